/**
 * What became of a call, in one vocabulary for the audit trail, the operator API, the console,
 * the CLI and the `mewgate_calls_total` metric:
 *
 *   ok          the tool answered with a result
 *   tool_error  the tool answered with a result marked `isError: true` (it refused or failed)
 *   error       a JSON-RPC error: from the tool, or from the gateway (its target left)
 *   timeout     no answer within the call's timeout
 *   cancelled   the caller (or the space) gave up on it
 *   not_routed  approved, but it could not be sent (its target had gone, say)
 *
 * And, for the Decided list, the last few approved calls' results as text (folded by the
 * readers): kept in memory only, bounded in count and size; the audit trail keeps the rest.
 */
import { now } from "../wire/envelope.js";

export type CallOutcome = "ok" | "tool_error" | "error" | "timeout" | "cancelled" | "not_routed";

export const CALL_OUTCOMES: readonly CallOutcome[] = ["ok", "tool_error", "error", "timeout", "cancelled", "not_routed"];

/** The outcome of an answered call from its `mcp/response` payload. */
export function answerOutcome(payload: { result?: unknown; error?: unknown }): "ok" | "tool_error" | "error" {
  if (payload.error !== undefined) return "error";
  const r = payload.result;
  return typeof r === "object" && r !== null && (r as { isError?: unknown }).isError === true ? "tool_error" : "ok";
}

/** The outcome of a call the gateway ended with an error of its own, from that error's reason. */
export function failureOutcome(reason: string): CallOutcome {
  return reason === "timeout" || reason === "cancelled" || reason === "not_routed" ? reason : "error";
}

/** What a Decided card shows of an approved call's end. */
export interface CallResult {
  outcome: CallOutcome;
  /** The result's text (text content joined; other content summarised), or the error's message. */
  text: string;
  /** Characters cut from `text` to keep it bounded. */
  cut?: number | undefined;
  at: string;
}

/** Most results remembered, and most characters of one. */
const MAX_RESULTS = 500;
const MAX_TEXT = 64 * 1024;

/** A result as text a person reads: text content as it is, anything else named with its size. */
export function resultText(payload: { result?: unknown; error?: unknown }): string {
  if (payload.error !== undefined) {
    const e = payload.error as { message?: unknown; code?: unknown };
    return `${typeof e?.message === "string" ? e.message : "error"}${typeof e?.code === "number" ? ` (code ${e.code})` : ""}`;
  }
  const r = payload.result as { content?: unknown; structuredContent?: unknown } | undefined;
  if (r && Array.isArray(r.content)) {
    const parts = r.content.map((c: unknown) => {
      const item = (c ?? {}) as Record<string, unknown>;
      if (item["type"] === "text" && typeof item["text"] === "string") return item["text"];
      const data = typeof item["data"] === "string" ? item["data"] : typeof item["blob"] === "string" ? item["blob"] : undefined;
      const size = data === undefined ? "" : `, ${Math.floor((data.length * 3) / 4)} bytes`;
      return `[${String(item["type"] ?? "content")}${typeof item["mimeType"] === "string" ? ` ${item["mimeType"]}` : ""}${size}]`;
    });
    return parts.join("\n");
  }
  try {
    return JSON.stringify(r ?? null, null, 2) ?? "";
  } catch {
    return String(r);
  }
}

/** The last results of approved calls, by proposal id, oldest dropped first. */
export class CallResults {
  private readonly byId = new Map<string, CallResult>();

  add(id: string, outcome: CallOutcome, text: string): void {
    const cut = text.length > MAX_TEXT ? text.length - MAX_TEXT : 0;
    this.byId.delete(id);
    this.byId.set(id, { outcome, text: cut ? text.slice(0, MAX_TEXT) : text, ...(cut ? { cut } : {}), at: now() });
    if (this.byId.size > MAX_RESULTS) this.byId.delete(this.byId.keys().next().value!);
  }

  get(id: string): CallResult | undefined {
    return this.byId.get(id);
  }
}
