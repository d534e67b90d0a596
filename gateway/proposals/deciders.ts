/**
 * Who may decide a proposal, asked wherever one is decided (mcp/approve, a fulfilment,
 * mcp/reject, the operator API, the console, a link): never its proposer, one of its
 * `approvers` if set (widened by escalation), able to make the call itself with the arguments
 * that will run, a person where a guard or a cap holds it, and a reviewer only within its
 * bound (reviewer-bound.ts). Each refusal says why; the cards' "who may decide" lists are
 * drawn from the same answers (operator/deciders.ts).
 */
import { type Envelope, type ErrorCode, ErrorCodes, type InboundEnvelope } from "../wire/envelope.js";
import { clip, disabledRefusal, type SpaceHost } from "../ports/host.js";
import type { CallRouter } from "../calls/routing.js";
import type { Registry } from "../tools/registry.js";
import { awaiting, GUARDS_KEY, CAP_KEY, OPEN_OWNER, type Proposal, type ProposalBook, runningArguments, runningParams } from "./book.js";
import type { Member } from "../ports/member.js";
import { approversNow } from "./approvals.js";
import { respondMark as markRespond } from "./respond.js";
import { type ReviewerDesk, reviewerRefusal, reviews } from "./reviewer-bound.js";
import type { DeciderKind } from "./receipts.js";

/** What deciding who may decide uses of the space. */
export type DecidersHost = Pick<SpaceHost, "authority" | "config" | "fail" | "id">;

export class Deciders {
  constructor(
    private readonly space: DecidersHost,
    private readonly proposals: ProposalBook,
    private readonly registry: Registry,
    private readonly router: Pick<CallRouter, "authorize">,
    /** What bounds a reviewer (reviewer-bound.ts): the recorded calls its risk is read over. */
    private readonly reviewers?: ReviewerDesk,
  ) {}

  /**
   * The proposal an `mcp/approve` / `mcp/reject` / `mcp/withdraw` names, if it still awaits
   * a decision (pending, or interrupted: approved before the gateway stopped, waiting to be
   * decided again); otherwise the sender is told exactly why not.
   */
  pendingProposal(member: Member, inbound: InboundEnvelope, verb: string): Proposal | undefined {
    const id = inbound.correlation_id?.[0];
    if (id === undefined) {
      this.space.fail(member, ErrorCodes.invalidEnvelope, `${verb}: correlation_id must name the proposal`, inbound.id);
      return undefined;
    }
    const p = this.proposals.get(id);
    if (p && awaiting(p.state) && this.proposals.isBusy(id)) {
      this.space.fail(member, ErrorCodes.proposalNotPending, `a decision on proposal "${clip(id)}" is being recorded`, inbound.id, {
        state: "deciding",
      });
      return undefined;
    }
    if (p && awaiting(p.state)) return p;
    const ended = p?.state ?? this.proposals.endedAs(id);
    if (ended)
      this.space.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(id)}" is already ${ended}`, inbound.id, { state: ended });
    else this.space.fail(member, ErrorCodes.unknownProposal, `no proposal "${clip(id)}" in space "${this.space.id}"`, inbound.id);
    return undefined;
  }
  /** Whether `member` may decide `p` (`whyNotDecide`); if not, it is told why. */
  mayDecide(member: Member, p: Proposal, inboundId: string | undefined, approving = false): boolean {
    const why = this.whyNotDecide(member, p, approving);
    if (why) this.space.fail(member, why.code, why.message, inboundId);
    return why === undefined;
  }
  /**
   * Who may approve or reject: not the proposer, one of its `approvers` if set, and able to
   * make the call itself, with the arguments that will run. `approving`: nor may anyone approve
   * a call to a participant switched off since it was proposed (the proposal stays as it is);
   * asked before the approver's capability, which may rest on the tool's annotations, hidden
   * while it is off. Also the bar for a Respond to count as an answer (`respondMark`).
   */
  whyNotDecide(member: Member, p: Proposal, approving = false): { code: ErrorCode; message: string } | undefined {
    if (member.id === p.proposer)
      return { code: ErrorCodes.selfApproval, message: "you cannot decide on your own proposal (withdraw it instead)" };
    // Switched off, it offers nothing to the space, its word on others' calls included.
    if (this.registry.isDisabled(member.id))
      return { code: disabledRefusal(member.id).code, message: "you are switched off in this space, so you may not decide proposals" };
    // A guard or a cap held it for a person: an agent or a service does not stand in (policy/guards.ts, caps.ts).
    const marks = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
    // A cap that holds, reached since it was proposed, holds it as well when it is approved.
    const capHeld =
      approving && p.tool !== undefined && p.owner !== OPEN_OWNER
        ? this.space.authority.caps.over(p.proposer, p.owner, p.tool, { only: "hold" })
        : undefined;
    const held =
      (marks?.[GUARDS_KEY] as { action?: string } | undefined)?.action === "hold" ||
      marks?.[CAP_KEY] !== undefined ||
      capHeld !== undefined;
    if (held && this.space.config.participants[member.id]?.kind !== "human")
      return {
        code: ErrorCodes.guardHeld,
        message: "a guard or a cap of the space holds this call for a person; only a human participant may decide it",
      };
    // A cap that refuses is not lifted by an approval: the proposal waits for the next minute
    // (the router asks again as the call leaves, calls/guarded.ts `capRefusal`).
    const refused =
      approving && p.tool !== undefined && p.owner !== OPEN_OWNER
        ? this.space.authority.caps.over(p.proposer, p.owner, p.tool, { approver: member.id, only: "refuse" })
        : undefined;
    if (refused)
      return {
        code: ErrorCodes.capExceeded,
        message: `a cap of the space is reached (${refused.text}); the proposal stays pending: approve it again next minute`,
      };
    // A reviewer of the proposer is bounded by what it is, not by the approvers list or its own
    // capabilities: it never rejects, and its approval is held to its bound (`reviewerBar`).
    if (this.reviewers && reviews(this.reviewers, member.id, p)) {
      if (!approving) return reviewerRefusal(this.reviewers, member.id, p, { approving: false });
      if (p.method === "tools/call" && this.registry.isDisabled(p.owner)) {
        const off = disabledRefusal(p.owner);
        return { code: off.code, message: `${off.message}; the proposal stays ${p.state}` };
      }
      return undefined;
    }
    // The proposer's approvers (ids and @groups: space.yaml's, and those the identity provider
    // put members in), widened by escalation stages reached (approvals.ts).
    const approvers = approversNow(this.space.config, p);
    if (approvers && !this.space.authority.groups.names(approvers, member.id)) {
      return { code: ErrorCodes.notAnApprover, message: `proposals of "${p.proposer}" are decided by ${approvers.join(", ")}` };
    }
    // Nobody can tell whether a rejecter could make an open proposal's call before a target
    // is named: rejecting runs nothing, so the approvers' list is the bar. Fulfilling names one.
    if (p.owner === OPEN_OWNER && !approving) return undefined;
    if (approving && p.method === "tools/call" && this.registry.isDisabled(p.owner)) {
      const off = disabledRefusal(p.owner);
      return { code: off.code, message: `${off.message}; the proposal stays ${p.state}` };
    }
    const verdict = this.router.authorize(member, p.owner, p.method, runningParams(p), true);
    if (verdict.decision === "direct" || (verdict.decision === "proposal" && verdict.flagged === true)) return undefined;
    return {
      code: ErrorCodes.approverLacksCapability,
      message: `you may not make this call yourself (with the arguments that will run), so you cannot approve or reject it`,
    };
  }
  /**
   * Why `member` may not approve `p` once, as it stands, with the arguments that will run:
   * `whyNotDecide`, then a reviewer's bound (reviewer-bound.ts). The bar "who may decide"
   * lists are drawn from (operator/deciders.ts), so a card names only those the gateway would heed.
   */
  whyNotApprove(member: Member, p: Proposal): { code: ErrorCode; message: string } | undefined {
    const why = this.whyNotDecide(member, p, true);
    if (why || !this.reviewers) return why;
    return reviewerRefusal(this.reviewers, member.id, p, { approving: true, scope: "once", args: runningArguments(p) });
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
  /** A reviewer's approval within its bound, or it is told why not (reviewer-bound.ts); anyone else passes. */
  reviewerBar(member: Member, p: Proposal, act: Parameters<typeof reviewerRefusal>[3], inboundId: string | undefined): boolean {
    const why = this.reviewers && reviewerRefusal(this.reviewers, member.id, p, act);
    if (why) this.space.fail(member, why.code, why.message, inboundId);
    return why === undefined;
  }
  /** The approver's bar for the call with `args` instead of the proposed arguments. */
  mayCallWith(member: Member, p: Proposal, args: Record<string, unknown>, inboundId: string | undefined): boolean {
    const verdict = this.router.authorize(member, p.owner, p.method, { ...p.params, arguments: args }, true);
    if (verdict.decision === "direct" || (verdict.decision === "proposal" && verdict.flagged === true)) return true;
    if (verdict.decision === "denied") this.space.fail(member, verdict.code, verdict.message, inboundId, verdict.extra);
    else
      this.space.fail(
        member,
        ErrorCodes.approverLacksCapability,
        "you may not make this call yourself, so you cannot approve or reject it",
        inboundId,
      );
    return false;
  }
  /** What kind of decider `id` is for `p`: a reviewer of its proposer, else a person or an agent by its kind. */
  deciderKind(id: string, p: Proposal): DeciderKind {
    if (this.reviewers && reviews(this.reviewers, id, p)) return "reviewer";
    return this.space.config.participants[id]?.kind === "human" ? "person" : "agent";
  }
}
