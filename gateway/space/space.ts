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
 * The MCP governance is not decided here: the pipeline hands each MCP kind to its module,
 * which acts back on the space through `SpaceHost` (host.ts), implemented below —
 *   mcp.ts        mcp/request and mcp/response: call tracking, the gateway's own
 *                 `system:gateway` endpoint, the tool catalogue and its refresh;
 *   decisions.ts  mcp/proposal, approve, reject, withdraw, and expiry.
 * Their state lives in calls.ts, registry.ts and proposals.ts; lending.ts handles
 * capability/grant and capability/revoke over grants.ts; authority.ts decides every call.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { Authority } from "../policy/authority.js";
import { compileCapabilities } from "../policy/capabilities.js";
import type { SpaceConfig } from "../config/config.js";
import { Decisions } from "../proposals/decisions.js";
import {
  type Capability,
  type Envelope,
  CloseCodes,
  ErrorCodes,
  type ErrorCode,
  GATEWAY_ID,
  type InboundEnvelope,
  errorEnvelope,
  parseFrame,
  type ParsedFrame,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import { clip, type SpaceHost } from "../ports/host.js";
import { frameBudget, maySee } from "../calls/endpoint.js";
import { GrantBook } from "../policy/grants.js";
import { Lending } from "../policy/lending.js";
import { Invites } from "../agents/invites.js";
import { Conversations } from "../agents/conversations.js";
import { Switches } from "../agents/switches.js";
import { Streams } from "../agents/streams.js";
import { McpRouter } from "../calls/router.js";
import { type AuditEntry, type AuditQuery, type Proposal, ProposalBook } from "../proposals/book.js";
import { Registry } from "../ports/registry.js";
import { Ledger, type StateRecord } from "./ledger.js";
import { SpaceMetrics } from "../operator/metrics.js";
import { Notifier } from "../operator/notify.js";
import type { Plan } from "../ports/plan.js";
import { StoreError, type StoreOpener } from "../store/index.js";
import { Member, type Peer, type Visibility } from "../ports/member.js";
import { jsonBytes } from "../wire/paging.js";
import type { TokenBook } from "../identity/tokens.js";
import { buildWelcome, WELCOME_HISTORY_BYTES } from "./welcome.js";

export { Member, type Peer, type Visibility } from "../ports/member.js";

export type AuthResult = { ok: true; id: string } | { ok: false; code: number; reason: string };


/** Frames of one member that may wait behind its changes being written. */
const MAX_BACKLOG = 256;
/** Decisions of one member that may be on their way to disk at once. */
const MAX_IN_FLIGHT = 64;
/** Kinds whose durable changes one member may pipeline (each is acknowledged in order). */
const PIPELINED = new Set(["mcp/proposal", "mcp/approve", "mcp/reject", "mcp/withdraw", "mcp/response"]);

function pipelined(parsed: ParsedFrame, inFlight: number): boolean {
  return inFlight < MAX_IN_FLIGHT && parsed.ok && "envelope" in parsed && PIPELINED.has(parsed.envelope.kind);
}

/** How long presence may wait to be sent together with more presence. */
const PRESENCE_BATCH_MS = 10;

/** Stands for a welcome's participants until they are spliced in (`sendWelcome`). */
const ROSTER_MARK = `\u0000roster:${randomBytes(12).toString("hex")}`;
const ROSTER_MARK_JSON = JSON.stringify(ROSTER_MARK);

export class Space implements SpaceHost {
  readonly id: string;
  readonly registry = new Registry();
  readonly proposals: ProposalBook;
  /** mcp/request and mcp/response, the gateway endpoint, the catalogue (mcp.ts). */
  private readonly mcp: McpRouter;
  /** What happens to proposals (decisions.ts). */
  private readonly decisions: Decisions;
  private readonly members = new Map<string, Member>();
  /** Grants, and which still stand (grants.ts). */
  private readonly grants: GrantBook;
  /** Where every change of proposals and grants is made durable (ledger.ts). */
  private readonly ledger: Ledger;
  /** Figures for /metrics. */
  readonly metrics = new SpaceMetrics();
  /** Webhooks told of proposals (gateway.notify). */
  readonly notifier: Notifier;
  /** The web console's address, once the gateway listens (for links in notices). */
  consoleUrl: string | undefined;
  /** The policy decision point (authority.ts). */
  readonly authority: Authority;
  /** capability/grant and capability/revoke (lending.ts). */
  private readonly lending: Lending;
  /** MEW streams (streams.ts). */
  private readonly streams: Streams;
  /** Participants invited at runtime (invites.ts). */
  private readonly invites: Invites;
  /** Participants switched off at runtime (switches.ts). */
  readonly switches: Switches;
  /** Who holds each person's conversation (conversations.ts). */
  private conversations!: Conversations;
  private readonly history: { env: Envelope; size: number }[] = [];
  private isClosed = false;
  private presence: { env: Envelope; subject: Member | undefined; joinedBy: number }[] = [];
  /** Joins so far; each member remembers its number. */
  private joins = 0;
  /** Operator API event streams (operator/api.ts): they see, they do not act. */
  private readonly watchers = new Set<{ id: string; visibility: Visibility; peer: Peer }>();

  constructor(
    readonly config: SpaceConfig,
    private readonly tokens: TokenBook,
    readonly log: Logger,
    /** Where the space's state is kept, when not in `gateway.state_dir` (a cluster's bus). */
    opts: { store?: StoreOpener<StateRecord> } = {},
  ) {
    this.id = config.space.id;
    this.grants = new GrantBook((id) => this.authority.configured(id));
    this.authority = new Authority(config, this.grants, this.registry);
    this.lending = new Lending(this, this.grants);
    this.streams = new Streams({ config, log, deliver: (e, s, t) => this.deliver(e, s, t), fail: (...a) => this.fail(...a), members: () => this.members.values() });
    this.invites = new Invites(
      {
        config,
        log,
        member: (id) => this.members.get(id),
        capabilitiesOf: (id) => this.grants.capabilitiesOf(id),
        deliver: (e, s) => this.deliver(e, s),
        sendTo: (m, e) => this.sendTo(m, e),
        fail: (...a) => this.fail(...a),
        record: (...p) => this.record(...p),
        storeFailed: (...a) => this.storeFailed(...a),
        forget: (id) => this.authority.forget(id),
      },
      tokens,
    );
    this.switches = new Switches({
      config,
      log,
      deliver: (e, s) => this.deliver(e, s),
      fail: (...a) => this.fail(...a),
      record: (...p) => this.record(...p),
      storeFailed: (...a) => this.storeFailed(...a),
      changed: (id, disabled) => {
        if (this.registry.setDisabled(id, disabled)) this.mcp?.catalogueChanged();
      },
    });
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const space = this;
    this.conversations = new Conversations({
      config,
      log,
      get calls() {
        // Undefined only while the store is read at start, before the router exists.
        return space.mcp?.calls;
      },
      abort: (call, reason, message) => this.mcp.abort(call, reason, message),
      deliver: (e, s, t) => this.deliver(e, s, t),
      fail: (...a) => this.fail(...a),
      record: (...p) => this.record(...p),
      note: (p) => void this.note(p),
      storeFailed: (...a) => this.storeFailed(...a),
    });
    this.notifier = new Notifier(this.id, config.gateway.notify, log.child({ component: "notify" }), () => this.consoleUrl, (p) => (p.tool ? this.authority.why(p.proposer, p.owner, p.tool) : undefined));
    const onDue = config.policy.expires_action === "keep" ? undefined : (p: Proposal) => void this.decisions.onDue(p);
    this.proposals = new ProposalBook(onDue, (p, event, from) => this.proposalChanged(p, event, from));
    this.ledger = Ledger.open(config, log, { proposals: this.proposals, grants: this.grants, invites: this.invites, switches: this.switches, conversations: this.conversations }, (s) => this.metrics.storeWriteSeconds.observe(s), opts.store);
    const { torn, migrated, records, bytes, ms } = this.ledger.report;
    if (torn) log.warn(torn, "the state journal ended in a torn record (a crash mid-write); it was cut off there");
    if (migrated?.length) log.info({ files: migrated }, "state migrated from the first wave's files");
    log.debug({ records, bytes, ms }, "state restored");
    this.grants.revalidate();
    this.mcp = new McpRouter(this, this.registry, this.proposals);
    this.decisions = new Decisions(this, this.proposals, this.mcp);
    this.mcp.calls.onEnd = (call) => this.conversations.callEnded(call);
    // Stacks that were held when the gateway stopped are held again, with their calls.
    this.conversations.resume();
    // A request can be a decision (a MEW fulfilment, a gateway tools/call that needs
    // approval) and a decision routes a request, so the two are linked once, here.
    this.mcp.decisions = this.decisions;
    for (const p of this.proposals.restored()) {
      this.log.warn({ proposal: p.id }, "proposal was in flight when the gateway stopped; marked failed");
      this.note(this.proposals.planTransition(p, { state: "failed", reason: "gateway_restarted" }));
    }
  }

  get online(): number {
    return this.members.size;
  }

  heldInConversation(callId: string): boolean {
    return this.conversations.holds(callId);
  }

  watching(id: string): boolean {
    for (const w of this.watchers) if (w.id === id) return true;
    return false;
  }

  /** Requests waiting on participant `id` to answer (a form asked of a person at the web console). */
  requestsFor(id: string): Array<Record<string, unknown>> {
    return this.mcp.calls.toTarget(id).map((c) => ({ id: c.id, from: c.caller, method: c.method, rpc_id: c.rpcId, params: c.params, age_ms: Date.now() - c.openedAt }));
  }

  member(id: string): Member | undefined {
    return this.members.get(id);
  }

  /**
   * The token decides the identity; a claimed id is only checked against it. A cluster
   * node that holds the socket passes the token's SHA-256 digest instead (cluster/owner.ts).
   */
  authenticate(token: string | { digest: Buffer }, claimedId?: string): AuthResult {
    const id = typeof token === "string" ? this.tokens.identify(token) : this.tokens.identifyDigest(token.digest);
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
    const member = new Member(id, config, peer, config.visibility, opts.echo ?? config.echo, this.log, ++this.joins);
    this.recompile(member);
    const previous = this.members.get(id);
    this.members.set(id, member);
    if (previous) {
      previous.peer.close(CloseCodes.replaced, "replaced by a newer connection for the same participant");
      member.log.info("connection replaced");
    } else {
      // Through the space's logger, so a member that never logs again never makes its own.
      this.log.info({ participant: id, visibility: member.visibility }, "joined");
    }
    this.sendWelcome(member);
    if (!previous) {
      this.announce(systemEnvelope("system/presence", { event: "join", participant: this.describe(member) }), member);
    }
    if (config.kind === "mcp") this.mcp.refreshTools(id);
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
    // In this order: its calls' waiters hear first, then the leave, then the catalogue change.
    this.mcp.settle(member.id);
    this.streams.left(member.id);
    this.announce(systemEnvelope("system/presence", { event: "leave", participant: { id: member.id }, reason }));
    this.mcp.forgetTools(member.id);
  }

  /**
   * One text frame from `member`.
   *
   * A frame that changes durable state is answered once the change is on disk, while the
   * member goes on sending. Its frames still take effect in the order it sent them:
   * decisions on proposals are pipelined — the store writes and acknowledges them in
   * order — and any other frame waits until the member's writes in flight are done, so
   * that, say, a chat message never overtakes the proposal sent before it. Other members
   * are never held.
   */
  handle(member: Member, text: string): void {
    this.metrics.envelopesIn++;
    const parsed = parseFrame(text);
    if (member.backlog || (member.inFlight > 0 && !pipelined(parsed, member.inFlight))) {
      member.backlog ??= [];
      if (member.backlog.length >= MAX_BACKLOG) {
        return this.fail(member, ErrorCodes.rateLimited, `${MAX_BACKLOG} of your frames are already waiting for the disk; frame dropped`);
      }
      member.backlog.push(parsed);
      return;
    }
    this.run(member, parsed);
  }

  private run(member: Member, parsed: ParsedFrame): void {
    const pending = this.process(member, parsed);
    if (!pending) return;
    member.inFlight++;
    pending
      .catch((err: unknown) => member.log.error({ err: String(err) }, "a frame's handling failed"))
      .finally(() => {
        member.inFlight--;
        // A member that left or was replaced meanwhile gets nothing more done.
        if (this.members.get(member.id) !== member || this.isClosed) return;
        const queue = member.backlog;
        while (queue?.length && (member.inFlight === 0 || pipelined(queue[0]!, member.inFlight))) this.run(member, queue.shift()!);
        if (queue?.length === 0 && member.backlog === queue) member.backlog = undefined;
      });
  }

  /** A raw stream frame (`#<id>#<data>`) from `member` (server.ts sends them here, not to `handle`). */
  streamFrame(member: Member, data: Buffer, binary: boolean): void {
    this.metrics.envelopesIn++;
    this.streams.frame(member, data, binary);
  }

  /** The whole inbound pipeline for one frame; a promise when the frame changes durable state. */
  private process(member: Member, parsed: ParsedFrame): Promise<void> | void {
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
      // Worded as MEW's gateway words it ("system/register is reserved for the gateway"): its clients match on it.
      return this.fail(member, ErrorCodes.reservedKind, `${clip(inbound.kind)} is reserved for the gateway`, inbound.id);
    }
    if (inbound.to) {
      // MEW addresses the gateway as "gateway" too (stream/request and the like).
      const unknown = inbound.to.filter((to) => to !== GATEWAY_ID && to !== "gateway" && !(to in this.config.participants));
      if (unknown.length) {
        return this.fail(member, ErrorCodes.unknownRecipient, `no participant ${unknown.map((u) => `"${clip(u)}"`).join(", ")} in space "${this.id}"`, inbound.id);
      }
    }
    // An mcp/request is checked by mcp.ts once its payload is parsed: tools/call by the
    // tool policy, the rest by capability.
    if (inbound.kind === "mcp/request") return this.mcp.onRequest(member, inbound);
    // A takeover is allowed by space.yaml's agent.takeover and the call it names, not by a capability.
    if (inbound.kind === "space/takeover") return this.conversations.onTakeover(member, inbound);
    if (!member.allows(inbound)) return this.capabilityViolation(member, inbound);
    switch (inbound.kind) {
      case "mcp/response":
        return this.mcp.onResponse(member, inbound);
      case "mcp/proposal":
        return this.decisions.onProposal(member, inbound);
      case "mcp/approve":
        return this.decisions.onApprove(member, inbound);
      case "mcp/reject":
        return this.decisions.onReject(member, inbound);
      case "mcp/withdraw":
        return this.decisions.onWithdraw(member, inbound);
      case "capability/grant":
        return this.lending.onGrant(member, inbound);
      case "capability/revoke":
        return this.lending.onRevoke(member, inbound);
      case "space/invite":
        return this.invites.onInvite(member, inbound);
      case "space/kick":
        return this.invites.onKick(member, inbound);
      case "space/disable":
      case "space/enable":
        return this.switches.onSwitch(member, inbound, inbound.kind === "space/disable" ? "disable" : "enable");
      case "stream/request":
        return this.streams.request(member, inbound);
      case "stream/close":
        return this.streams.close(member, inbound);
      case "stream/grant-write":
      case "stream/revoke-write":
      case "stream/transfer-ownership":
        return this.streams.rights(member, inbound);
      case "chat":
        // Who is talking with whom, idle clocks, and "stop" (conversations.ts).
        const chat = stamp(inbound, member.id);
        this.conversations.onChat(member, chat);
        this.deliver(chat, member);
        return;
      default:
        this.deliver(stamp(inbound, member.id), member);
    }
  }

  /** Set by `closeAll`: the space routes nothing any more. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Closes every connection, then the store once what was written is flushed; used on shutdown. */
  closeAll(code: number, reason: string): Promise<void> {
    this.isClosed = true;
    for (const m of this.members.values()) m.peer.close(code, reason);
    this.members.clear();
    this.mcp.close();
    this.conversations.close();
    this.proposals.close();
    this.notifier.close();
    return this.ledger.close();
  }

  /** Audit entries matching the filter, oldest first. */
  audit(q: AuditQuery = {}, limit?: number): AuditEntry[] {
    return this.ledger.audit(q, limit);
  }

  // --- acting and watching without joining (the operator API) ----------------------

  /**
   * Runs one frame through the whole pipeline as participant `id` without joining: what
   * the participant's live connection, if any, sees of it is what it would see of any
   * other participant's frame, and the connection is left alone. Resolves with the errors
   * the frame earned (none: it took effect).
   */
  async act(id: string, frame: Record<string, unknown>, opts: { tellLive?: boolean; replies?: Envelope[] } = {}): Promise<Array<Record<string, unknown>>> {
    const config = this.config.participants[id];
    if (!config) throw new Error(`act: "${id}" is not a participant of space "${this.id}"`);
    const errors: Array<Record<string, unknown>> = [];
    const peer: Peer = {
      send: (bytes) => {
        const env = JSON.parse(bytes.toString("utf8")) as Envelope;
        const toActor = env.to?.length === 1 && env.to[0] === id && env.from === GATEWAY_ID;
        if (env.kind === "system/error") errors.push(env.payload as Record<string, unknown>);
        else if (toActor) opts.replies?.push(env);
        else return;
        // MEW's injection: the participant's own connection hears the gateway's answer too.
        if (opts.tellLive) this.members.get(id)?.peer.send(bytes);
      },
      close: () => {},
    };
    const actor = new Member(id, config, peer, config.visibility, false, this.log, this.joins, "api");
    this.recompile(actor);
    const pending = this.process(actor, parseFrame(JSON.stringify(frame)));
    if (pending) await pending;
    return errors;
  }

  /** Streams to `peer` what participant `id` may see, until the returned function is called. */
  watch(id: string, peer: Peer): () => void {
    const config = this.config.participants[id];
    if (!config) throw new Error(`watch: "${id}" is not a participant of space "${this.id}"`);
    const w = { id, visibility: config.visibility, peer };
    this.watchers.add(w);
    return () => {
      if (!this.watchers.delete(w)) return;
      // The last console of someone not connected closed: what only they could answer fails now.
      if (!this.members.has(id) && !this.watching(id)) this.mcp.unreachable(id);
    };
  }

  /** Who holds each person's conversation (conversations.ts). */
  conversationsView(): Array<Record<string, unknown>> {
    return this.conversations.view();
  }

  /** Every participant of the space, connected or not, as `viewer` may see it. */
  participantsView(): Array<Record<string, unknown>> {
    return Object.values(this.config.participants).map((p) => ({
      id: p.id,
      kind: p.kind,
      ...(p.description ? { description: p.description } : {}),
      online: this.members.has(p.id),
      ...(this.switches.isDisabled(p.id) ? { disabled: true } : {}),
      capabilities: this.grants.capabilitiesOf(p.id),
    }));
  }

  /** Grants held now, each with whether it stands (its granter still holds what it lent). */
  grantsView(): Array<Record<string, unknown>> {
    return this.grants.all().map((g) => ({ ...g, standing: this.grants.stands(g) }));
  }

  /** The grant with this id, if it is held. */
  grantById(id: string): { id: string; recipient: string; from: string } | undefined {
    return this.grants.all().find((g) => g.id === id);
  }

  // --- durable changes (ledger.ts) ---------------------------------------------------

  record(...plans: Plan[]): Promise<void> {
    return this.ledger.record(...plans);
  }

  note(plan: Plan): Promise<void> {
    plan.apply();
    plan.done?.();
    return this.ledger.record({ records: plan.records, apply: () => {} }).catch((err: unknown) => {
      this.log.error({ err: String(err) }, "could not write a call's outcome; after a restart it will count as failed");
    });
  }

  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void {
    const cause = err instanceof Error ? err.message : String(err);
    this.log.error({ participant: member.id, err: cause }, `state store: ${what}`);
    // The participant learns the cause (ENOSPC, say), not the server's paths.
    const errno = err instanceof StoreError && err.errno ? err.errno : "an error";
    this.fail(member, ErrorCodes.storeFailed, `${what}: the gateway could not write its state (${errno}); nothing changed, try again later`, correlationId, { errno });
  }

  /** Pending proposals, oldest first. */
  pendingProposals(): Proposal[] {
    return this.proposals.pending();
  }

  /** The space's tools as participant `id` sees them, connected or not. */
  toolsForId(id: string): Array<Record<string, unknown>> {
    return this.registry.list().map((t) => ({ ...t, policy: this.authority.tool(id, t.participant, t.tool) }));
  }

  /** The catalogue entry of `owner/tool`, if registered. */
  toolEntry(owner: string, tool: string): Record<string, unknown> | undefined {
    return this.registry.get(owner, tool) as Record<string, unknown> | undefined;
  }

  /** The space's tools as `member` sees them: each with the policy that applies to it (mcp.ts). */
  toolsFor(member: Member): Array<Record<string, unknown>> {
    return this.mcp.toolsFor(member);
  }

  // --- routing -------------------------------------------------------------------
  // deliver, sendTo, fail and capabilityViolation are public as the `SpaceHost` through
  // which mcp.ts and decisions.ts act; nothing outside gateway/ calls them.

  /**
   * Serializes once and hands the same bytes to every recipient: `all` members see
   * everything, `addressed` members what names them, everyone sees presence (and what
   * the caller sends `toEveryone`). The sender gets its own envelope back only with echo
   * on. `joinedBy` is for presence only: members who joined later learnt it from their
   * welcome.
   */
  deliver(env: Envelope, sender?: Member, toEveryone = false, joinedBy = Infinity): void {
    if (this.presence.length) this.flushPresence();
    const bytes = Buffer.from(JSON.stringify(env));
    this.remember(env, bytes.length);
    const to = env.to;
    const everyone = toEveryone || env.kind === "system/presence";
    for (const m of this.members.values()) {
      if ((m === sender && !m.echo) || m.joinSeq > joinedBy) continue;
      if (everyone || m.visibility === "all" || (to !== undefined && to.includes(m.id))) {
        m.peer.send(bytes);
        this.metrics.envelopesOut++;
      }
    }
    // Operators watching through the API see what their participant may see.
    for (const w of this.watchers) {
      if (everyone || w.visibility === "all" || (to !== undefined && to.includes(w.id))) w.peer.send(bytes);
    }
  }

  /**
   * Presence waits up to PRESENCE_BATCH_MS, so a wave of joins reaches each member as one
   * write rather than one per join (each socket's frames of a tick leave together): announcing
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

  /** A proposal changed (proposals.ts): count it, time its decision, tell the webhooks. */
  private proposalChanged(p: Proposal, event: string, from: string | undefined): void {
    this.metrics.proposal(event);
    if (from === "pending" && (event === "approved" || event === "rejected")) this.metrics.decisionSeconds.observe((Date.now() - Date.parse(p.createdAt)) / 1000);
    this.notifier.proposal(p, event);
  }

  sendTo(member: Member, env: Envelope): void {
    this.metrics.envelopesOut++;
    member.peer.send(Buffer.from(JSON.stringify(env)));
  }

  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void {
    if (this.log.isLevelEnabled("debug")) member.log.debug({ code, correlationId }, message);
    this.sendTo(member, errorEnvelope(member.id, code, message, { correlationId, ...extra }));
  }

  capabilityViolation(member: Member, inbound: InboundEnvelope): void {
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

  // --- welcome -------------------------------------------------------------------

  private describe(member: Member): Record<string, unknown> {
    const disabled = this.switches.isDisabled(member.id);
    const cached = member.described;
    // Capabilities are replaced, never mutated, when they change: the reference tells.
    if (cached && cached.capabilities === member.capabilities && cached.disabled === disabled) return cached.value;
    const d: Record<string, unknown> = { id: member.id, kind: member.config.kind, capabilities: member.capabilities };
    if (disabled) d["disabled"] = true;
    if (member.config.description) d["description"] = member.config.description;
    const json = JSON.stringify(d);
    member.described = { value: d, json, bytes: Buffer.byteLength(json) + 1, capabilities: member.capabilities, disabled };
    return d;
  }

  /** A description from `describe` as JSON, and its size, without serializing it again. */
  private describedJson(d: Record<string, unknown>): string {
    const m = typeof d["id"] === "string" ? this.members.get(d["id"]) : undefined;
    return m?.described?.value === d ? m.described.json : JSON.stringify(d);
  }

  private describedBytes(d: Record<string, unknown>): number {
    const m = typeof d["id"] === "string" ? this.members.get(d["id"]) : undefined;
    return m?.described?.value === d ? m.described.bytes : jsonBytes(d);
  }

  /**
   * Sends a welcome. Its participants are spliced in from each member's cached JSON rather
   * than serialized again for every joiner (a wave of joins would otherwise serialize the
   * roster once per joiner); the marker is random per process, so no text can forge it.
   */
  private sendWelcome(member: Member): void {
    const env = this.welcome(member);
    const payload = env.payload as Record<string, unknown>;
    const list = payload["participants"] as Record<string, unknown>[];
    payload["participants"] = ROSTER_MARK;
    const text = JSON.stringify(env);
    const at = text.indexOf(ROSTER_MARK_JSON);
    payload["participants"] = list;
    this.metrics.envelopesOut++;
    if (at < 0) return member.peer.send(Buffer.from(JSON.stringify(env)));
    member.peer.send(Buffer.from(`${text.slice(0, at)}[${list.map((d) => this.describedJson(d)).join(",")}]${text.slice(at + ROSTER_MARK_JSON.length)}`));
  }

  private welcome(member: Member): Envelope {
    const history = this.history;
    const sees = (env: Envelope) => member.visibility === "all" || env.to?.includes(member.id) || env.kind === "system/presence";
    return buildWelcome({
      to: member.id,
      you: { ...this.describe(member), visibility: member.visibility },
      space: { id: this.id, name: this.config.space.name, description: this.config.space.description },
      participants: [...this.members.values()].filter((m) => m !== member).map((m) => this.describe(m)),
      participantBytes: (d) => this.describedBytes(d),
      tools: this.toolsFor(member),
      proposals: this.proposals.pending().filter((p) => maySee(member, p)),
      history: (function* () {
        for (let i = history.length - 1; i >= 0; i--) if (sees(history[i]!.env)) yield history[i]!;
      })(),
      budget: frameBudget(this),
      activeStreams: this.streams.active(),
      conversations: this.conversations.view(),
    });
  }

  // --- capabilities and grants ------------------------------------------------------

  /** Compiles a member's capabilities; called on join and whenever grants change, never per message. */
  private recompile(member: Member): void {
    member.capabilities = this.grants.capabilitiesOf(member.id);
    member.allows = compileCapabilities(member.capabilities);
  }

  /** Why `granter` may not make one more grant, if it may not. */
  grantQuota(granter: string): string | undefined {
    return this.lending.quota(granter);
  }

  /** A grant, to be recorded (an "always" approval makes one in its own transaction). */
  grantPlan(from: string, recipient: string, capabilities: Capability[], reason: string | undefined, env?: Envelope): Plan {
    return this.lending.plan(from, recipient, capabilities, reason, env);
  }

  /** After a grant change: recompile and send the recipient a fresh welcome. */
  refresh(recipient: string): void {
    const m = this.members.get(recipient);
    if (!m) return;
    this.recompile(m);
    this.sendWelcome(m);
  }
}
