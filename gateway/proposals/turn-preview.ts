/**
 * A call's preview that knows the earlier calls of its turn (wire/turn.ts): when an agent
 * asks in one reply to write a file and then to edit it, the edit is shown against what the
 * write would leave, not against the disk the write has not touched yet.
 *
 * The earlier calls are those of the same proposer and turn id, with a lower index, to the
 * same server, that have not ended (waiting for a decision, or approved and in flight): one
 * that ran is on the disk already, one refused never will be. Only the built-in
 * server-filesystem previews replay them: each earlier write_file or edit_file of the same
 * path (as written, after `posix.normalize`), in order, on the text (the disk's, read as
 * the viewer, when no earlier write sets it). An edit is replayed only where its old text
 * is found word for word (the server also tries ignoring indentation: not guessed here).
 * Any earlier call of the same server that may change files and is not replayed is named
 * on the preview as not reflected, never silently left out.
 */
import { posix } from "node:path";
import { turnOf } from "../wire/turn.js";
import { type Proposal, runningArguments } from "./book.js";

/** An earlier call of the turn, as a preview names it: its place in the turn (1-based), its tool, its proposal. */
export interface TurnCall {
  call: number;
  tool: string;
  proposal: string;
}

export interface Earlier extends TurnCall {
  args: Record<string, unknown>;
}

/** How many edits one replay applies at most (each is a search of the whole text). */
const MAX_EDITS = 200;

/** The calls of `p`'s turn before it that have not ended, in the turn's order (`open`: the book's unended proposals). */
export function earlierOf(p: Proposal, open: readonly Proposal[]): Earlier[] {
  const mark = turnOf(p.params);
  if (!mark || p.method !== "tools/call") return [];
  const out: Array<Earlier & { index: number }> = [];
  for (const q of open) {
    if (q.id === p.id || q.proposer !== p.proposer || q.owner !== p.owner || q.method !== "tools/call" || q.tool === undefined) continue;
    const m = turnOf(q.params);
    if (!m || m.id !== mark.id || m.index >= mark.index) continue;
    out.push({ index: m.index, call: m.index + 1, tool: q.tool, proposal: q.id, args: runningArguments(q) });
  }
  return out.sort((a, b) => a.index - b.index).map(({ index: _, ...e }) => e);
}

/** Whether `a` and `b` name the same file as written (no resolving against the server's roots). */
export function samePath(a: unknown, b: unknown): boolean {
  return typeof a === "string" && typeof b === "string" && a !== "" && posix.normalize(a) === posix.normalize(b);
}

/**
 * Of `earlier`, those replayed on `path` (write_file and edit_file of it) and those that may
 * change files but are not replayed (any other tool of the server not declared read-only).
 */
export function bearingOn(
  earlier: readonly Earlier[],
  path: string | undefined,
  readOnly: (tool: string) => boolean,
): { replay: Earlier[]; unknown: TurnCall[] } {
  const replay: Earlier[] = [];
  const unknown: TurnCall[] = [];
  for (const e of earlier) {
    const fileTool = e.tool === "write_file" || e.tool === "edit_file";
    if (fileTool && path !== undefined && samePath(e.args["path"], path)) replay.push(e);
    else if (fileTool && typeof e.args["path"] === "string") continue;
    else if (!readOnly(e.tool)) unknown.push({ call: e.call, tool: e.tool, proposal: e.proposal });
  }
  return { replay, unknown };
}

/** CRLF and lone CR as LF, as server-filesystem reads both texts. */
const lf = (s: string) => s.replace(/\r\n?/g, "\n");

/**
 * `text` with server-filesystem's `edits` applied in order, each old text found word for
 * word; or why not. Never throws, whatever `edits` is.
 */
export function applyEdits(text: string, edits: unknown): { text: string } | { error: string } {
  if (!Array.isArray(edits)) return { error: "its edits are not a list" };
  if (edits.length > MAX_EDITS) return { error: `it makes ${edits.length} edits; a preview replays at most ${MAX_EDITS}` };
  let out = lf(text);
  for (let i = 0; i < edits.length; i++) {
    const e = edits[i] as { oldText?: unknown; newText?: unknown } | null;
    if (typeof e !== "object" || e === null || typeof e.oldText !== "string" || typeof e.newText !== "string")
      return { error: `its edit ${i + 1} is not {oldText, newText}` };
    const from = lf(e.oldText);
    const at = out.indexOf(from);
    if (from === "" || at < 0) return { error: `the old text of its edit ${i + 1} is not there word for word` };
    out = out.slice(0, at) + lf(e.newText) + out.slice(at + from.length);
  }
  return { text: out };
}

/**
 * What the file holds after `replay` (earlier calls of one path, in order), from `disk` (the
 * file's text, read only when `needsDisk`); or why that cannot be told.
 */
export function replayed(replay: readonly Earlier[], disk: string | undefined): { text: string; from: TurnCall[] } | { error: string } {
  let start = 0;
  let text = disk;
  for (let i = replay.length - 1; i >= 0; i--) {
    if (replay[i]!.tool !== "write_file") continue;
    const content = replay[i]!.args["content"];
    if (typeof content !== "string") return { error: `call ${replay[i]!.call} of this turn (write_file) has no text content` };
    text = content;
    start = i + 1;
    break;
  }
  if (text === undefined) return { error: "the file could not be read" };
  for (const e of replay.slice(start)) {
    const r = applyEdits(text, e.args["edits"]);
    if ("error" in r) return { error: `call ${e.call} of this turn (edit_file) cannot be replayed: ${r.error}` };
    text = r.text;
  }
  return { text, from: replay.map(({ call, tool, proposal }) => ({ call, tool, proposal })) };
}

/** Whether replaying needs the file's text from the disk: no earlier write sets it. */
export function needsDisk(replay: readonly Earlier[]): boolean {
  return !replay.some((e) => e.tool === "write_file");
}

/** A read of the file as the viewer (preview.ts `step`), as far as a replay needs it. */
export type DiskRead =
  | { kind: "answer"; text: string; bytes: number; isError: boolean }
  | { kind: "refused" | "failed" | "timeout"; code?: string | undefined; message: string };

/** What a turn-aware preview found: the fields of preview.ts `Preview` it sets. */
export interface TurnOutcome {
  status: "ok" | "refused" | "failed" | "timeout" | "too_large" | "will_fail";
  render?: "diff";
  text?: string;
  unchanged?: boolean;
  message?: string;
  code?: string;
  /** The earlier calls of the turn the preview was made after. */
  after_turn?: TurnCall[];
}

/**
 * The preview of `tool` (write_file or edit_file) with `args` on `path`, after the earlier
 * calls `replay` of its turn: the text they would leave, then this call's, diffed by
 * `diff(before, after, fromLabel)` (undefined: too different to diff in time).
 */
export async function afterTurn(
  tool: string,
  args: Record<string, unknown>,
  path: string,
  replay: readonly Earlier[],
  opts: { maxBytes: number; read: () => Promise<DiskRead>; diff: (before: string, after: string, from: string) => string | undefined },
): Promise<TurnOutcome> {
  const shown = JSON.stringify(path);
  let disk: string | undefined;
  if (needsDisk(replay)) {
    const r = await opts.read();
    if (r.kind !== "answer") return { status: r.kind, message: r.message, ...(r.code ? { code: r.code } : {}) };
    if (r.isError)
      return /ENOENT|no such file/i.test(r.text)
        ? { status: "will_fail", message: `${callsInWords(replay)} of this turn edit ${shown}, which does not exist, so they will fail` }
        : { status: "failed", message: `the file could not be read: ${r.text.slice(0, 2000)}` };
    if (r.bytes > opts.maxBytes)
      return { status: "too_large", message: `the current text is ${r.bytes} bytes; previews diff at most ${opts.maxBytes}` };
    disk = r.text;
  }
  const before = replayed(replay, disk);
  const after_turn = "from" in before ? before.from : undefined;
  if ("error" in before) return { status: "failed", message: `no preview after the earlier calls of this turn: ${before.error}` };
  let next: string;
  if (tool === "write_file") {
    if (typeof args["content"] !== "string") return { status: "failed", message: "the write has no text content", after_turn };
    next = args["content"];
  } else {
    const r = applyEdits(before.text, args["edits"]);
    if ("error" in r)
      return {
        status: "failed",
        after_turn,
        message: `this edit cannot be shown against what ${callsInWords(before.from)} of this turn would leave: ${r.error}${
          r.error.endsWith("word for word") ? " (the server may still match it ignoring indentation, or refuse the edit)" : ""
        }`,
      };
    next = r.text;
  }
  for (const [what, t] of [
    ["the text before it", before.text],
    ["the proposed text", next],
  ] as const)
    if (Buffer.byteLength(t) > opts.maxBytes)
      return {
        status: "too_large",
        after_turn,
        message: `${what} is ${Buffer.byteLength(t)} bytes; previews diff at most ${opts.maxBytes}`,
      };
  if (before.text === next) return { status: "ok", render: "diff", unchanged: true, text: "", after_turn };
  const text = opts.diff(before.text, next, `after ${callsInWords(before.from)} of this turn`);
  if (text === undefined) return { status: "too_large", after_turn, message: "the two texts are too different to diff in time" };
  return { status: "ok", render: "diff", text, after_turn };
}

/** "call 1 (write_file)", "calls 1 (write_file) and 2 (edit_file)". */
export function callsInWords(calls: readonly TurnCall[]): string {
  const each = calls.map((c) => `${c.call} (${c.tool})`);
  const list = each.length <= 1 ? (each[0] ?? "") : `${each.slice(0, -1).join(", ")} and ${each.at(-1)}`;
  return `${calls.length === 1 ? "call" : "calls"} ${list}`;
}
