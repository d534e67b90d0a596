/**
 * What a proposal becomes when the call that carries it out ends: the one place a call's end
 * moves a proposal, whichever way it ended. The router reports each end once (`CallEnd`,
 * calls/calls.ts): an answer from the target, or a failure with the gateway's reason (a
 * timeout, the target left, a cancellation, a route refused after the approval was written).
 * The result is kept for the Decided list (and, with the proposal's end, for a proposer that
 * is away: unheard.ts) and the transition is noted (written behind, as
 * nobody waits on it but the proposer's answer, which the router sends once it is applied).
 */
import type { Call, CallEnd } from "../calls/calls.js";
import type { Plan } from "../store/plan.js";
import type { ProposalBook } from "./book.js";
import { answerOutcome, failureOutcome, resultText } from "../calls/outcomes.js";
import { RpcErrors } from "../wire/envelope.js";

export class RunsEnded {
  constructor(
    private readonly proposals: ProposalBook,
    /** Applies a plan now and writes it behind (`SpaceHost.note`). */
    private readonly note: (plan: Plan) => Promise<void>,
  ) {}

  /**
   * The call ended: its proposal, if it carries one still routed (or approved, for a failure),
   * is answered or failed. Undefined when no proposal moved; else resolves once written or failed.
   */
  callEnded(call: Pick<Call, "proposalId">, end: CallEnd): Promise<void> | undefined {
    const p = call.proposalId ? this.proposals.get(call.proposalId) : undefined;
    if (!p) return undefined;
    if (end.how === "answered") {
      if (p.state !== "routed") return undefined;
      const outcome = answerOutcome(end.response);
      // The audit trail has the outcome by the time the proposer hears it.
      this.proposals.results.add(p.id, outcome, resultText(end.response));
      // Its proposer away, the answer is kept for it with the proposal's end (unheard.ts).
      return this.note(this.proposals.planTransition(p, { state: "answered", outcome }, end.response));
    }
    if (p.state !== "routed" && p.state !== "approved") return undefined;
    const outcome = failureOutcome(end.reason);
    this.proposals.results.add(p.id, outcome, end.message);
    const code =
      end.reason === "timeout"
        ? RpcErrors.timeout
        : end.reason === "target_left"
          ? RpcErrors.targetLeft
          : end.reason === "cancelled"
            ? RpcErrors.cancelled
            : RpcErrors.failed;
    const error = { code, message: end.message, data: { reason: end.reason } };
    return this.note(this.proposals.planTransition(p, { state: "failed", reason: end.reason, outcome }, { error }));
  }
}
