/**
 * The two-person rule and escalation: how many distinct approvers a proposal needs, who may
 * decide it now, and what its card shows ("1 of 2", who approved, whether it can still be
 * satisfied).
 *
 * - A proposal needs `approvals: N` of its proposer's settings (a number, or the first
 *   `{tool glob: N}` that matches `owner/tool`), fixed when it is held (`Proposal.required`),
 *   so a later change of space.yaml does not move the bar under a proposal already shown.
 * - Approvals are distinct by participant id: two connections of one participant are one
 *   approver. The proposer never counts (decisions.ts refuses it before it gets here).
 * - Edits: only the first approval may edit the arguments (what runs is then the edited ones,
 *   book.ts `whatRuns`); an edit after a first approval is refused (`approval_mismatch`), and
 *   once the arguments were edited every later approver must send them (`arguments`, as its
 *   card shows them) to confirm it saw them: a bare approval may have been given looking at the
 *   card before the edit. So no approver's "yes" is silently moved onto arguments it never saw.
 * - "always" on a proposal that needs more than one approval is refused: a grant by one
 *   person would let every later call skip the second person; so is a `capability/grant` of
 *   such a tool to the proposer (policy/lending.ts), and a grant never makes such a call direct
 *   (policy/authority.ts), whenever it was made.
 * - Escalation (`policy.escalate`): once a stage's `after_ms` has passed since the proposal
 *   was made, the stage's `approvers` may decide too, besides the proposer's own; it is a
 *   function of the time, so it holds across a restart with no state of its own.
 */
import { requiredApprovals } from "../policy/quorum.js";
import type { Groups } from "../policy/groups.js";
import type { SpaceConfig } from "../config/config.js";
import type { Proposal } from "./book.js";
import { canonicalJson } from "../policy/scope.js";

/** How many distinct approvers a call needs: policy/quorum.ts, where grants are held to it too. */
export { requiredApprovals };

/** The escalation stages reached by now, in order. */
export function stagesReached(config: SpaceConfig, p: Proposal, now = Date.now()): number[] {
  const made = Date.parse(p.createdAt);
  const out: number[] = [];
  config.policy.escalate.forEach((s, i) => {
    if (made + s.after_ms <= now) out.push(i);
  });
  return out;
}

/**
 * Who may decide `p` now, as a list of ids and `@group`s, or undefined when the proposer
 * names no approvers (then anyone who could make the call may, as before).
 */
export function approversNow(config: SpaceConfig, p: Proposal, now = Date.now()): string[] | undefined {
  const own = config.participants[p.proposer]?.approvers;
  if (own === undefined) return undefined;
  return [...own, ...stagesReached(config, p, now).flatMap((i) => config.policy.escalate[i]!.approvers)];
}

/** The distinct approvers so far. */
export function approvedBy(p: Proposal): string[] {
  return [...new Set((p.approvals ?? []).map((a) => a.by))];
}

/**
 * What a card shows of a proposal that needs more than one approval: the count, who, and
 * whether enough participants could still approve it (`mayApprove(id)`: the participant could
 * make the call itself), so a bar nobody can reach is said, not left waiting.
 */
export function approvalsView(config: SpaceConfig, groups: Groups, p: Proposal, mayApprove: (id: string) => boolean): Record<string, unknown> | undefined {
  const required = p.required ?? 1;
  if (required <= 1) return undefined;
  const by = approvedBy(p);
  const named = approversNow(config, p);
  const everyone = [...Object.keys(config.participants), ...groups.expand(groups.declared().map((g) => `@${g}`))];
  // Escalation stages not yet reached can widen the bar later: count them as possible too.
  const later = config.policy.escalate.flatMap((s) => s.approvers);
  const candidates = new Set(named === undefined ? everyone : groups.expand([...named, ...later]));
  candidates.delete(p.proposer);
  const possible = [...candidates].filter((id) => by.includes(id) || mayApprove(id)).length;
  const satisfiable = possible >= required;
  return {
    required,
    count: by.length,
    by,
    text: `${by.length} of ${required}`,
    satisfiable,
    // Approvals that no longer count (a reload removed or demoted their approver: standing.ts).
    ...(p.droppedApprovals?.length ? { dropped: p.droppedApprovals } : {}),
    ...(satisfiable ? {} : { why: `needs ${required} distinct approvers but only ${possible} could approve it (never the proposer); it can never be approved as things stand` }),
  };
}

/** Whether two argument objects are the same JSON (key order aside). */
export function sameArguments(a: unknown, b: unknown): boolean {
  return canonicalJson(a) === canonicalJson(b);
}
