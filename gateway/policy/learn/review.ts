/**
 * A reviewer before the human: a participant (often an agent with a model) or a group named
 * in the proposer's `review: {by, may_approve}` reads each proposal first and answers with a
 * verdict, the risk it sees and its reason. Who is a reviewer, and the bound its decisions meet
 * on every route (its approval within `may_approve` of the gateway's risk, once, as proposed,
 * never in a quorum, never a rejection), is proposals/reviewer-bound.ts's; its decisions never
 * teach (history.ts counts only people's).
 *
 * Notes are shown on the card after `cleanNote` (controls, bidirectional overrides and
 * invisible characters removed, at most NOTE_MAX characters); they live in memory: after a
 * restart the card waits for people, as it would without a reviewer.
 */
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
