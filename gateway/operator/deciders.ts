/**
 * Who may decide a proposal, for its card: each participant asked the very bar its decision
 * would meet (space.ts `decidingRight`: deciders.ts `whyNotDecide` and `whyNotApprove`) —
 * not the proposer; one of its approvers, @groups expanded, with the escalation stages
 * reached; able to make the call itself with the arguments that will run; not switched
 * off; a reviewer of the proposer only within its bound (proposals/reviewer-bound.ts), as
 * one who approves and never rejects; for a two-person rule, not one who approved already.
 * And whether the viewer is one of them, with the gateway's reason when not. The console and
 * the terminal draw their buttons from this, so a person learns before clicking, not after.
 */
import type { Proposal } from "../proposals/book.js";
import { approvedBy } from "../proposals/approvals.js";
import type { Space } from "../space/space.js";

export interface Deciders {
  /** Who may approve it now (ids, in space.yaml's order): people, who may reject it too, and reviewers within their bound. */
  deciders: string[];
  /** Of `deciders`, the reviewers: they approve once, and never reject. */
  reviewers?: string[];
  /** Who may reject it but not approve it as things stand (its server switched off, say). */
  rejecters?: string[];
  /** Whether the viewer may approve or reject it. */
  mayDecide: boolean;
  /** The viewer may only approve (a reviewer) or only reject it. */
  mayOnly?: "approve" | "reject";
  /** Why not, in words, when `mayDecide` is false. */
  mayNotDecide?: string;
}

export function decidersOf(space: Space, viewer: string, p: Proposal): Deciders {
  const already = approvedBy(p);
  const deciders: string[] = [];
  const reviewers: string[] = [];
  const rejecters: string[] = [];
  let mine: ReturnType<Space["decidingRight"]> | undefined;
  for (const id of Object.keys(space.config.participants)) {
    if (id === p.proposer || already.includes(id)) continue;
    const right = space.decidingRight(id, p);
    if (id === viewer) mine = right;
    if (right.approve) deciders.push(id);
    if (right.approve && !right.reject) reviewers.push(id);
    if (right.reject && !right.approve) rejecters.push(id);
  }
  const lists = { deciders, ...(reviewers.length ? { reviewers } : {}), ...(rejecters.length ? { rejecters } : {}) };
  if (mine && (mine.approve || mine.reject))
    return { ...lists, mayDecide: true, ...(mine.approve && mine.reject ? {} : { mayOnly: mine.approve ? "approve" : "reject" }) };
  const why =
    viewer === p.proposer
      ? "it is your own proposal (you may withdraw it)"
      : already.includes(viewer)
        ? "you approved it already; it waits for another approver"
        : (mine?.why?.message ?? "you may not decide it");
  return { ...lists, mayDecide: false, mayNotDecide: why };
}
