/**
 * How the interactive terminal shows the proposals waiting for this person: the block
 * printed again whenever the queue changes, every argument of one (`v`), and the list
 * (`/proposals`). Pure functions of the queue, so what is approved is what was shown.
 */
import type { SpaceConfig } from "../../gateway/index.js";
import type { Envelope } from "../../gateway/index.js";
import type { ToolInfo } from "../../participants/index.js";
import { callShape, fit, interruption, oneLine, sanitize, shortId, truncate, whyApproval, wrapJson, type Style } from "./format.js";
import { isRecord } from "../../gateway/index.js";
import type { ProposalQueue } from "./queue.js";
import { wrapWords } from "./wrap-words.js";

/** The preview printed under the proposal (preview-view.ts), offered with the rest of the view. */
export { showPreview } from "./preview-view.js";

/** Most changes of a tool's definition the block lists. */
const CHANGE_LINES = 8;

/**
 * What changed in the tool since it was allowed, if the proposal carries it
 * (`payload["mewgate/definition_changed"]`, written by the gateway, sanitised here).
 */
export function definitionChanges(env: Envelope): string[] | undefined {
  const mark = isRecord(env.payload) ? env.payload["mewgate/definition_changed"] : undefined;
  if (!isRecord(mark)) return undefined;
  return (Array.isArray(mark["changes"]) ? mark["changes"] : []).filter((c): c is string => typeof c === "string").map(sanitize);
}

/** Lines of arguments the approval view shows before its "more" marker. */
const ARGUMENT_LINES = 24;

/** The block shown while proposals wait: the selected one whole (up to its marker), the others one line each. */
export function queueBlock(
  queue: ProposalQueue,
  s: Style,
  w: number,
  why: { config?: SpaceConfig | undefined; tools?: readonly ToolInfo[] | undefined },
): string[] {
  const n = queue.size;
  const current = queue.current!;
  const call = callShape(current);
  const cut = interruption(current);
  const lines = [
    s.yellow(`── ${n} proposal${n === 1 ? "" : "s"} waiting · ${queue.position}/${n} ${"─".repeat(Math.max(2, Math.min(40, w - 40)))}`),
    `${s.bold(current.from)} wants ${s.bold(call.label)}  ${s.dim(`[${shortId(current.id)}]`)}${cut ? `  ${s.red("INTERRUPTED")}` : ""}`,
  ];
  // Approved once already: a person must see that approving it again may run it twice.
  if (cut) {
    lines.push(s.red(truncate(`interrupted: ${cut.message}`, w)));
    lines.push(
      s.dim(truncate(`approved by ${cut.approvedBy ?? "someone"} before the stop; a approves it again (it runs again), r rejects it`, w)),
    );
  } else lines.push(s.dim(truncate(`why: ${whyApproval(current, why)}`, w)));
  // The tool's own hints, and why the proposer wants it in its words (docs/protocol.md, intent).
  const hints = hintWords(why.tools?.find((t) => t.name === call.label));
  if (hints.length) lines.push(`tool: ${hints.map((h) => (h === "destructive" ? s.red(h) : h)).join(" · ")}`);
  const intent = intentOf(current);
  if (intent) {
    const said = wrapWords(intent, w - 4);
    lines.push(s.cyan(`${current.from} says why:`));
    for (const l of said.slice(0, INTENT_LINES)) lines.push(s.cyan(`  ${l}`));
    if (said.length > INTENT_LINES)
      lines.push(s.dim(`  ⋯ ${said.length - INTENT_LINES} more line${said.length - INTENT_LINES === 1 ? "" : "s"} — v shows them all`));
  }
  // The gateway flagged the tool's texts (gateway/tools/inspect.ts): the reasons, before anything else is decided.
  const findings = flaggedReasons(why.tools?.find((t) => t.name === call.label));
  if (findings.length) {
    lines.push(s.red(truncate(`⚠ the gateway flagged ${call.label}:`, w)));
    for (const r of findings.slice(0, 6)) lines.push(s.red(truncate(`  · ${r}`, w)));
    if (findings.length > 6) lines.push(s.red(`  · … and ${findings.length - 6} more`));
  }
  // The tool is not what it was when it was allowed: a person sees how before approving.
  const changed = definitionChanges(current);
  if (changed) {
    lines.push(s.red(truncate(`the tool changed since it was allowed; approving confirms its new definition:`, w)));
    for (const c of changed.slice(0, CHANGE_LINES)) lines.push(s.red(truncate(`  · ${c}`, w)));
    if (changed.length > CHANGE_LINES) lines.push(s.dim(`  … and ${changed.length - CHANGE_LINES} more`));
  }
  lines.push(call.method === "tools/call" ? "arguments:" : "params:");
  // Wrapped, never cut: what the human approves is what is on the screen, or the
  // marker says there is more and `v` prints it all.
  const args = wrapJson(call.arguments, w - 4, ARGUMENT_LINES);
  lines.push(...args.lines.map((l) => `  ${l}`));
  if (args.more > 0) lines.push(s.yellow(`  ⋯ ${args.more} more line${args.more === 1 ? "" : "s"} of arguments — v shows them all`));
  const others = queue.all.filter((p) => p !== current);
  for (const p of others.slice(0, 5)) {
    const c = callShape(p);
    lines.push(s.dim(fit(`   also: ${p.from} → ${c.label} [${shortId(p.id)}]${interruption(p) ? " (interrupted)" : ""} `, c.arguments, w)));
  }
  if (others.length > 5) lines.push(s.dim(`   … and ${others.length - 5} more (/proposals)`));
  lines.push(
    s.yellow(
      `a approve ${cut ? "again" : "once"} · A approve always… · e edit, then approve · R respond · r reject · v view all · n/p next/previous`,
    ),
  );
  return lines;
}

/** A proposal's arguments whole, wrapped, for the scrollback (`v`). */
export function allArguments(current: Envelope, s: Style, width: number): string[] {
  const call = callShape(current);
  const { lines } = wrapJson(call.arguments, width - 4);
  const intent = intentOf(current);
  return [
    ...(intent ? [s.dim(`── why ${current.from} wants it ──`), ...wrapWords(intent, width - 4).map((l) => `  ${l}`)] : []),
    s.dim(`── all arguments of [${shortId(current.id)}] ${call.label} (${lines.length} lines) ──`),
    ...lines.map((l) => `  ${l}`),
    s.dim("── end of arguments ──"),
  ];
}

/** `/proposals`: one line each, the selected one marked. */
export function proposalLines(queue: ProposalQueue, s: Style, width: number): string[] {
  if (queue.size === 0) return [s.dim("no proposals waiting")];
  return queue.all.map((p, i) => {
    const c = callShape(p);
    const mark = p === queue.current ? ">" : " ";
    return truncate(
      `${mark} ${i + 1}. [${shortId(p.id)}] ${interruption(p) ? "INTERRUPTED " : ""}${p.from} → ${c.label} ${oneLine(c.arguments, 80)}`,
      width,
    );
  });
}

/** The reasons the gateway gave for flagging a tool (its `findings`), as text; none for a clean or unknown tool. */
export function flaggedReasons(tool: ToolInfo | undefined): string[] {
  const findings = tool?.["findings"];
  if (!Array.isArray(findings)) return [];
  return findings
    .slice(0, 32)
    .map((f) =>
      typeof f === "object" && f !== null && typeof (f as { reason?: unknown }).reason === "string"
        ? (f as { reason: string }).reason
        : "flagged",
    );
}

/** Lines of the proposer's intent the block shows before its "more" marker. */
const INTENT_LINES = 4;

/** The proposer's intent (`payload.intent`), if it sent one. */
export function intentOf(env: Envelope): string | undefined {
  const intent = isRecord(env.payload) ? env.payload["intent"] : undefined;
  return typeof intent === "string" && intent.trim() !== "" ? intent : undefined;
}

/** Text wrapped (never cut) to `width`, its own lines kept, each sanitised. */
export function wrapText(text: string, width: number): string[] {
  const w = Math.max(20, width);
  const out: string[] = [];
  for (const raw of text.replace(/\r\n/g, "\n").split("\n")) {
    let rest = sanitize(raw.replace(/\t/g, "  "));
    out.push(rest.slice(0, w));
    rest = rest.slice(w);
    while (rest.length > 0) {
      out.push(`↪ ${rest.slice(0, w - 2)}`);
      rest = rest.slice(w - 2);
    }
  }
  return out;
}

const HINT_WORDS: Array<[string, string, string]> = [
  ["destructiveHint", "destructive", "not destructive"],
  ["readOnlyHint", "read-only", "not read-only"],
  ["idempotentHint", "idempotent", "not idempotent"],
  ["openWorldHint", "open world", "closed world"],
];

/** The annotation hints a tool declares, in words (only booleans count). */
export function hintWords(tool: ToolInfo | undefined): string[] {
  const a = tool?.["annotations"];
  if (!isRecord(a)) return [];
  return HINT_WORDS.filter(([k]) => typeof a[k] === "boolean").map(([k, yes, no]) => (a[k] ? yes : no));
}
