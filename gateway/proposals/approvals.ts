/**
 * The two-person rule and escalation: how many distinct approvers a proposal needs, who may
 * decide it now, and what its card shows ("1 of 2", who approved, whether it can still be
 * satisfied).
 *
 * - A proposal needs `approvals: N` of its proposer's settings (a number, or the first
 *   `{tool glob: N}` that matches `owner/tool`), fixed when it is held (`Proposal.required`),
 *   so a later change of space.yaml does not move the bar under a proposal already shown.
 * - Approvals are distinct by participant id: two connections of one participant are one
 *   approver. The proposer never counts (deciders.ts refuses it before it gets here).
 * - Edits: only the first approval may edit the arguments (what runs is then the edited ones,
 *   book.ts `whatRuns`); an edit after a first approval is refused (`approval_mismatch`), and
 *   once the arguments were edited every later approver must send them (`arguments`, as its
 *   card shows them) to confirm it saw them: a bare approval may have been given looking at the
 *   card before the edit. So no approver's "yes" is silently moved onto arguments it never saw.
 * - "always" on a proposal that needs more than one approval is refused: a grant by one
 *   person would let every later call skip the second person; so is a `capability/grant` of
 *   such a tool to the proposer (agents/lending.ts), and a grant never makes such a call direct
 *   (policy/authority.ts), whenever it was made.
 * - Escalation (`policy.escalate`): once a stage's `after_ms` has passed since the proposal
 *   was made, the stage's `approvers` may decide too, besides the proposer's own; it is a
 *   function of the time, so it holds across a restart with no state of its own.
 *
 * The rules and their use are one concern, kept whole here: `quorumRefusal` is the check an
 * approval of several meets (approval.ts), `recordOneOf` records each but the last (the last
 * approves the call as a single approval would, decisions.ts), and `fulfilmentBlocked` says
 * when a MEW fulfilment may not be the last one.
 */
import type { Groups } from "../policy/groups.js";
import type { SpaceConfig } from "../config/config.js";
import { awaiting, type Proposal, type ProposalBook, whatRuns } from "./book.js";
import { canonical } from "../store/chain.js";
import { type ErrorCode, ErrorCodes, now, systemEnvelope } from "../wire/envelope.js";
import { clip, type SpaceHost } from "../ports/host.js";
import type { Member } from "../ports/member.js";

/** How many distinct approvers a call needs: policy/quorum.ts, where grants are held to it too. */

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
export function approvalsView(
  config: SpaceConfig,
  groups: Groups,
  p: Proposal,
  mayApprove: (id: string) => boolean,
): Record<string, unknown> | undefined {
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
    ...(satisfiable
      ? {}
      : {
          why: `needs ${required} distinct approvers but only ${possible} could approve it (never the proposer); it can never be approved as things stand`,
        }),
  };
}

/** Whether two argument objects are the same JSON (key order aside). */
export function sameArguments(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

// --- each approval of a proposal that needs several ----------------------------------

/**
 * Why `approver`'s approval of `p`, which needs several, may not count, if it may not: it
 * approved already, it asks "always" (a grant by one would let later calls skip the others),
 * or it does not match what earlier approvers approved (`laterApprovalMismatch`). `d.edited`:
 * arguments that differ from those that will run; `d.confirmed`: it sent exactly those.
 */
export function quorumRefusal(
  approver: string,
  p: Proposal,
  d: { scope: "once" | "always"; edited: Record<string, unknown> | undefined; confirmed: boolean },
): { code: ErrorCode; message: string; extra?: Record<string, unknown> } | undefined {
  const required = p.required ?? 1;
  const by = approvedBy(p);
  if (by.includes(approver))
    return {
      code: ErrorCodes.alreadyApproved,
      message: `you already approved proposal "${clip(p.id)}" (${by.length} of ${required}); it needs another approver`,
      extra: { approvals: by.length, required },
    };
  if (d.scope === "always")
    return {
      code: ErrorCodes.invalidPayload,
      message: `proposal "${clip(p.id)}" needs ${required} approvers, so it cannot be approved "always" (a grant would let later calls skip the others); approve once`,
    };
  return laterApprovalMismatch(p, by, d.edited, d.confirmed);
}

/** Whether one more approval completes `p`'s quorum, as its approvals stand. */
export function completesQuorum(p: Proposal): boolean {
  return approvedBy(p).length + 1 >= (p.required ?? 1);
}

/**
 * Records `member`'s approval of `p` as one of several, and tells the proposer and the approver
 * how far it got; the proposal waits for more. Throws, having changed nothing, if not written.
 */
export async function recordOneOf(
  space: Pick<SpaceHost, "deliver" | "record">,
  proposals: ProposalBook,
  member: Member,
  p: Proposal,
  d: { edited: Record<string, unknown> | undefined; reason: string | undefined },
): Promise<void> {
  const approval = {
    by: member.id,
    ts: now(),
    ...(d.edited !== undefined ? { arguments: d.edited } : {}),
    ...(d.reason !== undefined ? { reason: d.reason } : {}),
  };
  await space.record(proposals.planApproval(p, approval));
  const required = p.required ?? 1;
  const after = approvedBy(p);
  member.log.info(
    { proposal: p.id, proposer: p.proposer, approvals: after.length, required },
    "proposal approved, waiting for more approvers",
  );
  // Everyone who sees the proposal sees how far it got; the proposer learns it still waits.
  const runs = whatRuns(p);
  const edit = runs.edited ? { arguments: runs.arguments, edited_by: runs.edited.by, edited_at: runs.edited.at } : {};
  const payload = { proposal: p.id, required, approvals: after.length, by: after, text: `${after.length} of ${required}`, ...edit };
  space.deliver(systemEnvelope("system/approval", payload, { to: [p.proposer, member.id], correlation_id: [p.id] }));
}

/**
 * Why an approval after the first may not count, if it may not. The count is of approvals given
 * looking at the arguments that run: an edit after a first approval is refused (so is one that
 * puts back the proposed arguments), and once the arguments were edited, a later approver must
 * send them (`arguments`, as its card shows them) to confirm it saw them, since a bare approval
 * may have been given looking at the card before the edit.
 */
function laterApprovalMismatch(
  p: Proposal,
  by: string[],
  edited: Record<string, unknown> | undefined,
  confirmed: boolean,
): { code: ErrorCode; message: string; extra: Record<string, unknown> } | undefined {
  if (by.length === 0) return undefined;
  const runs = whatRuns(p);
  if (edited !== undefined) {
    return {
      code: ErrorCodes.approvalMismatch,
      message: `proposal "${clip(p.id)}" was already approved by ${by.join(", ")} with other arguments; approve those as they are, or reject it`,
      extra: { approved_by: by, arguments: runs.arguments },
    };
  }
  if (runs.edited && !confirmed) {
    const who = runs.edited.by ?? "an approver";
    return {
      code: ErrorCodes.approvalMismatch,
      message: `the arguments of proposal "${clip(p.id)}" were edited by ${who}: approve with those arguments (payload.arguments, as the card shows them) to confirm you saw them, or reject it`,
      extra: { approved_by: by, arguments: runs.arguments, edited_by: runs.edited.by },
    };
  }
  return undefined;
}

/**
 * Why a MEW fulfilment by `fulfiller` may not be the last approval of `p` (with `edited` arguments
 * that differ from those that run; `carried`: it sent arguments at all), if it may not.
 */
export function fulfilmentBlocked(
  fulfiller: string,
  p: Proposal,
  edited: Record<string, unknown> | undefined,
  carried: boolean,
): { code: ErrorCode; message: string; extra: Record<string, unknown> } | undefined {
  const required = p.required ?? 1;
  if (required <= 1 || !awaiting(p.state)) return undefined;
  const by = approvedBy(p);
  if (by.includes(fulfiller) || by.length + 1 < required) {
    return {
      code: ErrorCodes.approvalsNeeded,
      message: `proposal "${clip(p.id)}" needs ${required} distinct approvers and has ${by.length}; approve it with mcp/approve first`,
      extra: { approvals: by.length, required },
    };
  }
  return laterApprovalMismatch(p, by, edited, carried && edited === undefined);
}
