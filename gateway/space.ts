/**
 * One space: who is in it, what each may send, and who sees what.
 *
 * The space never touches a socket. A connected participant is a `Peer` (send bytes,
 * close), so the WebSocket server and in-process participants plug in alike.
 *
 * Every inbound frame goes through one pipeline, stopping at the first failure:
 *   JSON → envelope schema → from → reserved kinds → recipients → capability or tool
 *   policy → kind (calls, proposals, grants) → route.
 *
 * The space also keeps the tool registry, the proposals it holds and the calls in flight
 * (registry.ts, proposals.ts, calls.ts hold the state; the decisions are made here, in
 * one place per kind).
 */
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import { type Call, Calls } from "./calls.js";
import { compileCapabilities, covers, type Matcher } from "./capabilities.js";
import type { ParticipantConfig, SpaceConfig } from "./config.js";
import {
  ApprovePayloadSchema,
  type Capability,
  type Envelope,
  ErrorCodes,
  type ErrorCode,
  GATEWAY_ID,
  GrantPayloadSchema,
  type InboundEnvelope,
  McpRequestPayloadSchema,
  type McpRequestPayload,
  McpResponsePayloadSchema,
  PROTOCOL,
  ProposalPayloadSchema,
  RejectPayloadSchema,
  RevokePayloadSchema,
  RpcErrors,
  WithdrawPayloadSchema,
  describeIssue,
  errorEnvelope,
  parseFrame,
  stamp,
  systemEnvelope,
} from "./envelope.js";
import { allowCapabilities, CompiledPolicy, type Decision, decide, toolGrant } from "./policy.js";
import { type Proposal, ProposalBook } from "./proposals.js";
import { McpToolSchema, type McpTool, Registry, ToolsListResultSchema, MAX_TOOLS_PER_PARTICIPANT } from "./registry.js";
import { AppendLog } from "./store.js";
import type { TokenBook } from "./tokens.js";

/** A connected participant, seen from the space: a place to put bytes. */
export interface Peer {
  /** Queues one serialized envelope. A peer that cannot keep up drops itself. */
  send(bytes: Buffer): void;
  close(code: number, reason: string): void;
}

export type Visibility = "all" | "addressed";

export class Member {
  /** Everything the member may send: configured, compiled from `allow`, and granted. */
  capabilities: Capability[] = [];
  allows: Matcher = () => false;
  /** Configured capabilities plus `allow` globs: what the tool policy calls "configured". */
  configured: Matcher = () => false;
  /** Runtime grants only: these beat `ask` in the tool policy. */
  granted: Matcher = () => false;
  readonly policy: CompiledPolicy;

  constructor(
    readonly id: string,
    readonly config: ParticipantConfig,
    readonly peer: Peer,
    readonly visibility: Visibility,
    readonly echo: boolean,
    readonly log: Logger,
    /** Order of joining in this space. */
    readonly joinSeq: number,
  ) {
    this.policy = new CompiledPolicy(config.tools);
  }
}

interface Grant {
  id: string;
  from: string;
  recipient: string;
  capabilities: Capability[];
  reason?: string | undefined;
  ts: string;
}

type GrantRecord =
  | ({ type: "grant" } & Grant)
  | { type: "revoke"; id: string; from: string; recipient: string; grant_id?: string | undefined; capabilities?: Capability[] | undefined; ts: string };

export type AuthResult = { ok: true; id: string } | { ok: false; code: number; reason: string };

/** WebSocket close codes, documented in the README. */
export const CloseCodes = {
  goingAway: 1001,
  badRequest: 4400,
  unauthorized: 4401,
  identityMismatch: 4403,
  unknownSpace: 4404,
  unknownParticipant: 4406,
  joinTimeout: 4408,
  replaced: 4409,
  flood: 4429,
  slowConsumer: 4503,
} as const;

/** Largest total of history that goes into one welcome. */
const WELCOME_HISTORY_BYTES = 256 * 1024;

/** How long presence may wait to be sent together with more presence. */
const PRESENCE_BATCH_MS = 10;

/** Most pages of `tools/list` the gateway follows for one participant. */
const MAX_TOOL_PAGES = 100;

export class Space {
  readonly id: string;
  readonly registry = new Registry();
  readonly proposals: ProposalBook;
  private readonly members = new Map<string, Member>();
  private readonly grants = new Map<string, Grant[]>();
  private readonly grantLog: AppendLog<GrantRecord>;
  private readonly history: { env: Envelope; size: number }[] = [];
  private readonly calls: Calls;
  /** Bumped per tools/list refresh of a participant, so a stale answer is ignored. */
  private readonly toolFetches = new Map<string, number>();
  private isClosed = false;
  private presence: { env: Envelope; subject: Member | undefined; joinedBy: number }[] = [];
  /** Joins so far; each member remembers its number. */
  private joins = 0;

  constructor(
    readonly config: SpaceConfig,
    private readonly tokens: TokenBook,
    private readonly log: Logger,
  ) {
    this.id = config.space.id;
    const stateDir = config.gateway.state_dir;
    this.grantLog = new AppendLog(join(stateDir, "grants.jsonl"));
    for (const record of this.grantLog.readAll()) this.applyGrantRecord(record);
    this.calls = new Calls(config.calls, (call) => this.callTimedOut(call));
    this.proposals = new ProposalBook(stateDir, (p) => this.proposalExpired(p));
    for (const p of this.proposals.restore()) this.log.warn({ proposal: p.id }, "proposal was in flight when the gateway stopped; marked failed");
  }

  get online(): number {
    return this.members.size;
  }

  member(id: string): Member | undefined {
    return this.members.get(id);
  }

  /** The token decides the identity; a claimed id is only checked against it. */
  authenticate(token: string, claimedId?: string): AuthResult {
    const id = this.tokens.identify(token);
    if (id === undefined) return { ok: false, code: CloseCodes.unauthorized, reason: `invalid token for space "${this.id}"` };
    if (claimedId !== undefined && claimedId !== id) {
      if (!(claimedId in this.config.participants)) {
        return { ok: false, code: CloseCodes.unknownParticipant, reason: `no participant "${clip(claimedId)}" in space "${this.id}"` };
      }
      return { ok: false, code: CloseCodes.identityMismatch, reason: `token does not belong to participant "${clip(claimedId)}"` };
    }
    return { ok: true, id };
  }

  /**
   * Adds an authenticated participant. A second connection for the same id replaces the
   * first, which is closed with `replaced`; the others see no leave or join.
   */
  join(id: string, peer: Peer, opts: { echo?: boolean } = {}): Member {
    const config = this.config.participants[id];
    if (!config) throw new Error(`join: "${id}" is not a participant of space "${this.id}"`);
    const member = new Member(id, config, peer, config.visibility, opts.echo ?? config.echo, this.log.child({ participant: id }), ++this.joins);
    this.recompile(member);
    const previous = this.members.get(id);
    this.members.set(id, member);
    if (previous) {
      previous.peer.close(CloseCodes.replaced, "replaced by a newer connection for the same participant");
      member.log.info("connection replaced");
    } else {
      member.log.info({ visibility: member.visibility }, "joined");
    }
    this.sendTo(member, this.welcome(member));
    if (!previous) {
      this.announce(systemEnvelope("system/presence", { event: "join", participant: this.describe(member) }), member);
    }
    if (config.kind === "mcp") this.refreshTools(id);
    return member;
  }

  /**
   * Removes a participant whose connection ended. Ignores a member already replaced.
   * Every call pending on it fails now; calls it made are cancelled at their targets.
   */
  leave(member: Member, reason: string): void {
    if (this.members.get(member.id) !== member) return;
    this.members.delete(member.id);
    member.log.info({ reason }, "left");
    const { onTarget, byCaller } = this.calls.involving(member.id);
    for (const call of onTarget) {
      this.calls.close(call, false);
      this.failCall(call, RpcErrors.targetLeft, "target_left", `"${member.id}" left the space before answering`);
    }
    for (const call of byCaller) {
      this.calls.close(call, undefined);
      this.cancelAtTarget(call, "the caller left the space");
    }
    this.announce(systemEnvelope("system/presence", { event: "leave", participant: { id: member.id }, reason }));
    this.toolFetches.delete(member.id);
    if (this.registry.remove(member.id)) this.toolsChanged();
  }

  /** The whole inbound pipeline for one text frame from `member`. */
  handle(member: Member, text: string): void {
    const parsed = parseFrame(text);
    if (!parsed.ok) return this.fail(member, parsed.code, parsed.message, parsed.id);
    if ("join" in parsed) {
      // MEW clients may send a join even after authenticating by header; harmless when
      // it names the same identity.
      const claimed = parsed.join.participantId ?? parsed.join.participant_id;
      const auth = this.authenticate(parsed.join.token, claimed);
      if (auth.ok && auth.id === member.id) return;
      return this.fail(member, ErrorCodes.alreadyJoined, `this connection is already joined as "${member.id}"`);
    }
    const inbound = parsed.envelope;
    if (inbound.from !== undefined && inbound.from !== member.id) {
      return this.fail(member, ErrorCodes.fromMismatch, `from must be "${member.id}" (your authenticated id), not "${clip(inbound.from)}"`, inbound.id);
    }
    if (inbound.kind.startsWith("system/")) {
      return this.fail(member, ErrorCodes.reservedKind, `kind "${inbound.kind}" is reserved for the gateway`, inbound.id);
    }
    if (inbound.to) {
      const unknown = inbound.to.filter((to) => to !== GATEWAY_ID && !(to in this.config.participants));
      if (unknown.length) {
        return this.fail(member, ErrorCodes.unknownRecipient, `no participant ${unknown.map((u) => `"${clip(u)}"`).join(", ")} in space "${this.id}"`, inbound.id);
      }
    }
    // An mcp/request is checked by onRequest: tools/call by the tool policy, the rest by capability.
    if (inbound.kind === "mcp/request") return this.onRequest(member, inbound);
    if (!member.allows(inbound)) return this.capabilityViolation(member, inbound);
    switch (inbound.kind) {
      case "mcp/response":
        return this.onResponse(member, inbound);
      case "mcp/proposal":
        return this.onProposal(member, inbound);
      case "mcp/approve":
        return this.onApprove(member, inbound);
      case "mcp/reject":
        return this.onReject(member, inbound);
      case "mcp/withdraw":
        return this.onWithdraw(member, inbound);
      case "capability/grant":
        return this.grant(member, inbound);
      case "capability/revoke":
        return this.revoke(member, inbound);
      default:
        this.deliver(stamp(inbound, member.id), member);
    }
  }

  /** Set by `closeAll`: the space routes nothing any more. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Closes every connection and the state files; used on shutdown. */
  closeAll(code: number, reason: string): void {
    this.isClosed = true;
    for (const m of this.members.values()) m.peer.close(code, reason);
    this.members.clear();
    this.calls.clear();
    this.proposals.close();
    this.grantLog.close();
  }

  /** The space's tools as `caller` sees them: each with the policy that applies to it. */
  toolsFor(member: Member): Array<Record<string, unknown>> {
    return this.registry.list().map((t) => ({ ...t, policy: this.decideTool(member, t.participant, t.tool) }));
  }

  // --- routing -------------------------------------------------------------------

  /**
   * Serializes once and hands the same bytes to every recipient: `all` members see
   * everything, `addressed` members what names them, everyone sees presence (and what
   * the caller sends `toEveryone`). The
   * sender gets its own envelope back only with echo on.
   */
  private deliver(env: Envelope, sender?: Member, toEveryone = false, joinedBy = Infinity): void {
    if (this.presence.length) this.flushPresence();
    const bytes = Buffer.from(JSON.stringify(env));
    this.remember(env, bytes.length);
    const to = env.to;
    const everyone = toEveryone || env.kind === "system/presence";
    for (const m of this.members.values()) {
      if ((m === sender && !m.echo) || m.joinSeq > joinedBy) continue;
      if (everyone || m.visibility === "all" || (to !== undefined && to.includes(m.id))) m.peer.send(bytes);
    }
  }

  /**
   * Presence waits up to PRESENCE_BATCH_MS, so a wave of joins reaches each member as one
   * write rather than one per join (each socket stays corked for the flush): announcing
   * every join to every member is quadratic, and syscalls were nine tenths of it. Anything
   * else delivered meanwhile flushes it first, so nobody sees a participant act before it
   * is announced.
   */
  private announce(env: Envelope, subject?: Member): void {
    // Whoever joins after this moment learns the news from its welcome instead.
    if (this.presence.push({ env, subject, joinedBy: this.joins }) === 1) setTimeout(() => this.flushPresence(), PRESENCE_BATCH_MS).unref();
  }

  private flushPresence(): void {
    const batch = this.presence;
    this.presence = [];
    for (const { env, subject, joinedBy } of batch) this.deliver(env, subject, false, joinedBy);
  }

  private sendTo(member: Member, env: Envelope): void {
    member.peer.send(Buffer.from(JSON.stringify(env)));
  }

  private fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void {
    if (member.log.isLevelEnabled("debug")) member.log.debug({ code, correlationId }, message);
    this.sendTo(member, errorEnvelope(member.id, code, message, { correlationId, ...extra }));
  }

  private capabilityViolation(member: Member, inbound: InboundEnvelope): void {
    this.fail(member, ErrorCodes.capabilityViolation, `your capabilities do not allow sending this "${inbound.kind}" envelope`, inbound.id, {
      attempted_kind: inbound.kind,
      your_capabilities: member.capabilities,
    });
  }

  private remember(env: Envelope, size: number): void {
    const max = this.config.gateway.limits.history;
    // Big envelopes would not fit a welcome anyway; keeping them would only hold memory.
    if (max === 0 || size > WELCOME_HISTORY_BYTES / 4) return;
    this.history.push({ env, size });
    if (this.history.length > max) this.history.shift();
  }

  // --- calls ---------------------------------------------------------------------

  private onRequest(member: Member, inbound: InboundEnvelope): void {
    const parsed = McpRequestPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `mcp/request: ${describeIssue(parsed.error)}`, inbound.id);
    const payload = parsed.data;
    const to = inbound.to ?? [];
    if (to.includes(GATEWAY_ID)) {
      if (to.length > 1) return this.fail(member, ErrorCodes.invalidEnvelope, `a request to ${GATEWAY_ID} must not name other recipients`, inbound.id);
      return this.onGatewayRequest(member, inbound, payload);
    }
    if (payload.id === undefined) {
      // A notification: nothing to track.
      if (!member.allows(inbound)) return this.capabilityViolation(member, inbound);
      if (payload.method === "notifications/cancelled") this.callerCancelled(member, inbound.correlation_id);
      this.deliver(stamp(inbound, member.id), member);
      if (payload.method === "notifications/tools/list_changed") this.refreshTools(member.id);
      return;
    }
    const fulfilled = inbound.correlation_id?.map((id) => this.proposals.get(id)).find((p) => p !== undefined);
    if (fulfilled) return this.onFulfil(member, inbound, payload, fulfilled);
    if (to.length !== 1) {
      return this.fail(member, ErrorCodes.invalidEnvelope, "an mcp/request with an id goes to exactly one participant (to: [id])", inbound.id);
    }
    const target = to[0]!;
    if (payload.method === "tools/call") {
      const tool = payload.params?.["name"];
      if (typeof tool !== "string") return this.fail(member, ErrorCodes.invalidPayload, "tools/call: params.name must be a string", inbound.id);
      const decision = this.decideTool(member, target, tool);
      if (decision !== "direct") return this.refuseTool(member, decision, `${target}/${tool}`, inbound.id);
    } else if (!member.allows(inbound)) {
      return this.capabilityViolation(member, inbound);
    }
    this.route(member, stamp(inbound, member.id), payload);
  }

  private refuseTool(member: Member, decision: Exclude<Decision, "direct">, name: string, correlationId: string | undefined): void {
    if (decision === "denied") return this.fail(member, ErrorCodes.denied, `the space's policy denies you ${name}`, correlationId, { tool: name });
    this.fail(
      member,
      ErrorCodes.proposalRequired,
      `${name} needs approval: send it as an mcp/proposal (same method and params), or call it through ${GATEWAY_ID}, which proposes it for you`,
      correlationId,
      { tool: name },
    );
  }

  /** Governance, tracking, delivery: for every request that goes to a participant. */
  private route(caller: Member, env: Envelope, payload: McpRequestPayload, extra: Pick<Call, "proposalId" | "fulfiller"> = {}): boolean {
    const target = env.to![0]!;
    if (!this.members.has(target)) {
      this.fail(caller, ErrorCodes.targetOffline, `"${target}" is not connected`, env.id);
      return false;
    }
    if (this.calls.get(env.id)) {
      this.fail(caller, ErrorCodes.duplicateId, `a call with id "${clip(env.id)}" is already pending`, env.id);
      return false;
    }
    const proposal = extra.proposalId ? this.proposals.get(extra.proposalId) : undefined;
    const chain = proposal ? proposal.chain : this.calls.chainFor(env.from, env.correlation_id);
    const refusal = this.calls.refuse(env.from, target, chain);
    if (refusal) {
      this.fail(caller, refusal.code, refusal.message, env.id, { chain: [...chain, target] });
      return false;
    }
    const meta = payload.params?.["_meta"] as Record<string, unknown> | undefined;
    this.calls.open(
      { id: env.id, caller: env.from, target, rpcId: payload.id!, method: payload.method, chain, ...extra },
      this.calls.timeoutFor(meta?.["mewgate/timeout_ms"]),
    );
    this.deliver(env, caller);
    return true;
  }

  private onResponse(member: Member, inbound: InboundEnvelope): void {
    const parsed = McpResponsePayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `mcp/response: ${describeIssue(parsed.error)}`, inbound.id);
    const call = inbound.correlation_id?.map((id) => this.calls.get(id)).find((c) => c !== undefined);
    if (!call) {
      return this.fail(member, ErrorCodes.noPendingCall, "no pending call matches this response's correlation_id (it may have timed out or been answered)", inbound.id);
    }
    if (call.target !== member.id) {
      member.log.warn({ call: call.id, target: call.target }, "forged response refused");
      return this.fail(member, ErrorCodes.forgedResponse, `only "${call.target}" may answer call "${clip(call.id)}"`, inbound.id);
    }
    const ok = parsed.data.error === undefined;
    this.calls.close(call, ok);
    if (call.internal) return call.internal(parsed.data);
    const env = stamp(inbound, member.id);
    // The response goes to whoever waits on the call, whatever `to` the responder wrote.
    env.to = [call.caller];
    if (call.proposalId) {
      env.correlation_id = [call.id, call.proposalId];
      if (call.fulfiller) {
        env.to.push(call.fulfiller.id);
        env.correlation_id.push(call.fulfiller.envelopeId);
      }
      const p = this.proposals.get(call.proposalId);
      if (p?.state === "routed") this.proposals.transition(p, { state: "answered", outcome: ok ? "ok" : "error" });
    }
    this.deliver(env, member);
  }

  /** The caller gave up on a call: stop tracking it, and do not count it against the target's breaker. */
  private callerCancelled(member: Member, correlation: string[] | undefined): void {
    for (const id of correlation ?? []) {
      const call = this.calls.get(id);
      if (!call || call.caller !== member.id) continue;
      this.calls.close(call, undefined);
      const p = call.proposalId ? this.proposals.get(call.proposalId) : undefined;
      if (p?.state === "routed") this.proposals.transition(p, { state: "failed", reason: "cancelled" });
    }
  }

  private callTimedOut(call: Call): void {
    if (call.internal) return call.internal(undefined, "timeout");
    this.failCall(call, RpcErrors.timeout, "timeout", `"${call.target}" did not answer ${call.method} in time`);
    this.cancelAtTarget(call, "timed out");
  }

  /** Answers a call's waiters with a JSON-RPC error from the gateway. */
  private failCall(call: Call, code: number, reason: string, message: string): void {
    if (call.internal) return call.internal(undefined, reason);
    const to = [call.caller];
    const correlation = [call.id];
    if (call.proposalId) {
      correlation.push(call.proposalId);
      const p = this.proposals.get(call.proposalId);
      if (p && (p.state === "routed" || p.state === "approved")) this.proposals.transition(p, { state: "failed", reason });
    }
    if (call.fulfiller) {
      to.push(call.fulfiller.id);
      correlation.push(call.fulfiller.envelopeId);
    }
    const payload = { jsonrpc: "2.0", id: call.rpcId, error: { code, message, data: { reason, target: call.target } } };
    this.deliver(systemEnvelope("mcp/response", payload, { to, correlation_id: correlation }));
  }

  private cancelAtTarget(call: Call, reason: string): void {
    const target = this.members.get(call.target);
    if (!target) return;
    const payload = { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: call.rpcId, reason } };
    this.sendTo(target, systemEnvelope("mcp/request", payload, { to: [call.target], correlation_id: [call.id] }));
  }

  // --- the gateway as an MCP endpoint: the registry ------------------------------------

  private onGatewayRequest(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload): void {
    const correlation = inbound.id === undefined ? {} : { correlation_id: [inbound.id] };
    const reply = (body: Record<string, unknown>) =>
      this.sendTo(member, systemEnvelope("mcp/response", { jsonrpc: "2.0", id: payload.id ?? null, ...body }, { to: [member.id], ...correlation }));
    switch (payload.method) {
      case "notifications/tools/list_changed":
        return this.refreshTools(member.id);
      case "tools/list":
        return reply({ result: { tools: this.toolsFor(member) } });
      case "ping":
        return reply({ result: {} });
      case "tools/call":
        break;
      default:
        if (payload.id === undefined) return;
        return reply({ error: { code: RpcErrors.methodNotFound, message: `${GATEWAY_ID} does not serve ${payload.method}; it serves tools/list and tools/call` } });
    }
    const name = payload.params?.["name"];
    if (typeof name !== "string") return this.fail(member, ErrorCodes.invalidPayload, "tools/call: params.name must be a string like \"fs/read_file\"", inbound.id);
    if (payload.id === undefined || inbound.id === undefined) {
      return this.fail(member, ErrorCodes.invalidPayload, "tools/call through the gateway needs an envelope id and a JSON-RPC id", inbound.id);
    }
    const entry = this.registry.resolve(name);
    if (!entry) return this.fail(member, ErrorCodes.unknownTool, `no tool "${clip(name)}" in space "${this.id}"`, inbound.id);
    const params = { ...payload.params, name: entry.tool };
    const decision = this.decideTool(member, entry.participant, entry.tool);
    if (decision === "denied") return this.refuseTool(member, decision, name, inbound.id);
    if (decision === "direct") {
      const env = stamp({ ...inbound, to: [entry.participant], payload: { ...payload, params } }, member.id);
      this.route(member, env, { ...payload, params });
      return;
    }
    // Needs approval: the gateway proposes it on the caller's behalf, under the request's id,
    // so the caller simply keeps waiting for the response to its request.
    const proposalEnv = stamp({ ...inbound, kind: "mcp/proposal", to: [entry.participant], payload: { method: "tools/call", params } }, member.id);
    this.hold(member, proposalEnv, "tools/call", params, payload.id, { tellProposer: true });
  }

  /** Asks a participant for its tools (every page) and stores them. */
  private refreshTools(id: string): void {
    const member = this.members.get(id);
    if (!member) return;
    const generation = (this.toolFetches.get(id) ?? 0) + 1;
    this.toolFetches.set(id, generation);
    const tools: McpTool[] = [];
    const page = (cursor: string | undefined, n: number): void => {
      this.gatewayRequest(member, "tools/list", cursor ? { cursor } : {}, (response, reason) => {
        if (this.toolFetches.get(id) !== generation || this.members.get(id) !== member) return;
        if (!response || response.error !== undefined) {
          member.log.warn({ reason: reason ?? response?.error }, "tools/list failed; keeping its previous tools");
          return;
        }
        const result = ToolsListResultSchema.safeParse(response.result);
        if (!result.success) {
          member.log.warn({ issue: describeIssue(result.error) }, "tools/list answered with a malformed result");
          return;
        }
        for (const t of result.data.tools) {
          const tool = McpToolSchema.safeParse(t);
          if (tool.success) tools.push(tool.data);
          else member.log.warn({ issue: describeIssue(tool.error) }, "skipping a malformed tool");
        }
        const next = result.data.nextCursor;
        if (next && n + 1 < MAX_TOOL_PAGES && tools.length < MAX_TOOLS_PER_PARTICIPANT) return page(next, n + 1);
        if (this.registry.set(id, tools.slice(0, MAX_TOOLS_PER_PARTICIPANT))) {
          member.log.info({ tools: tools.length }, "tools registered");
          this.toolsChanged();
        }
      });
    };
    page(undefined, 0);
  }

  private gatewayRequest(target: Member, method: string, params: Record<string, unknown>, done: NonNullable<Call["internal"]>): void {
    const id = randomUUID();
    this.calls.open({ id, caller: GATEWAY_ID, target: target.id, rpcId: id, method, chain: [GATEWAY_ID], internal: done }, this.config.calls.timeout_ms);
    const env: Envelope = { protocol: PROTOCOL, id, ts: new Date().toISOString(), from: GATEWAY_ID, to: [target.id], kind: "mcp/request", payload: { jsonrpc: "2.0", id, method, params } };
    this.sendTo(target, env);
  }

  /**
   * Tells everyone the catalogue changed — `addressed` members too, like presence, since an
   * MCP client behind one must hear of it. Welcomes carry the new catalogue from now on.
   */
  private toolsChanged(): void {
    this.deliver(systemEnvelope("mcp/request", { jsonrpc: "2.0", method: "notifications/tools/list_changed" }), undefined, true);
  }

  private decideTool(member: Member, owner: string, tool: string): Decision {
    return decide({
      policy: member.policy,
      granted: member.granted,
      configured: member.configured,
      owner,
      tool,
      annotations: this.registry.get(owner, tool)?.annotations,
      fallback: this.config.policy.fallback,
    });
  }

  /** Whether `member` may itself make the call a proposal asks for: the bar for deciding on it. */
  private mayCall(member: Member, p: Proposal): boolean {
    if (p.method === "tools/call" && p.tool !== undefined) return this.decideTool(member, p.owner, p.tool) === "direct";
    return member.allows({ kind: "mcp/request", to: [p.owner], payload: { method: p.method, params: p.params } });
  }

  // --- proposals -------------------------------------------------------------------

  private onProposal(member: Member, inbound: InboundEnvelope): void {
    const parsed = ProposalPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `mcp/proposal: ${describeIssue(parsed.error)}`, inbound.id);
    let { method, params = {} } = parsed.data;
    let to = inbound.to ?? [];
    if (to.length === 1 && to[0] === GATEWAY_ID && method === "tools/call") {
      const entry = typeof params["name"] === "string" ? this.registry.resolve(params["name"]) : undefined;
      if (!entry) return this.fail(member, ErrorCodes.unknownTool, `no tool "${clip(String(params["name"]))}" in space "${this.id}"`, inbound.id);
      to = [entry.participant];
      params = { ...params, name: entry.tool };
    }
    if (to.length !== 1 || to[0] === GATEWAY_ID) {
      return this.fail(member, ErrorCodes.invalidEnvelope, "an mcp/proposal names exactly one participant that would serve it (to: [id])", inbound.id);
    }
    if (method === "tools/call" && typeof params["name"] !== "string") {
      return this.fail(member, ErrorCodes.invalidPayload, "tools/call: params.name must be a string", inbound.id);
    }
    if (method === "tools/call" && this.decideTool(member, to[0]!, params["name"] as string) === "denied") {
      return this.refuseTool(member, "denied", `${to[0]}/${String(params["name"])}`, inbound.id);
    }
    const env = stamp({ ...inbound, to, payload: { method, params } }, member.id);
    this.hold(member, env, method, params, env.id);
  }

  /**
   * Holds a proposal. `tellProposer`: the gateway made it from a tools/call, so the caller
   * learns that its call now waits for approval.
   */
  private hold(member: Member, env: Envelope, method: string, params: Record<string, unknown>, rpcId: string | number, opts: { tellProposer?: boolean } = {}): void {
    if (this.proposals.get(env.id) || this.proposals.endedAs(env.id) || this.calls.get(env.id)) {
      return this.fail(member, ErrorCodes.duplicateId, `id "${clip(env.id)}" is already in use`, env.id);
    }
    const owner = env.to![0]!;
    const now = Date.now();
    this.proposals.add({
      id: env.id,
      proposer: member.id,
      owner,
      method,
      params,
      tool: method === "tools/call" ? (params["name"] as string) : undefined,
      rpcId,
      chain: this.calls.chainFor(member.id, env.correlation_id),
      state: "pending",
      createdAt: new Date(now).toISOString(),
      expiresAt: now + this.config.policy.proposal_ttl_ms,
      envelope: env,
    });
    member.log.info({ proposal: env.id, owner, method }, "proposal held");
    this.deliver(env, opts.tellProposer ? undefined : member);
  }

  /**
   * The proposal an `mcp/approve` / `mcp/reject` / `mcp/withdraw` names, if it is still
   * pending; otherwise the sender is told exactly why not.
   */
  private pendingProposal(member: Member, inbound: InboundEnvelope, verb: string): Proposal | undefined {
    const id = inbound.correlation_id?.[0];
    if (id === undefined) {
      this.fail(member, ErrorCodes.invalidEnvelope, `${verb}: correlation_id must name the proposal`, inbound.id);
      return undefined;
    }
    const p = this.proposals.get(id);
    if (p?.state === "pending") return p;
    const ended = p?.state ?? this.proposals.endedAs(id);
    if (ended) this.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(id)}" is already ${ended}`, inbound.id, { state: ended });
    else this.fail(member, ErrorCodes.unknownProposal, `no proposal "${clip(id)}" in space "${this.id}"`, inbound.id);
    return undefined;
  }

  /** Who may approve or reject: not the proposer, one of its `approvers` if set, and able to make the call itself. */
  private mayDecide(member: Member, p: Proposal, inboundId: string | undefined): boolean {
    if (member.id === p.proposer) {
      this.fail(member, ErrorCodes.selfApproval, "you cannot decide on your own proposal (withdraw it instead)", inboundId);
      return false;
    }
    const approvers = this.config.participants[p.proposer]?.approvers;
    if (approvers && !approvers.includes(member.id)) {
      this.fail(member, ErrorCodes.notAnApprover, `proposals of "${p.proposer}" are decided by ${approvers.join(", ")}`, inboundId);
      return false;
    }
    if (!this.mayCall(member, p)) {
      this.fail(member, ErrorCodes.approverLacksCapability, `you may not make this call yourself, so you cannot approve or reject it`, inboundId);
      return false;
    }
    return true;
  }

  private onApprove(member: Member, inbound: InboundEnvelope): void {
    const parsed = ApprovePayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `mcp/approve: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/approve");
    if (!p || !this.mayDecide(member, p, inbound.id)) return;
    const { scope, arguments: edited, reason } = parsed.data;
    if (scope === "always" && (p.tool === undefined || /[*!]/.test(p.tool))) {
      return this.fail(member, ErrorCodes.invalidPayload, "scope \"always\" applies to a tools/call of a tool whose name has no * or !", inbound.id);
    }
    const env = stamp(inbound, member.id);
    env.to ??= [p.proposer];
    this.approve(member, p, { scope, edited, reason }, env);
  }

  /** A MEW fulfilment: a request correlated to a pending proposal counts as a one-time approval. */
  private onFulfil(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload, p: Proposal): void {
    if (p.state !== "pending") return void this.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(p.id)}" is already ${p.state}`, inbound.id);
    if (!this.mayDecide(member, p, inbound.id)) return;
    const args = payload.params?.["arguments"];
    const edited = args && typeof args === "object" && !Array.isArray(args) ? (args as Record<string, unknown>) : undefined;
    const env = stamp(inbound, member.id);
    this.approve(member, p, { scope: "once", edited, reason: "fulfilled" }, undefined, { id: member.id, envelopeId: env.id });
  }

  private approve(
    approver: Member,
    p: Proposal,
    d: { scope: "once" | "always"; edited: Record<string, unknown> | undefined; reason: string | undefined },
    announce: Envelope | undefined,
    fulfiller?: { id: string; envelopeId: string },
  ): void {
    // Everything that could stop the call is checked before the decision is recorded, so a
    // refused approval leaves the proposal pending for a later try.
    if (!this.members.has(p.owner)) return this.fail(approver, ErrorCodes.targetOffline, `"${p.owner}" is not connected; the proposal stays pending`, announce?.id);
    const refusal = this.calls.refuse(p.proposer, p.owner, p.chain);
    if (refusal) return this.fail(approver, refusal.code, `${refusal.message}; the proposal stays pending`, announce?.id);
    const args = d.edited ?? (p.params["arguments"] as Record<string, unknown> | undefined);
    this.proposals.transition(p, { state: "approved", decidedBy: approver.id, scope: d.scope, reason: d.reason, editedArguments: d.edited });
    approver.log.info({ proposal: p.id, proposer: p.proposer, scope: d.scope }, "proposal approved");
    if (announce) this.deliver(announce, approver);
    if (d.scope === "always" && p.tool !== undefined) {
      this.addGrant(approver.id, p.proposer, [toolGrant(p.owner, p.tool)], `always approve ${p.owner}/${p.tool} (proposal ${p.id})`);
    }
    const params = args === undefined ? p.params : { ...p.params, arguments: args };
    const payload: McpRequestPayload = { jsonrpc: "2.0", id: p.rpcId, method: p.method, params };
    const env: Envelope = { protocol: PROTOCOL, id: randomUUID(), ts: new Date().toISOString(), from: p.proposer, to: [p.owner], kind: "mcp/request", correlation_id: [p.id], payload };
    this.proposals.transition(p, { state: "routed" });
    // Routed on the proposer's behalf: the proposer, not the approver, is the caller.
    if (!this.route(this.members.get(p.proposer) ?? approver, env, payload, { proposalId: p.id, fulfiller })) {
      this.proposals.transition(p, { state: "failed", reason: "not_routed" });
      const error = { code: RpcErrors.failed, message: "the approved call could not be routed", data: { reason: "not_routed", target: p.owner } };
      this.deliver(systemEnvelope("mcp/response", { jsonrpc: "2.0", id: p.rpcId, error }, { to: [p.proposer], correlation_id: [p.id] }));
    }
  }

  private onReject(member: Member, inbound: InboundEnvelope): void {
    const parsed = RejectPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `mcp/reject: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/reject");
    if (!p || !this.mayDecide(member, p, inbound.id)) return;
    this.proposals.transition(p, { state: "rejected", decidedBy: member.id, reason: parsed.data.reason, text: parsed.data.text });
    member.log.info({ proposal: p.id, proposer: p.proposer, reason: parsed.data.reason }, "proposal rejected");
    const env = stamp(inbound, member.id);
    env.to ??= [p.proposer];
    this.deliver(env, member);
  }

  private onWithdraw(member: Member, inbound: InboundEnvelope): void {
    const parsed = WithdrawPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `mcp/withdraw: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/withdraw");
    if (!p) return;
    if (p.proposer !== member.id) return this.fail(member, ErrorCodes.notProposer, `only "${p.proposer}" may withdraw this proposal`, inbound.id);
    this.proposals.transition(p, { state: "withdrawn", decidedBy: member.id, reason: parsed.data.reason ?? "no_longer_needed" });
    this.deliver(stamp(inbound, member.id), member);
  }

  private proposalExpired(p: Proposal): void {
    const seconds = Math.round(this.config.policy.proposal_ttl_ms / 1000);
    this.log.info({ proposal: p.id, proposer: p.proposer }, "proposal expired");
    const payload = { reason: "timeout", text: `no decision within ${seconds}s; the proposal expired` };
    this.deliver(systemEnvelope("mcp/reject", payload, { to: [p.proposer], correlation_id: [p.id] }));
  }

  // --- welcome -------------------------------------------------------------------

  private describe(member: Member): Record<string, unknown> {
    const d: Record<string, unknown> = { id: member.id, kind: member.config.kind, capabilities: member.capabilities };
    if (member.config.description) d["description"] = member.config.description;
    return d;
  }

  private welcome(member: Member): Envelope {
    const participants = [...this.members.values()].filter((m) => m !== member).map((m) => this.describe(m));
    // Newest first until the byte budget is spent, then back in order.
    const history: Envelope[] = [];
    let budget = WELCOME_HISTORY_BYTES;
    for (let i = this.history.length - 1; i >= 0; i--) {
      const h = this.history[i]!;
      if (member.visibility === "addressed" && !h.env.to?.includes(member.id) && h.env.kind !== "system/presence") continue;
      if (h.size > budget) break;
      budget -= h.size;
      history.push(h.env);
    }
    history.reverse();
    const proposals = this.proposals.pending().filter((p) => member.visibility === "all" || p.proposer === member.id || p.owner === member.id);
    const space = { id: this.id, name: this.config.space.name, description: this.config.space.description };
    return systemEnvelope(
      "system/welcome",
      {
        you: { ...this.describe(member), visibility: member.visibility },
        space,
        participants,
        tools: this.toolsFor(member),
        proposals: proposals.map((p) => p.envelope),
        history,
      },
      { to: [member.id] },
    );
  }

  // --- capabilities and grants ------------------------------------------------------

  /** Compiles a member's capabilities; called on join and whenever its grants change, never per message. */
  private recompile(member: Member): void {
    const configured = [...member.config.capabilities, ...allowCapabilities(member.config.tools)];
    const granted = (this.grants.get(member.id) ?? []).flatMap((g) => g.capabilities);
    member.capabilities = [...configured, ...granted];
    member.allows = compileCapabilities(member.capabilities);
    member.configured = compileCapabilities(configured);
    member.granted = compileCapabilities(granted);
  }

  private grant(member: Member, inbound: InboundEnvelope): void {
    const parsed = GrantPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `capability/grant: ${describeIssue(parsed.error)}`, inbound.id);
    const { recipient, capabilities, reason } = parsed.data;
    if (!(recipient in this.config.participants)) {
      return this.fail(member, ErrorCodes.unknownRecipient, `no participant "${clip(recipient)}" in space "${this.id}"`, inbound.id);
    }
    const notHeld = capabilities.filter((c) => !covers(member.capabilities, c));
    if (notHeld.length) {
      return this.fail(member, ErrorCodes.grantExceedsHeld, "you can only grant capabilities you hold yourself", inbound.id, { not_held: notHeld });
    }
    const env = stamp(inbound, member.id);
    this.addGrant(member.id, recipient, capabilities, reason, env);
    this.deliver(env, member);
  }

  /** Persists a grant before anyone is told, so an acknowledged grant survives a crash; then refreshes the recipient. */
  private addGrant(from: string, recipient: string, capabilities: Capability[], reason: string | undefined, env?: Envelope): void {
    const record: Grant = { id: env?.id ?? randomUUID(), from, recipient, capabilities, reason, ts: env?.ts ?? new Date().toISOString() };
    this.grantLog.append({ type: "grant", ...record });
    this.applyGrantRecord({ type: "grant", ...record });
    this.log.info({ grant: record.id, from, recipient }, "capability granted");
    this.refresh(recipient);
  }

  private revoke(member: Member, inbound: InboundEnvelope): void {
    const parsed = RevokePayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.fail(member, ErrorCodes.invalidPayload, `capability/revoke: ${describeIssue(parsed.error)}`, inbound.id);
    const { recipient, grant_id, capabilities } = parsed.data;
    const held = this.grants.get(recipient) ?? [];
    if (grant_id !== undefined) {
      const g = held.find((x) => x.id === grant_id);
      if (!g) return this.fail(member, ErrorCodes.unknownGrant, `no grant "${clip(grant_id)}" to "${clip(recipient)}"`, inbound.id);
      // The granter may take back its grant; anyone else must hold what it lent.
      if (g.from !== member.id && !g.capabilities.every((c) => covers(member.capabilities, c))) {
        return this.fail(member, ErrorCodes.revokeNotAllowed, "you may revoke only grants you made or capabilities you hold", inbound.id);
      }
    } else if (!capabilities!.every((c) => covers(member.capabilities, c))) {
      return this.fail(member, ErrorCodes.revokeNotAllowed, "you may revoke only capabilities you hold", inbound.id);
    }
    const env = stamp(inbound, member.id);
    const record: GrantRecord = { type: "revoke", id: env.id, from: member.id, recipient, grant_id, capabilities, ts: env.ts };
    this.grantLog.append(record);
    this.applyGrantRecord(record);
    this.log.info({ revoke: env.id, from: member.id, recipient }, "capability revoked");
    this.deliver(env, member);
    this.refresh(recipient);
  }

  private applyGrantRecord(record: GrantRecord): void {
    const list = this.grants.get(record.recipient) ?? [];
    if (record.type === "grant") {
      const { type: _type, ...grant } = record;
      list.push(grant);
    } else if (record.grant_id !== undefined) {
      const i = list.findIndex((g) => g.id === record.grant_id);
      if (i >= 0) list.splice(i, 1);
    } else {
      const patterns = record.capabilities ?? [];
      for (const g of list) g.capabilities = g.capabilities.filter((c) => !patterns.some((p) => covers([p], c)));
    }
    this.grants.set(
      record.recipient,
      list.filter((g) => g.capabilities.length > 0),
    );
  }

  /** After a grant change: recompile and send the recipient a fresh welcome. */
  private refresh(recipient: string): void {
    const m = this.members.get(recipient);
    if (!m) return;
    this.recompile(m);
    this.sendTo(m, this.welcome(m));
  }
}

/** Keeps client-supplied strings in messages short. */
function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 61)}...` : s;
}
