/**
 * The recorded calls a space can learn from, read out of its audit trail: one entry per
 * proposal (who proposed, which tool, the arguments that ran or would have run) with what
 * people decided — approved, rejected, edited, or nobody (withdrawn, expired, cancelled by
 * the gateway).
 *
 * Only a person's decision counts as one: a rejection by `system:gateway` (a reload that
 * cancelled a proposal) is nobody's word. An approval that changed the arguments is kept
 * apart (`edited`): the person did not approve what was proposed, so nothing learns "allow"
 * from it.
 */
import type { AuditEntry } from "../../proposals/book.js";
import { GATEWAY_ID } from "../../wire/envelope.js";

export type PeopleSaid = "approved" | "rejected" | "edited" | "undecided";

/** One recorded call. */
export interface PastCall {
  /** The proposal's id. */
  id: string;
  ts: string;
  proposer: string;
  owner: string;
  tool: string;
  /** The arguments that ran (an approver's edit), else those proposed. */
  args: Record<string, unknown>;
  said: PeopleSaid;
  /** Who decided, when a person did. */
  by?: string | undefined;
  /** A rejection's reason code. */
  reason?: string | undefined;
  /** When a person decided. */
  decidedAt?: string | undefined;
}

/**
 * The arguments that run for an audit entry: what the approver set, else what was proposed.
 * The one place this module reads them, so it follows the proposal's own accessor.
 */
export function argumentsOf(e: Pick<AuditEntry, "arguments">): Record<string, unknown> {
  const a = e.arguments;
  return typeof a === "object" && a !== null && !Array.isArray(a) ? (a as Record<string, unknown>) : {};
}

/** The recorded tool calls in `entries` (oldest first), folded per proposal. */
export function pastCalls(entries: readonly AuditEntry[]): PastCall[] {
  const byId = new Map<string, PastCall>();
  const out: PastCall[] = [];
  for (const e of entries) {
    if (e.method !== "tools/call" || typeof e.tool !== "string" || !e.proposal) continue;
    let c = byId.get(e.proposal);
    if (e.event === "proposed") {
      if (c) continue;
      c = { id: e.proposal, ts: e.ts, proposer: e.proposer, owner: e.owner, tool: e.tool, args: argumentsOf(e), said: "undecided" };
      byId.set(e.proposal, c);
      out.push(c);
      continue;
    }
    if (!c) continue;
    const person = e.by !== undefined && e.by !== GATEWAY_ID && e.by !== e.proposer;
    if (e.event === "approved" && person && c.said === "undecided") {
      c.by = e.by;
      c.decidedAt = e.ts;
      if (e.edited) {
        c.said = "edited";
        c.args = argumentsOf(e);
      } else c.said = "approved";
    } else if (e.event === "rejected" && person && c.said === "undecided") {
      c.said = "rejected";
      c.by = e.by;
      c.decidedAt = e.ts;
      c.reason = e.reason;
    }
  }
  return out;
}
