/**
 * The approvals of a proposal that needs several (proposals/approvals.ts has the rules):
 * each one but the last is written, counted and shown; the last approves the call as a single
 * approval would, with the arguments the first approver approved. Split from decisions.ts,
 * which calls it; it acts on the space only through `SpaceHost`.
 */
import { type ErrorCode, ErrorCodes, now, systemEnvelope } from "../wire/envelope.js";
import { clip, type SpaceHost } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import { awaiting, type Proposal, type ProposalBook, whatRuns } from "./book.js";
import { approvedBy } from "./approvals.js";
import { dropBeforeLast, dropFallenApprovals } from "./still-count.js";

/**
 * One approval of `p` by `member`. `d.edited`: arguments that differ from those that will run
 * (book.ts `whatRuns`); `d.confirmed`: the approver sent exactly those. `last(edited)`: approve
 * and route it, with `edited` this approval's own edits (only a first approval has any), else
 * the arguments that will run.
 */
export async function approveOneOf(
  space: SpaceHost,
  proposals: ProposalBook,
  member: Member,
  p: Proposal,
  d: { scope: "once" | "always"; edited: Record<string, unknown> | undefined; confirmed: boolean; reason: string | undefined },
  sentId: string | undefined,
  last: (edited: Record<string, unknown> | undefined) => Promise<void>,
): Promise<void> {
  const required = p.required ?? 1;
  const by = approvedBy(p);
  if (by.includes(member.id)) {
    return space.fail(member, ErrorCodes.alreadyApproved, `you already approved proposal "${clip(p.id)}" (${by.length} of ${required}); it needs another approver`, sentId, { approvals: by.length, required });
  }
  if (d.scope === "always") {
    return space.fail(member, ErrorCodes.invalidPayload, `proposal "${clip(p.id)}" needs ${required} approvers, so it cannot be approved "always" (a grant would let later calls skip the others); approve once`, sentId);
  }
  const mismatch = laterApprovalMismatch(p, by, d.edited, d.confirmed);
  if (mismatch) return space.fail(member, mismatch.code, mismatch.message, sentId, mismatch.extra);
  const stays = `the proposal stays ${p.state}`;
  if (by.length + 1 >= required) {
    // The approval that would complete the quorum: the earlier ones must still count (still-count.ts).
    try {
      if ((await dropFallenApprovals(space, proposals, p)) === 0) return last(d.edited);
    } catch (err) {
      return space.storeFailed(member, err, sentId, `approvals that no longer count could not be dropped; ${stays}`);
    }
    const left = approvedBy(p);
    const again = laterApprovalMismatch(p, left, d.edited, d.confirmed);
    if (again) return space.fail(member, again.code, again.message, sentId, again.extra);
    if (left.length + 1 >= required) return last(d.edited);
    // Too few remain: this approval is recorded as one of several, and the proposal waits.
  }
  const approval = { by: member.id, ts: now(), ...(d.edited !== undefined ? { arguments: d.edited } : {}), ...(d.reason !== undefined ? { reason: d.reason } : {}) };
  try {
    await space.record(proposals.planApproval(p, approval));
  } catch (err) {
    return space.storeFailed(member, err, sentId, `the approval was not recorded; ${stays}`);
  }
  const after = approvedBy(p);
  member.log.info({ proposal: p.id, proposer: p.proposer, approvals: after.length, required }, "proposal approved, waiting for more approvers");
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
function laterApprovalMismatch(p: Proposal, by: string[], edited: Record<string, unknown> | undefined, confirmed: boolean): { code: ErrorCode; message: string; extra: Record<string, unknown> } | undefined {
  if (by.length === 0) return undefined;
  const runs = whatRuns(p);
  if (edited !== undefined) {
    return { code: ErrorCodes.approvalMismatch, message: `proposal "${clip(p.id)}" was already approved by ${by.join(", ")} with other arguments; approve those as they are, or reject it`, extra: { approved_by: by, arguments: runs.arguments } };
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
export function fulfilmentBlocked(fulfiller: string, p: Proposal, edited: Record<string, unknown> | undefined, carried: boolean): { code: ErrorCode; message: string; extra: Record<string, unknown> } | undefined {
  const required = p.required ?? 1;
  if (required <= 1 || !awaiting(p.state)) return undefined;
  const by = approvedBy(p);
  if (by.includes(fulfiller) || by.length + 1 < required) {
    return { code: ErrorCodes.approvalsNeeded, message: `proposal "${clip(p.id)}" needs ${required} distinct approvers and has ${by.length}; approve it with mcp/approve first`, extra: { approvals: by.length, required } };
  }
  return laterApprovalMismatch(p, by, edited, carried && edited === undefined);
}

/**
 * `fulfilmentBlocked`, after dropping the earlier approvals that no longer count were this
 * fulfilment the last one (still-count.ts): fewer remaining block it.
 */
export async function fulfilmentStanding(space: SpaceHost, proposals: ProposalBook, fulfiller: string, p: Proposal, edited: Record<string, unknown> | undefined, carried: boolean): Promise<ReturnType<typeof fulfilmentBlocked>> {
  try {
    await dropBeforeLast(space, proposals, p);
  } catch (err) {
    space.log.error({ proposal: p.id, err: String(err) }, "could not record dropped approvals");
    return { code: ErrorCodes.storeFailed, message: `approvals that no longer count could not be dropped; the proposal stays ${p.state}`, extra: {} };
  }
  return fulfilmentBlocked(fulfiller, p, edited, carried);
}
