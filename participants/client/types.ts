/**
 * The participant client's public types: the options a client is built with, the events it
 * raises, and what calls, handlers and approvals are given. Types only; the code that uses
 * them is in the other files of this folder.
 */
import type { Logger } from "pino";
import type * as z from "zod";
import type { Capability, Envelope } from "../../gateway/index.js";
import type { ParticipantError } from "../errors.js";
import type { TransportFactory } from "../transport.js";
import type { WebSocketTransportOptions } from "../websocket.js";
import type { ParticipantInfo, RpcId, ToolInfo } from "../wire.js";

export interface ReconnectOptions {
  /** First retry waits up to this long (full jitter: uniform in [0, ceiling]). Default 100. */
  initialDelayMs?: number;
  /** The ceiling stops doubling here. Default 10 000. */
  maxDelayMs?: number;
  /** Give up after this many consecutive failed attempts. Default: never. */
  maxAttempts?: number;
  /** Also retry when the very first connection fails (e.g. the gateway is still starting). Default false: `connect()` rejects. */
  retryFirstConnect?: boolean;
}

interface CommonOptions {
  /** `false` turns reconnecting off (the usual choice in-process). */
  reconnect?: ReconnectOptions | false | undefined;
  /** How long a connection attempt may take to get its welcome. Default 10 000. */
  connectTimeoutMs?: number | undefined;
  /**
   * Local deadline of `request()` when the call gives none. A bit above the gateway's
   * default call timeout (30 s), so the gateway's own timeout answer normally wins.
   * Default 35 000.
   */
  requestTimeoutMs?: number | undefined;
  /**
   * Local deadline while a call waits for a human decision: `propose()`, and a `request()`
   * the gateway turned into a proposal. Above the gateway's default proposal TTL (10 min).
   * Default 660 000.
   */
  proposalTimeoutMs?: number | undefined;
  /** `send()` refuses (`backpressure`) while more than this many bytes wait to be written. Default 8 MiB. */
  maxBufferedBytes?: number | undefined;
  /** A pino logger; the client logs through one child per client. Tokens are never logged. */
  logger?: Logger | undefined;
}

/** Connect over WebSocket with a token (the transport's options: url, space, token, participantId, echo, heartbeatMs). */
export interface WebSocketClientOptions extends CommonOptions, WebSocketTransportOptions {}

/** Connect through any transport, e.g. `() => connectInProcess(space, "agent")`. Called once per (re)connection. */
export interface TransportClientOptions extends CommonOptions {
  transport: TransportFactory;
}

export type ClientOptions = WebSocketClientOptions | TransportClientOptions;

export type ClientStatus = "idle" | "connecting" | "open" | "reconnecting" | "closed";

/** What a welcome told this participant. */
/** What a frame may be in the space (its `gateway.limits`), as the welcome says. */
export interface FrameLimits {
  max_payload_bytes: number;
  max_depth: number;
}

export interface WelcomeInfo {
  id: string;
  kind: string | undefined;
  capabilities: Capability[];
  visibility: string | undefined;
  space:
    | {
        id: string;
        name?: string | undefined;
        description?: string | undefined;
        /** The largest frame the space takes and how deep it may nest; `send` refuses a frame past them. */
        limits?: FrameLimits | undefined;
      }
    | undefined;
  /** The others present at that moment. */
  participants: ParticipantInfo[];
  /** The space's tools with the policy that applies to this participant (may be empty). */
  tools: ToolInfo[];
  /** Pending proposals. */
  proposals: Envelope[];
  /** Recent envelopes this participant may see. */
  history: Envelope[];
  /** This welcome opened a connection that replaces an earlier one (a reconnect). */
  reconnected: boolean;
  /** This welcome was re-sent on an open connection because the capabilities changed. */
  refreshed: boolean;
  envelope: Envelope;
}

export interface PresenceEvent {
  event: "join" | "leave";
  participant: ParticipantInfo;
  reason?: string | undefined;
  envelope: Envelope;
}

export interface ClientCloseEvent {
  code: number;
  reason: string;
  /** Whether the client will try again. */
  reconnecting: boolean;
  /** Set when the close is final for a reason the owner should know (auth refusal, replaced, gave up). */
  error?: ParticipantError | undefined;
}

/** Events, for `on()` / `once()` / `off()`. */
export interface ClientEvents {
  /** Every welcome: the first, after each reconnect, and after a grant or revoke. */
  welcome: [info: WelcomeInfo];
  /** Every envelope received, after the client has updated its own state. */
  envelope: [envelope: Envelope];
  presence: [event: PresenceEvent];
  /** Every `mcp/proposal` seen (the UI's "waiting for approval" list). */
  proposal: [proposal: Envelope];
  /** Problems not tied to a pending call: uncorrelated `system/error`s, undecodable frames. Logged when nobody listens. */
  error: [error: ParticipantError];
  /** A connection ended. */
  close: [event: ClientCloseEvent];
  reconnecting: [info: { attempt: number; delayMs: number }];
}

/** An envelope to send; the client fills in `protocol` and `id` (returned by `send`). */
export interface OutboundEnvelope {
  kind: string;
  to?: string[] | undefined;
  payload?: unknown;
  correlation_id?: string[] | undefined;
  context?: string | undefined;
  id?: string | undefined;
}

export interface CallOptions {
  /**
   * Local deadline in ms. For `request()` it is also sent to the gateway as
   * `params._meta["mewgate/timeout_ms"]` (when params is an object), so both give up together.
   */
  timeoutMs?: number | undefined;
  /** Abort the call: a request sends `notifications/cancelled`, a proposal is withdrawn; rejects with `cancelled`. */
  signal?: AbortSignal | undefined;
  /** Called when the call is held as a proposal awaiting approval (a `request()` to `system:gateway` that policy routes through a human). */
  onProposal?: ((proposal: Envelope) => void) | undefined;
  /** MCP progress for this call; sets `params._meta.progressToken` when absent. */
  onProgress?: ((params: { progress?: number; total?: number; message?: string; [k: string]: unknown }) => void) | undefined;
  /** Ids added to `correlation_id`, besides the served request the client adds on its own. */
  correlationId?: string[] | undefined;
  /** `false`: send as a fresh call, not as part of the request being served (no chain). Default true. */
  chain?: boolean | undefined;
  context?: string | undefined;
}

export interface TypedCallOptions<S extends z.ZodType> extends CallOptions {
  /** Validates the result; a mismatch rejects with `invalid_response`. */
  schema: S;
}

/** A pending `request()` / `propose()`: a promise that also carries the envelope id it was sent with. */
export type PendingCall<T> = Promise<T> & { readonly id: string };

/** What a request handler is given. */
export interface IncomingRequest {
  method: string;
  params: unknown;
  /** Who sent it (the caller, or `system:gateway` for calls it forwards). */
  from: string;
  /** The caller's JSON-RPC id. */
  rpcId: RpcId;
  envelope: Envelope;
  /** Aborted when the caller cancels, the gateway times the call out, or the connection drops. No answer is sent after that. */
  signal: AbortSignal;
}

/** Returns the JSON-RPC `result`, or throws (an `RpcError`, or anything with an integer `code`) for a JSON-RPC error. */
export type RequestHandler = (request: IncomingRequest) => unknown;

export interface IncomingNotification {
  method: string;
  params: unknown;
  from: string;
  envelope: Envelope;
}
export type NotificationHandler = (notification: IncomingNotification) => void;

export interface ApproveOptions {
  /** `always` also grants the proposer that tool for the future. Default `once`. */
  scope?: "once" | "always";
  /** Edited arguments to run the call with instead of the proposed ones. */
  arguments?: Record<string, unknown> | undefined;
  reason?: string | undefined;
  /** With `always`: limit the grant to exactly these arguments, or to a field under the approved value's directory (docs/security.md). */
  limit?: "tool" | "exact" | { field: string; prefix?: string } | undefined;
}
