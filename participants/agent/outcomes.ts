/**
 * What a tool call through the gateway came back with, as the loop's `ToolOutcome`.
 *
 * A success is an MCP `CallToolResult`, turned into text for the model. A failure is a
 * `ParticipantError` from the SDK, whatever way it arrived (a rejected proposal, the
 * gateway's call governance, a JSON-RPC error, a timeout); it is mapped onto the loop's
 * small set of codes, keeping the gateway's own code in the message so the model (and a
 * person reading the transcript) can tell a cycle from a departed owner.
 */
import { ParticipantError } from "../errors.js";
import type { ToolFailure, ToolFailureCode, ToolOutcome } from "./loop.js";
import { isRecord } from "../../gateway/index.js";

/** The text of an MCP `CallToolResult` (text blocks joined; other blocks summarized). */
export function resultText(result: unknown): { text: string; isError: boolean } {
  if (!isRecord(result)) return { text: result === undefined ? "(no output)" : JSON.stringify(result), isError: false };
  const isError = result["isError"] === true;
  const parts: string[] = [];
  const content = Array.isArray(result["content"]) ? result["content"] : [];
  for (const block of content) {
    if (!isRecord(block)) continue;
    switch (block["type"]) {
      case "text":
        if (typeof block["text"] === "string") parts.push(block["text"]);
        break;
      case "image":
      case "audio":
        parts.push(`[${block["type"]}${typeof block["mimeType"] === "string" ? ` ${block["mimeType"]}` : ""}]`);
        break;
      case "resource": {
        const r = isRecord(block["resource"]) ? block["resource"] : {};
        parts.push(typeof r["text"] === "string" ? r["text"] : `[resource ${String(r["uri"] ?? "")}]`);
        break;
      }
      case "resource_link":
        parts.push(`[resource ${String(block["uri"] ?? "")}]`);
        break;
      default:
        parts.push(JSON.stringify(block));
    }
  }
  // A tool that answers only with structured content still has something to say.
  if (parts.length === 0 && result["structuredContent"] !== undefined) parts.push(JSON.stringify(result["structuredContent"]));
  return { text: parts.length > 0 ? parts.join("\n") : "(no output)", isError };
}

/** A successful call's outcome. */
export function successOutcome(result: unknown, approvedBy?: string): ToolOutcome {
  const { text, isError } = resultText(result);
  return { type: "result", content: text, ...(isError ? { isError } : {}), ...(approvedBy ? { approvedBy } : {}) };
}

/** Gateway and SDK codes that mean "the call could not be made now", not "the tool failed". */
const UNAVAILABLE = new Set([
  "cycle_detected",
  "depth_exceeded",
  "circuit_open",
  "too_many_pending",
  "target_left",
  "target_offline",
  "disconnected",
  "backpressure",
  "closed",
  "not_routed",
]);

/** A failed call's outcome; anything that is not a `ParticipantError` is `failed`. */
export function failureOutcome(err: unknown): ToolFailure {
  if (!(err instanceof ParticipantError)) {
    return { type: "error", code: "failed", message: err instanceof Error ? err.message : String(err) };
  }
  const by = err.envelope?.from;
  switch (err.code) {
    case "rejected":
      return {
        type: "error",
        code: "rejected",
        message: err.text?.trim() || "no explanation was given",
        ...(err.reason ? { reason: err.reason } : {}),
        ...(by ? { by } : {}),
      };
    case "expired":
      return {
        type: "error",
        code: "timeout",
        message: "the proposal expired before anyone approved or rejected it; the call was not made",
      };
    case "timeout":
      return { type: "error", code: "timeout", message: err.message };
    case "interrupted":
      return {
        type: "error",
        code: "failed",
        message:
          "interrupted: the gateway stopped after the call was approved; it may or may not have run. Check its effect before calling it again; a person may also approve the same proposal again",
      };
    case "withdrawn":
    case "cancelled":
      return { type: "error", code: "cancelled", message: err.message };
    case "denied":
    case "proposal_required":
    case "capability_violation":
      return { type: "error", code: "denied", message: `${err.code}: ${err.message}` };
    case "unknown_tool":
      return { type: "error", code: "unknown_tool", message: err.message };
    case "invalid_payload":
      return { type: "error", code: "invalid_arguments", message: err.message };
    case "rpc_error":
      // -32602: the owner refused the arguments.
      return { type: "error", code: err.rpcCode === -32602 ? "invalid_arguments" : "failed", message: err.message };
  }
  const code: ToolFailureCode = UNAVAILABLE.has(err.code) ? "unavailable" : "failed";
  return { type: "error", code, message: `${err.code}: ${err.message}` };
}
