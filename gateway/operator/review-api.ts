/**
 * A reviewer before the human, over the operator API (proposals/reviewer-bound.ts says the rules):
 *
 *   GET  reviews                      the pending proposals the caller reviews, as cards
 *   POST proposals/<id>/review {verdict: approve|reject|escalate, risk: low|medium|high, reason}
 *
 * Only a reviewer the proposer's `review.by` names may answer, once per proposal. An
 * `approve` is sent as the reviewer's own approval through `space.seats.act`, the pipeline
 * every approval takes, where its bound is held (proposals/reviewer-bound.ts: the gateway's
 * risk within `may_approve`, one approval needed, once, as proposed) — the same bound a
 * reviewer meets on the wire, through a link or as a fulfilment. A refused approval and
 * every other verdict leave the proposal waiting for people with the reviewer's cleaned note
 * on its card, and why.
 */
import type { Proposal } from "../proposals/book.js";
import { cleanNote, type ReviewNote, type Verdict } from "../policy/learn/review.js";
import { reviewerBound } from "../proposals/reviewer-bound.js";
import type { RiskLevel } from "../policy/learn/risk.js";
import type { Space } from "../space/space.js";
import { reviewNote, setReviewNote } from "./learn-api.js";
import { proposalView } from "./views.js";

type Reply = { status: number; body: unknown };
const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });
const VERDICTS = new Set<Verdict>(["approve", "reject", "escalate"]);
const RISKS = new Set<RiskLevel>(["low", "medium", "high"]);

/** Whether `me` reviews `p`'s proposals. */
function reviews(space: Space, me: string, p: Proposal): boolean {
  return reviewerBound(space.config, space.authority.groups, p.proposer, me) !== undefined;
}

export function reviewsRoute(space: Space, me: string): Reply {
  space.recorded.indexes(true);
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
  const note: ReviewNote = { by: me, verdict, risk, reason, at: new Date().toISOString(), outcome: "to_people" };
  if (verdict === "approve") {
    const errors = await space.seats.act(me, {
      kind: "mcp/approve",
      correlation_id: [p.id],
      payload: { scope: "once", reason: reason ? `review: ${reason}`.slice(0, 500) : "review" },
    });
    if (errors.length) note.why = String(errors[0]!["message"] ?? errors[0]!["code"]);
    else note.outcome = "approved";
  } else note.why = verdict === "reject" ? "a reviewer does not reject by itself: people decide" : "the reviewer asked for people";
  setReviewNote(space, p.id, note);
  return { status: 200, body: { ok: true, ...note } };
}
