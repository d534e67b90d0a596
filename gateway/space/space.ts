/**
 * One space: its membership (join, leave, the token check), the views the operator API
 * reads, and the modules that handle its traffic, each exposed as a field.
 *
 * The space never touches a socket. A connected participant is a `Peer` (send bytes,
 * close), so the WebSocket server and in-process participants plug in alike. The modules
 * are built by compose.ts, in dependency order, each given only the ports it uses; the
 * handlers (calls/, proposals/, policy/, agents/) act back on the space only through
 * `SpaceHost` (ports/host.ts), built there, and none of them imports this folder. Callers
 * reach a module through its field (`space.seats.act`, `space.ledger.audit`,
 * `space.pipeline.handle`, `space.host.deliver`); this class forwards nothing.
 */
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import { SpaceIdentity } from "../identity/provider.js";
import type { TokenBook } from "../identity/tokens.js";
import { admitPolicy, type PolicyFinding } from "../policy/check.js";
import { clip } from "../ports/host.js";
import { Member, type Peer } from "../ports/member.js";
import type { Proposal } from "../proposals/book.js";
import type { StoreOpener } from "../store/index.js";
import { CloseCodes, ErrorCodes, systemEnvelope } from "../wire/envelope.js";
import { composeSpace, grantsView, type SpaceParts } from "./compose.js";
import type { StateRecord } from "./ledger.js";

export { Member, type Peer, type Visibility } from "../ports/member.js";

export type AuthResult = { ok: true; id: string; digest?: string } | { ok: false; code: number; reason: string };

export class Space {
  readonly id: string;
  // The modules, built by compose.ts: `SpaceParts` there says what each one does.
  readonly host: SpaceParts["host"];
  readonly registry: SpaceParts["registry"];
  readonly proposals: SpaceParts["proposals"];
  readonly mcp: SpaceParts["router"];
  readonly deciders: SpaceParts["deciders"];
  readonly ends: SpaceParts["ends"];
  readonly escalations: SpaceParts["escalations"];
  readonly delivery: SpaceParts["delivery"];
  readonly pipeline: SpaceParts["pipeline"];
  readonly seats: SpaceParts["seats"];
  readonly grants: SpaceParts["grants"];
  readonly ledger: SpaceParts["ledger"];
  readonly recorded: SpaceParts["recorded"];
  readonly metrics: SpaceParts["metrics"];
  readonly tracing: SpaceParts["tracing"];
  readonly notifier: SpaceParts["notifier"];
  readonly aids: SpaceParts["aids"];
  readonly receipts: SpaceParts["receipts"];
  readonly passkeys: SpaceParts["passkeys"];
  readonly passkeyBar: SpaceParts["passkeyBar"];
  readonly authority: SpaceParts["authority"];
  readonly streams: SpaceParts["streams"];
  readonly switches: SpaceParts["switches"];
  readonly conversations: SpaceParts["conversations"];
  readonly sessions: SpaceParts["sessions"];
  readonly refresh: SpaceParts["refresh"];
  readonly reload: SpaceParts["reload"];
  private readonly parts: SpaceParts;
  /** The web console's address, once the gateway listens (for links in notices). */
  consoleUrl: string | undefined;
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
    this.findings = admitPolicy(config);
    for (const f of this.findings) log.warn({ code: f.code, at: `${f.file}:${f.line}:${f.column}`, rule: f.path }, f.message);
    this.identity =
      config.identity &&
      new SpaceIdentity(
        config.identity,
        this.id,
        Object.keys(config.participants),
        (id: string) => Object.hasOwn(config.participants, id),
        log.child({ component: "identity" }),
        opts.env,
      );
    const parts = composeSpace(
      {
        id: this.id,
        config,
        tokens,
        log,
        runtimeGroups: this.runtimeGroups,
        consoleUrl: () => this.consoleUrl,
        noteFindings: (found) => this.noteFindings(found),
        closed: () => this.isClosed,
        sameIdentity: (member, token, claimed) => {
          const auth = this.authenticate(token, claimed);
          return auth.ok && auth.id === member.id;
        },
      },
      opts,
    );
    this.parts = parts;
    ({
      host: this.host,
      registry: this.registry,
      proposals: this.proposals,
      router: this.mcp,
      deciders: this.deciders,
      ends: this.ends,
      escalations: this.escalations,
      delivery: this.delivery,
      pipeline: this.pipeline,
      seats: this.seats,
      grants: this.grants,
      ledger: this.ledger,
      recorded: this.recorded,
      metrics: this.metrics,
      tracing: this.tracing,
      notifier: this.notifier,
      aids: this.aids,
      receipts: this.receipts,
      passkeys: this.passkeys,
      passkeyBar: this.passkeyBar,
      authority: this.authority,
      streams: this.streams,
      switches: this.switches,
      conversations: this.conversations,
      sessions: this.sessions,
      refresh: this.refresh,
      reload: this.reload,
    } = parts);
  }

  get online(): number {
    return this.delivery.members.size;
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
    this.parts.recompile(member);
    const previous = this.delivery.members.get(id);
    this.delivery.members.set(id, member);
    if (previous) {
      previous.peer.close(CloseCodes.replaced, "replaced by a newer connection for the same participant");
      member.log.info("connection replaced");
    } else {
      // Through the space's logger, so a member that never logs again never makes its own.
      this.log.info({ participant: id, visibility: member.visibility }, "joined");
    }
    this.parts.roster.send(member);
    this.ends.tellInterrupted(member);
    // What was asked of the connection it replaced waits for an answer from this one.
    if (previous) this.mcp.reoffer(member);
    if (!previous) {
      this.delivery.presenceOf(
        "join",
        id,
        systemEnvelope("system/presence", { event: "join", participant: this.parts.roster.describe(member) }),
        member,
      );
    }
    if (config.kind === "mcp") this.mcp.refreshTools(id);
    if (opts.digest !== undefined) this.sessions.joined(member);
    return member;
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
    this.delivery.presenceOf(
      "leave",
      member.id,
      systemEnvelope("system/presence", { event: "leave", participant: { id: member.id }, reason }),
    );
    this.mcp.forgetTools(member.id);
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
    this.escalations.close();
    const flushed = this.tracing.shutdown();
    return this.ledger.close().finally(() => flushed);
  }

  /** Findings made after the load (calls/catalogue.ts): each new one kept with the others and told to `findingListeners`. */
  noteFindings(found: PolicyFinding[]): void {
    for (const f of found) {
      if (this.findings.some((k) => k.code === f.code && k.message === f.message && k.line === f.line)) continue;
      this.findings.push(f);
      for (const hear of this.findingListeners) hear(f);
    }
  }

  // --- the views the operator API reads ----------------------------------------------

  /** Why participant `id` may not decide proposal `p` (nor Respond to it), or undefined (deciders.ts `whyNotDecide`). */
  whyNotDecide(id: string, p: Proposal): { code: string; message: string } | undefined {
    const actor = this.seats.actor(id);
    return actor ? this.deciders.whyNotDecide(actor, p) : { code: ErrorCodes.unknownRecipient, message: `no participant "${clip(id)}"` };
  }

  /**
   * What participant `id` may do with proposal `p` now, for "who may decide" (operator/deciders.ts):
   * approve it (deciders.ts `whyNotApprove`, a reviewer's bound included), reject it
   * (`whyNotDecide`), and why not when it may do neither.
   */
  decidingRight(id: string, p: Proposal): { approve: boolean; reject: boolean; why?: { code: string; message: string } } {
    const actor = this.seats.actor(id);
    if (!actor)
      return { approve: false, reject: false, why: { code: ErrorCodes.unknownRecipient, message: `no participant "${clip(id)}"` } };
    const notApprove = this.deciders.whyNotApprove(actor, p);
    const notReject = this.deciders.whyNotDecide(actor, p);
    return { approve: !notApprove, reject: !notReject, ...(notApprove && notReject ? { why: notApprove } : {}) };
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

  /** Grants held now, each with whether it stands (its granter still holds what it lent). */
  grantsView(): Array<Record<string, unknown>> {
    return grantsView(this.grants);
  }

  /** Requests waiting on participant `id` to answer (a form asked of a person at the web console). */
  requestsFor(id: string): Array<Record<string, unknown>> {
    return this.mcp.calls
      .toTarget(id)
      .map((c) => ({ id: c.id, from: c.caller, method: c.method, rpc_id: c.rpcId, params: c.params, age_ms: Date.now() - c.openedAt }));
  }

  /** The grant with this id, if it is held. */
  grantById(id: string): { id: string; recipient: string; from: string } | undefined {
    return this.grants.all().find((g) => g.id === id);
  }

  /** The space's tools as participant `id` sees them, connected or not. */
  toolsForId(id: string): Array<Record<string, unknown>> {
    return this.registry.list().map((t) => ({ ...t, policy: this.authority.tool(id, t.participant, t.tool) }));
  }
}
