/**
 * The participant SDK: one connection class that every participant kind is built on
 * (agents, the MCP bridge, the space-as-MCP-server, the terminal).
 *
 * ```ts
 * const client = await ParticipantClient.connect({ url: "ws://127.0.0.1:7420", space: "lab", token });
 * client.onRequest(async ({ method, params }) => ({ echoed: params }));
 * const result = await client.request("fs", "tools/call", { name: "read_file", arguments: { path: "a.txt" } });
 * ```
 *
 * What it does for its user:
 * - connects (WebSocket or in-process, behind one `Transport` seam), waits for the welcome
 *   and keeps `participants` current from presence;
 * - reconnects on unexpected closes with exponential backoff and full jitter, never on an
 *   auth refusal or on being replaced, and re-announces its tools afterwards;
 * - `request()` / `propose()` resolve with the JSON-RPC result or reject with a typed
 *   `ParticipantError`, whatever way the failure arrives (JSON-RPC error, correlated
 *   `system/error`, `mcp/reject`, `mcp/withdraw`, local timeout, disconnect);
 * - `onRequest()` serves calls; calls made while serving carry the served request in
 *   their `correlation_id`, so the gateway can follow call chains — automatically;
 * - `serveMcp()` serves an `McpServer` from `@modelcontextprotocol/sdk` to the space.
 *
 * Pending calls and served requests live in Maps keyed by envelope id, each with its timer
 * or abort controller, and are all settled when the connection ends.
 *
 * This class is the facade: it owns the events and composes four pieces, each one concern
 * in its own file — `Connection` (connection.ts), `Calls` (calls.ts), `Serving`
 * (serving.ts) and `Inbound` (inbound.ts), which dispatches what arrives and keeps the
 * view of the space. They reach each other only through the functions the constructor
 * hands them (ports, not back-references).
 */
import { EventEmitter } from "node:events";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type * as z from "zod";
import type { Capability, Envelope } from "../../gateway/index.js";
import { ParticipantError } from "../errors.js";
import type { ParticipantInfo, RpcId, ToolInfo } from "../wire.js";
import { Calls } from "./calls.js";
import { Connection } from "./connection.js";
import { Inbound } from "./inbound.js";
import { Serving } from "./serving.js";
import type {
  ApproveOptions,
  CallOptions,
  ClientEvents,
  ClientOptions,
  ClientStatus,
  NotificationHandler,
  OutboundEnvelope,
  PendingCall,
  RequestHandler,
  TypedCallOptions,
  WelcomeInfo,
} from "./types.js";

/** One participant's connection to one space. */
export class ParticipantClient {
  /** Creates a client and connects it; resolves after the welcome. */
  static async connect(opts: ClientOptions): Promise<ParticipantClient> {
    const client = new ParticipantClient(opts);
    await client.connect();
    return client;
  }

  private readonly events = new EventEmitter();
  private readonly conn: Connection;
  private readonly calls: Calls;
  private readonly serving: Serving;
  private readonly inbound: Inbound;

  constructor(opts: ClientOptions) {
    this.conn = new Connection(opts, {
      receive: (text) => this.inbound.receive(text),
      settleAll: (why, keepHeld) => this.settleAll(why, keepHeld),
      closeMcp: () => this.serving.closeMcp(),
      welcome: () => this.inbound.lastWelcome,
      emit: this.emit.bind(this),
    });
    this.calls = new Calls(this.conn, {
      requestTimeoutMs: opts.requestTimeoutMs ?? 35_000,
      proposalTimeoutMs: opts.proposalTimeoutMs ?? 660_000,
      servedHere: () => this.serving.servedHere(),
    });
    this.serving = new Serving(this.conn, this.calls, () => this.inbound.lastWelcome?.id);
    this.inbound = new Inbound(this.conn, this.calls, this.serving, { emit: this.emit.bind(this), report: this.report.bind(this) });
  }

  // --- state ------------------------------------------------------------------------------

  get status(): ClientStatus {
    return this.conn.state;
  }

  /** This participant's id, from the welcome. Throws before the first welcome. */
  get id(): string {
    const welcome = this.inbound.lastWelcome;
    if (!welcome) throw new ParticipantError("disconnected", "not connected yet: await connect() first");
    return welcome.id;
  }

  /** Current capabilities (updated by every welcome, including after grants). */
  get capabilities(): readonly Capability[] {
    return this.inbound.caps;
  }

  /** The other participants present, by id, kept current from presence. */
  get participants(): ReadonlyMap<string, ParticipantInfo> {
    return this.inbound.others;
  }

  /** The space's tools as of the last welcome or `listTools()`. */
  get tools(): readonly ToolInfo[] {
    return this.inbound.toolList;
  }

  /** Pending proposals seen (from the welcome and since), by proposal id; decided ones are removed. */
  get proposals(): ReadonlyMap<string, Envelope> {
    return this.inbound.seenProposals;
  }

  /** The last welcome, if any. */
  get welcome(): WelcomeInfo | undefined {
    return this.inbound.lastWelcome;
  }

  // --- events -----------------------------------------------------------------------------

  /** Subscribes; returns the unsubscribe function. */
  on<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): () => void {
    this.events.on(event, listener as (...args: unknown[]) => void);
    return () => this.off(event, listener);
  }

  once<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): () => void {
    this.events.once(event, listener as (...args: unknown[]) => void);
    return () => this.off(event, listener);
  }

  off<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): void {
    this.events.off(event, listener as (...args: unknown[]) => void);
  }

  // --- connection -------------------------------------------------------------------------

  /**
   * Connects and resolves with the welcome. Rejects with a `ParticipantError`: the auth
   * codes (`unauthorized`, `unknown_space`, …) or `connect_failed` (unless
   * `reconnect.retryFirstConnect`), or `closed` if `close()` is called meanwhile.
   */
  connect(): Promise<WelcomeInfo> {
    return this.conn.connect();
  }

  /** Leaves the space for good: pending calls reject with `disconnected`, served requests are aborted, nothing reconnects. */
  close(reason = "client closed"): Promise<void> {
    return this.conn.close(reason);
  }

  /**
   * Every pending call fails, every served request is aborted: none can be answered on a
   * new connection — except, while reconnecting, the calls held in a person's conversation
   * (`space/conversation`): the gateway keeps those across its own restart, so the answer
   * can still come, or still be given, once the connection is back.
   */
  private settleAll(why: string, keepHeld = false): void {
    const held = keepHeld ? this.inbound.heldCallIds() : new Set<string>();
    // An approved call's outcome may still be told after a reconnect (interrupted, if the
    // gateway restarted): it waits for the next welcome (calls.ts `resumed`).
    this.calls.failAll(why, keepHeld ? new Set([...held, ...this.calls.approvedIds()]) : held);
    this.serving.abortAll(held);
  }

  // --- sending ----------------------------------------------------------------------------

  /**
   * Sends one envelope and returns its id. Throws `ParticipantError` `disconnected` when
   * not connected, `backpressure` when the outbound buffer is over `maxBufferedBytes`.
   * The gateway's verdict on it (a `system/error`) arrives as an `error` event.
   */
  send(envelope: OutboundEnvelope): string {
    return this.conn.send(envelope);
  }

  /** Sends a JSON-RPC notification (`mcp/request` without id). Without `target` it is a broadcast. */
  notify(target: string | undefined, method: string, params?: unknown, opts: { correlationId?: string[] } = {}): string {
    return this.conn.notify(target, method, params, opts);
  }

  /**
   * Sends an MCP request to `target` and resolves with the JSON-RPC `result`.
   *
   * To use the space's registry, target `system:gateway` with a namespaced tool name
   * (`tools/call` `{name: "fs/read_file"}`); if policy makes it a proposal, this keeps
   * waiting for the decision (see `onProposal`).
   *
   * Rejects with `ParticipantError`: `rpc_error` (or the JSON-RPC error's `data.reason`,
   * e.g. `timeout`, `target_left`), a correlated `system/error`'s code
   * (`capability_violation`, `proposal_required`, `denied`, `cycle_detected`, …),
   * `rejected` / `expired` / `withdrawn`, `interrupted` (approved, then the gateway stopped:
   * it may or may not have run; see calls.ts `resumed`), `timeout`, `cancelled`,
   * `disconnected`, `invalid_response`.
   */
  request<S extends z.ZodType>(target: string, method: string, params: unknown, opts: TypedCallOptions<S>): PendingCall<z.output<S>>;
  request(target: string, method: string, params?: unknown, opts?: CallOptions): PendingCall<unknown>;
  request(target: string, method: string, params?: unknown, opts: CallOptions & { schema?: z.ZodType } = {}): PendingCall<unknown> {
    return this.calls.request(target, method, params, opts);
  }

  /**
   * Proposes an MCP call to `target` (`mcp/proposal` `{method, params}`) and resolves with
   * the result once an approver approved it and the owner answered. Rejects like
   * `request()`; `rejected` (with `reason`, `text`) and `expired` are the usual outcomes
   * besides success. `timeoutMs` defaults to `proposalTimeoutMs`.
   */
  propose<S extends z.ZodType>(target: string, method: string, params: unknown, opts: TypedCallOptions<S>): PendingCall<z.output<S>>;
  propose(target: string, method: string, params?: unknown, opts?: CallOptions): PendingCall<unknown>;
  propose(target: string, method: string, params?: unknown, opts: CallOptions & { schema?: z.ZodType } = {}): PendingCall<unknown> {
    return this.calls.propose(target, method, params, opts);
  }

  /** Withdraws one of my proposals; a pending `propose()` for it rejects with `withdrawn`. Returns the envelope id. */
  withdraw(proposalId: string, reason?: string): string {
    const id = this.calls.withdraw(proposalId, reason);
    this.inbound.forgetProposal(proposalId);
    return id;
  }

  /** As an approver: approves a proposal (`mcp/approve`). Returns the envelope id; a refusal comes as an `error` event correlated to it. */
  approve(proposalId: string, opts: ApproveOptions = {}): string {
    return this.calls.approve(proposalId, opts);
  }

  /** As an approver: rejects a proposal (`mcp/reject` `{reason, text?}`); the proposer's call fails with that reason. */
  reject(proposalId: string, reason: string, text?: string): string {
    return this.calls.reject(proposalId, reason, text);
  }

  /**
   * Asks `system:gateway` for every tool of the space (all pages), each with the policy
   * that applies to me, and updates `tools`.
   */
  listTools(opts: CallOptions = {}): Promise<ToolInfo[]> {
    return this.inbound.listTools(opts);
  }

  /**
   * Every pending proposal this participant may see, following `proposals/list` pages;
   * they are also remembered in `proposals`. Large arguments come elided
   * (`{"mewgate/elided": {bytes, fetch}}`); `proposals/get` fetches one whole.
   */
  listProposals(opts: CallOptions = {}): Promise<Envelope[]> {
    return this.inbound.listProposals(opts);
  }

  /** Everyone connected, asked of the gateway (`participants/list`, all pages); `participants` is set from it. */
  listParticipants(opts: CallOptions = {}): Promise<ParticipantInfo[]> {
    return this.inbound.listParticipants(opts);
  }

  // --- serving ----------------------------------------------------------------------------

  /**
   * Serves `mcp/request`s addressed to this participant. The handler's return value is
   * the JSON-RPC result; a throw becomes a JSON-RPC error. Calls the handler makes through
   * this client join the served request's call chain automatically. One handler at a
   * time, and not together with `serveMcp()`. Returns a function that removes it.
   */
  onRequest(handler: RequestHandler): () => void {
    return this.serving.onRequest(handler);
  }

  /**
   * Takes up a call this participant was serving before it restarted — one the gateway kept
   * because it is held in a person's conversation (`space/conversation` names its envelope
   * id and JSON-RPC id). Returns how to answer it, and a signal that aborts when the caller
   * cancels or the gateway ends it.
   */
  adopt(
    envelopeId: string,
    from: string,
    rpcId: RpcId,
  ): { signal: AbortSignal; answer(result: unknown): void; fail(error: unknown): void } {
    return this.serving.adopt(envelopeId, from, rpcId);
  }

  /** Receives JSON-RPC notifications addressed to me or broadcast. Returns a function that removes the handler. */
  onNotification(handler: NotificationHandler): () => void {
    return this.inbound.onNotification(handler);
  }

  /**
   * Serves an MCP server from `@modelcontextprotocol/sdk` to the space: requests
   * addressed to me go to the server, its answers go back as `mcp/response`, its
   * `notifications/tools/list_changed` reach the gateway. After every (re)connect the
   * client announces its tools so the gateway asks `tools/list`. Closing the server stops
   * serving; closing the client closes the server's transport.
   */
  serveMcp(server: McpServer | Server): Promise<void> {
    return this.serving.serveMcp(server);
  }

  /**
   * Tells the gateway my tool list changed (`notifications/tools/list_changed` to
   * `system:gateway`), so it asks me `tools/list`. Done automatically after every
   * (re)connect when serving an MCP server with tools; call it yourself when serving
   * tools with `onRequest`.
   */
  announceTools(): void {
    this.serving.announceTools();
  }

  // --- events raised by the pieces --------------------------------------------------------

  private emit<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void {
    try {
      this.events.emit(event, ...args);
    } catch (err) {
      // A listener's bug must not break the connection's bookkeeping.
      this.conn.log?.warn({ err, event }, "event listener threw");
    }
  }

  private report(error: ParticipantError): void {
    if (this.events.listenerCount("error") > 0) this.emit("error", error);
    else this.conn.log?.warn({ code: error.code }, error.message);
  }
}
