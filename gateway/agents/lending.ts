/**
 * Lending capabilities at runtime: `capability/grant` and `capability/revoke`, checked
 * and made durable. A grant may lend only what its granter holds and, for a tool, what its
 * own policy lets it call directly; a revoke takes down, in the same transaction, every
 * grant that was lent on from what it takes back. Which grants stand is grants.ts's
 * business; this module acts on the space only through `LendingHost`.
 */
import { reviewerBound } from "../proposals/reviewer-bound.js";
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { Authority } from "../policy/authority.js";
import { type Capability, covers } from "../policy/capabilities.js";
import type { SpaceConfig } from "../config/config.js";
import {
  type Envelope,
  ErrorCodes,
  GATEWAY_ID,
  GrantPayloadSchema,
  type InboundEnvelope,
  RevokePayloadSchema,
  describeIssue,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import type { GrantBook, GrantRecord } from "../policy/grants.js";
import type { GrantCondition } from "../policy/scope.js";
import { clip, noParticipantRefusal, type Refusal } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import type { Plan } from "../store/plan.js";

/** What lending needs of the space. */
export interface LendingHost {
  readonly config: SpaceConfig;
  readonly log: Logger;
  readonly authority: Authority;
  deliver(env: Envelope, sender?: Member): void;
  record(...plans: Plan[]): Promise<void>;
  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void;
  /** Recompiles a member's capabilities and sends it a fresh welcome. */
  refresh(recipient: string): void;
}

export class Lending {
  constructor(
    private readonly host: LendingHost,
    private readonly grants: GrantBook,
  ) {}

  /** Why `granter` may not make one more grant, if it may not. */
  quota(granter: string): string | undefined {
    const q = this.host.config.quotas;
    if (this.grants.madeBy(granter) >= q.grants) return `you have made ${q.grants} grants, your limit (quotas.grants)`;
    if (this.grants.size >= q.space_grants) return `the space holds ${q.space_grants} grants, its limit (quotas.space_grants)`;
    return undefined;
  }

  /** A `capability/grant`: checked, then recorded and delivered; a refusal goes back for the pipeline to send (ports/host.ts `Answer`). */
  async onGrant(member: Member, inbound: InboundEnvelope): Promise<Refusal | undefined> {
    const parsed = GrantPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return { code: ErrorCodes.invalidPayload, message: `capability/grant: ${describeIssue(parsed.error)}` };
    const { recipient, capabilities, reason } = parsed.data;
    if (!(recipient in this.host.config.participants)) return noParticipantRefusal(recipient);
    if (recipient === member.id) return { code: ErrorCodes.invalidPayload, message: "capability/grant: you cannot grant to yourself" };
    // A reviewer lends nothing to those it reviews: a loan would make their calls direct, past its bound.
    if (reviewerBound(this.host.config, this.host.authority.groups, recipient, member.id))
      return {
        code: ErrorCodes.reviewerBound,
        message: `you review ${clip(recipient)}'s proposals: a reviewer lends nothing to those it reviews`,
      };
    // Holding the pattern is not enough for a tool: the granter's own policy must let it
    // call the tool directly (the same check as an invite's, at the decision point).
    const refused = this.host.authority.lendable(member.id, this.grants.capabilitiesOf(member.id), capabilities);
    if (refused?.decision === "denied") return { code: refused.code, message: refused.message, extra: refused.extra };
    // A tool the recipient needs several approvers for is not one person's to lend (policy/quorum.ts).
    const bypass = this.host.authority.quorumBypass(recipient, capabilities);
    if (bypass)
      return { code: ErrorCodes.grantExceedsPolicy, message: `${bypass}; approve its proposals instead`, extra: { quorum: true } };
    const over = this.quota(member.id);
    if (over) return { code: ErrorCodes.quotaExceeded, message: over, extra: { quota: "grants" } };
    const env = stamp(inbound, member.id);
    try {
      await this.host.record(this.plan(member.id, recipient, capabilities, reason, env));
    } catch (err) {
      this.host.storeFailed(member, err, inbound.id, "the grant was not recorded");
      return undefined;
    }
    this.host.deliver(env, member);
    return undefined;
  }

  /**
   * A grant, to be recorded; once it is, the recipient is refreshed. It records the digest
   * of each tool it names (`pins`, or the definitions now): a later change of the tool
   * suspends it (authority.ts).
   */
  plan(
    from: string,
    recipient: string,
    capabilities: Capability[],
    reason: string | undefined,
    env?: Envelope,
    pins?: Record<string, string>,
    condition?: GrantCondition,
  ): Plan {
    const digests = pins ?? this.host.authority.pinsFor(capabilities);
    const record: GrantRecord = {
      type: "grant",
      id: env?.id ?? randomUUID(),
      from,
      recipient,
      capabilities,
      reason,
      ts: env?.ts ?? new Date().toISOString(),
      ...(digests ? { pins: digests } : {}),
      ...(condition ? { condition } : {}),
    };
    return {
      records: [record],
      apply: () => {
        this.grants.apply(record);
        this.grants.revalidate();
        this.host.log.info({ grant: record.id, from, recipient }, "capability granted");
        this.host.refresh(recipient);
      },
    };
  }

  /** A `capability/revoke`, with the grants lent on from what it takes back; a refusal goes back for the pipeline to send. */
  async onRevoke(member: Member, inbound: InboundEnvelope): Promise<Refusal | undefined> {
    const parsed = RevokePayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return { code: ErrorCodes.invalidPayload, message: `capability/revoke: ${describeIssue(parsed.error)}` };
    const { recipient, grant_id, capabilities } = parsed.data;
    const held = this.grants.capabilitiesOf(member.id);
    if (grant_id !== undefined) {
      const g = this.grants.to(recipient).find((x) => x.id === grant_id);
      if (!g) return { code: ErrorCodes.unknownGrant, message: `no grant "${clip(grant_id)}" to "${clip(recipient)}"` };
      // The granter may take back its grant; anyone else must hold what it lent.
      if (g.from !== member.id && !g.capabilities.every((c) => covers(held, c)))
        return { code: ErrorCodes.revokeNotAllowed, message: "you may revoke only grants you made or capabilities you hold" };
    } else if (!capabilities!.every((c) => covers(held, c))) {
      if (!(recipient in this.host.config.participants)) return noParticipantRefusal(recipient);
      // Spec §3.6.2 asks only for the capability/revoke capability. A revoke that would take
      // away nothing anyone holds harms nobody: it is delivered as the no-op it is. One that
      // would take something away still needs the revoker to hold it.
      if (!this.removesAny(recipient, capabilities!)) {
        const env = stamp(inbound, member.id);
        this.host.log.info({ revoke: env.id, from: member.id, recipient }, "capability revoke matched no grant; delivered as a no-op");
        this.host.deliver(env, member);
        return undefined;
      }
      return { code: ErrorCodes.revokeNotAllowed, message: "you may revoke only capabilities you hold" };
    }
    const env = stamp(inbound, member.id);
    const revoke: GrantRecord = { type: "revoke", id: env.id, from: member.id, recipient, grant_id, capabilities, ts: env.ts };
    // The grants lent on from what is taken back fall with it, in the same transaction:
    // worked out on a copy, so a failed write leaves every grant as it was.
    const trial = this.grants.clone();
    trial.apply(revoke);
    const fell = trial.revalidate();
    const cascade: GrantRecord[] = fell.map((g) => ({
      type: "revoke",
      id: randomUUID(),
      from: GATEWAY_ID,
      recipient: g.recipient,
      grant_id: g.id,
      ts: env.ts,
      cascade_of: env.id,
    }));
    try {
      await this.host.record({
        records: [revoke, ...cascade],
        apply: () => {
          for (const r of [revoke, ...cascade]) this.grants.apply(r);
        },
      });
    } catch (err) {
      this.host.storeFailed(member, err, inbound.id, "the revoke was not recorded");
      return undefined;
    }
    this.grants.revalidate();
    this.host.log.info({ revoke: env.id, from: member.id, recipient }, "capability revoked");
    this.host.deliver(env, member);
    for (const g of fell) {
      this.host.log.info({ grant: g.id, recipient: g.recipient, cascade_of: env.id }, "grant fell with the one it was lent from");
      const payload = { recipient: g.recipient, grant_id: g.id, reason: `lent on from a grant that was revoked (${env.id})` };
      this.host.deliver(systemEnvelope("capability/revoke", payload, { to: [g.recipient, g.from] }));
    }
    for (const id of new Set([recipient, ...fell.map((g) => g.recipient)])) this.host.refresh(id);
    return undefined;
  }

  /** Whether revoking `patterns` from `recipient` would remove any capability it was granted. */
  private removesAny(recipient: string, patterns: Capability[]): boolean {
    return this.grants.to(recipient).some((g) => g.capabilities.some((c) => patterns.some((p) => covers([p], c))));
  }
}
