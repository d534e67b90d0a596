/**
 * Whose a request or an answer is, where the router must know: a URL elicitation is its
 * addressee's alone (never delivered by visibility), what waits on a participant is asked
 * again of its new connection, and an error that is the caller's own (a bad request, a
 * sign-in it has not made) says nothing of the target's health.
 */
import type { Call } from "./calls.js";
import { type Envelope, type McpRequestPayload, now, PROTOCOL } from "../wire/envelope.js";

/** A pending request of `call`, as its target's new connection is shown it. */
export function askedAgain(call: Call, target: string): Envelope {
  return {
    protocol: PROTOCOL,
    id: call.id,
    ts: now(),
    from: call.caller,
    to: [target],
    kind: "mcp/request",
    ...(call.callbackFor === undefined ? {} : { correlation_id: [call.callbackFor] }),
    payload: { jsonrpc: "2.0", id: call.rpcId, method: call.method, params: call.params },
  } as Envelope;
}

/** JSON-RPC errors that say the request was wrong, not the target: invalid request, method not found, invalid params. */
export function callersFault(error: unknown): boolean {
  const code = typeof error === "object" && error !== null ? (error as { code?: unknown }).code : undefined;
  // -32021: the request lacks a client capability the answer needs (MCP 2026-07-28), the caller's too.
  if (code === -32600 || code === -32601 || code === -32602 || code === -32021) return true;
  // The caller has not signed in at the target's server, or not with the scope it asks (a bridge's sign-in): theirs, not the target's health.
  const data = (error as { data?: unknown }).data;
  const reason = typeof data === "object" && data !== null ? (data as { reason?: unknown }).reason : undefined;
  return reason === "sign_in_needed" || reason === "step_up_needed";
}

/**
 * A URL elicitation is for its addressee alone: the MCP spec keeps what it links to (a
 * sign-in at an authorization server, a payment) between the server and that person, and
 * whoever followed the link would act as them.
 */
export function isPrivate(payload: McpRequestPayload): boolean {
  return payload.method === "elicitation/create" && (payload.params as { mode?: unknown } | undefined)?.mode === "url";
}
