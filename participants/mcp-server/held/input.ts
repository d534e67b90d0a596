/**
 * A server's `input_required` (MCP 2026-07-28, the multi-round trip) through a face whose
 * client speaks 2026-07-28: the face asks the owner with `TAKES_INPUT` set in `_meta`, the
 * bridge then hands the server's `input_required` back as it came instead of fulfilling it
 * through the space, and the client's retry (`inputResponses`, `requestState`) goes on to
 * the server untouched. The request state is the server's: opaque here, never read or
 * changed; the server checks it (a tampered one is the server's to refuse).
 *
 * Bounded, so a client cannot push more through the space than a person could read: a
 * request state longer than MAX_STATE characters or input responses larger than
 * MAX_RESPONSES_BYTES are refused with a message that says so.
 */
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { GATEWAY_ID } from "../../../gateway/index.js";
import type { ParticipantError } from "../../errors.js";

/** The `_meta` flag: this request's client takes `input_required` itself. The gateway's own (a client's `mewgate/` keys are dropped, face/face.ts). */
export const TAKES_INPUT = "mewgate/input_required";

/** Where modern/modern.ts puts a retry's `inputResponses` and `requestState` for the face (set there only; a client's own is dropped). */
export const RETRY_META = "mewgate/retry";

/**
 * Where modern/modern.ts names the 2026-07-28 request a call to the face serves (logs/modern-logs.ts): the
 * face's log lines about that call carry it back in their `_meta`, so they reach that request's
 * client. Set there only (a client's own is replaced).
 */
export const LOG_ROUTE = "mewgate/log_route";

export const MAX_STATE = 65_536;
export const MAX_RESPONSES_BYTES = 1_048_576;

/** The multi-round-trip params of a retry (from the request's `_meta`, RETRY_META), to pass on as they came; `{}` when there are none. */
export function retryParams(meta: unknown): { inputResponses?: unknown; requestState?: string } {
  const params = typeof meta === "object" && meta !== null ? (meta as Record<string, unknown>)[RETRY_META] : undefined;
  if (typeof params !== "object" || params === null) return {};
  const { inputResponses, requestState } = params as Record<string, unknown>;
  const out: { inputResponses?: unknown; requestState?: string } = {};
  if (requestState !== undefined) {
    if (typeof requestState !== "string") throw new McpError(ErrorCode.InvalidParams, "requestState must be a string");
    if (requestState.length > MAX_STATE)
      throw new McpError(ErrorCode.InvalidParams, `requestState is longer than ${MAX_STATE} characters; it is not passed on`);
    out.requestState = requestState;
  }
  if (inputResponses !== undefined) {
    if (typeof inputResponses !== "object" || inputResponses === null || Array.isArray(inputResponses))
      throw new McpError(ErrorCode.InvalidParams, "inputResponses must be an object of responses by key");
    if (Buffer.byteLength(JSON.stringify(inputResponses)) > MAX_RESPONSES_BYTES)
      throw new McpError(ErrorCode.InvalidParams, `inputResponses are larger than ${MAX_RESPONSES_BYTES} bytes; they are not passed on`);
    out.inputResponses = inputResponses;
  }
  return out;
}

/** Whether `result` is a server's `input_required` answer (passed on as it came). */
export function isInputRequired(result: unknown): result is Record<string, unknown> {
  return typeof result === "object" && result !== null && (result as Record<string, unknown>)["resultType"] === "input_required";
}

/**
 * An error the tool's server gave, passed on to a 2026-07-28 client as a JSON-RPC error even
 * when its data names a reason (a bad request state…): not the gateway's, nor the bridge's
 * own failure (whose data names the bridge as `participant`).
 */
export function serverError(err: ParticipantError): boolean {
  const from = err.envelope?.from;
  if (err.rpcCode === undefined || from === undefined || from === GATEWAY_ID) return false;
  const data = err.data as Record<string, unknown> | undefined;
  return !(typeof data === "object" && data !== null && data["participant"] === from);
}
