/**
 * How a space is built: every module it runs, in the order they depend on one another,
 * each given the ports it uses. Read top to bottom, nothing here reaches a module not yet
 * built: where two modules need each other, the one built first owns an event the later
 * one subscribes to (the book's `due` and `changed`, a conversation's `aborting`, a
 * switch's `catalogueChanged`, a confirmed pin), or is itself built first and opened later
 * (the ledger: the books are handed it to record their changes, and opening it reads the
 * store back into them). The grant book and the decision point ask each other, so the
 * decision point keeps the book (policy/authority.ts).
 *
 * What is the space's own (its members' identities, the findings of its policy, the
 * console's address, whether it has closed) stays in space.ts and comes in as `SpaceOwn`.
 */
import type { Logger } from "pino";
import { Conversations } from "../agents/conversations.js";
import { Invites } from "../agents/invites.js";
import { Streams } from "../agents/streams.js";
import { Switches } from "../agents/switches.js";
import { Calls } from "../calls/calls.js";
import { frameBudget, GatewayEndpoint, maySee } from "../requests/endpoint.js";
import { Requests } from "../requests/requests.js";
import { McpRouter } from "../calls/router.js";
import type { SpaceConfig } from "../config/config.js";
import type { TokenBook } from "../identity/tokens.js";
import { Authority } from "../policy/authority.js";
import { compileCapabilities } from "../policy/capabilities.js";
import type { PolicyFinding } from "../policy/check.js";
import type { GrantBook } from "../policy/grants.js";
import { Lending } from "../agents/lending.js";
import { describeCondition } from "../policy/scope.js";
import type { SpaceHost } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import { SpaceMetrics } from "../ports/metrics.js";
import { Registry } from "../tools/registry.js";
import { Tracing } from "../ports/tracing.js";
import { Aids } from "../proposals/aids.js";
import { ReceiptKeys } from "../proposals/receipts.js";
import { decisionOf } from "../proposals/telemetry.js";
import { PasskeyBar } from "../proposals/passkey-bar.js";
import { Passkeys, type PasskeyPlace } from "../identity/passkeys.js";
import { OPEN_OWNER, type Proposal, ProposalBook, runningArguments } from "../proposals/book.js";
import { Decisions } from "../proposals/decisions.js";
import { Deciders } from "../proposals/deciders.js";
import { passkeyRisk } from "../proposals/passkey-bar.js";
import { proposalRisk } from "../proposals/risk.js";
import { Proposing } from "../proposals/propose.js";
import { Ends, interruptApproved } from "../proposals/ends.js";
import { Escalations } from "../proposals/escalation.js";
import { personIn } from "../policy/learn/history.js";
import { LEARN_WINDOW, Recorded } from "../policy/learn/recorded.js";
import { Notifier } from "../proposals/notify.js";
import { RunsEnded } from "../proposals/runs-ended.js";
import { StoreError, type StoreOpener } from "../store/index.js";
import { ErrorCodes } from "../wire/envelope.js";
import { Delivery } from "./delivery.js";
import type { Handlers } from "./kinds.js";
import { Ledger, type StateRecord } from "./ledger.js";
import { Pipeline } from "./pipeline.js";
import { applyReload, type ReloadHost, type ReloadReport } from "./reload.js";
import { Roster } from "./roster.js";
import { Seats } from "./seats.js";
import { Sessions } from "./sessions.js";

/** What a space keeps itself and hands its modules. */
export interface SpaceOwn {
  readonly id: string;
  readonly config: SpaceConfig;
  readonly tokens: TokenBook;
  readonly log: Logger;
  /** Groups each participant's identity provider put it in when it last signed in (bearer.ts). */
  readonly runtimeGroups: ReadonlyMap<string, readonly string[]>;
  /** The web console's address, once the gateway listens. */
  consoleUrl(): string | undefined;
  /** Findings made after the load (calls/catalogue.ts). */
  noteFindings(found: PolicyFinding[]): void;
  /** Set once the space has closed: it routes nothing more. */
  closed(): boolean;
  /** Whether `token` (and the id it claims, if any) is `member`'s own: a join sent again after joining. */
  sameIdentity(member: Member, token: string, claimed: string | undefined): boolean;
}

/** The modules of one space, built. */
export interface SpaceParts {
  /** The port the handlers act on the space through (ports/host.ts). */
  readonly host: SpaceHost;
  readonly metrics: SpaceMetrics;
  readonly tracing: Tracing;
  readonly registry: Registry;
  /** Members, watchers, presence, history, and the way out. */
  readonly delivery: Delivery;
  readonly sessions: Sessions;
  readonly grants: GrantBook;
  readonly authority: Authority;
  readonly streams: Streams;
  readonly invites: Invites;
  readonly switches: Switches;
  readonly conversations: Conversations;
  readonly proposals: ProposalBook;
  readonly ledger: Ledger;
  /** The recorded calls people decided, for risk, the cards' history and what bounds a reviewer (policy/learn/recorded.ts). */
  readonly recorded: Recorded;
  /** mcp/request and mcp/response, the gateway endpoint, the catalogue. */
  readonly router: McpRouter;
  readonly aids: Aids;
  /** The key that signs approval receipts and the JWKS that checks them (proposals/receipts.ts). */
  readonly receipts: ReceiptKeys;
  /** People's passkeys (identity/passkeys.ts) and which approvals need them (proposals/passkey-bar.ts). */
  readonly passkeys: Passkeys;
  readonly passkeyBar: PasskeyBar;
  readonly notifier: Notifier;
  readonly roster: Roster;
  readonly lending: Lending;
  /** A proposal held, who may decide it, its approval and call, its other ends; the escalation timers. */
  readonly proposing: Proposing;
  readonly deciders: Deciders;
  readonly decisions: Decisions;
  readonly ends: Ends;
  readonly escalations: Escalations;
  readonly pipeline: Pipeline;
  readonly seats: Seats;
  /** Compiles a member's capabilities; on join and whenever grants change, never per message. */
  recompile(member: Member): void;
  /** After a grant change: recompile the recipient and send it a fresh welcome. */
  refresh(recipient: string): void;
  /** Takes a new space.yaml, parsed and validated, with its tokens (reload.ts); rejects, having changed nothing, if its audit record is not written. */
  reload(next: SpaceConfig, tokens: TokenBook, by: string): Promise<ReloadReport>;
}

export function composeSpace(
  own: SpaceOwn,
  opts: { store?: StoreOpener<StateRecord> | undefined; env?: NodeJS.ProcessEnv | undefined } = {},
): SpaceParts {
  const { id, config, log } = own;
  const metrics = new SpaceMetrics();
  const tracing = Tracing.from(config.gateway.telemetry, process.env, log);
  const registry = new Registry();
  const delivery = new Delivery(config, metrics, log);
  const sessions = new Sessions(() => delivery.members.values(), own.tokens);
  const authority = new Authority(config, registry);
  const grants = authority.grants;
  const ledger = new Ledger(config, log, (s) => metrics.storeWriteSeconds.observe(s), opts.store);
  const proposals = new ProposalBook(config.policy.expires_action !== "keep");
  // A proposal that ends while its proposer is away keeps its end for it (proposals/unheard.ts).
  proposals.hears = (who) => delivery.members.has(who);

  const storeFailed = (member: Member, err: unknown, correlationId: string | undefined, what: string): void => {
    const cause = err instanceof Error ? err.message : String(err);
    log.error({ participant: member.id, err: cause }, `state store: ${what}`);
    // The participant learns the cause (ENOSPC, say), not the server's paths.
    const errno = err instanceof StoreError && err.errno ? err.errno : "an error";
    delivery.fail(
      member,
      ErrorCodes.storeFailed,
      `${what}: the gateway could not write its state (${errno}); nothing changed, try again later`,
      correlationId,
      { errno },
    );
  };
  const host: SpaceHost = {
    id,
    config,
    log,
    authority,
    metrics,
    tracing,
    noteFindings: (found) => own.noteFindings(found),
    verdictOf: (caller, owner, method, params, confirming) =>
      authority.call(caller, compileCapabilities(grants.capabilitiesOf(caller)), owner, method, params, confirming),
    member: (who) => delivery.members.get(who),
    watching: (who) => delivery.watching(who),
    deliver: (env, sender, toEveryone) => delivery.deliver(env, sender, toEveryone),
    deliverOnly: (env, id) => delivery.deliverOnly(env, id),
    sendTo: (member, env) => delivery.sendTo(member, env),
    sendBytes: (member, bytes) => delivery.sendBytes(member, bytes),
    fail: (...a) => delivery.fail(...a),
    capabilityViolation: (member, inbound) => delivery.capabilityViolation(member, inbound),
    grantsView: () => grantsView(grants),
    record: (...plans) => ledger.record(...plans),
    note: (plan) => ledger.note(plan),
    later: (make) => ledger.later(make),
    storeFailed,
  };

  const streams = new Streams({ config, log, deliver: host.deliver, fail: host.fail, members: () => delivery.members.values() });
  const invites = new Invites(
    {
      config,
      log,
      member: host.member,
      capabilitiesOf: (who) => grants.capabilitiesOf(who),
      authority,
      deliver: host.deliver,
      sendTo: host.sendTo,
      record: host.record,
      storeFailed,
      forget: (who) => authority.forget(who),
    },
    own.tokens,
  );
  const switches = new Switches({ config, log, deliver: host.deliver, record: host.record, storeFailed, registry });
  // The call table is built before the store is read: conversations restored from it name their calls,
  // opened again in it once the router exists (Conversations.resume).
  const calls = new Calls(config.calls);
  const conversations = new Conversations({
    config,
    log,
    calls,
    deliver: host.deliver,
    fail: host.fail,
    record: host.record,
    note: (plan) => void ledger.note(plan),
    storeFailed,
  });
  const books = { proposals, grants, invites, switches, conversations, pins: registry.pins, caps: authority.caps };
  const { torn, migrated, records, bytes, ms } = ledger.open(books);
  if (torn) log.warn(torn, "the state journal ended in a torn record (a crash mid-write); it was cut off there");
  if (migrated?.length) log.info({ files: migrated }, "state migrated from the first wave's files");
  log.debug({ records, bytes, ms }, "state restored");
  // Confirmed tool definitions outlive a restart: a tool that changed while the gateway was stopped is not trusted on sight.
  registry.pins.confirmed.add((r) => void ledger.note({ records: [r], apply: () => {} }));
  grants.revalidate();

  const runs = new RunsEnded(proposals, (plan) => ledger.note(plan));
  const router = new McpRouter(host, calls, registry, (call, end) => runs.callEnded(call, end), conversations);
  switches.catalogueChanged.add(() => router.catalogueChanged());
  const aids = new Aids({
    config,
    registry,
    authority,
    isDisabled: (who) => switches.isDisabled(who),
    unended: () => proposals.unended(),
    callFor: (...a) => router.callFor(...a),
    consoleUrl: own.consoleUrl,
  });
  const notifier = new Notifier(
    id,
    config.gateway.notify,
    log.child({ component: "notify" }),
    own.consoleUrl,
    (p) => (p.tool ? authority.why(p.proposer, p.owner, p.tool, runningArguments(p)) : undefined),
    (p) => aids.linksFor(p),
    opts.env ?? process.env,
  );
  // Each change of a proposal is counted, timed, traced and told to the webhooks.
  proposals.changed.add((p, event, from) => {
    metrics.proposal(event);
    // A decision (proposals/telemetry.ts) is counted by outcome and decider, and put on the wait's span.
    const decided = decisionOf(p, event, from, (who, q) => deciders.deciderKind(who, q));
    if (decided) metrics.decision(decided.outcome, decided.decider);
    // Its wait for a person as a span, under the call its proposer is serving, if any.
    if (tracing.on)
      tracing.proposal(
        id,
        p,
        event,
        from,
        () => calls.serving(p.proposer, (p.envelope as { correlation_id?: string[] }).correlation_id)?.trace?.context,
        () => decided && { ...decided, ...decisionContext(p) },
      );
    if (from === "pending" && (event === "approved" || event === "rejected"))
      metrics.decisionSeconds.observe((Date.now() - Date.parse(p.createdAt)) / 1000);
    notifier.proposal(p, event);
  });

  /** The rule that asked for a person and the gateway's risk of what ran, for a decision's span. */
  const decisionContext = (p: Proposal): { rule?: string; risk?: string } => {
    if (p.tool === undefined || p.owner === OPEN_OWNER) return {};
    const args = runningArguments(p);
    const risk = proposalRisk(p, registry, recorded, { args });
    return { rule: authority.why(p.proposer, p.owner, p.tool, args), ...(risk ? { risk: risk.level } : {}) };
  };

  const roster = new Roster(delivery, metrics, {
    config,
    isDisabled: (who) => switches.isDisabled(who),
    tools: (m) => router.toolsFor(m),
    proposals: (m) => proposals.pending().filter((p) => maySee(m, p)),
    budget: () => frameBudget(host),
    activeStreams: () => streams.active(),
    conversations: () => conversations.view(),
  });
  const recompile = (member: Member): void => {
    member.capabilities = grants.capabilitiesOf(member.id);
    member.allows = compileCapabilities(member.capabilities);
  };
  const refresh = (recipient: string): void => {
    const m = delivery.members.get(recipient);
    if (!m) return;
    recompile(m);
    roster.send(m);
  };
  const lending = new Lending({ ...host, refresh }, grants);
  const recorded = new Recorded(
    () => ledger.audit({}, LEARN_WINDOW),
    () => {
      let version = 0;
      for (const n of metrics.proposals.values()) version += n;
      return version;
    },
    personIn(config),
  );
  // Each approval's signed receipt (proposals/receipts.ts), under the space's key in the state directory.
  const receipts = new ReceiptKeys(id, config.gateway.state_dir);
  void receipts.ready().catch((err: unknown) => log.error({ err: String(err) }, "the approval receipt key could not be read"));
  // Approvals confirmed with the approver's passkey, where policy.passkey asks (proposals/passkey-bar.ts).
  const passkeys = new Passkeys(id, config.gateway.state_dir);
  const passkeyBar = new PasskeyBar({
    space: id,
    config: () => host.config,
    risk: (p) => passkeyRisk(p, registry, recorded),
    place: () => passkeyPlace(host.config.gateway.public_url, own.consoleUrl()),
    passkeys,
  });
  const reviewers = { config, groups: authority.groups, recorded, registry };
  const deciders = new Deciders(host, proposals, registry, reviewers);
  const proposing = new Proposing(host, proposals, calls, registry, router);
  const decisions = new Decisions(host, proposals, calls, registry, router, runs, lending, deciders, receipts, passkeyBar);
  const ends = new Ends(host, proposals, deciders);
  const escalations = new Escalations(host, proposals, (p, approvers) => notifier.escalated(p, approvers));
  proposals.changed.add((p) => escalations.arm(p));
  // Stacks that were held when the gateway stopped are held again, with their calls.
  conversations.resume();

  // A request can be a decision (a MEW fulfilment, a gateway tools/call that needs
  // approval): the handler of requests sits above the router and the decisions.
  const endpoint = new GatewayEndpoint(
    host,
    router,
    { hold: (...a) => proposing.hold(...a), withdrawn: (...a) => ends.withdrawn(...a), pending: () => proposals.pending() },
    aids.previews,
    {
      ended: (pid, who) => proposals.unheard.of(pid, who),
      running: (pid, who) => {
        const p = typeof pid === "string" ? proposals.get(pid) : undefined;
        return p?.proposer === who && (p.state === "approved" || p.state === "routed") ? p : undefined;
      },
      participants: (viewer) => {
        const out: Array<Record<string, unknown>> = [];
        for (const m of delivery.members.values()) if (m !== viewer) out.push(roster.describe(m));
        return out;
      },
    },
  );
  const requests = new Requests(host, router, decisions, endpoint, proposals);
  const handlers: Handlers = {
    mcp: router,
    requests,
    proposing,
    deciders,
    decisions,
    ends,
    lending,
    invites,
    switches,
    streams,
    conversations,
    deliver: (e, sender) => delivery.deliver(e, sender),
  };
  const pipeline = new Pipeline({
    config,
    metrics,
    handlers,
    member: host.member,
    closed: own.closed,
    sameIdentity: own.sameIdentity,
    fail: host.fail,
    capabilityViolation: host.capabilityViolation,
  });
  const seats = new Seats({
    id,
    config,
    log,
    delivery,
    pipeline,
    runtimeGroups: own.runtimeGroups,
    recompile,
    watching: host.watching,
    unreachable: (who) => router.unreachable(who),
  });

  const reloading: ReloadHost = {
    id,
    config,
    log,
    tokens: own.tokens,
    authority,
    proposals,
    members: () => delivery.members.values(),
    record: host.record,
    deliver: (e) => delivery.deliver(e),
    refresh,
    revalidateGrants: () => grants.revalidate(),
    tokensChanged: () => sessions.revoke(),
    verdict: host.verdictOf,
  };

  interruptApproved(config, log, proposals, (plan) => void ledger.note(plan));
  // Escalation timers, re-armed from each proposal's creation (proposals/escalation.ts).
  for (const p of proposals.pending()) escalations.arm(p);

  return {
    host,
    metrics,
    tracing,
    registry,
    delivery,
    sessions,
    grants,
    authority,
    streams,
    invites,
    switches,
    conversations,
    proposals,
    ledger,
    recorded,
    router,
    aids,
    receipts,
    passkeys,
    passkeyBar,
    notifier,
    roster,
    lending,
    proposing,
    deciders,
    decisions,
    ends,
    escalations,
    pipeline,
    seats,
    recompile,
    refresh,
    reload: (next, tokens, by) => {
      // A receipt key rotated since (mewgate audit receipts rotate-key) signs from now on.
      receipts.reload();
      return applyReload(reloading, next, tokens, by);
    },
  };
}

/** Grants held now, each with whether it stands (its granter still holds what it lent). */
export function grantsView(grants: GrantBook): Array<Record<string, unknown>> {
  return grants
    .all()
    .map((g) => ({ ...g, standing: grants.stands(g), ...(g.condition ? { limited_to: describeCondition(g.condition) } : {}) }));
}

/** Where people's browsers reach the console: the public URL's origin, and the listening address's (with its `localhost` twin). */
export function passkeyPlace(publicUrl: string | undefined, consoleUrl: string | undefined): PasskeyPlace {
  const origins = new Set<string>();
  for (const u of [publicUrl, consoleUrl]) {
    if (!u) continue;
    const url = new URL(u);
    // A browser refuses an IP address as an RP ID: at a loopback address, localhost comes first (the page `where` names).
    if (url.hostname === "127.0.0.1" || url.hostname === "[::1]")
      origins.add(`${url.protocol}//localhost${url.port ? `:${url.port}` : ""}`);
    origins.add(url.origin);
  }
  const list = [...origins];
  return { origins: list, rpIds: [...new Set(list.map((o) => new URL(o).hostname))] };
}
