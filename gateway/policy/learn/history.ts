/**
 * The recorded calls a space can learn from, read out of its audit trail: one entry per
 * proposal (who proposed, which tool, the arguments that ran or would have run) with what
 * people decided — approved, rejected, edited, or nobody (withdrawn, expired, cancelled by
 * the gateway).
 *
 * Only a person's decision counts as one (`isPerson`: a `kind: human` participant): a
 * rejection by `system:gateway` (a reload that cancelled a proposal) is nobody's word, and an
 * approval by an agent or a reviewer is no person's, so nothing learns from it and fatigue
 * does not count it. An approval that changed the arguments is kept
 * apart (`edited`): the person did not approve what was proposed, so nothing learns "allow"
 * from it.
 */
import type { AuditEntry } from "../../audit/entry.js";
import { GATEWAY_ID } from "../../wire/envelope.js";
import { isRecord } from "../../wire/values.js";

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
  /** A call that went straight through (allowed by a rule or a grant): nobody was asked, so `said` is "undecided" (`directCalls`). */
  direct?: true;
}

/**
 * The arguments that run for an audit entry: what the approver set, else what was proposed.
 * The one place this module reads them, so it follows the proposal's own accessor.
 */
export function argumentsOf(e: Pick<AuditEntry, "arguments">): Record<string, unknown> {
  const a = e.arguments;
  return isRecord(a) ? (a as Record<string, unknown>) : {};
}

/** Who is a person in a space: a `kind: human` participant (space.yaml's, or one admitted at run time). */
export function personIn(config: { participants: Readonly<Record<string, { kind: string }>> }): (id: string) => boolean {
  return (id) => Object.hasOwn(config.participants, id) && config.participants[id]!.kind === "human";
}

/** The recorded tool calls in `entries` (oldest first), folded per proposal; only `isPerson`'s decisions count. */
export function pastCalls(entries: readonly AuditEntry[], isPerson: (id: string) => boolean): PastCall[] {
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
    const person = e.by !== undefined && e.by !== GATEWAY_ID && e.by !== e.proposer && isPerson(e.by);
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

/**
 * The calls that went straight through, from their `called` records (calls/direct-audit.ts):
 * nobody was asked, so each is `direct`, `said: "undecided"`, with no `by`. For a dry run only (a changed
 * policy that would now hold or deny them is listed); never read by suggestions, so a call no
 * person saw never counts as anyone's approval. A call whose arguments were kept only as
 * their digest replays with none (a rule's condition then fails closed, so it is listed if a
 * condition could hold it).
 */
export function directCalls(entries: readonly AuditEntry[]): PastCall[] {
  const out: PastCall[] = [];
  for (const e of entries) {
    if (e.event !== "called" || e.method !== "tools/call" || typeof e.tool !== "string") continue;
    const request = typeof e.outcome === "string" && e.outcome.startsWith("request ") ? e.outcome.slice(8) : e.ts;
    out.push({
      id: `called:${request}`,
      ts: e.ts,
      proposer: e.proposer,
      owner: e.owner,
      tool: e.tool,
      args: argumentsOf(e),
      said: "undecided",
      direct: true,
    });
  }
  return out;
}

/** What a dry run replays: the proposed calls (`pastCalls`) and the direct ones (`directCalls`), oldest first. */
export function replayedCalls(entries: readonly AuditEntry[], isPerson: (id: string) => boolean): PastCall[] {
  return [...pastCalls(entries, isPerson), ...directCalls(entries)].sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : 0));
}
