/**
 * How a proposal ends without running: rejected by someone who may decide it, withdrawn by its
 * proposer (or given up when the call behind it was cancelled), expired when its time is up;
 * and, for one interrupted by a restart, its proposer told that the call may or may not have run.
 */
import {
  ErrorCodes,
  type InboundEnvelope,
  RejectPayloadSchema,
  RpcErrors,
  WithdrawPayloadSchema,
  describeIssue,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import type { Refusal, SpaceHost } from "../ports/host.js";
import { awaiting, INTERRUPTED_TEXT, type Proposal, type ProposalBook } from "./book.js";
import type { Member } from "../ports/member.js";
import { newDecisionId } from "../audit/entry.js";
import type { Deciders } from "./deciders.js";
import type { SpaceConfig } from "../config/config.js";
import type { Plan } from "../store/plan.js";
import type { Logger } from "pino";

/** What ending a proposal uses of the space. */
export type EndsHost = Pick<SpaceHost, "config" | "deliver" | "log" | "record" | "sendTo" | "storeFailed">;

export class Ends {
  constructor(
    private readonly space: EndsHost,
    private readonly proposals: ProposalBook,
    private readonly deciders: Pick<Deciders, "awaitingProposal" | "whyNotDecide">,
  ) {
    // The book is built first and tells this when a proposal's time is up.
    proposals.due.add((p) => void this.onDue(p));
  }

  async onReject(member: Member, inbound: InboundEnvelope): Promise<Refusal | undefined> {
    const parsed = RejectPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return { code: ErrorCodes.invalidPayload, message: `mcp/reject: ${describeIssue(parsed.error)}` };
    const p = this.deciders.awaitingProposal(inbound, "mcp/reject");
    if (!("id" in p)) return p;
    const why = this.deciders.whyNotDecide(member, p);
    if (why) return why;
    try {
      await this.space.record(
        this.proposals.planTransition(p, {
          state: "rejected",
          decidedBy: member.id,
          reason: parsed.data.reason,
          text: parsed.data.text,
          decision: newDecisionId(),
        }),
      );
    } catch (err) {
      this.space.storeFailed(member, err, inbound.id, `the rejection was not recorded; the proposal stays ${p.state}`);
      return undefined;
    }
    member.log.info({ proposal: p.id, proposer: p.proposer, reason: parsed.data.reason }, "proposal rejected");
    const env = stamp(inbound, member.id);
    env.to ??= [p.proposer];
    this.space.deliver(env, member);
    return undefined;
  }
  async onWithdraw(member: Member, inbound: InboundEnvelope): Promise<Refusal | undefined> {
    const parsed = WithdrawPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return { code: ErrorCodes.invalidPayload, message: `mcp/withdraw: ${describeIssue(parsed.error)}` };
    const p = this.deciders.awaitingProposal(inbound, "mcp/withdraw");
    if (!("id" in p)) return p;
    if (p.proposer !== member.id) return { code: ErrorCodes.notProposer, message: `only "${p.proposer}" may withdraw this proposal` };
    try {
      await this.space.record(
        this.proposals.planTransition(p, {
          state: "withdrawn",
          decidedBy: member.id,
          reason: parsed.data.reason ?? "no_longer_needed",
          decision: newDecisionId(),
        }),
      );
    } catch (err) {
      this.space.storeFailed(member, err, inbound.id, `the withdrawal was not recorded; the proposal stays ${p.state}`);
      return undefined;
    }
    this.space.deliver(stamp(inbound, member.id), member);
    return undefined;
  }
  /** The proposer gave up on a proposal some other way (it cancelled the call behind it): everyone hears it withdrawn. */
  async withdrawn(member: Member, p: Proposal, reason: string): Promise<void> {
    if (!awaiting(p.state) || this.proposals.isBusy(p.id)) return;
    try {
      await this.space.record(
        this.proposals.planTransition(p, { state: "withdrawn", decidedBy: member.id, reason, decision: newDecisionId() }),
      );
    } catch (err) {
      return this.space.storeFailed(member, err, p.id, "the withdrawal was not recorded; the proposal stays pending");
    }
    this.space.deliver(systemEnvelope("mcp/withdraw", { reason }, { to: [p.proposer, p.owner], correlation_id: [p.id] }));
  }
  /**
   * A pending (or interrupted) proposal's time is up: record its expiry, then tell the
   * proposer. If a decision is being written, or the write fails, try again shortly; until
   * then it stays as it was, and nothing is lost either way.
   */
  async onDue(p: Proposal): Promise<void> {
    if (this.proposals.isBusy(p.id)) return this.proposals.arm(p, 1000);
    try {
      await this.space.record(this.proposals.planTransition(p, { state: "expired", reason: "timeout", decision: newDecisionId() }));
    } catch (err) {
      this.space.log.error({ proposal: p.id, err: String(err) }, "could not record an expiry; trying again in 5 s");
      return this.proposals.arm(p, 5000);
    }
    const seconds = Math.round(this.space.config.policy.proposal_ttl_ms / 1000);
    this.space.log.info({ proposal: p.id, proposer: p.proposer }, "proposal expired");
    const payload = { reason: "timeout", text: `no decision within ${seconds}s; the proposal expired` };
    this.space.deliver(systemEnvelope("mcp/reject", payload, { to: [p.proposer], correlation_id: [p.id] }));
  }
  /**
   * `member` joined (or came back): each of its proposals that is interrupted ends its call
   * with a JSON-RPC error of reason `interrupted`, correlated to the proposal as its answer
   * would be, so a proposer still waiting — or a MEW client matching correlation_id[0] —
   * learns the call may or may not have run. The proposal still waits for a person: a new
   * approval routes it again and its answer comes the same way.
   */
  tellInterrupted(member: Member): void {
    for (const p of this.proposals.pending()) {
      if (p.state !== "interrupted" || p.proposer !== member.id) continue;
      const data = { reason: "interrupted", proposal: p.id, state: p.state, approved_by: p.decidedBy, target: p.owner };
      const error = { code: RpcErrors.failed, message: `${INTERRUPTED_TEXT}; it waits for someone to approve it again or reject it`, data };
      this.space.sendTo(
        member,
        systemEnvelope("mcp/response", { jsonrpc: "2.0", id: p.rpcId, error }, { to: [p.proposer], correlation_id: [p.id] }),
      );
    }
  }
}

/**
 * Approved before the gateway stopped, with no outcome written: the call may or may not
 * have reached the tool, so it is never routed again on its own. It waits, interrupted,
 * for a person to decide again, with a fresh TTL; its proposer hears it on joining
 * (`Ends.tellInterrupted`). Asked once, as the space starts (space/compose.ts); each change is
 * noted, not awaited: after another crash it would be interrupted again, as it is now.
 */
export function interruptApproved(
  config: Pick<SpaceConfig, "policy">,
  log: Pick<Logger, "warn">,
  proposals: ProposalBook,
  note: (plan: Plan) => void,
): void {
  for (const p of proposals.restored()) {
    log.warn(
      { proposal: p.id, proposer: p.proposer, approver: p.decidedBy },
      "proposal was approved when the gateway stopped; marked interrupted until someone decides again",
    );
    // A two-person rule holds again: the call may have run, so running it again needs its approvers again.
    const again: Partial<Proposal> = (p.required ?? 1) > 1 ? { approvals: [] } : {};
    note(
      proposals.planTransition(p, {
        state: "interrupted",
        reason: "gateway_restarted",
        expiresAt: Date.now() + config.policy.proposal_ttl_ms,
        ...again,
      }),
    );
  }
}
