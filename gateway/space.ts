/**
 * One space: who is in it, what each may send, and who sees what.
 *
 * The space never touches a socket. A connected participant is a `Peer` (send bytes,
 * close), so the WebSocket server and in-process participants plug in alike.
 *
 * Every inbound frame goes through one pipeline, stopping at the first failure:
 *   JSON → envelope schema → from → reserved kinds → capability → recipients → kind → route.
 */
import type { Logger } from "pino";
import { compileCapabilities, covers, type Matcher } from "./capabilities.js";
import { defaultCapabilities, defaultVisibility, type ParticipantConfig, type SpaceConfig } from "./config.js";
import {
  type Capability,
  type Envelope,
  ErrorCodes,
  type ErrorCode,
  GATEWAY_ID,
  GrantPayloadSchema,
  type InboundEnvelope,
  RevokePayloadSchema,
  describeIssue,
  errorEnvelope,
  parseFrame,
  stamp,
  systemEnvelope,
} from "./envelope.js";
import { AppendLog } from "./store.js";
import type { TokenBook } from "./tokens.js";
import { join } from "node:path";

/** A connected participant, seen from the space: a place to put bytes. */
export interface Peer {
  /** Queues one serialized envelope. A peer that cannot keep up drops itself. */
  send(bytes: Buffer): void;
  close(code: number, reason: string): void;
}

export type Visibility = "all" | "addressed";

export class Member {
  capabilities: Capability[] = [];
  allows: Matcher = () => false;

  constructor(
    readonly id: string,
    readonly config: ParticipantConfig,
    readonly peer: Peer,
    readonly visibility: Visibility,
    readonly echo: boolean,
    readonly log: Logger,
  ) {}
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

export class Space {
  readonly id: string;
  private readonly members = new Map<string, Member>();
  private readonly grants = new Map<string, Grant[]>();
  private readonly grantLog: AppendLog<GrantRecord>;
  private readonly history: { env: Envelope; size: number }[] = [];

  constructor(
    readonly config: SpaceConfig,
    private readonly tokens: TokenBook,
    private readonly log: Logger,
  ) {
    this.id = config.space.id;
    this.grantLog = new AppendLog(join(config.gateway.state_dir, "grants.jsonl"));
    for (const record of this.grantLog.readAll()) this.applyGrantRecord(record);
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
    const visibility = (config.visibility ?? this.config.defaults?.visibility ?? defaultVisibility(config.kind)) as Visibility;
    const member = new Member(id, config, peer, visibility, opts.echo ?? config.echo ?? false, this.log.child({ participant: id }));
    this.recompile(member);
    const previous = this.members.get(id);
    this.members.set(id, member);
    if (previous) {
      previous.peer.close(CloseCodes.replaced, "replaced by a newer connection for the same participant");
      member.log.info("connection replaced");
    } else {
      member.log.info({ visibility }, "joined");
    }
    this.sendTo(member, this.welcome(member));
    if (!previous) {
      this.deliver(systemEnvelope("system/presence", { event: "join", participant: this.describe(member) }), member);
    }
    return member;
  }

  /** Removes a participant whose connection ended. Ignores a member already replaced. */
  leave(member: Member, reason: string): void {
    if (this.members.get(member.id) !== member) return;
    this.members.delete(member.id);
    member.log.info({ reason }, "left");
    this.deliver(systemEnvelope("system/presence", { event: "leave", participant: { id: member.id }, reason }));
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
    if (!member.allows(inbound)) {
      return this.fail(member, ErrorCodes.capabilityViolation, `your capabilities do not allow sending this "${inbound.kind}" envelope`, inbound.id, {
        attempted_kind: inbound.kind,
        your_capabilities: member.capabilities,
      });
    }
    if (inbound.to) {
      const unknown = inbound.to.filter((to) => to !== GATEWAY_ID && !(to in this.config.participants));
      if (unknown.length) {
        return this.fail(member, ErrorCodes.unknownRecipient, `no participant ${unknown.map((u) => `"${clip(u)}"`).join(", ")} in space "${this.id}"`, inbound.id);
      }
    }
    switch (inbound.kind) {
      case "capability/grant":
        return this.grant(member, inbound);
      case "capability/revoke":
        return this.revoke(member, inbound);
      default:
        this.deliver(stamp(inbound, member.id), member);
    }
  }

  /** Closes every connection; used on shutdown. */
  closeAll(code: number, reason: string): void {
    for (const m of this.members.values()) m.peer.close(code, reason);
    this.members.clear();
    this.grantLog.close();
  }

  // --- routing -------------------------------------------------------------------

  /**
   * Serializes once and hands the same bytes to every recipient: `all` members see
   * everything, `addressed` members what names them, everyone sees presence. The
   * sender gets its own envelope back only with echo on.
   */
  private deliver(env: Envelope, sender?: Member): void {
    const bytes = Buffer.from(JSON.stringify(env));
    this.remember(env, bytes.length);
    const to = env.to;
    const everyone = env.kind === "system/presence";
    for (const m of this.members.values()) {
      if (m === sender && !m.echo) continue;
      if (everyone || m.visibility === "all" || (to !== undefined && to.includes(m.id))) m.peer.send(bytes);
    }
  }

  private sendTo(member: Member, env: Envelope): void {
    member.peer.send(Buffer.from(JSON.stringify(env)));
  }

  private fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void {
    if (member.log.isLevelEnabled("debug")) member.log.debug({ code, correlationId }, message);
    this.sendTo(member, errorEnvelope(member.id, code, message, { correlationId, ...extra }));
  }

  private remember(env: Envelope, size: number): void {
    const max = this.config.gateway.limits.history;
    if (max === 0) return;
    this.history.push({ env, size });
    if (this.history.length > max) this.history.shift();
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
    const space = { id: this.id, name: this.config.space.name ?? this.id, description: this.config.space.description };
    return systemEnvelope(
      "system/welcome",
      { you: { ...this.describe(member), visibility: member.visibility }, space, participants, tools: [], proposals: [], history },
      { to: [member.id] },
    );
  }

  // --- capabilities and grants ------------------------------------------------------

  private baseCapabilities(config: ParticipantConfig): Capability[] {
    return (config.capabilities ?? this.config.defaults?.capabilities ?? defaultCapabilities(config.kind)) as Capability[];
  }

  /** Compiles a member's capabilities; called on join and whenever its grants change, never per message. */
  private recompile(member: Member): void {
    const granted = (this.grants.get(member.id) ?? []).flatMap((g) => g.capabilities);
    member.capabilities = [...this.baseCapabilities(member.config), ...granted];
    member.allows = compileCapabilities(member.capabilities);
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
    const record: Grant = { id: env.id, from: member.id, recipient, capabilities, reason, ts: env.ts };
    // Persisted before anyone is told, so an acknowledged grant survives a crash.
    this.grantLog.append({ type: "grant", ...record });
    this.applyGrantRecord({ type: "grant", ...record });
    this.log.info({ grant: env.id, from: member.id, recipient }, "capability granted");
    this.deliver(env, member);
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
