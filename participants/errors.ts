/**
 * The two error families of the participant side:
 * - `ParticipantError`: what a caller of `request()` / `propose()` / `connect()` gets. Local
 *   (never sent), with a stable string `code` to branch on.
 * - `RpcError`: what a request handler throws to answer with a JSON-RPC error
 *   (`{code, message, data}` on the wire).
 */
import type { Envelope } from "../gateway/index.js";

/**
 * Codes a `ParticipantError` carries. Besides these, a `system/error` correlated to a call
 * passes its own `payload.code` through (`capability_violation`, `proposal_required`,
 * `denied`, `cycle_detected`, `depth_exceeded`, `circuit_open`, `unknown_recipient`, …), and
 * a JSON-RPC error whose `data.reason` is a string uses that reason (`timeout`,
 * `target_left`, …).
 */
export type ParticipantErrorCode =
  /** The target answered with a JSON-RPC error (see `rpcCode`, `data`). */
  | "rpc_error"
  /** No answer in time (locally, or the gateway's call timeout). */
  | "timeout"
  /** The connection ended while the call was pending. */
  | "disconnected"
  /** The proposal (or call) was rejected by an approver; see `reason` and `text`. */
  | "rejected"
  /** The proposal expired before anyone decided (`mcp/reject` with reason `timeout`). */
  | "expired"
  /** The proposal was withdrawn. */
  | "withdrawn"
  /**
   * The gateway stopped after the proposal was approved, before its outcome was recorded:
   * the call may or may not have run. The proposal waits for a person to approve it again
   * (or reject it); a new approval's answer is not this call's.
   */
  | "interrupted"
  /** The caller aborted the call through its `AbortSignal`. */
  | "cancelled"
  /** The answer did not have the expected shape (`mcp/response` not JSON-RPC, or `schema` failed). */
  | "invalid_response"
  /** The envelope is larger or nests deeper than the space takes (its welcome's `space.limits`): it was not sent. */
  | "too_large"
  /** The outbound buffer is over `maxBufferedBytes`; the gateway is not keeping up. */
  | "backpressure"
  /** Connecting failed: see `closeCode`. Auth refusals have their own codes below. */
  | "connect_failed"
  /** Close 4401: missing or invalid token. */
  | "unauthorized"
  /** Close 4403: the claimed participant id does not match the token. */
  | "identity_mismatch"
  /** Close 4404: no such space. */
  | "unknown_space"
  /** Close 4406: the claimed participant is not in the space. */
  | "unknown_participant"
  /** Close 4400: bad request (no space given). */
  | "bad_request"
  /** Close 4409: another connection of the same participant replaced this one. */
  | "replaced"
  /** The client was closed by its owner. */
  | "closed"
  | (string & {});

export interface ParticipantErrorDetails {
  /** JSON-RPC error code, for `rpc_error` (and other codes taken from a JSON-RPC error). */
  rpcCode?: number | undefined;
  /** JSON-RPC `error.data`, or the `system/error` payload. */
  data?: unknown;
  /** The reason code of an `mcp/reject` (`rejected`, `expired`) or `mcp/withdraw`. */
  reason?: string | undefined;
  /** Free text an approver gave with a rejection. */
  text?: string | undefined;
  /** WebSocket close code, for connection errors. */
  closeCode?: number | undefined;
  /** The envelope that carried the error, when one did. */
  envelope?: Envelope | undefined;
  cause?: unknown;
}

/** A failed call or connection, with a stable `code`. */
export class ParticipantError extends Error {
  override readonly name = "ParticipantError";
  readonly code: ParticipantErrorCode;
  readonly rpcCode: number | undefined;
  readonly data: unknown;
  readonly reason: string | undefined;
  readonly text: string | undefined;
  readonly closeCode: number | undefined;
  readonly envelope: Envelope | undefined;

  constructor(code: ParticipantErrorCode, message: string, details: ParticipantErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.code = code;
    this.rpcCode = details.rpcCode;
    this.data = details.data;
    this.reason = details.reason;
    this.text = details.text;
    this.closeCode = details.closeCode;
    this.envelope = details.envelope;
  }
}

/** Standard JSON-RPC error codes a handler may want. */
export const RpcErrorCodes = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
} as const;

/**
 * Thrown from a request handler to answer with this JSON-RPC error. Any thrown object with
 * an integer `code` (such as the MCP SDK's `McpError`) is treated the same way; anything
 * else becomes `-32603` with the error's message.
 */
export class RpcError extends Error {
  override readonly name = "RpcError";
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}
