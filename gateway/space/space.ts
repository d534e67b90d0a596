/**
 * One space: it builds the modules that handle its traffic and wires them to ports.
 *
 * The space never touches a socket. A connected participant is a `Peer` (send bytes,
 * close), so the WebSocket server and in-process participants plug in alike. What a space
 * does is spread over the files beside this one, each given only what it needs:
 *   pipeline.ts  every inbound frame, from text to the handler of its kind;
 *   kinds.ts     the table of which handler each kind goes to;
 *   delivery.ts  members, watchers, presence and history, and the one way bytes leave;
 *   roster.ts    how members are described, and each joiner's welcome;
 *   ledger.ts    where every change of durable state is written;
 *   seats.ts     acting and watching as a participant without joining (the operator API);
 *   reload.ts    a new space.yaml taken while the space runs; bearer.ts, tokens and JWTs.
 * The handlers live in their own folders (calls/, proposals/, policy/, agents/) and act back
 * on the space only through `SpaceHost` (ports/host.ts), which this class implements; none
 * of them imports this folder. This file keeps membership (join, leave, the token check),
 * the views the operator API reads, and the glue between the modules. It is past 500 lines
 * because it is that glue: the constructor wires some fifteen modules to one another, and
 * nearly every method is a line or two handing a port to one of them; what has a concern of
 * its own has its own file above.
 */
import type { Logger } from "pino";
import { Conversations } from "../agents/conversations.js";
import { Invites } from "../agents/invites.js";
import { Streams } from "../agents/streams.js";
import { Switches } from "../agents/switches.js";
import { frameBudget, maySee } from "../calls/endpoint.js";
import { Calls } from "../calls/calls.js";
import { McpRouter } from "../calls/router.js";
import { Requests } from "../calls/requests.js";
import { GatewayEndpoint } from "../calls/endpoint.js";
import type { SpaceConfig } from "../config/config.js";
import { admitPolicy, type PolicyFinding } from "../policy/check.js";
import type { TokenBook } from "../identity/tokens.js";
import { SpaceIdentity } from "../identity/provider.js";
import { SpaceMetrics } from "../ports/metrics.js";
import { Tracing } from "../ports/tracing.js";
import { Notifier } from "../proposals/notify.js";
import { describeCondition } from "../policy/scope.js";
import { Authority, type Verdict } from "../policy/authority.js";
import { compileCapabilities } from "../policy/capabilities.js";
import { GrantBook } from "../policy/grants.js";
import { Lending } from "../policy/lending.js";
import { clip, type SpaceHost } from "../ports/host.js";
import { Member, type Peer } from "../ports/member.js";
import type { Plan } from "../ports/plan.js";
import { Registry } from "../ports/registry.js";
import { type AuditEntry, type AuditQuery, type Proposal, ProposalBook, runningArguments } from "../proposals/book.js";
import { Aids } from "../proposals/aids.js";
import { Decisions } from "../proposals/decisions.js";
import { RunsEnded } from "../proposals/runs-ended.js";
import { StoreError, type StoreOpener } from "../store/index.js";
import { type Envelope, CloseCodes, ErrorCodes, type ErrorCode, type InboundEnvelope, systemEnvelope } from "../wire/envelope.js";
import { Delivery } from "./delivery.js";
import type { Handlers } from "./kinds.js";
import { Ledger, type StateRecord } from "./ledger.js";
import { Pipeline } from "./pipeline.js";
import { Seats } from "./seats.js";
import { Roster } from "./roster.js";
import { applyReload, type ReloadHost, type ReloadReport } from "./reload.js";
import { Sessions } from "./sessions.js";

export { Member, type Peer, type Visibility } from "../ports/member.js";

export type AuthResult = { ok: true; id: string; digest?: string } | { ok: false; code: number; reason: string };

export class Space implements SpaceHost {
  readonly id: string;
  readonly registry = new Registry();
  readonly proposals: ProposalBook;
  /** mcp/request and mcp/response, the gateway endpoint, the catalogue (calls/router.ts). */
  private readonly mcp: McpRouter;
  /** What happens to proposals (decisions.ts). */
  private readonly decisions: Decisions;
  /** Members, watchers, presence, history, and the way out (delivery.ts). */
  private readonly delivery: Delivery;
  /** Members' descriptions and welcomes (roster.ts). */
  private readonly roster: Roster;
  /** Every inbound frame (pipeline.ts). */
  private readonly pipeline: Pipeline;
  /** Acting and watching as a participant without joining (seats.ts). */
  private readonly seats: Seats;
  /** Grants, and which still stand (grants.ts). */
  private readonly grants: GrantBook;
  /** Where every change of proposals and grants is made durable (ledger.ts). */
  private readonly ledger: Ledger;
  /** Figures for /metrics. */
  readonly metrics = new SpaceMetrics();
  /** Spans of call chains, exported over OTLP when configured (ports/tracing.ts). */
  readonly tracing: Tracing;
  /** Webhooks told of proposals (gateway.notify). */
  readonly notifier: Notifier;
  /** Previews and signed decision links: what helps a person decide (proposals/aids.ts). */
  readonly aids: Aids;
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
  private readonly conversations: Conversations;
  /** Who is connected from where, and token expiry (sessions.ts). */
  readonly sessions: Sessions;
  private isClosed = false;
  /** The space's identity provider, with `identity:` in space.yaml (space/bearer.ts uses it). */
  readonly identity: SpaceIdentity | undefined;
  /** What the last load of space.yaml found in its tool rules, short of an error (policy/check.ts): for the operator to see. */
  findings: PolicyFinding[];
  /** Who hears findings made after the load (a rule that still matches nothing once its owner's tools registered): `up` and `gateway` print them. */
  readonly findingListeners = new Set<(f: PolicyFinding) => void>();
  /** Groups each participant's identity provider put it in when it last signed in (space/bearer.ts). */
  readonly runtimeGroups = new Map<string, readonly string[]>();

  constructor(
    readonly config: SpaceConfig,
    readonly tokens: TokenBook,
    readonly log: Logger,
    /** Where the space's state is kept, when not in `gateway.state_dir` (a cluster's bus). */
    opts: { store?: StoreOpener<StateRecord>; env?: NodeJS.ProcessEnv } = {},
  ) {
    this.id = config.space.id;
    // Rules that match nothing, or a condition that does not compile, are found before anyone joins (policy/check.ts).
    const findings = admitPolicy(config);
    this.findings = findings;
    for (const f of findings) log.warn({ code: f.code, at: `${f.file}:${f.line}:${f.column}`, rule: f.path }, f.message);
    this.tracing = Tracing.from(config.gateway.telemetry, process.env, log);
    const declared = (id: string) => Object.hasOwn(config.participants, id);
    this.identity =
      config.identity &&
      new SpaceIdentity(
        config.identity,
        this.id,
        Object.keys(config.participants),
        declared,
        log.child({ component: "identity" }),
        opts.env,
      );
    this.delivery = new Delivery(config, this.metrics, log);
    this.sessions = new Sessions(() => this.delivery.members.values(), tokens);
    this.grants = new GrantBook((id) => this.authority.configured(id));
    this.authority = new Authority(config, this.grants, this.registry);
    this.lending = new Lending(this, this.grants);
    this.streams = new Streams({
      config,
      log,
      deliver: (e, s, t) => this.deliver(e, s, t),
      fail: (...a) => this.fail(...a),
      members: () => this.delivery.members.values(),
    });
    this.invites = new Invites(
      {
        config,
        log,
        member: (id) => this.delivery.members.get(id),
        capabilitiesOf: (id) => this.grants.capabilitiesOf(id),
        authority: { lendable: (...a) => this.authority.lendable(...a) },
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
      registry: this.registry,
    });
    // The call table is built first: conversations restored from the store name their calls,
    // opened again in it once the router exists (Conversations.resume).
    const calls = new Calls(config.calls);
    this.conversations = new Conversations({
      config,
      log,
      calls,
      deliver: (e, s, t) => this.deliver(e, s, t),
      fail: (...a) => this.fail(...a),
      record: (...p) => this.record(...p),
      note: (p) => void this.note(p),
      storeFailed: (...a) => this.storeFailed(...a),
    });
    this.aids = new Aids({
      config,
      registry: this.registry,
      authority: this.authority,
      isDisabled: (id) => this.switches.isDisabled(id),
      callFor: (...a) => this.mcp.callFor(...a),
      consoleUrl: () => this.consoleUrl,
    });
    this.notifier = new Notifier(
      this.id,
      config.gateway.notify,
      log.child({ component: "notify" }),
      () => this.consoleUrl,
      (p) => (p.tool ? this.authority.why(p.proposer, p.owner, p.tool, runningArguments(p)) : undefined),
      (p) => this.aids.linksFor(p),
      opts.env ?? process.env,
    );
    this.proposals = new ProposalBook(config.policy.expires_action !== "keep");
    this.proposals.changed.add((p, event, from) => this.proposalChanged(p, event, from, calls));
    this.ledger = Ledger.open(
      config,
      log,
      {
        proposals: this.proposals,
        grants: this.grants,
        invites: this.invites,
        switches: this.switches,
        conversations: this.conversations,
        pins: this.registry.pins,
      },
      (s) => this.metrics.storeWriteSeconds.observe(s),
      opts.store,
    );
    // Confirmed tool definitions outlive a restart: a tool that changed while the gateway was stopped is not trusted on sight.
    this.registry.pins.confirmed.add((r) => void this.note({ records: [r], apply: () => {} }));
    const { torn, migrated, records, bytes, ms } = this.ledger.report;
    if (torn) log.warn(torn, "the state journal ended in a torn record (a crash mid-write); it was cut off there");
    if (migrated?.length) log.info({ files: migrated }, "state migrated from the first wave's files");
    log.debug({ records, bytes, ms }, "state restored");
    this.grants.revalidate();
    const runs = new RunsEnded(this.proposals, (plan) => this.note(plan));
    this.mcp = new McpRouter(this, calls, this.registry, this.proposals, (call, end) => runs.callEnded(call, end), this.conversations);
    this.switches.catalogueChanged.add(() => this.mcp.catalogueChanged());
    this.decisions = new Decisions(this, this.proposals, calls, this.registry, this.mcp, runs, this.lending, (p, approvers) =>
      this.notifier.escalated(p, approvers),
    );
    // Stacks that were held when the gateway stopped are held again, with their calls.
    this.conversations.resume();
    this.roster = new Roster(this.delivery, this.metrics, {
      config,
      isDisabled: (id) => this.switches.isDisabled(id),
      tools: (m) => this.toolsFor(m),
      proposals: (m) => this.proposals.pending().filter((p) => maySee(m, p)),
      budget: () => frameBudget(this),
      activeStreams: () => this.streams.active(),
      conversations: () => this.conversations.view(),
    });
    // A request can be a decision (a MEW fulfilment, a gateway tools/call that needs
    // approval): the handler of requests sits above the router and the decisions.
    const requests = new Requests(this, this.mcp, this.decisions, new GatewayEndpoint(this, this.mcp, this.decisions), this.proposals);
    const handlers: Handlers = {
      mcp: this.mcp,
      requests,
      decisions: this.decisions,
      lending: this.lending,
      invites: this.invites,
      switches: this.switches,
      streams: this.streams,
      conversations: this.conversations,
      deliver: (e, sender) => this.delivery.deliver(e, sender),
    };
    this.pipeline = new Pipeline({
      config,
      metrics: this.metrics,
      handlers,
      member: (id) => this.delivery.members.get(id),
      closed: () => this.isClosed,
      sameIdentity: (member, token, claimed) => {
        const auth = this.authenticate(token, claimed);
        return auth.ok && auth.id === member.id;
      },
      fail: (...a) => this.delivery.fail(...a),
      capabilityViolation: (m, e) => this.delivery.capabilityViolation(m, e),
    });
    this.seats = new Seats({
      id: this.id,
      config,
      log,
      delivery: this.delivery,
      pipeline: () => this.pipeline,
      runtimeGroups: this.runtimeGroups,
      recompile: (m) => this.recompile(m),
      watching: (id) => this.watching(id),
      unreachable: (id) => this.mcp.unreachable(id),
    });
    // Approved before the gateway stopped, with no outcome written: the call may or may not
    // have reached the tool, so it is never routed again on its own. It waits, interrupted,
    // for a person to decide again, with a fresh TTL; its proposer hears it on joining.
    for (const p of this.proposals.restored()) {
      this.log.warn(
        { proposal: p.id, proposer: p.proposer, approver: p.decidedBy },
        "proposal was approved when the gateway stopped; marked interrupted until someone decides again",
      );
      // A two-person rule holds again: the call may have run, so running it again needs its approvers again.
      const again = (p.required ?? 1) > 1 ? { approvals: [] } : {};
      this.note(
        this.proposals.planTransition(p, {
          state: "interrupted",
          reason: "gateway_restarted",
          expiresAt: Date.now() + config.policy.proposal_ttl_ms,
          ...again,
        }),
      );
    }
    // Escalation timers, re-armed from each proposal's creation (proposals/escalation.ts).
    for (const p of this.proposals.pending()) this.decisions.escalations.arm(p);
  }

  get online(): number {
    return this.delivery.members.size;
  }

  watching(id: string): boolean {
    for (const w of this.delivery.watchers) if (w.id === id) return true;
    return false;
  }

  /** Requests waiting on participant `id` to answer (a form asked of a person at the web console). */
  requestsFor(id: string): Array<Record<string, unknown>> {
    return this.mcp.calls
      .toTarget(id)
      .map((c) => ({ id: c.id, from: c.caller, method: c.method, rpc_id: c.rpcId, params: c.params, age_ms: Date.now() - c.openedAt }));
  }

  member(id: string): Member | undefined {
    return this.delivery.members.get(id);
  }

  /**
   * The token decides the identity; a claimed id is only checked against it. A cluster
   * node that holds the socket passes the token's SHA-256 digest instead (cluster/owner.ts).
   */
  authenticate(token: string | { digest: Buffer }, claimedId?: string): AuthResult {
    const check = typeof token === "string" ? this.tokens.check(token) : this.tokens.checkDigest(token.digest);
    if (check && !check.ok)
      return {
        ok: false,
        code: CloseCodes.tokenExpired,
        reason: `the token of "${check.id}" expired at ${new Date(check.at).toISOString()}`,
      };
    if (check === undefined) return { ok: false, code: CloseCodes.unauthorized, reason: `invalid token for space "${this.id}"` };
    const id = check.id;
    if (claimedId !== undefined && claimedId !== id) {
      if (!(claimedId in this.config.participants)) {
        return { ok: false, code: CloseCodes.unknownParticipant, reason: `no participant "${clip(claimedId)}" in space "${this.id}"` };
      }
      return { ok: false, code: CloseCodes.identityMismatch, reason: `token does not belong to participant "${clip(claimedId)}"` };
    }
    return { ok: true, id, digest: check.digest };
  }

  /**
   * Adds an authenticated participant. A second connection for the same id replaces the
   * first, which is closed with `replaced`; the others see no leave or join.
   */
  join(id: string, peer: Peer, opts: { echo?: boolean | undefined; digest?: string | undefined } = {}): Member {
    const config = this.config.participants[id];
    if (!config) throw new Error(`join: "${id}" is not a participant of space "${this.id}"`);
    const member = new Member(id, config, peer, config.visibility, opts.echo ?? config.echo, this.log, ++this.delivery.joins);
    member.groups = this.runtimeGroups.get(id) ?? [];
    member.tokenDigest = opts.digest;
    this.recompile(member);
    const previous = this.delivery.members.get(id);
    this.delivery.members.set(id, member);
    if (previous) {
      previous.peer.close(CloseCodes.replaced, "replaced by a newer connection for the same participant");
      member.log.info("connection replaced");
    } else {
      // Through the space's logger, so a member that never logs again never makes its own.
      this.log.info({ participant: id, visibility: member.visibility }, "joined");
    }
    this.roster.send(member);
    this.decisions.tellInterrupted(member);
    if (!previous) {
      this.delivery.announce(systemEnvelope("system/presence", { event: "join", participant: this.roster.describe(member) }), member);
    }
    if (config.kind === "mcp") this.mcp.refreshTools(id);
    if (opts.digest !== undefined) this.sessions.schedule();
    return member;
  }

  /** Takes a new space.yaml, parsed and validated, with its tokens (reload.ts); rejects, having changed nothing, if its audit record is not written. */
  reload(next: SpaceConfig, tokens: TokenBook, by: string): Promise<ReloadReport> {
    const ports: ReloadHost = {
      id: this.id,
      config: this.config,
      log: this.log,
      tokens: this.tokens,
      authority: this.authority,
      proposals: this.proposals,
      members: () => this.delivery.members.values(),
      record: (...p) => this.record(...p),
      deliver: (e) => this.deliver(e),
      refresh: (id) => this.refresh(id),
      revalidateGrants: () => this.grants.revalidate(),
      tokensChanged: () => this.sessions.revoke(),
      verdict: (caller, owner, method, params, confirming) =>
        this.authority.call(caller, compileCapabilities(this.grants.capabilitiesOf(caller)), owner, method, params, confirming),
    };
    return applyReload(ports, next, tokens, by);
  }

  /**
   * Removes a participant whose connection ended. Ignores a member already replaced.
   * Every call pending on it fails now; calls it made are cancelled at their targets.
   */
  leave(member: Member, reason: string): void {
    if (this.delivery.members.get(member.id) !== member) return;
    this.delivery.members.delete(member.id);
    member.log.info({ reason }, "left");
    // In this order: its calls' waiters hear first, then the leave, then the catalogue change.
    this.mcp.settle(member.id);
    this.streams.left(member.id);
    this.delivery.announce(systemEnvelope("system/presence", { event: "leave", participant: { id: member.id }, reason }));
    this.mcp.forgetTools(member.id);
  }

  /** One text frame from `member`, in the order it sent them (pipeline.ts). */
  handle(member: Member, text: string): void {
    this.pipeline.handle(member, text);
  }

  /** A raw stream frame (`#<id>#<data>`) from `member` (server.ts sends them here, not to `handle`). */
  streamFrame(member: Member, data: Buffer, binary: boolean): void {
    this.metrics.envelopesIn++;
    this.streams.frame(member, data, binary);
  }

  /** Set by `closeAll`: the space routes nothing any more. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Closes every connection, then the store once what was written is flushed; used on shutdown. */
  closeAll(code: number, reason: string): Promise<void> {
    this.isClosed = true;
    this.sessions.close();
    for (const m of this.delivery.members.values()) m.peer.close(code, reason);
    this.delivery.members.clear();
    this.mcp.close();
    this.conversations.close();
    this.proposals.close();
    this.notifier.close();
    this.decisions.escalations.close();
    const flushed = this.tracing.shutdown();
    return this.ledger.close().finally(() => flushed);
  }

  /** Audit entries matching the filter, oldest first. */
  audit(q: AuditQuery = {}, limit?: number): AuditEntry[] {
    return this.ledger.audit(q, limit);
  }

  // --- acting and watching without joining (the operator API) ----------------------

  /** Runs one frame through the whole pipeline as participant `id` without joining (seats.ts). */
  act(
    id: string,
    frame: Record<string, unknown>,
    opts: { tellLive?: boolean; replies?: Envelope[] } = {},
  ): Promise<Array<Record<string, unknown>>> {
    return this.seats.act(id, frame, opts);
  }

  /** Findings made after the load (calls/catalogue.ts): each new one kept with the others and told to `findingListeners`. */
  noteFindings(found: PolicyFinding[]): void {
    for (const f of found) {
      if (this.findings.some((k) => k.code === f.code && k.message === f.message && k.line === f.line)) continue;
      this.findings.push(f);
      for (const hear of this.findingListeners) hear(f);
    }
  }

  /** The decision point for `caller`, connected or not, with its capabilities as they stand (SpaceHost). */
  verdictOf(caller: string, owner: string, method: string, params: Record<string, unknown>, confirming: boolean): Verdict {
    return this.authority.call(caller, compileCapabilities(this.grants.capabilitiesOf(caller)), owner, method, params, confirming);
  }

  /** Why participant `id` may not decide proposal `p` (nor Respond to it), or undefined (decisions.ts `whyNotDecide`). */
  whyNotDecide(id: string, p: Proposal): { code: string; message: string } | undefined {
    const actor = this.seats.actor(id);
    return actor ? this.decisions.whyNotDecide(actor, p) : { code: ErrorCodes.unknownRecipient, message: `no participant "${clip(id)}"` };
  }

  /** Streams to `peer` what participant `id` may see, until the returned function is called (seats.ts). */
  watch(id: string, peer: Peer): () => void {
    return this.seats.watch(id, peer);
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
      online: this.delivery.members.has(p.id),
      ...(this.switches.isDisabled(p.id) ? { disabled: true } : {}),
      capabilities: this.grants.capabilitiesOf(p.id),
      groups: this.authority.groups.of(p.id),
    }));
  }

  /** The recent envelopes `viewer` may see, oldest first, at most `limit` (delivery.ts). */
  recentFor(viewer: string, limit: number, match: (env: Envelope) => boolean = () => true): Envelope[] {
    return this.delivery.recentFor(viewer, limit, match);
  }

  /** Grants held now, each with whether it stands (its granter still holds what it lent). */
  grantsView(): Array<Record<string, unknown>> {
    return this.grants
      .all()
      .map((g) => ({ ...g, standing: this.grants.stands(g), ...(g.condition ? { limited_to: describeCondition(g.condition) } : {}) }));
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
      this.log.error(
        { err: String(err) },
        "could not write a call's outcome; after a restart it comes back interrupted if its call was in flight",
      );
    });
  }

  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void {
    const cause = err instanceof Error ? err.message : String(err);
    this.log.error({ participant: member.id, err: cause }, `state store: ${what}`);
    // The participant learns the cause (ENOSPC, say), not the server's paths.
    const errno = err instanceof StoreError && err.errno ? err.errno : "an error";
    this.fail(
      member,
      ErrorCodes.storeFailed,
      `${what}: the gateway could not write its state (${errno}); nothing changed, try again later`,
      correlationId,
      { errno },
    );
  }

  /** Proposals awaiting a decision (pending, and interrupted ones), oldest first. */
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

  /** The space's tools as `member` sees them: each with the policy that applies to it (calls/router.ts). */
  toolsFor(member: Member): Array<Record<string, unknown>> {
    return this.mcp.toolsFor(member);
  }

  /** A proposal changed (proposals/book.ts): count it, time its decision, tell the webhooks. */
  private proposalChanged(p: Proposal, event: string, from: string | undefined, calls: Calls): void {
    this.metrics.proposal(event);
    // Its wait for a person as a span, under the call its proposer is serving, if any.
    if (this.tracing.on)
      this.tracing.proposal(
        this.id,
        p,
        event,
        from,
        () => calls.serving(p.proposer, (p.envelope as { correlation_id?: string[] }).correlation_id)?.trace?.context,
      );
    if (from === "pending" && (event === "approved" || event === "rejected"))
      this.metrics.decisionSeconds.observe((Date.now() - Date.parse(p.createdAt)) / 1000);
    this.notifier.proposal(p, event);
  }

  // --- the way out (delivery.ts), as the `SpaceHost` the handlers act through ----------

  deliver(env: Envelope, sender?: Member, toEveryone = false): void {
    this.delivery.deliver(env, sender, toEveryone);
  }

  sendTo(member: Member, env: Envelope): void {
    this.delivery.sendTo(member, env);
  }

  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void {
    this.delivery.fail(member, code, message, correlationId, extra);
  }

  capabilityViolation(member: Member, inbound: InboundEnvelope): void {
    this.delivery.capabilityViolation(member, inbound);
  }

  // --- capabilities and grants ------------------------------------------------------

  /** Compiles a member's capabilities; called on join and whenever grants change, never per message. */
  private recompile(member: Member): void {
    member.capabilities = this.grants.capabilitiesOf(member.id);
    member.allows = compileCapabilities(member.capabilities);
  }

  /** After a grant change: recompile and send the recipient a fresh welcome. */
  refresh(recipient: string): void {
    const m = this.delivery.members.get(recipient);
    if (!m) return;
    this.recompile(m);
    this.roster.send(m);
  }
}
