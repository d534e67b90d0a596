/**
 * Participants added at runtime: MEW's `space/invite` and `space/kick`.
 *
 * An invite names a new participant id and its `initial_capabilities`; the inviter may
 * give only what it holds itself, as with a grant. The gateway mints a token, keeps only
 * its digest (in the state store, so the participant survives a restart), and hands the
 * token to the inviter alone — everyone else sees the invite without it. A kick removes
 * an invited participant for good (its token stops working, its connection is closed);
 * a participant from space.yaml can only be disconnected, since the file brings it back.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { Authority } from "../policy/authority.js";
import type { Capability } from "../policy/capabilities.js";
import type { ParticipantConfig, SpaceConfig } from "../config/config.js";
import { CloseCodes, type Envelope, ErrorCodes, type InboundEnvelope, stamp, systemEnvelope } from "../wire/envelope.js";
import { clip, noParticipantRefusal, type Refusal } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import type { Plan } from "../store/plan.js";
import { TokenBook } from "../identity/tokens.js";
import { Lookalikes } from "../config/confusables.js";

export type InviteRecord =
  | { type: "invite"; id: string; by: string; capabilities: Capability[]; digest: string; ts: string; reason?: string | undefined }
  | { type: "kick"; id: string; by: string; ts: string; reason?: string | undefined };

const PARTICIPANT_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
/** Most participants invited into one space. */
const MAX_INVITED = 256;

export interface InviteHost {
  readonly config: SpaceConfig;
  readonly log: Logger;
  member(id: string): Member | undefined;
  capabilitiesOf(id: string): Capability[];
  /** The decision point: what the inviter may lend. */
  readonly authority: Pick<Authority, "lendable">;
  deliver(env: Envelope, sender?: Member): void;
  sendTo(member: Member, env: Envelope): void;
  record(...plans: Plan[]): Promise<void>;
  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void;
  /** A participant's rules changed or it is gone: forget what was derived from them. */
  forget(id: string): void;
}

export class Invites {
  /** Invited participants now in the space, as recorded. */
  private readonly invited = new Map<string, Extract<InviteRecord, { type: "invite" }>>();

  constructor(
    private readonly host: InviteHost,
    private readonly tokens: TokenBook,
  ) {}

  /** Folds a stored record in (on start), or applies one just written. */
  apply(r: InviteRecord): void {
    if (r.type === "invite") {
      this.invited.set(r.id, r);
      const p: ParticipantConfig = {
        id: r.id,
        kind: "agent",
        echo: false,
        visibility: "all",
        capabilities: r.capabilities,
        invitedBy: r.by,
      } as ParticipantConfig;
      this.host.config.participants[r.id] = p;
      this.tokens.addDigest(r.id, r.digest);
    } else if (this.invited.delete(r.id)) {
      delete this.host.config.participants[r.id];
      this.tokens.remove(r.id);
    }
    this.host.forget(r.id);
  }

  snapshot(): InviteRecord[] {
    return [...this.invited.values()];
  }

  isInvited(id: string): boolean {
    return this.invited.has(id);
  }

  /** `space/invite`: a puppet participant made, with a loan of the inviter's capabilities; a refusal goes back for the pipeline to send. */
  async onInvite(member: Member, inbound: InboundEnvelope): Promise<Refusal | undefined> {
    const payload = (inbound.payload ?? {}) as Record<string, unknown>;
    const id = payload["participant_id"];
    const caps = payload["initial_capabilities"] ?? [];
    if (typeof id !== "string") return { code: ErrorCodes.invalidPayload, message: "space/invite: payload.participant_id is required" };
    if (!PARTICIPANT_ID.test(id))
      return {
        code: ErrorCodes.invalidPayload,
        message: "space/invite: participant_id has invalid characters (a letter or digit, then letters, digits, _ . -; at most 64)",
      };
    // `reason: already_exists` is MEW's word for it, which its clients look for.
    if (id in this.host.config.participants || id === "gateway")
      return {
        code: ErrorCodes.duplicateId,
        message: `"${clip(id)}" is already a participant of the space`,
        extra: { reason: "already_exists" },
      };
    // `fiIes` beside `files` (or `fi1es`, `Files`) would pass for it on every screen (config/confusables.ts).
    const like = new Lookalikes([...Object.keys(this.host.config.participants), "gateway"]).clash(id);
    if (like !== undefined) {
      return {
        code: ErrorCodes.lookalikeId,
        message: `"${clip(id)}" reads like participant "${clip(like)}", so it could pass for it: choose an id that reads differently`,
        extra: { existing: like, reason: "lookalike" },
      };
    }
    if (!Array.isArray(caps) || !caps.every((c) => typeof c === "object" && c !== null && typeof (c as Capability).kind === "string")) {
      return {
        code: ErrorCodes.invalidPayload,
        message: 'space/invite: initial_capabilities must be a list of capabilities like {kind: "chat"}',
      };
    }
    const capabilities = caps as Capability[];
    // An invite lends the inviter's capabilities as a grant does, checked the same way, and
    // stays a loan: the puppet may call a tool only while its inviter may (policy/authority.ts).
    const refused = this.host.authority.lendable(member.id, this.host.capabilitiesOf(member.id), capabilities);
    if (refused?.decision === "denied") return { code: refused.code, message: refused.message, extra: refused.extra };
    if (this.invited.size >= MAX_INVITED)
      return {
        code: ErrorCodes.quotaExceeded,
        message: `the space has ${MAX_INVITED} invited participants, its limit`,
        extra: { quota: "invited" },
      };
    const token = randomBytes(24).toString("base64url");
    const env = stamp(inbound, member.id);
    const record: InviteRecord = {
      type: "invite",
      id,
      by: member.id,
      capabilities,
      digest: TokenBook.digestOf(token),
      ts: env.ts,
      reason: typeof payload["reason"] === "string" ? payload["reason"] : undefined,
    };
    try {
      await this.host.record({ records: [record], apply: () => this.apply(record) });
    } catch (err) {
      this.host.storeFailed(member, err, inbound.id, "the invitation was not recorded");
      return undefined;
    }
    this.host.log.info({ invited: id, by: member.id }, "participant invited");
    // Everyone sees the invitation (and, as MEW's presence event "invited", who joins the
    // roster); only the inviter gets the token, in a space/invite-ack, never a broadcast.
    this.host.deliver(env, member);
    this.host.deliver(
      systemEnvelope("system/presence", { event: "invited", participant: { id, kind: "agent", capabilities }, by: member.id }),
    );
    this.host.sendTo(
      member,
      systemEnvelope(
        "space/invite-ack",
        { participant_id: id, status: "created", token, capabilities },
        { to: [member.id], correlation_id: [env.id] },
      ),
    );
    return undefined;
  }

  /** `space/kick`: a participant removed (an invited one for good); a refusal goes back for the pipeline to send. */
  async onKick(member: Member, inbound: InboundEnvelope): Promise<Refusal | undefined> {
    const payload = (inbound.payload ?? {}) as Record<string, unknown>;
    const id = payload["participant_id"];
    if (typeof id !== "string" || !(id in this.host.config.participants)) return noParticipantRefusal(id);
    if (id === member.id) return { code: ErrorCodes.invalidPayload, message: "space/kick: you cannot remove yourself (leave instead)" };
    const env = stamp(inbound, member.id);
    const reason = typeof payload["reason"] === "string" ? payload["reason"] : undefined;
    if (this.invited.has(id)) {
      const record: InviteRecord = { type: "kick", id, by: member.id, ts: env.ts, reason };
      try {
        await this.host.record({ records: [record], apply: () => this.apply(record) });
      } catch (err) {
        this.host.storeFailed(member, err, inbound.id, "the removal was not recorded");
        return undefined;
      }
    }
    this.host.log.info({ kicked: id, by: member.id, invited: !this.invited.has(id) }, "participant removed");
    this.host.deliver(env, member);
    this.host.member(id)?.peer.close(CloseCodes.unauthorized, `removed from the space by ${member.id}${reason ? `: ${clip(reason)}` : ""}`);
    return undefined;
  }
}
