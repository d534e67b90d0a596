/**
 * Who may decide a proposal, asked wherever one is decided (mcp/approve, a fulfilment,
 * mcp/reject, the operator API, the console, a link): never its proposer, one of its
 * `approvers` if set (widened by escalation), able to make the call itself with the arguments
 * that will run, a person where a guard or a cap holds it, and a reviewer only within its
 * bound (reviewer-bound.ts). Each refusal says why; the cards' "who may decide" lists are
 * drawn from the same answers (operator/deciders.ts).
 */
import { type Envelope, ErrorCodes, type InboundEnvelope } from "../wire/envelope.js";
import { clip, disabledRefusal, type Refusal, type SpaceHost } from "../ports/host.js";
import type { ApprovalVerdict } from "../policy/authority.js";
import type { Registry } from "../tools/registry.js";
import { awaiting, GUARDS_KEY, CAP_KEY, OPEN_OWNER, type Proposal, type ProposalBook, runningParams } from "./book.js";
import type { Member } from "../ports/member.js";
import { approversNow } from "./approvals.js";
import { respondMark as markRespond } from "./respond.js";
import { type Act, type ReviewerDesk, reviewerBound, reviewerRefusal, reviews } from "./reviewer-bound.js";
import type { DeciderKind } from "./receipts.js";

/** What deciding who may decide uses of the space. */
export type DecidersHost = Pick<SpaceHost, "authority" | "config" | "id">;

/** What an approval brings to the bar: policy's one answer on it, and whether it edits the arguments. */
export interface Asked {
  verdict: ApprovalVerdict;
  edited: boolean;
}

export class Deciders {
  constructor(
    private readonly space: DecidersHost,
    private readonly proposals: ProposalBook,
    private readonly registry: Registry,
    /** What bounds a reviewer (reviewer-bound.ts): the recorded calls its risk is read over. */
    private readonly reviewers?: ReviewerDesk,
  ) {}

  /**
   * The proposal an `mcp/approve` / `mcp/reject` / `mcp/withdraw` names, if it still awaits
   * a decision (pending, or interrupted: approved before the gateway stopped, waiting to be
   * decided again); otherwise why not, for the sender.
   */
  awaitingProposal(inbound: InboundEnvelope, verb: string): Proposal | Refusal {
    const id = inbound.correlation_id?.[0];
    if (id === undefined) return { code: ErrorCodes.invalidEnvelope, message: `${verb}: correlation_id must name the proposal` };
    const p = this.proposals.get(id);
    if (p && awaiting(p.state) && this.proposals.isBusy(id))
      return {
        code: ErrorCodes.proposalNotPending,
        message: `a decision on proposal "${clip(id)}" is being recorded`,
        extra: { state: "deciding" },
      };
    if (p && awaiting(p.state)) return p;
    const ended = p?.state ?? this.proposals.endedAs(id);
    if (ended)
      return { code: ErrorCodes.proposalNotPending, message: `proposal "${clip(id)}" is already ${ended}`, extra: { state: ended } };
    return { code: ErrorCodes.unknownProposal, message: `no proposal "${clip(id)}" in space "${this.space.id}"` };
  }
  /**
   * Who may reject `p` (or Respond to it): the bar `whyNotApprove` sets, without what only an
   * approval asks (the owner switched on, policy's verdict on what runs, a reviewer's risk).
   */
  whyNotDecide(member: Member, p: Proposal): Refusal | undefined {
    return this.decide(member, p, { approving: false });
  }
  /**
   * Why `member` may not approve `p` as `act` asks: not the proposer, one of its `approvers` if
   * set, and able to make the call itself with the arguments that will run; nor may anyone
   * approve a call to a participant switched off since it was proposed (the proposal stays as
   * it is), asked before the approver's capability, which may rest on the tool's annotations,
   * hidden while it is off. A reviewer of the proposer decides within its bound instead
   * (reviewer-bound.ts). `asked`: policy's one answer on this approval (policy/authority.ts
   * `approval`) over the arguments that will run, and whether the approver edited them; asked
   * here with those that run now when an approval does not bring it. Without an act, the bar
   * for approving it once as it stands: the one "who may decide" lists are drawn from
   * (operator/deciders.ts), so a card names only those the gateway would heed.
   */
  whyNotApprove(member: Member, p: Proposal, asked?: Asked, act: Act = { approving: true, scope: "once" }): Refusal | undefined {
    return this.decide(member, p, act, asked);
  }
  /** The one bar both ask, in the order its refusals are given. */
  private decide(member: Member, p: Proposal, act: Act, asked?: Asked): Refusal | undefined {
    const approving = act.approving;
    if (member.id === p.proposer)
      return { code: ErrorCodes.selfApproval, message: "you cannot decide on your own proposal (withdraw it instead)" };
    // Switched off, it offers nothing to the space, its word on others' calls included.
    if (this.registry.isDisabled(member.id))
      return { code: ErrorCodes.participantDisabled, message: "you are switched off in this space, so you may not decide proposals" };
    const answer = approving && p.owner !== OPEN_OWNER ? (asked?.verdict ?? this.askApproval(member, p)) : undefined;
    // A guard or a cap held it for a person: an agent or a service does not stand in (policy/guards.ts, caps.ts).
    // A cap that holds, reached since it was proposed, holds it as well when it is approved.
    const marks = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
    const held =
      (marks?.[GUARDS_KEY] as { action?: string } | undefined)?.action === "hold" ||
      marks?.[CAP_KEY] !== undefined ||
      answer?.capHolds !== undefined;
    if (held && this.space.config.participants[member.id]?.kind !== "human")
      return {
        code: ErrorCodes.guardHeld,
        message: "a guard or a cap of the space holds this call for a person; only a human participant may decide it",
      };
    // A cap that refuses is not lifted by an approval: the proposal waits for the next minute
    // (the router asks again as the call leaves, calls/guarded.ts `capRefusal`).
    if (answer?.capRefuses)
      return {
        code: ErrorCodes.capExceeded,
        message: `a cap of the space is reached (${answer.capRefuses.text}); the proposal stays pending: approve it again next minute`,
      };
    // A reviewer of the proposer is bounded by what it is, not by the approvers list or its own capabilities.
    const reviewer = this.reviewers;
    const bound = reviewer && reviewerBound(reviewer.config, reviewer.groups, p.proposer, member.id);
    if (bound) return this.ownerOff(p, approving) ?? reviewerRefusal(reviewer, p, act, bound);
    // The proposer's approvers (ids and @groups: space.yaml's, and those the identity provider
    // put members in), widened by escalation stages reached (approvals.ts).
    const approvers = approversNow(this.space.config, p);
    if (approvers && !this.space.authority.groups.names(approvers, member.id)) {
      return { code: ErrorCodes.notAnApprover, message: `proposals of "${p.proposer}" are decided by ${approvers.join(", ")}` };
    }
    // Nobody can tell whether a rejecter could make an open proposal's call before a target
    // is named: rejecting runs nothing, so the approvers' list is the bar. Fulfilling names one.
    if (p.owner === OPEN_OWNER && !approving) return undefined;
    const off = this.ownerOff(p, approving);
    if (off) return off;
    const verdict = answer?.approver ?? this.space.authority.call(member.id, member.allows, p.owner, p.method, runningParams(p), true);
    if (verdict.decision === "direct" || (verdict.decision === "proposal" && verdict.flagged === true)) return undefined;
    // Edited arguments the approver may not send at all (over a quota, say) are refused as they would be sent.
    if (verdict.decision === "denied" && asked?.edited) return { code: verdict.code, message: verdict.message, extra: verdict.extra };
    return {
      code: ErrorCodes.approverLacksCapability,
      message: `you may not make this call yourself (with the arguments that will run), so you cannot approve or reject it`,
    };
  }
  /** A chat correlated to a proposal, marked as a Respond only if `member` may decide it (respond.ts). */
  respondMark(member: Member, chat: Envelope): Envelope {
    return markRespond(
      chat,
      member.id,
      (id) => this.proposals.get(id),
      (p) => this.whyNotDecide(member, p) === undefined,
    );
  }
  /** Policy's answer on `member` approving `p` with the arguments that run now: its side only, what "who may decide" needs. */
  private askApproval(member: Member, p: Proposal): ApprovalVerdict {
    return this.space.authority.approval({ id: p.proposer }, member, p.owner, p.method, runningParams(p), true);
  }
  /** Approving a tool call of a participant switched off since it was proposed: refused, and the proposal stays. */
  private ownerOff(p: Proposal, approving: boolean): Refusal | undefined {
    if (!approving || p.method !== "tools/call" || !this.registry.isDisabled(p.owner)) return undefined;
    const off = disabledRefusal(p.owner);
    return { code: off.code, message: `${off.message}; the proposal stays ${p.state}` };
  }
  /** What kind of decider `id` is for `p`: a reviewer of its proposer, else a person or an agent by its kind. */
  deciderKind(id: string, p: Proposal): DeciderKind {
    if (this.reviewers && reviews(this.reviewers, id, p)) return "reviewer";
    return this.space.config.participants[id]?.kind === "human" ? "person" : "agent";
  }
}
