/**
 * A reviewer before the human: a participant (often an agent with a model) or a group named
 * in the proposer's `review: {by, may_approve}` reads each proposal first and answers with a
 * verdict, the risk it sees and its reason.
 *
 * What it may do is bounded by the gateway, not by what it says: it approves by itself only
 * a call whose risk as the gateway states it (risk.ts) is at most `may_approve`, that needs
 * one approval (never a quorum's share), and through the same pipeline as anyone's approval
 * (so it must be able to make the call itself, and never its own proposal); the approval is
 * recorded as the reviewer's. Anything else goes to people with its note, shown on the card
 * after `cleanNote` (controls, bidirectional overrides and invisible characters removed,
 * at most NOTE_MAX characters). Notes live in memory: after a restart the card waits for
 * people, as it would without a reviewer.
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
export function mayApprove(may: "none" | "low" | "medium", gatewayRisk: RiskLevel, required: number): { ok: boolean; why?: string } {
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
