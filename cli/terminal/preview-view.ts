/**
 * A proposal's preview in the terminal and in `mewgate proposals show`: what the call would
 * change (gateway/proposals/preview.ts), asked of `system:gateway` (`proposals/preview`) or
 * the API, drawn as lines — a diff coloured by its first character — every line sanitised.
 * A refused, failed or timed-out preview is one line saying so; nothing waits for it.
 */
import type { Envelope } from "../../gateway/index.js";
import type { ParticipantClient } from "../../participants/index.js";
import { sanitize, shortId, truncate, type Style } from "./format.js";
import { isRecord } from "../../gateway/index.js";

/** Lines of a preview shown under the proposal before "more". */
const PREVIEW_LINES = 30;

const HEADS: Record<string, string> = {
  refused: "preview refused",
  failed: "preview failed",
  timeout: "preview timed out",
  too_large: "no preview: too large",
  will_fail: "this call will fail",
};

/** Earlier calls of a turn as the gateway lists them (proposals/turn-preview.ts), in words, sanitised. */
function turnCalls(list: unknown): string {
  const each = (Array.isArray(list) ? list : [])
    .filter((c): c is { call: number; tool: string } => isRecord(c) && Number.isInteger(c["call"]) && typeof c["tool"] === "string")
    .slice(0, 64)
    .map((c) => `${c.call} (${sanitize(c.tool)})`);
  if (each.length === 0) return "";
  return `${each.length === 1 ? "call" : "calls"} ${each.length === 1 ? each[0] : `${each.slice(0, -1).join(", ")} and ${each.at(-1)}`}`;
}

/** The preview as lines for a terminal `width` wide, at most `max` of its text. */
export function previewLines(preview: unknown, s: Style, width: number, max = PREVIEW_LINES): string[] {
  if (!isRecord(preview) || preview["status"] === "none" || typeof preview["status"] !== "string") return [];
  const status = preview["status"];
  const tool = typeof preview["tool"] === "string" ? ` (${preview["tool"]})` : "";
  if (status !== "ok")
    return [s.yellow(truncate(`${HEADS[status] ?? "no preview"}${tool}: ${String(preview["message"] ?? status)}`, width))];
  if (preview["unchanged"] === true) return [s.cyan(truncate(`preview: no change — the file already holds exactly this${tool}`, width))];
  const render = preview["render"];
  const after = turnCalls(preview["after_turn"]);
  const what = after
    ? `changes against what ${after} of this turn would leave`
    : render === "diff"
      ? preview["new_file"]
        ? "a new file"
        : "changes against what is there now"
      : render === "patch"
        ? "the tool's own dry run"
        : "what is there now";
  const lines = sanitize(String(preview["text"] ?? "")).split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const out = [s.cyan(truncate(`preview: ${what}${tool}${preview["truncated"] ? " — cut short" : ""}`, width))];
  const skipped = turnCalls(preview["not_reflected"]);
  if (skipped) out.push(s.yellow(truncate(`  not reflected: ${skipped} of this turn, which may change files too`, width)));
  const colour = (l: string) =>
    render === "text"
      ? l
      : l.startsWith("+++") || l.startsWith("---")
        ? s.dim(l)
        : l.startsWith("@@")
          ? s.cyan(l)
          : l.startsWith("+")
            ? s.green(l)
            : l.startsWith("-")
              ? s.red(l)
              : l;
  for (const l of lines.slice(0, max)) out.push(`  ${colour(truncate(l, width - 2))}`);
  if (lines.length > max) out.push(s.dim(`  ⋯ ${lines.length - max} more line${lines.length - max === 1 ? "" : "s"} of the preview`));
  return out;
}

/** Previews asked for, per terminal client: each proposal's once. */
const asked = new WeakMap<ParticipantClient, Set<string>>();

/**
 * Asks for the preview of the terminal's current proposal, once per proposal, and prints it
 * when it comes — if that proposal is still the one shown (`current()`).
 */
export function showPreview(
  client: ParticipantClient,
  p: Envelope | undefined,
  s: Style,
  width: number,
  print: (lines: string[]) => void,
  current: () => Envelope | undefined,
): void {
  if (!p || !isRecord(p.payload) || p.payload["method"] !== "tools/call") return;
  let seen = asked.get(client);
  if (!seen) {
    seen = new Set();
    asked.set(client, seen);
  }
  if (seen.has(p.id)) return;
  seen.add(p.id);
  if (seen.size > 1000) seen.delete(seen.values().next().value!);
  client.request("system:gateway", "proposals/preview", { id: p.id }).then(
    (preview) => {
      const lines = previewLines(preview, s, width);
      if (lines.length && current()?.id === p.id) print([s.dim(`── preview of [${shortId(p.id)}] ──`), ...lines]);
    },
    () => {},
  );
}
