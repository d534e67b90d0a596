/**
 * What the terminal shows for each envelope: one readable line (rarely a few), never the raw
 * JSON. Pure functions, so the view is tested without a terminal.
 */
import type { SpaceConfig } from "../../gateway/index.js";
import type { Envelope } from "../../gateway/index.js";
import { CompiledPolicy } from "../../gateway/index.js";
import type { ToolInfo } from "../../participants/index.js";
import { replaceHidden } from "../../gateway/index.js";
import { isRecord } from "../../gateway/index.js";

export const GATEWAY = "system:gateway";

/** ANSI styling, or none when the output is not a colour terminal. */
export interface Style {
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
}

const wrap = (open: number, close: number) => (s: string) => `\x1b[${open}m${s}\x1b[${close}m`;
export const ANSI: Style = {
  bold: wrap(1, 22),
  dim: wrap(2, 22),
  red: wrap(31, 39),
  green: wrap(32, 39),
  yellow: wrap(33, 39),
  cyan: wrap(36, 39),
};
const id = (s: string) => s;
export const PLAIN: Style = { bold: id, dim: id, red: id, green: id, yellow: id, cyan: id };

/** Escape sequences a terminal acts on: CSI (cursor moves, erases, SGR), OSC (titles, OSC 52 clipboard writes), DCS/SOS/PM/APC strings, and two-byte ESC forms. */
const ESCAPES =
  /\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_][\s\S]*?(?:\x07|\x1b\\|$)|\x1b[ -~]?|\x9b[0-?]*[ -/]*[@-~]|[\x90\x98\x9d-\x9f][\s\S]*?(?:\x07|\x9c|\x1b\\|$)/g;
/** C0 and C1 controls (bar tab and newline, handled by the callers), DEL, and bidi overrides that reorder what is shown. */
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g;

/**
 * A string from the wire, made safe to draw: escape sequences removed whole, other
 * control characters shown as `�`. Everything a participant sends passes through this
 * before it reaches the screen, so nobody can move the cursor, repaint the approval
 * view, hide text or write the clipboard from a chat message, a tool name or an argument.
 */
export function sanitize(s: string): string {
  // Escapes out whole; then the one table (gateway/wire/text.ts): controls, format and bidi
  // characters, tags and abused variation selectors each shown as `�`.
  return replaceHidden(s.replace(ESCAPES, "").replace(CONTROLS, "�"), () => "�");
}

/** Cuts to `max` characters (counting the ellipsis), sanitized. */
export function truncate(s: string, max: number): string {
  s = sanitize(s);
  if (max <= 1) return s.slice(0, Math.max(0, max));
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** Any value on one line: strings as they are (newlines shown as ⏎), the rest as compact JSON. */
export function oneLine(value: unknown, max = 120): string {
  let s: string;
  if (typeof value === "string") s = value;
  else {
    try {
      s = JSON.stringify(value) ?? String(value);
    } catch {
      s = String(value);
    }
  }
  return truncate(s.replace(/\s*\r?\n\s*/g, " ⏎ ").replace(/\t/g, " "), max);
}

/**
 * Pretty JSON wrapped (never cut) to `width`: every character of the value is in the
 * lines. `more` counts the lines past `maxLines`, for a marker that says so.
 */
export function wrapJson(value: unknown, width: number, maxLines = Infinity): { lines: string[]; more: number } {
  let text: string;
  try {
    text = JSON.stringify(value ?? {}, null, 2) ?? "undefined";
  } catch {
    text = String(value);
  }
  const w = Math.max(20, width);
  const lines: string[] = [];
  for (const raw of sanitize(text).split("\n")) {
    const indent = /^ */.exec(raw)![0].length;
    let rest = raw;
    lines.push(rest.slice(0, w));
    rest = rest.slice(w);
    // Continuations are marked and indented a step further, so a wrap is never mistaken for a new key.
    const pad = `${" ".repeat(Math.min(indent + 2, 20))}↪ `;
    while (rest.length > 0) {
      const room = Math.max(10, w - pad.length);
      lines.push(pad + rest.slice(0, room));
      rest = rest.slice(room);
    }
  }
  return lines.length <= maxLines ? { lines, more: 0 } : { lines: lines.slice(0, maxLines), more: lines.length - maxLines };
}

/** Pretty JSON, each line cut to `width`, at most `maxLines` lines. */
export function prettyJson(value: unknown, opts: { width: number; maxLines: number }): string[] {
  let text: string;
  try {
    text = JSON.stringify(value ?? {}, null, 2) ?? "undefined";
  } catch {
    text = String(value);
  }
  const lines = text.split("\n").map((l) => truncate(l, Math.max(20, opts.width)));
  if (lines.length <= opts.maxLines) return lines;
  const shown = lines.slice(0, Math.max(1, opts.maxLines - 1));
  return [...shown, `… ${lines.length - shown.length} more lines (e shows and edits them all)`];
}

/** Length as shown: without ANSI escapes. */
export function visibleLength(s: string): number {
  return s.replace(/\x1b\[[0-9;]*m/g, "").length;
}

/** `head` (may be styled) followed by `value` on one line, cut so the whole fits `width` columns. */
export function fit(head: string, value: unknown, width: number, tail = ""): string {
  const room = Math.max(12, width - visibleLength(head) - visibleLength(tail));
  return `${head}${oneLine(value, room)}${tail}`;
}

export function shortId(id: string): string {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/** A tools/call or other MCP call a proposal or request asks for. */
export interface CallShape {
  owner: string;
  method: string;
  /** For tools/call: the tool's name at its owner. */
  tool?: string | undefined;
  /** `owner/tool`, or `owner: method`. */
  label: string;
  arguments: unknown;
}

/** How a proposal approved before the gateway stopped is marked (`payload["mewgate/interrupted"]`). */
export interface Interruption {
  /** Who approved it before the stop, if known. */
  approvedBy: string | undefined;
  /** Why it waits again, in words. */
  message: string;
}

/** The mark of an interrupted proposal, if `env` is one: it waits for someone to approve it again or reject it. */
export function interruption(env: Envelope): Interruption | undefined {
  const payload = isRecord(env.payload) ? env.payload : {};
  const mark = payload["mewgate/interrupted"];
  if (!isRecord(mark)) return undefined;
  return {
    approvedBy: typeof mark["approved_by"] === "string" ? sanitize(mark["approved_by"]) : undefined,
    message: sanitize(
      typeof mark["message"] === "string" ? mark["message"] : "the gateway stopped after it was approved; it may or may not have run",
    ),
  };
}

export function callShape(env: Envelope): CallShape {
  const payload = isRecord(env.payload) ? env.payload : {};
  const method = typeof payload["method"] === "string" ? payload["method"] : "?";
  let params = isRecord(payload["params"]) ? payload["params"] : {};
  // An approver edited the arguments (`mewgate/edited`), or an interrupted proposal was approved
  // with edits: those are what an approval runs, so they are what the card shows.
  const mark = payload["mewgate/interrupted"];
  const edit = payload["mewgate/edited"];
  if (isRecord(edit) && isRecord(edit["arguments"])) params = { ...params, arguments: edit["arguments"] };
  else if (isRecord(mark) && isRecord(mark["arguments"])) params = { ...params, arguments: mark["arguments"] };
  const owner = env.to?.[0] ?? "?";
  if (method === "tools/call" && typeof params["name"] === "string") {
    const name = params["name"];
    // Addressed to the gateway, the name is already namespaced.
    const label = sanitize(owner === GATEWAY ? name : `${owner}/${name}`);
    const slash = label.indexOf("/");
    return { owner: label.slice(0, slash), method, tool: label.slice(slash + 1), label, arguments: params["arguments"] ?? {} };
  }
  return { owner, method, label: sanitize(`${owner}: ${method}`), arguments: params };
}

/** Text of an MCP tool result, for one line. */
export function summarizeResult(result: unknown): string {
  if (!isRecord(result)) return oneLine(result);
  const content = result["content"];
  if (Array.isArray(content) && content.length > 0) {
    const parts = content.map((c) =>
      isRecord(c) ? (c["type"] === "text" ? String(c["text"] ?? "") : `[${String(c["type"] ?? "content")}]`) : oneLine(c),
    );
    return parts.join(" ");
  }
  if (Array.isArray(result["tools"])) return `${result["tools"].length} tools`;
  if (result["structuredContent"] !== undefined) return oneLine(result["structuredContent"]);
  return oneLine(result);
}

/** Text a payload carries, whichever field a sender used (`text`, `message`, `content`, `reasoning`). */
function payloadText(payload: unknown): string | undefined {
  if (typeof payload === "string") return payload;
  if (!isRecord(payload)) return undefined;
  for (const k of ["text", "message", "content", "reasoning", "thought", "summary"]) {
    const v = payload[k];
    if (typeof v === "string" && v) return v;
  }
  return undefined;
}

/** A call in flight, as the terminal saw its request. */
export interface SeenCall {
  caller: string;
  label: string;
  target?: string | undefined;
  rpcId?: unknown;
}

export interface ViewContext {
  me: string;
  width: number;
  style: Style;
  /** Requests seen, by envelope id: so a response line can name its tool. */
  calls: Map<string, SeenCall>;
  /** Proposal ids seen, so a routed call can be shown as the approved proposal it is. */
  proposals: Set<string>;
}

const MAX_CALLS_REMEMBERED = 2000;

function remember(ctx: ViewContext, id: string, call: SeenCall): void {
  ctx.calls.set(id, call);
  if (ctx.calls.size > MAX_CALLS_REMEMBERED) ctx.calls.delete(ctx.calls.keys().next().value!);
}

function who(id: string): string {
  return id === GATEWAY ? "gateway" : id;
}

/** The lines an envelope shows as; [] for what a person does not need to see (tool list plumbing). */
export function formatEnvelope(env: Envelope, ctx: ViewContext): string[] {
  const s = ctx.style;
  const w = Math.max(40, ctx.width);
  const from = who(env.from);
  const to = env.to?.length ? ` → ${env.to.join(", ")}` : "";
  const payload = isRecord(env.payload) ? env.payload : {};
  switch (env.kind) {
    case "chat": {
      const text = payloadText(env.payload) ?? "";
      const [first = "", ...rest] = text.split(/\r?\n/);
      const head = `${s.bold(from)}${s.dim(to)}: `;
      const lines = [head + first, ...rest.map((l) => `  ${l}`)];
      // An agent's reply says what the request cost, with everything it delegated.
      const usage = isRecord(env.payload) && isRecord(env.payload["usage"]) ? env.payload["usage"] : undefined;
      if (usage && typeof usage["input_tokens"] === "number" && typeof usage["output_tokens"] === "number") {
        const tokens = (usage["input_tokens"] + usage["output_tokens"]).toLocaleString("en-US");
        const cost = typeof usage["cost_usd"] === "number" ? ` · $${usage["cost_usd"].toFixed(4)}` : "";
        lines.push(s.dim(`  (${tokens} tokens${cost} for this request)`));
      }
      return lines;
    }
    case "mcp/request": {
      const method = String(payload["method"] ?? "");
      if (method === "notifications/tools/list_changed" || method === "tools/list" || method === "ping") return [];
      if (method === "notifications/progress") {
        const p = isRecord(payload["params"]) ? payload["params"] : {};
        const msg = typeof p["message"] === "string" ? ` ${p["message"]}` : "";
        const of = p["total"] !== undefined ? `/${String(p["total"])}` : "";
        return [s.dim(`  … ${from} progress ${String(p["progress"] ?? "")}${of}${msg}`)];
      }
      if (method === "notifications/cancelled") {
        const p = isRecord(payload["params"]) ? payload["params"] : {};
        return [s.dim(`  ✗ ${from} cancelled a call${p["reason"] ? `: ${String(p["reason"])}` : ""}`)];
      }
      if (method.startsWith("notifications/")) return [s.dim(`  ${from}${to}: ${method}`)];
      const call = callShape(env);
      remember(ctx, env.id, { caller: env.from, label: call.label, target: env.to?.[0], rpcId: payload["id"] });
      const onBehalf = env.correlation_id?.some((c) => ctx.proposals.has(c)) ? s.dim(" (approved proposal)") : "";
      const args = method === "tools/call" ? call.arguments : isRecord(payload["params"]) ? payload["params"] : {};
      return [fit(`${s.cyan("→")} ${from} calls ${s.bold(call.label)} `, args, w, onBehalf)];
    }
    case "mcp/response": {
      // The call's id is in the correlation, not always first (an approved proposal's id leads).
      const callId = env.correlation_id?.find((c) => ctx.calls.has(c));
      const call = callId ? ctx.calls.get(callId) : undefined;
      if (!call) return [];
      if (callId) ctx.calls.delete(callId);
      const error = isRecord(payload["error"]) ? payload["error"] : undefined;
      const result = payload["result"];
      const toolError = isRecord(result) && result["isError"] === true;
      const by = env.from === GATEWAY ? "gateway" : env.from;
      const label = `${call.label} → ${call.caller}`;
      if (error)
        return [
          fit(`${s.red("✗")} ${label}: `, String(error["message"] ?? "error"), w, by === "gateway" ? s.dim(" (from the gateway)") : ""),
        ];
      return [fit(`${toolError ? s.red("✗") : s.green("←")} ${label}: `, summarizeResult(result), w)];
    }
    case "mcp/proposal": {
      const call = callShape(env);
      ctx.proposals.add(env.id);
      if (ctx.proposals.size > MAX_CALLS_REMEMBERED) ctx.proposals.delete(ctx.proposals.values().next().value!);
      return [fit(`${s.yellow("?")} ${s.bold(from)} proposes ${s.bold(call.label)} ${s.dim(`[${shortId(env.id)}]`)} `, call.arguments, w)];
    }
    case "mcp/approve": {
      const scope = payload["scope"] === "always" ? " (always)" : "";
      const edited = payload["arguments"] !== undefined ? " with edited arguments" : "";
      return [`${s.green("✓")} ${from} approved ${s.dim(`[${shortId(env.correlation_id?.[0] ?? "?")}]`)}${scope}${edited}`];
    }
    case "system/approval": {
      // One of several approvals a proposal needs (two-person rule): it still waits.
      const by = Array.isArray(payload["by"]) ? payload["by"].map(String) : [];
      // Approvals a reload dropped (their approver removed or demoted): the count went down.
      if (Array.isArray(payload["dropped"]))
        return [`${s.yellow("!")} proposal ${s.dim(`[${shortId(env.correlation_id?.[0] ?? "?")}]`)}: ${String(payload["text"] ?? "")}`];
      return [
        `${s.green("✓")} ${by.at(-1) ?? "someone"} approved ${s.dim(`[${shortId(env.correlation_id?.[0] ?? "?")}]`)}: ${String(payload["text"] ?? "")} approvals${by.length ? ` (${by.join(", ")})` : ""}; it waits for another approver`,
      ];
    }
    case "mcp/reject": {
      const reason = String(payload["reason"] ?? "disagree");
      const text = typeof payload["text"] === "string" ? `: ${payload["text"]}` : "";
      const verb = env.from === GATEWAY && reason === "timeout" ? "expired" : `rejected by ${from} (${reason})`;
      return [`${s.red("✗")} proposal ${s.dim(`[${shortId(env.correlation_id?.[0] ?? "?")}]`)} ${verb}${text}`];
    }
    case "mcp/withdraw":
      return [
        s.dim(
          `  ${from} withdrew proposal [${shortId(env.correlation_id?.[0] ?? "?")}]${payload["reason"] ? `: ${String(payload["reason"])}` : ""}`,
        ),
      ];
    case "system/presence": {
      if (payload["event"] === "summary") {
        // A large space's presence (presence.each_up_to): counts, the ids not spelled out.
        const count = (list: unknown, more: unknown) => (Array.isArray(list) ? list.length : 0) + (typeof more === "number" ? more : 0);
        return [
          s.dim(
            `* ${count(payload["joined"], payload["joined_more"])} joined, ${count(payload["left"], payload["left_more"])} left${typeof payload["online"] === "number" ? ` (${payload["online"]} online)` : ""}`,
          ),
        ];
      }
      const p = isRecord(payload["participant"]) ? payload["participant"] : {};
      const pid = String(p["id"] ?? "?");
      if (payload["event"] === "join") return [s.dim(`* ${pid} joined${p["kind"] ? ` (${String(p["kind"])})` : ""}`)];
      if (payload["event"] === "invited") return [s.dim(`* ${pid} was invited${payload["by"] ? ` by ${String(payload["by"])}` : ""}`)];
      return [s.dim(`* ${pid} left${payload["reason"] ? ` (${String(payload["reason"])})` : ""}`)];
    }
    case "space/conversation": {
      // Who holds a person's conversation (interactive delegation).
      const stack = Array.isArray(payload["stack"]) ? payload["stack"].filter(isRecord).map((f) => String(f["agent"] ?? "?")) : [];
      const human = String(payload["human"] ?? "?");
      const holder = typeof payload["holder"] === "string" ? payload["holder"] : undefined;
      return [
        s.dim(
          holder
            ? `* ${holder} now holds ${human}'s conversation (${stack.join(" → ")}); say "stop" to end it`
            : `* ${human}'s conversation is handed back`,
        ),
      ];
    }
    case "system/error":
      return [s.red(`! ${String(payload["code"] ?? payload["error"] ?? "error")}: ${String(payload["message"] ?? "")}`)];
    case "system/welcome":
      return [];
    default:
      break;
  }
  if (env.kind.startsWith("reasoning/")) {
    const text = payloadText(env.payload);
    const step = env.kind.slice("reasoning/".length);
    return [s.dim(fit(`  ~ ${from} ${step === "thought" ? "thinks" : step}${text ? ": " : ""}`, text ?? "", w))];
  }
  if (env.kind === "participant/status") {
    // The fields a person looks at first (MEW's names, plus mewgate agents' own), then the rest.
    const first = ["state", "status", "provider", "model", "tokens", "max_tokens", "messages_in_context", "turns", "last_error"];
    const entries = Object.entries(payload).filter(([, v]) => typeof v !== "object" || v === null);
    entries.sort(([a], [b]) => (first.indexOf(a) + 1 || 99) - (first.indexOf(b) + 1 || 99));
    const fields = entries.map(([k, v]) => `${k}=${String(v)}`).join(" ");
    return [s.dim(fit(`  ${from} status: `, fields || env.payload, w))];
  }
  if (env.kind.startsWith("participant/")) {
    return [
      s.dim(
        `  ${from}${to}: ${env.kind.slice("participant/".length)}${payloadText(env.payload) ? ` — ${oneLine(payloadText(env.payload), 80)}` : ""}`,
      ),
    ];
  }
  if (env.kind.startsWith("capability/")) {
    const recipient = typeof payload["recipient"] === "string" ? ` ${payload["recipient"]}` : "";
    return [
      s.dim(
        `  ${from} ${env.kind.slice("capability/".length)}${recipient} ${oneLine(payload["capabilities"] ?? payload["grant_id"] ?? "", 80)}`,
      ),
    ];
  }
  return [s.dim(fit(`  ${from}${to} ${env.kind}: `, env.payload, w))];
}

/**
 * Why a proposal waits for a person, as precisely as what we know allows: with the
 * space.yaml (under `up`), the rule that applied; otherwise what the tool's annotations say.
 */
export function whyApproval(
  proposal: Envelope,
  opts: { config?: SpaceConfig | undefined; tools?: readonly ToolInfo[] | undefined },
): string {
  const call = callShape(proposal);
  if (call.method !== "tools/call" || call.tool === undefined)
    return `${proposal.from} proposed an MCP ${call.method}, which is not one of its capabilities`;
  const tool = opts.tools?.find((t) => t.name === call.label);
  const ann = tool?.annotations ?? {};
  const traits = [
    ann["destructiveHint"] === true ? "destructive" : "",
    ann["readOnlyHint"] === true ? "read-only" : ann["readOnlyHint"] === false ? "not read-only" : "",
  ].filter(Boolean);
  const hint = traits.length ? ` (tool is ${traits.join(", ")})` : "";
  // A tool the gateway flagged is called only with approval under tool_checks: ask, whatever the rules say.
  const flagged = Array.isArray(tool?.["findings"]) && tool["findings"].length > 0;
  if (flagged && opts.config?.policy.tool_checks === "ask")
    return `policy: proposal — the gateway flagged ${call.label} and the space's policy.tool_checks is "ask"${hint}`;
  const proposer = opts.config?.participants[proposal.from];
  if (proposer && opts.config) {
    // The proposal's arguments, for rules with conditions (policy/conditions.ts).
    const args = isRecord(proposal.payload) && isRecord(proposal.payload["params"]) ? (proposal.payload["params"]["arguments"] ?? {}) : {};
    const rule = new CompiledPolicy(proposer.tools).rule(call.label, {
      args,
      caller: { id: proposal.from, kind: proposer.kind, groups: [] },
      annotations: tool?.annotations,
    });
    if (rule === "ask") return `policy: proposal — ${proposal.from}'s tools.ask matches ${call.label}${hint}`;
    if (rule === "except") return `policy: proposal — ${proposal.from}'s tools.except covers ${call.label}, yet it was held${hint}`;
    if (rule === undefined) {
      const fallback = opts.config.policy.fallback;
      return `policy: proposal — no rule of ${proposal.from} covers ${call.label} and it is not read-only, so the space's fallback "${fallback}" applies${hint}`;
    }
  }
  return `policy: proposal — ${proposal.from} may not call ${call.label} directly${hint}`;
}
