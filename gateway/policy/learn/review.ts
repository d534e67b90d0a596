/**
 * A reviewer before the human: a participant (often an agent with a model) or a group named
 * in the proposer's `review: {by, may_approve}` reads each proposal first and answers with a
 * verdict, the risk it sees and its reason.
 *
 * What it may do is bounded by what it is, not by the route it takes (proposals/
 * reviewer-bound.ts applies it where every approval passes): for the proposals of those it
 * reviews, its approval stands only for a call whose risk as the gateway states it (risk.ts,
 * over the history now) is at most `may_approve`, that needs one approval (it never counts
 * toward `approvals: N`), once (never `always`, never with a limit), as proposed (no edits);
 * it never rejects (its doubts go to people with its note); it lends nothing to those it
 * reviews; its decisions never teach (history.ts counts only people's). It need not be named
 * in the proposer's `approvers`. A person (`kind: human`) named by `review.by` decides as a
 * person. Notes are shown on the card after `cleanNote` (controls, bidirectional overrides
 * and invisible characters removed, at most NOTE_MAX characters); they live in memory: after
 * a restart the card waits for people, as it would without a reviewer.
 */
import type { SpaceConfig } from "../../config/config.js";
import type { Groups } from "../groups.js";
import type { RiskLevel } from "./risk.js";

export const NOTE_MAX = 500;
export type Verdict = "approve" | "reject" | "escalate";

export interface ReviewNote {
  by: string;
  verdict: Verdict;
  /** The risk the reviewer says it sees (its word, shown as such). */
  risk: RiskLevel;
  reason: string;
  at: string;
  /** What the gateway did with it: approved as the reviewer, or handed to people (and why). */
  outcome: "approved" | "to_people";
  why?: string | undefined;
}

export type MayApprove = "none" | "low" | "medium";
const RANK: Record<string, number> = { none: -1, low: 0, medium: 1, high: 2 };

/** A reviewer's text as a person will read it. */
export function cleanNote(text: unknown): string {
  const s = typeof text === "string" ? text : "";
  const cleaned = s
    .normalize("NFC")
    .replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g, "")
    .replace(/\s+/g, " ")
    .trim();
  return cleaned.length > NOTE_MAX ? `${cleaned.slice(0, NOTE_MAX - 1)}…` : cleaned;
}

/** Whether the reviewer's word may stand as an approval: the gateway's risk within `may`, a single approval needed. */
export function mayApprove(may: MayApprove, gatewayRisk: RiskLevel, required: number): { ok: boolean; why?: string } {
  if (required > 1) return { ok: false, why: `it needs ${required} approvals: a reviewer never stands for people in a quorum` };
  if (RANK[gatewayRisk]! > RANK[may]!)
    return {
      ok: false,
      why: `the gateway rates it ${gatewayRisk}; this reviewer may approve ${may === "none" ? "nothing by itself" : `up to ${may}`}`,
    };
  return { ok: true };
}

/** Whether `id` (in `groups`) is a reviewer named by `by` (`alice` or `@ops`). */
export function isReviewer(by: string, id: string, groups: readonly string[]): boolean {
  return by.startsWith("@") ? groups.includes(by.slice(1)) : by === id;
}

/**
 * The bound `id` works under for `proposer`'s proposals, if it reviews them as a reviewer: named
 * by the proposer's `review.by` (itself, or a group it is in) and not a person, who decides as one.
 */
export function reviewerBound(config: SpaceConfig, groups: Groups, proposer: string, id: string): { may: MayApprove } | undefined {
  const review = config.participants[proposer]?.review;
  if (!review || id === proposer || config.participants[id]?.kind === "human") return undefined;
  return isReviewer(review.by, id, groups.of(id)) ? { may: review.may_approve } : undefined;
}
