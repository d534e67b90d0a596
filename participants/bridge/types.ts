/**
 * The MCP bridge's public types (options, status, events, the `Bridge` handle) and the
 * JSON-RPC errors it answers with when the server cannot: the vocabulary bridge.ts and
 * its parts share, kept apart so that none of them imports bridge.ts.
 */
import type { Implementation } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import type { McpServerConfig, Tracing } from "../../gateway/index.js";
import { RpcErrors } from "../../gateway/index.js";
import type { ClientOptions, ParticipantClient } from "../client.js";
import { RpcError } from "../errors.js";
import type { OAuthBridgeOptions } from "./oauth-signin.js";

export interface RestartOptions {
  /** The first restart waits about this long: a random delay between half of it and all of it. Default 250. */
  initialDelayMs?: number | undefined;
  /** The wait doubles per consecutive restart up to this ceiling. Default 30 000. */
  maxDelayMs?: number | undefined;
  /**
   * Give up after this many consecutive restarts without a stable run (up 10 s); the
   * bridge then stays in the space with no tools and answers `server_unavailable`.
   * Default: never give up.
   */
  maxRestarts?: number | undefined;
}

export interface BridgeOptions {
  /** The participant id in the space. Over WebSocket it is sent as the claimed id, so a token for someone else is refused. */
  id: string;
  /** The server, in the shape of space.yaml's `mcp:` / `mcpServers:` entries. */
  server: McpServerConfig;
  /** How to join: `{url, space, token}` or `{transport}` (in-process), as for `ParticipantClient`. */
  client: ClientOptions;
  /** pino; the server's stderr lines go here at info with `{stream: "stderr"}`. Headers, env and tokens are never logged. */
  logger?: Logger | undefined;
  restart?: RestartOptions | undefined;
  /**
   * A call the server has not answered after this long fails with `server_timeout` and is
   * cancelled at the server. Progress from the server re-arms it. A caller's own
   * `_meta["mewgate/timeout_ms"]` (bounded by the gateway) replaces it. Default 30 000.
   */
  callTimeoutMs?: number | undefined;
  /** Starting the server and its `initialize` must finish within this. Default 60 000 (an `npx` server may download first). */
  startTimeoutMs?: number | undefined;
  /**
   * Signing in to a `url:` server behind OAuth: the credential vault, the gateway's consent
   * desk and callback URL (oauth-signin.ts). Without it a 401 fails the start.
   */
  oauth?: OAuthBridgeOptions | undefined;
  /**
   * The space's traces (`Space.tracing`), when the bridge runs in the gateway's process
   * (`mewgate up`): a CLIENT span for each request to the server (trace.ts).
   */
  tracing?: Tracing | undefined;
}

export type BridgeStatus =
  /** `startBridge` is starting the server and joining the space. */
  | "starting"
  /** The server is up and the bridge serves the space. */
  | "running"
  /** The server went down; a restart is scheduled or under way. */
  | "restarting"
  /** Gave up restarting (`restart.maxRestarts`); still in the space, answering `server_unavailable`. */
  | "failed"
  /** `stop()` was called, or the participant's connection ended for good. */
  | "stopped";

/** Why a forwarded call failed without an answer from the server: `error.data.reason` of the JSON-RPC error. */
export type BridgeFailureReason = "server_crashed" | "server_unavailable" | "server_timeout";

/** JSON-RPC error codes the bridge answers with (the gateway's own codes for the same situations). */
export const BridgeErrorCodes = {
  server_crashed: RpcErrors.failed,
  server_unavailable: RpcErrors.failed,
  server_timeout: RpcErrors.timeout,
} as const satisfies Record<BridgeFailureReason, number>;

/** How the server went down. */
export interface ServerDown {
  /** Names the server, its command (or URL) and the exit code or signal. */
  message: string;
  code?: number | null | undefined;
  signal?: string | null | undefined;
}

export interface BridgeEvents {
  status: [status: BridgeStatus];
  /** The server is initialized: at start, and after every restart. */
  ready: [info: { restarts: number; serverInfo: Implementation | undefined; pid: number | undefined }];
  /** The server exited or its connection broke (pending calls have just failed). */
  down: [info: ServerDown];
  /** A restart is scheduled in `delayMs`. */
  restarting: [info: { attempt: number; delayMs: number }];
  /** The server needs a person to sign in at `issuer`: `url` is the link (also on a card in the people's inboxes). */
  signin: [info: { issuer: string; url: string }];
}

export interface Bridge {
  readonly id: string;
  /** The participant connection (for presence, events, or making calls of its own). */
  readonly client: ParticipantClient;
  readonly status: BridgeStatus;
  /** The stdio server's process id while it runs; undefined over HTTP or while it is down. */
  readonly pid: number | undefined;
  /** Restarts so far. */
  readonly restarts: number;
  /** `serverInfo` from the server's `initialize` answer. */
  readonly serverInfo: Implementation | undefined;
  /** Subscribes; returns the unsubscribe function. */
  on<K extends keyof BridgeEvents>(event: K, listener: (...args: BridgeEvents[K]) => void): () => void;
  /** Leaves the space and stops the server (closes its stdin, then SIGTERM, then SIGKILL). */
  stop(): Promise<void>;
}

/** A failure of ours, with `data.reason` saying which and `data.participant` naming the bridge; empty extras are left out. */
export function bridgeFailure(id: string, reason: BridgeFailureReason, message: string, extra: Record<string, unknown> = {}): RpcError {
  const data: Record<string, unknown> = { reason, participant: id };
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null) data[k] = v;
  return new RpcError(BridgeErrorCodes[reason], message, data);
}
