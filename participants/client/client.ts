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
 * or abort controller, and are all settled when the connection ends (STYLE #6).
 */
import { EventEmitter } from "node:events";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import * as z from "zod";
import { GATEWAY_ID, type Capability, type Envelope } from "../../gateway/envelope.js";
import { ParticipantError } from "../errors.js";
import {
  parseMcpRequest,
  PresencePayloadSchema,
  SystemErrorPayloadSchema,
  ToolInfoSchema,
  WelcomePayloadSchema,
  type ParticipantInfo,
  type RpcId,
  type ToolInfo,
} from "../wire.js";
import type {
  ApproveOptions,
  CallOptions,
  ClientEvents,
  ClientOptions,
  ClientStatus,
  IncomingNotification,
  NotificationHandler,
  OutboundEnvelope,
  PendingCall,
  RequestHandler,
  TypedCallOptions,
  WelcomeInfo,
} from "./types.js";
import { Calls } from "./calls.js";
import { Connection } from "./connection.js";
import { outsideServing, Serving } from "./serving.js";

// ---------------------------------------------------------------------------------------
// Internals

const ToolsPageSchema = z.looseObject({ tools: z.array(ToolInfoSchema), nextCursor: z.string().optional() });
const ProposalsPageSchema = z.looseObject({ proposals: z.array(z.looseObject({ id: z.string(), kind: z.string() })), nextCursor: z.string().optional() });

// ---------------------------------------------------------------------------------------

/** One participant's connection to one space. */
export class ParticipantClient {
  /** Creates a client and connects it; resolves after the welcome. */
  static async connect(opts: ClientOptions): Promise<ParticipantClient> {
    const client = new ParticipantClient(opts);
    await client.connect();
    return client;
  }

  private readonly conn: Connection;
  private readonly calls: Calls;
  private readonly events = new EventEmitter();

  private lastWelcome: WelcomeInfo | undefined;
  private readonly others = new Map<string, ParticipantInfo>();
  private readonly seenProposals = new Map<string, Envelope>();
  private toolList: ToolInfo[] = [];
  private caps: Capability[] = [];

  private readonly serving: Serving;
  private readonly notificationHandlers = new Set<NotificationHandler>();

  constructor(opts: ClientOptions) {
    this.conn = new Connection(opts, {
      receive: (text) => this.receive(text),
      settleAll: (why, keepHeld) => this.settleAll(why, keepHeld),
      closeMcp: () => this.serving.closeMcp(),
      welcome: () => this.lastWelcome,
      emit: this.emit.bind(this),
    });
    this.calls = new Calls(this.conn, {
      requestTimeoutMs: opts.requestTimeoutMs ?? 35_000,
      proposalTimeoutMs: opts.proposalTimeoutMs ?? 660_000,
      servedHere: () => this.serving.servedHere(),
    });
    this.serving = new Serving(this.conn, this.calls, () => this.lastWelcome?.id);
  }

  // --- state ------------------------------------------------------------------------------

  get status(): ClientStatus {
    return this.conn.state;
  }

  /** This participant's id, from the welcome. Throws before the first welcome. */
  get id(): string {
    if (!this.lastWelcome) throw new ParticipantError("disconnected", "not connected yet: await connect() first");
    return this.lastWelcome.id;
  }

  /** Current capabilities (updated by every welcome, including after grants). */
  get capabilities(): readonly Capability[] {
    return this.caps;
  }

  /** The other participants present, by id, kept current from presence. */
  get participants(): ReadonlyMap<string, ParticipantInfo> {
    return this.others;
  }

  /** The space's tools as of the last welcome or `listTools()`. */
  get tools(): readonly ToolInfo[] {
    return this.toolList;
  }

  /** Pending proposals seen (from the welcome and since), by proposal id; decided ones are removed. */
  get proposals(): ReadonlyMap<string, Envelope> {
    return this.seenProposals;
  }

  /** The last welcome, if any. */
  get welcome(): WelcomeInfo | undefined {
    return this.lastWelcome;
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
    const held = keepHeld ? new Set([...this.heldCalls.values()].flat()) : new Set<string>();
    this.calls.failAll(why, held);
    this.serving.abortAll(held);
  }

  /** Calls of mine (made or served) held in a person's conversation, per person. */
  private readonly heldCalls = new Map<string, string[]>();

  private noteConversation(human: unknown, stack: unknown): void {
    if (typeof human !== "string") return;
    const me = this.lastWelcome?.id;
    const mine = (Array.isArray(stack) ? stack : [])
      .filter((f): f is Record<string, unknown> => isRecord(f) && typeof f["call"] === "string" && (f["caller"] === me || f["agent"] === me))
      .map((f) => f["call"] as string);
    if (mine.length) this.heldCalls.set(human, mine);
    else this.heldCalls.delete(human);
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
   * `rejected` / `expired` / `withdrawn`, `timeout`, `cancelled`, `disconnected`,
   * `invalid_response`.
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
    this.seenProposals.delete(proposalId);
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
  async listTools(opts: CallOptions = {}): Promise<ToolInfo[]> {
    const tools: ToolInfo[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const res = await this.request(GATEWAY_ID, "tools/list", cursor === undefined ? {} : { cursor }, { ...opts, schema: ToolsPageSchema });
      tools.push(...res.tools);
      cursor = res.nextCursor;
      if (cursor === undefined) break;
    }
    this.toolList = tools;
    return tools;
  }

  /**
   * Every pending proposal this participant may see, following `proposals/list` pages;
   * they are also remembered in `proposals`. Large arguments come elided
   * (`{"mewgate/elided": {bytes, fetch}}`); `proposals/get` fetches one whole.
   */
  async listProposals(opts: CallOptions = {}): Promise<Envelope[]> {
    const proposals: Envelope[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const res = await this.request(GATEWAY_ID, "proposals/list", cursor === undefined ? {} : { cursor }, { ...opts, schema: ProposalsPageSchema });
      proposals.push(...(res.proposals as unknown as Envelope[]));
      cursor = res.nextCursor;
      if (cursor === undefined) break;
    }
    for (const p of proposals) if (!this.seenProposals.has(p.id)) this.seenProposals.set(p.id, p);
    return proposals;
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
  adopt(envelopeId: string, from: string, rpcId: RpcId): { signal: AbortSignal; answer(result: unknown): void; fail(error: unknown): void } {
    return this.serving.adopt(envelopeId, from, rpcId);
  }

  /** Receives JSON-RPC notifications addressed to me or broadcast. Returns a function that removes the handler. */
  onNotification(handler: NotificationHandler): () => void {
    this.notificationHandlers.add(handler);
    return () => this.notificationHandlers.delete(handler);
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

  // --- receiving --------------------------------------------------------------------------

  private receive(text: string): void {
    let env: Envelope;
    try {
      env = JSON.parse(text) as Envelope;
    } catch {
      this.conn.log?.warn("a frame from the gateway is not JSON; ignored");
      return;
    }
    if (!isEnvelope(env)) {
      this.conn.log?.warn("a frame from the gateway is not an envelope; ignored");
      return;
    }
    // Deliveries may arrive inside a handler's async context (in-process transports
    // inherit it); nothing received belongs to the request being served.
    outsideServing(() => this.dispatch(env));
  }

  private dispatch(env: Envelope): void {
    switch (env.kind) {
      case "system/welcome":
        this.onWelcome(env);
        if (isRecord(env.payload)) {
          this.heldCalls.clear();
          const list = env.payload["conversations"];
          for (const c of Array.isArray(list) ? list : []) if (isRecord(c)) this.noteConversation(c["human"], c["stack"]);
        }
        break;
      case "space/conversation":
        if (env.from === GATEWAY_ID && isRecord(env.payload)) this.noteConversation(env.payload["human"], env.payload["stack"]);
        break;
      case "system/presence":
        this.onPresence(env);
        break;
      case "system/error":
        this.onSystemError(env);
        break;
      case "mcp/request":
        this.onMcpRequest(env);
        break;
      case "mcp/response":
        this.forgetProposals(env);
        this.calls.answered(env);
        break;
      case "mcp/proposal":
        this.onProposal(env);
        break;
      case "mcp/approve": {
        this.calls.approved(env);
        this.forgetProposals(env);
        break;
      }
      case "mcp/reject":
        this.forgetProposals(env);
        this.calls.rejected(env);
        break;
      case "mcp/withdraw":
        this.forgetProposals(env);
        this.calls.withdrawn(env);
        break;
    }
    this.emit("envelope", env);
  }

  private onWelcome(env: Envelope): void {
    const parsed = WelcomePayloadSchema.safeParse(env.payload);
    if (!parsed.success) {
      this.report(new ParticipantError("invalid_response", `unreadable welcome: ${parsed.error.issues[0]?.message ?? "invalid"}`, { envelope: env }));
      return;
    }
    const w = parsed.data;
    const first = !this.conn.welcomed;
    const info: WelcomeInfo = {
      id: w.you.id,
      kind: w.you.kind,
      capabilities: w.you.capabilities,
      visibility: w.you.visibility,
      space: w.space,
      participants: w.participants,
      tools: w.tools,
      proposals: w.proposals as unknown as Envelope[],
      history: w.history as unknown as Envelope[],
      reconnected: first && this.conn.everOpen,
      refreshed: !first,
      envelope: env,
    };
    this.lastWelcome = info;
    this.caps = info.capabilities;
    this.toolList = info.tools;
    this.others.clear();
    for (const p of info.participants) this.others.set(p.id, p);
    if (first) {
      this.seenProposals.clear();
      for (const p of info.proposals) this.seenProposals.set(p.id, p);
      this.conn.opened(info);
    }
    this.emit("welcome", info);
    // A welcome carries what fits in one frame; the rest is a page away.
    if (w.tools_cursor !== undefined) this.listTools().catch((err: unknown) => this.conn.log?.warn({ err }, "could not fetch the rest of the catalogue"));
    if (first && w.proposals_cursor !== undefined) this.listProposals().catch((err: unknown) => this.conn.log?.warn({ err }, "could not fetch the rest of the pending proposals"));
    // Whether the server has tools is private to the SDK; a server without any answers
    // the gateway's tools/list with an error, which costs one round trip.
    if (first && this.serving.servesMcp) this.serving.announceTools();
  }

  private onPresence(env: Envelope): void {
    const parsed = PresencePayloadSchema.safeParse(env.payload);
    if (!parsed.success) return;
    const { event, participant, reason } = parsed.data;
    if (event === "join") this.others.set(participant.id, participant);
    else this.others.delete(participant.id);
    this.emit("presence", { event, participant, reason, envelope: env });
  }

  private onSystemError(env: Envelope): void {
    const parsed = SystemErrorPayloadSchema.safeParse(env.payload);
    const payload = parsed.success ? parsed.data : {};
    const code = payload.code ?? payload.error ?? "error";
    const error = new ParticipantError(code, payload.message ?? code, { data: env.payload, envelope: env });
    if (!this.calls.failCorrelated(env, error)) this.report(error);
  }

  private onMcpRequest(env: Envelope): void {
    const parsed = parseMcpRequest(env.payload);
    if (!parsed.success) return;
    const { id: rpcId, method, params } = parsed.data;
    const me = this.lastWelcome?.id;
    const addressed = env.to?.includes(me ?? "") ?? false;
    if (rpcId === undefined) {
      if ((env.to !== undefined && !addressed) || env.from === me) return;
      if (method === "notifications/cancelled") this.serving.cancelServing(env, params);
      else if (method === "notifications/progress") this.calls.progress(env, params);
      else if (addressed) this.serving.deliverNotification(method, params);
      const n: IncomingNotification = { method, params, from: env.from, envelope: env };
      for (const h of this.notificationHandlers) {
        try {
          h(n);
        } catch (err) {
          this.conn.log?.warn({ err, method }, "notification handler threw");
        }
      }
      return;
    }
    // Watchers see every request in the space; only the addressee answers.
    if (addressed) this.serving.serve(env, rpcId, method, params);
  }

  private onProposal(env: Envelope): void {
    this.seenProposals.set(env.id, env);
    this.calls.proposed(env);
    this.emit("proposal", env);
  }

  /** A decision or an answer ends a proposal's pending life. */
  private forgetProposals(env: Envelope): void {
    for (const id of env.correlation_id ?? []) this.seenProposals.delete(id);
  }

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

// ---------------------------------------------------------------------------------------

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A cheap header check: the gateway has already validated every envelope it routes. */
function isEnvelope(v: unknown): v is Envelope {
  return isRecord(v) && typeof v["kind"] === "string" && typeof v["id"] === "string" && typeof v["from"] === "string";
}
