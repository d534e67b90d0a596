/**
 * A reviewer before the human, over the operator API (policy/learn/review.ts says the rules):
 *
 *   GET  reviews                      the pending proposals the caller reviews, as cards
 *   POST proposals/<id>/review {verdict: approve|reject|escalate, risk: low|medium|high, reason}
 *
 * Only a reviewer the proposer's `review.by` names may answer, once per proposal. An
 * `approve` stands as the reviewer's own approval (through `space.seats.act`, the pipeline every
 * approval takes) only when the gateway's risk is within `may_approve` and one approval is
 * needed; otherwise, and for every other verdict, the proposal waits for people with the
 * reviewer's cleaned note on its card.
 */
import type { Proposal } from "../proposals/book.js";
import { requiredApprovals } from "../proposals/approvals.js";
import { cleanNote, isReviewer, mayApprove, type ReviewNote, type Verdict } from "../policy/learn/review.js";
import type { RiskLevel } from "../policy/learn/risk.js";
import type { Space } from "../space/space.js";
import { learnView, refreshLearning, reviewNote, setReviewNote } from "./learn-api.js";
import { proposalView } from "./views.js";

type Reply = { status: number; body: unknown };
const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });
const VERDICTS = new Set<Verdict>(["approve", "reject", "escalate"]);
const RISKS = new Set<RiskLevel>(["low", "medium", "high"]);

/** Whether `me` reviews `p`'s proposals. */
function reviews(space: Space, me: string, p: Proposal): boolean {
  const r = space.config.participants[p.proposer]?.review;
  return r !== undefined && p.proposer !== me && isReviewer(r.by, me, space.authority.groupsOf(me));
}

export function reviewsRoute(space: Space, me: string): Reply {
  refreshLearning(space);
  const list = space.proposals
    .pending()
    .filter((p) => p.state === "pending" && p.method === "tools/call" && reviews(space, me, p) && !reviewNote(space, p.id));
  return { status: 200, body: { proposals: list.map((p) => proposalView(space, me, p)) } };
}

export async function reviewRoute(space: Space, me: string, id: string, body: Record<string, unknown>): Promise<Reply> {
  const p = space.proposals.pending().find((x) => x.id === id && x.state === "pending");
  if (!p) return fail(404, "unknown_proposal", `no pending proposal "${id.slice(0, 64)}"`);
  if (!reviews(space, me, p)) return fail(403, "forbidden", `you do not review ${p.proposer}'s proposals`);
  if (reviewNote(space, p.id)) return fail(409, "already_reviewed", "this proposal was reviewed already");
  const verdict = body["verdict"] as Verdict;
  const risk = body["risk"] as RiskLevel;
  if (!VERDICTS.has(verdict)) return fail(400, "invalid_payload", "review: verdict must be approve, reject or escalate");
  if (!RISKS.has(risk)) return fail(400, "invalid_payload", "review: risk must be low, medium or high");
  const reason = cleanNote(body["reason"]);
  const may = space.config.participants[p.proposer]!.review!.may_approve;
  // The risk from the trail as it is now (a rejection a moment ago counts), never a cached card's.
  const card = proposalView(space, me, p);
  const facts = {
    annotations: (card["hints"] as Record<string, unknown> | undefined) ?? {},
    definitionChanged: card["definitionChanged"] !== undefined,
    flagged: Array.isArray(card["findings"]) && card["findings"].length > 0,
  };
  const gatewayRisk: RiskLevel = learnView(space, me, p, facts, true).risk?.level ?? "high";
  const note: ReviewNote = { by: me, verdict, risk, reason, at: new Date().toISOString(), outcome: "to_people" };
  if (verdict === "approve") {
    const bound = mayApprove(may, gatewayRisk, requiredApprovals(space.config, p.proposer, p.owner, p.tool));
    if (!bound.ok) note.why = bound.why;
    else {
      const errors = await space.seats.act(me, {
        kind: "mcp/approve",
        correlation_id: [p.id],
        payload: { scope: "once", reason: reason ? `review: ${reason}`.slice(0, 500) : "review" },
      });
      if (errors.length) note.why = `the approval was refused: ${String(errors[0]!["message"] ?? errors[0]!["code"])}`;
      else note.outcome = "approved";
    }
  } else note.why = verdict === "reject" ? "a reviewer does not reject by itself: people decide" : "the reviewer asked for people";
  setReviewNote(space, p.id, note);
  return { status: 200, body: { ok: true, ...note } };
}
