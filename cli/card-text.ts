/**
 * The operator API's proposal card (gateway/operator/views.ts) and Decided entries as lines
 * for `mewgate proposals show ID` and `mewgate proposals decided`: the same model the console
 * draws, every participant's text sanitised, multi-line values as numbered lines, nothing cut.
 */
import { oneLine, sanitize, type Style } from "./terminal/format.js";
import { isRecord } from "../gateway/index.js";
import { hintWords, wrapText } from "./terminal/proposal-view.js";
import { wrapWords } from "./terminal/wrap-words.js";

const OUTCOME_WORDS: Record<string, string> = {
  ok: "ok",
  tool_error: "tool error",
  error: "error",
  timeout: "timed out",
  cancelled: "cancelled",
  not_routed: "not routed",
};

const str = (v: unknown): string => (typeof v === "string" ? v : v === undefined ? "" : JSON.stringify(v));

/** A value as lines: a multi-line string numbered, a short scalar inline, the rest pretty JSON. */
function valueLines(key: string, value: unknown, width: number): string[] {
  if (typeof value === "string" && !value.includes("\n") && value.length <= width - key.length - 4)
    return [`  ${sanitize(key)}: ${sanitize(value)}`];
  const text = typeof value === "string" ? value : (JSON.stringify(value, null, 2) ?? String(value));
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  const pad = String(lines.length).length;
  return [
    `  ${sanitize(key)}:`,
    ...lines.flatMap((l, i) =>
      wrapText(l, width - pad - 7).map((w, j) => `    ${j === 0 ? String(i + 1).padStart(pad) : " ".repeat(pad)} │ ${w}`),
    ),
  ];
}

/** `mewgate proposals show ID`: the card. */
export function cardLines(card: Record<string, unknown>, s: Style, width: number): string[] {
  const lines = [
    `${s.bold(sanitize(str(card["proposer"])))} wants ${s.bold(sanitize(str(card["tool"] ?? card["method"])))}  ${s.dim(`#${sanitize(str(card["shortId"]))}`)}`,
  ];
  const title = typeof card["title"] === "string" ? sanitize(card["title"]) : "";
  const hints = hintWords({ name: "", annotations: card["hints"] } as never);
  if (title || hints.length)
    lines.push(`tool: ${title}${title && hints.length ? " — " : ""}${hints.map((h) => (h === "destructive" ? s.red(h) : h)).join(" · ")}`);
  if (typeof card["description"] === "string") lines.push(...wrapWords(card["description"], width).map((l) => s.dim(l)));
  const intent = isRecord(card["intent"]) ? card["intent"] : undefined;
  if (intent && typeof intent["text"] === "string") {
    lines.push(
      s.cyan(
        intent["source"] === "proposal"
          ? `why ${sanitize(str(card["proposer"]))} wants it:`
          : `${sanitize(str(card["proposer"]))}'s last message:`,
      ),
    );
    lines.push(...wrapWords(intent["text"], width - 2).map((l) => s.cyan(`  ${l}`)));
  } else lines.push(s.dim(`${sanitize(str(card["proposer"]))} gave no reason`));
  if (card["why"]) lines.push(s.dim(`needs approval: ${sanitize(str(card["why"]))}`));
  const expires = Date.parse(str(card["expiresAt"]));
  lines.push(
    s.dim(
      `proposed ${str(card["createdAt"])}, expires ${str(card["expiresAt"])}${Number.isNaN(expires) ? "" : ` (in ${Math.max(0, Math.round((expires - Date.now()) / 1000))} s)`}; id ${sanitize(str(card["id"]))}`,
    ),
  );
  if (card["state"] === "interrupted")
    lines.push(s.red("INTERRUPTED: the gateway stopped after it was approved; it may or may not have run"));
  // Approving it needs the approver's passkey (policy.passkey): not from a terminal, at the passkey page.
  const passkey = isRecord(card["passkey"]) && card["passkey"]["required"] === true ? card["passkey"] : undefined;
  if (passkey) lines.push(s.red(`approving needs your passkey, for this call alone: in a browser at ${sanitize(str(passkey["where"]))}`));
  const args = isRecord(card["arguments"]) ? card["arguments"] : {};
  lines.push("arguments:");
  if (Object.keys(args).length === 0) lines.push(s.dim("  (none)"));
  for (const [k, v] of Object.entries(args)) lines.push(...valueLines(k, v, width));
  return lines;
}

/** `mewgate proposals decided`: one block per decided proposal, newest first. */
export function decidedLines(decided: Array<Record<string, unknown>>, s: Style, width: number): string[] {
  if (decided.length === 0) return [s.dim("nothing decided yet")];
  const out: string[] = [];
  for (const d of decided) {
    const outcome = typeof d["outcome"] === "string" ? d["outcome"] : undefined;
    const badge = outcome
      ? outcome === "ok"
        ? s.green(OUTCOME_WORDS[outcome] ?? outcome)
        : s.red(OUTCOME_WORDS[outcome] ?? outcome)
      : d["decision"] === "approved"
        ? s.yellow("running")
        : "";
    const approvers = Array.isArray(d["approvedBy"]) && d["approvedBy"].length ? d["approvedBy"].map(str).join(" and ") : d["decidedBy"];
    const by = approvers ? ` by ${sanitize(str(approvers))}` : "";
    out.push(
      `[${sanitize(str(d["shortId"]))}] ${sanitize(str(d["proposer"]))} → ${sanitize(str(d["tool"] ?? d["method"]))}: ${str(d["decision"])}${by} at ${str(d["decidedAt"])}${d["edited"] ? " (edited)" : ""}${badge ? ` · ${badge}` : ""}`,
    );
    if (d["text"]) out.push(s.dim(`  "${sanitize(str(d["text"]))}"`));
    // What was decided on, so two rejected writes do not read the same.
    const args = d["arguments"] ?? d["proposedArguments"];
    if (args !== undefined) out.push(s.dim(`  arguments: ${oneLine(args, Math.max(40, width - 14))}`));
    const result = isRecord(d["result"]) && typeof d["result"]["text"] === "string" ? d["result"]["text"] : undefined;
    if (result !== undefined) {
      const lines = wrapWords(result, width - 4);
      out.push(...lines.slice(0, 6).map((l) => `    ${l}`));
      if (lines.length > 6) out.push(s.dim(`    ⋯ ${lines.length - 6} more lines (--json has it all)`));
    }
  }
  return out;
}

/** `mewgate proposals show ID` of a decided proposal: its Decided entry, then every argument it was decided on. */
export function decidedCardLines(d: Record<string, unknown>, s: Style, width: number): string[] {
  const lines = decidedLines([d], s, width).filter((l) => !l.startsWith(s.dim("  arguments: ")));
  const args = isRecord(d["arguments"]) ? d["arguments"] : isRecord(d["proposedArguments"]) ? d["proposedArguments"] : {};
  lines.push(`arguments${d["edited"] ? " (as edited)" : ""}:`);
  if (Object.keys(args).length === 0) lines.push(s.dim("  (none)"));
  for (const [k, v] of Object.entries(args)) lines.push(...valueLines(k, v, width));
  return lines;
}
