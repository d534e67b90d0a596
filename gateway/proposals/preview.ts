/**
 * A proposal's preview: what the call would change, shown to the person deciding it. A
 * read-only companion call (space.yaml `previews:`, config/previews.ts, or built in for
 * `@modelcontextprotocol/server-filesystem`) is made AS THE VIEWER, under the viewer's own
 * policy: it reads only what the viewer could read, and a companion the viewer could call
 * only through a proposal is refused, never proposed. Bounded in time (`timeout_ms`) and
 * size (`max_bytes`: a longer answer is cut, or for a diff refused as too large), cached
 * briefly per proposal, viewer and arguments. A preview that fails, is refused or times out
 * says so; it never holds up a decision, which does not wait for it.
 *
 * Built in for server-filesystem, recognised by its tools (names and the schema fields
 * used), not by its name, which a space may choose freely:
 *   write_file → get_file_info for the size (a missing file is a new file; one over
 *                max_bytes is not read), then read_text_file, and a unified diff of the
 *                current text against the proposed `content` ("unchanged" when they are
 *                the same). A path the write cannot use is said as such (`will_fail`): a
 *                directory that does not exist (get_file_info of the parent), a path the
 *                server refuses;
 *   edit_file  → edit_file itself with `dryRun: true`, whose answer is the diff, its
 *                header naming the file as the call did, not by the server's absolute path;
 *                a dry run that fails says the edit will (`will_fail`), and why.
 */
import { posix } from "node:path";
import type { PreviewRule } from "../config/previews.js";
import { DEFAULT_PREVIEW_MAX_BYTES, DEFAULT_PREVIEW_TIMEOUT_MS } from "../config/previews.js";
import type { SpaceConfig } from "../config/config.js";
import { compileGlob } from "../policy/capabilities.js";
import type { Verdict } from "../policy/authority.js";
import type { NotRouted } from "../ports/host.js";
import type { Registry } from "../tools/registry.js";
import { runningArguments, type Proposal } from "./book.js";
import { afterTurn, bearingOn, type Earlier, earlierOf, needsDisk, type TurnCall } from "./turn-preview.js";

export type PreviewStatus = "ok" | "none" | "refused" | "failed" | "timeout" | "too_large" | "will_fail";

/** What the API serves and the cards show. Every string in it may come from a participant: shown as text. */
export interface Preview {
  proposal: string;
  status: PreviewStatus;
  /** How `text` reads: a unified diff the gateway made, the companion's answer, or a diff the companion made. */
  render?: "diff" | "text" | "patch";
  /** The companion call, `participant/tool`. */
  tool?: string;
  source?: "builtin" | "config";
  text?: string;
  /** diff: the file (or field) did not exist yet. */
  new_file?: boolean;
  /** diff, patch: the call would leave the text exactly as it is. */
  unchanged?: boolean;
  truncated?: boolean;
  /** Why there is no preview: refused, failed, timed out, too large; or why the call will fail (will_fail). */
  message?: string;
  code?: string;
  /** Made after these earlier calls of the call's turn, still waiting or in flight (turn-preview.ts). */
  after_turn?: TurnCall[];
  /** Earlier calls of the turn to the same server that may change files, which the preview does not reflect. */
  not_reflected?: TurnCall[];
  /** Time the preview took to make (0 when cached). */
  ms: number;
  cached?: boolean;
}

/** What previews need of the space. */
export interface PreviewHost {
  readonly config: SpaceConfig;
  readonly registry: Registry;
  /** The verdict for `viewer` calling `owner/tool` with `args` directly (authority.ts). */
  verdict(viewer: string, owner: string, tool: string, args: Record<string, unknown>): Verdict;
  /** Whether `viewer` is switched off in the space. */
  isDisabled(viewer: string): boolean;
  /** The proposals that have not ended (book.ts `unended`): a turn's earlier calls are among them. */
  unended?(): readonly Proposal[];
  /** Sends the call as `viewer`; `done` gets the answer, or undefined and why not. */
  call(
    viewer: string,
    owner: string,
    method: string,
    params: Record<string, unknown>,
    timeoutMs: number,
    done: (response: { result?: unknown; error?: unknown } | undefined, reason?: string) => void,
  ): NotRouted | undefined;
}

/** How long a preview is reused for the same proposal, viewer and arguments. */
const CACHE_MS = 10_000;
const CACHE_MAX = 256;
/** Time the diff itself may take before it gives up (jsdiff's own bound). */
const DIFF_MS = 1000;
/** Beyond the call's own timeout, a last bound should its answer never come back at all. */
const GRACE_MS = 1000;

interface Step {
  owner: string;
  tool: string;
  args: Record<string, unknown>;
}

interface Plan {
  source: "builtin" | "config";
  render: "diff" | "text" | "patch";
  companion: Step;
  /** diff: the proposed new text, and a label for the diff's header. */
  proposed?: string;
  label?: string;
  /** Ask the size first (server-filesystem's get_file_info): a file over max_bytes is not read. */
  sizeFirst?: Step;
  timeoutMs: number;
  maxBytes: number;
}

export class Previews {
  private readonly cache = new Map<string, { at: number; preview: Promise<Preview> }>();
  private readonly rules: Array<{ glob: string; match: (name: string) => boolean; rule: PreviewRule }>;

  constructor(private readonly host: PreviewHost) {
    this.rules = Object.entries(host.config.previews).map(([glob, rule]) => ({ glob, match: compileGlob(glob), rule }));
  }

  /** The preview of `p` for `viewer`: made, or reused from a moment ago. */
  of(p: Proposal, viewer: string): Promise<Preview> {
    const args = shownArguments(p);
    // The earlier calls of its turn change what it would do: they are part of what is cached.
    const earlier = this.host.unended ? earlierOf(p, this.host.unended()) : [];
    const key = `${p.id}\0${viewer}\0${JSON.stringify(args)}\0${JSON.stringify(earlier)}`;
    const now = Date.now();
    const hit = this.cache.get(key);
    if (hit && now - hit.at < CACHE_MS) return hit.preview.then((r) => ({ ...r, ms: 0, cached: true }));
    const preview = this.withTurn(p, viewer, args, earlier);
    this.cache.set(key, { at: now, preview });
    if (this.cache.size > CACHE_MAX) {
      for (const [k, v] of this.cache) if (now - v.at >= CACHE_MS || this.cache.size > CACHE_MAX) this.cache.delete(k);
    }
    return preview;
  }

  /** Whether `p` has a preview at all (a rule or the built-in applies). */
  applies(p: Proposal): boolean {
    return this.plan(p, shownArguments(p)) !== undefined;
  }

  /**
   * The preview after the earlier calls of `p`'s turn (turn-preview.ts): a built-in write or
   * edit of a file an earlier call writes or edits is shown against the text those would
   * leave; earlier calls it cannot replay are named as not reflected.
   */
  private async withTurn(p: Proposal, viewer: string, args: Record<string, unknown>, earlier: Earlier[]): Promise<Preview> {
    if (earlier.length === 0) return this.make(p, viewer, args);
    const plan = this.plan(p, args);
    const path = plan?.source === "builtin" ? plan.label : undefined;
    const turn = bearingOn(earlier, path, (tool) => this.host.registry.get(p.owner, tool)?.annotations?.["readOnlyHint"] === true);
    const notReflected = turn.unknown.length ? { not_reflected: turn.unknown } : {};
    if (!plan || path === undefined || turn.replay.length === 0 || this.host.isDisabled(viewer)) {
      const r = await this.make(p, viewer, args);
      return r.status === "none" ? r : { ...r, ...notReflected };
    }
    const started = performance.now();
    const { createTwoFilesPatch } = await import("diff");
    const read = { owner: p.owner, tool: "read_text_file", args: { path } };
    const label = quoted(path);
    const r = await afterTurn(p.tool!, args, path, turn.replay, {
      maxBytes: plan.maxBytes,
      read: () => this.step(viewer, read, plan),
      diff: (before, after, from) => {
        const d = createTwoFilesPatch("a", "b", before, after, "", "", { context: 3, timeout: DIFF_MS });
        return d === undefined ? undefined : relabel(d, `${label}\t${from}`, `${label}\tproposed`);
      },
    });
    // Named by the companion it called: the read of the file, when no earlier write set its text.
    const tool = needsDisk(turn.replay) ? { tool: `${read.owner}/${read.tool}` } : {};
    return { proposal: p.id, ...tool, source: "builtin", ...r, ...notReflected, ms: Math.round(performance.now() - started) };
  }

  private async make(p: Proposal, viewer: string, args: Record<string, unknown>): Promise<Preview> {
    const started = performance.now();
    const done = (r: Omit<Preview, "proposal" | "ms">): Preview => ({ proposal: p.id, ...r, ms: Math.round(performance.now() - started) });
    const plan = this.plan(p, args);
    if (!plan) return done({ status: "none" });
    const base = { render: plan.render, tool: `${plan.companion.owner}/${plan.companion.tool}`, source: plan.source };
    if (this.host.isDisabled(viewer))
      return done({ ...base, status: "refused", code: "participant_disabled", message: "you are switched off in this space" });
    let proposedNew = false;
    if (plan.sizeFirst) {
      const info = await this.step(viewer, plan.sizeFirst, plan);
      if (info.kind === "refused" || info.kind === "timeout") return done({ ...base, ...outcome(info) });
      if (info.kind === "answer" && info.isError) {
        // The write would check its path the same way: say what it will do, not "a new file".
        const fails = await this.writeFails(viewer, plan, info.text);
        // Named by the companion that told (get_file_info), not the read the diff would have used.
        const told = `${plan.sizeFirst.owner}/${plan.sizeFirst.tool}`;
        if (typeof fails === "string") return done({ ...base, tool: told, status: "will_fail", message: fails });
        if (missing(info.text)) proposedNew = true;
      } else if (info.kind === "answer") {
        const size = /^size:\s*(\d+)/im.exec(info.text)?.[1];
        if (size !== undefined && Number(size) > plan.maxBytes) {
          return done({
            ...base,
            status: "too_large",
            message: `the file is ${Number(size)} bytes; previews read at most ${plan.maxBytes} (previews.*.max_bytes)`,
          });
        }
      }
    }
    let current = "";
    if (!proposedNew) {
      const answer = await this.step(viewer, plan.companion, plan);
      if (answer.kind !== "answer") return done({ ...base, ...outcome(answer) });
      if (answer.isError) {
        if (plan.render === "diff" && missing(answer.text)) proposedNew = true;
        else if (plan.source === "builtin" && plan.render === "patch" && plan.label !== undefined)
          // edit_file's dry run takes the path and edits as the edit itself will: its error is the edit's.
          return done({ ...base, status: "will_fail", message: editFails(answer.text, plan.label) });
        else return done({ ...base, status: "failed", message: `${base.tool} answered with an error: ${cut(answer.text, 2000)}` });
      } else current = answer.text;
      if (answer.bytes > plan.maxBytes) {
        if (plan.render === "diff")
          return done({
            ...base,
            status: "too_large",
            message: `the current text is ${answer.bytes} bytes; previews diff at most ${plan.maxBytes} (previews.*.max_bytes)`,
          });
        return done({ ...base, status: "ok", text: cutBytes(current, plan.maxBytes), truncated: true });
      }
    }
    if (plan.render === "patch") {
      const patch = unfence(current);
      // A patch with no hunk changes nothing (an edit whose new text is the old one).
      if (!patch.split("\n").some((l) => HUNK.test(l))) return done({ ...base, status: "ok", unchanged: true, text: "" });
      if (plan.label === undefined) return done({ ...base, status: "ok", text: patch });
      const name = quoted(plan.label);
      return done({ ...base, status: "ok", text: relabel(patch, `${name}\toriginal`, `${name}\tmodified`) });
    }
    if (plan.render !== "diff") return done({ ...base, status: "ok", text: current });
    const proposed = plan.proposed ?? "";
    if (Buffer.byteLength(proposed) > plan.maxBytes)
      return done({
        ...base,
        status: "too_large",
        message: `the proposed text is ${Buffer.byteLength(proposed)} bytes; previews diff at most ${plan.maxBytes}`,
      });
    if (!proposedNew && current === proposed) return done({ ...base, status: "ok", unchanged: true, text: "" });
    const label = quoted(plan.label ?? "text");
    // Diffed under fixed names; the header, naming the file, is written here (relabel).
    // Loaded with the first diff, not with the gateway: most spaces never show one.
    const { createTwoFilesPatch } = await import("diff");
    const diff = createTwoFilesPatch("a", "b", current, proposed, "", "", { context: 3, timeout: DIFF_MS });
    if (diff === undefined)
      return done({ ...base, status: "too_large", message: `the two texts are too different to diff within ${DIFF_MS} ms` });
    const text = relabel(diff, proposedNew ? "/dev/null\t(new file)" : `${label}\tcurrent`, `${label}\tproposed`);
    return done({ ...base, status: "ok", text, ...(proposedNew ? { new_file: true } : {}) });
  }

  /**
   * Whether a built-in write_file is bound to fail, from get_file_info's error about its
   * path: the message that says so (a directory that does not exist, a path the server
   * refuses), or undefined when the write would go ahead (a new file in a directory that
   * exists) or the directory could not be asked about.
   */
  private async writeFails(viewer: string, plan: Plan, error: string): Promise<string | undefined> {
    const path = plan.label;
    if (plan.source !== "builtin" || !plan.sizeFirst || path === undefined) return undefined;
    const dir = posix.dirname(path);
    const shown = JSON.stringify(dir);
    if (/Parent directory does not exist/i.test(error)) return `the directory ${shown} does not exist, so the write will fail`;
    const denied = /Access denied[^:\n]*/i.exec(error);
    if (denied) return `the server refuses this path (${denied[0].replace(/^Access denied\s*-?\s*/i, "")}), so the write will fail`;
    if (/ENOTDIR/.test(error)) return `the directory ${shown} is, or goes through, a file, so the write will fail`;
    if (!missing(error)) return undefined;
    const parent = await this.step(viewer, { ...plan.sizeFirst, args: { path: dir } }, plan);
    // Not known (the viewer may not ask about the directory, or it did not answer): a new file, as before.
    if (parent.kind !== "answer") return undefined;
    if (parent.isError) {
      if (missing(parent.text) || /Parent directory does not exist/i.test(parent.text))
        return `the directory ${shown} does not exist, so the write will fail`;
      return undefined;
    }
    if (/^isDirectory:\s*false/im.test(parent.text)) return `the directory ${shown} is, or goes through, a file, so the write will fail`;
    return undefined;
  }

  /** One companion call as `viewer`, under its policy; its answer's text, bounded. */
  private step(viewer: string, s: Step, plan: Plan): Promise<StepResult> {
    const verdict = this.host.verdict(viewer, s.owner, s.tool, s.args);
    const name = `${s.owner}/${s.tool}`;
    // A preview is a read the viewer could make now; one that would need approval is not made.
    if (verdict.decision === "proposal")
      return Promise.resolve({
        kind: "refused",
        code: "approval_required",
        message: `you may call ${name} only with approval, so it is not called for a preview`,
      });
    if (verdict.decision === "denied") return Promise.resolve({ kind: "refused", code: verdict.code, message: verdict.message });
    return new Promise((resolve) => {
      let settled = false;
      const settle = (r: StepResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(last);
        resolve(r);
      };
      // The call's own timeout answers first; this one only if its answer were lost on the way.
      const last = setTimeout(
        () => settle({ kind: "timeout", message: `${name} did not answer within ${plan.timeoutMs} ms` }),
        plan.timeoutMs + GRACE_MS,
      );
      last.unref();
      const refused = this.host.call(
        viewer,
        s.owner,
        "tools/call",
        { name: s.tool, arguments: s.args },
        plan.timeoutMs,
        (response, reason) => {
          if (!response) {
            if (reason === "timeout") return settle({ kind: "timeout", message: `${name} did not answer within ${plan.timeoutMs} ms` });
            return settle({ kind: "failed", message: `${name} could not answer (${reason ?? "no answer"})` });
          }
          if (response.error !== undefined) {
            const e = response.error as { message?: unknown };
            return settle({ kind: "failed", message: `${name} failed: ${cut(String(e?.message ?? "error"), 2000)}` });
          }
          settle({ kind: "answer", ...resultText(response.result, plan.maxBytes) });
        },
      );
      if (refused)
        settle({
          kind: refused.code === "target_offline" || refused.code === "circuit_open" ? "failed" : "refused",
          code: refused.code,
          message: refused.message,
        });
    });
  }

  /** Which companion call shows `p`'s effect: the first matching rule, else the built-in, else none. */
  private plan(p: Proposal, args: Record<string, unknown>): Plan | undefined {
    if (p.method !== "tools/call" || p.tool === undefined) return undefined;
    const name = `${p.owner}/${p.tool}`;
    const r = this.rules.find((x) => x.match(name))?.rule;
    if (r) {
      if (r.render === "none" || r.call === undefined) return undefined;
      const [owner, tool] = r.call.includes("/") ? (r.call.split("/", 2) as [string, string]) : [p.owner, r.call];
      const companionArgs: Record<string, unknown> = r.copy_arguments ? { ...args } : {};
      for (const [k, from] of Object.entries(r.arguments)) {
        const v = at(args, from);
        if (v !== undefined) companionArgs[k] = v;
      }
      Object.assign(companionArgs, r.set);
      const proposed = r.render === "diff" && r.field ? at(args, r.field) : undefined;
      const label = typeof args["path"] === "string" ? args["path"] : r.field;
      return {
        source: "config",
        render: r.render,
        companion: { owner, tool, args: companionArgs },
        proposed: typeof proposed === "string" ? proposed : proposed === undefined ? "" : JSON.stringify(proposed, null, 2),
        label,
        timeoutMs: r.timeout_ms,
        maxBytes: r.max_bytes,
      };
    }
    if (!isFilesystemServer(this.host.registry, p.owner)) return undefined;
    const common = { source: "builtin" as const, timeoutMs: DEFAULT_PREVIEW_TIMEOUT_MS, maxBytes: DEFAULT_PREVIEW_MAX_BYTES };
    if (p.tool === "write_file" && typeof args["path"] === "string" && typeof args["content"] === "string") {
      const path = args["path"];
      return {
        ...common,
        render: "diff",
        companion: { owner: p.owner, tool: "read_text_file", args: { path } },
        sizeFirst: this.host.registry.get(p.owner, "get_file_info") ? { owner: p.owner, tool: "get_file_info", args: { path } } : undefined,
        proposed: args["content"],
        label: path,
      };
    }
    if (p.tool === "edit_file" && typeof args["path"] === "string") {
      // The dry run's diff names the server's absolute path; the card shows the call's own.
      return {
        ...common,
        render: "patch",
        companion: { owner: p.owner, tool: "edit_file", args: { ...args, dryRun: true } },
        label: args["path"],
      };
    }
    return undefined;
  }
}

type StepResult =
  | { kind: "answer"; text: string; bytes: number; isError: boolean }
  | { kind: "refused"; code?: string | undefined; message: string }
  | { kind: "failed"; code?: string | undefined; message: string }
  | { kind: "timeout"; message: string };

function outcome(r: Exclude<StepResult, { kind: "answer" }>): Omit<Preview, "proposal" | "ms"> {
  const status = r.kind === "refused" ? "refused" : r.kind === "timeout" ? "timeout" : "failed";
  return { status, message: r.message, ...("code" in r && r.code ? { code: r.code } : {}) };
}

/** The arguments the decision is about: those that will run (book.ts `runningArguments`). */
export function shownArguments(p: Proposal): Record<string, unknown> {
  return runningArguments(p);
}

/** server-filesystem, known by the tools it offers and the fields the previews use. */
function isFilesystemServer(registry: Registry, owner: string): boolean {
  const props = (tool: string) => {
    const s = registry.get(owner, tool)?.inputSchema?.["properties"];
    return typeof s === "object" && s !== null ? (s as Record<string, unknown>) : undefined;
  };
  const write = props("write_file");
  const edit = props("edit_file");
  const read = props("read_text_file");
  return !!write && "path" in write && "content" in write && !!edit && "dryRun" in edit && "edits" in edit && !!read && "path" in read;
}

/** A tool result's text content, joined, and cut at `max` bytes (its full size is kept). */
function resultText(result: unknown, max: number): { text: string; bytes: number; isError: boolean } {
  const r = (typeof result === "object" && result !== null ? result : {}) as { content?: unknown; isError?: unknown };
  const parts = Array.isArray(r.content) ? r.content : [];
  let bytes = 0;
  const kept: string[] = [];
  let room = max;
  for (const c of parts) {
    const t = typeof c === "object" && c !== null && (c as { type?: unknown }).type === "text" ? (c as { text?: unknown }).text : undefined;
    if (typeof t !== "string") continue;
    const n = Buffer.byteLength(t);
    bytes += n;
    if (room > 0) kept.push(n <= room ? t : cutBytes(t, room));
    room -= n;
  }
  return { text: kept.join("\n"), bytes, isError: r.isError === true };
}

/** Whether an error text says the file is not there (Node's ENOENT, as server-filesystem passes it on). */
function missing(text: string): boolean {
  return /ENOENT|no such file/i.test(text);
}

/** Why a built-in edit_file will fail, from its dry run's error, naming the file as the call did. */
function editFails(error: string, path: string): string {
  const shown = JSON.stringify(path);
  const denied = /Access denied[^:\n]*/i.exec(error);
  if (denied) return `the server refuses this path (${denied[0].replace(/^Access denied\s*-?\s*/i, "")}), so the edit will fail`;
  if (missing(error) || /Parent directory does not exist/i.test(error)) return `the file ${shown} does not exist, so the edit will fail`;
  if (/ENOTDIR/.test(error)) return `the path ${shown} goes through a file, so the edit will fail`;
  return `the edit will fail: ${cut(error.replace(/^Error:\s*/, ""), 2000)}`;
}

/** A diff the companion wrapped in a Markdown fence (three backticks or more), without it. */
function unfence(text: string): string {
  const m = /^\s*(`{3,})[a-z]*\n([\s\S]*?)\n\1\s*$/.exec(text);
  return m ? m[2]! : text;
}

/**
 * A patch with its header made here: whatever came before its first hunk (jsdiff's "Index:"
 * rule, the server's absolute path) replaced by a ---/+++ pair naming the file as the call
 * did.
 */
function relabel(patch: string, from: string, to: string): string {
  const lines = patch.split("\n");
  const hunk = lines.findIndex((l) => HUNK.test(l));
  return [`--- ${from}`, `+++ ${to}`, ...(hunk < 0 ? [""] : lines.slice(hunk))].join("\n");
}

const HUNK = /^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@/;

/**
 * A file name as a diff header carries it (git's quoting, as jsdiff writes it): one with a
 * control character, a quote or a backslash in quotes with those escaped, so a name with a
 * newline cannot start a line of its own (a forged "+" line under the header).
 */
function quoted(name: string): string {
  if (!/[\x00-\x1f\x7f"\\]/.test(name)) return name;
  const esc: Record<string, string> = { "\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\" };
  return `"${name.replace(/[\x00-\x1f\x7f"\\]/g, (c) => esc[c] ?? `\\${c.charCodeAt(0).toString(8).padStart(3, "0")}`)}"`;
}

function at(obj: Record<string, unknown>, path: string): unknown {
  let v: unknown = obj;
  for (const k of path.split(".")) {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

function cut(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function cutBytes(s: string, max: number): string {
  const b = Buffer.from(s);
  if (b.length <= max) return s;
  // Back off to a character boundary so the cut never leaves half a UTF-8 sequence.
  let end = max;
  while (end > 0 && (b[end]! & 0xc0) === 0x80) end--;
  return b.subarray(0, end).toString("utf8");
}
