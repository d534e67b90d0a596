/**
 * The approvals of a proposal that needs several (proposals/approvals.ts has the rules):
 * each one but the last is written, counted and shown; the last approves the call as a single
 * approval would, with the arguments the first approver approved. Split from decisions.ts,
 * which calls it; it acts on the space only through `SpaceHost`.
 */
import { type ErrorCode, ErrorCodes, now, systemEnvelope } from "../wire/envelope.js";
import { clip, type SpaceHost } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import { awaiting, type Proposal, type ProposalBook } from "./book.js";
import { approvedBy, sameArguments } from "./approvals.js";

/**
 * One approval of `p` by `member`. `last(edited)`: approve and route it, with `edited` the
 * arguments to run it with (the first approver's edits, if any).
 */
export async function approveOneOf(
  space: SpaceHost,
  proposals: ProposalBook,
  member: Member,
  p: Proposal,
  d: { scope: "once" | "always"; edited: Record<string, unknown> | undefined; reason: string | undefined },
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
  // Only the first approval may edit: a later one approves what the first approved, or rejects.
  if (by.length > 0 && d.edited !== undefined && !sameArguments(d.edited, p.editedArguments ?? p.params["arguments"] ?? {})) {
    return space.fail(member, ErrorCodes.approvalMismatch, `proposal "${clip(p.id)}" was already approved by ${by.join(", ")} with other arguments; approve those as they are, or reject it`, sentId, { approved_by: by });
  }
  if (by.length + 1 >= required) return last(by.length > 0 ? p.editedArguments : d.edited);
  const stays = `the proposal stays ${p.state}`;
  const approval = { by: member.id, ts: now(), ...(d.edited !== undefined ? { arguments: d.edited } : {}), ...(d.reason !== undefined ? { reason: d.reason } : {}) };
  try {
    await space.record(proposals.planApproval(p, approval));
  } catch (err) {
    return space.storeFailed(member, err, sentId, `the approval was not recorded; ${stays}`);
  }
  const after = approvedBy(p);
  member.log.info({ proposal: p.id, proposer: p.proposer, approvals: after.length, required }, "proposal approved, waiting for more approvers");
  // Everyone who sees the proposal sees how far it got; the proposer learns it still waits.
  const payload = { proposal: p.id, required, approvals: after.length, by: after, text: `${after.length} of ${required}`, ...(p.editedArguments !== undefined ? { arguments: p.editedArguments } : {}) };
  space.deliver(systemEnvelope("system/approval", payload, { to: [p.proposer, member.id], correlation_id: [p.id] }));
}

/** Why a MEW fulfilment by `fulfiller` may not be the last approval of `p` (with `edited` arguments), if it may not. */
export function fulfilmentBlocked(fulfiller: string, p: Proposal, edited: Record<string, unknown> | undefined): { code: ErrorCode; message: string; extra: Record<string, unknown> } | undefined {
  const required = p.required ?? 1;
  if (required <= 1 || !awaiting(p.state)) return undefined;
  const by = approvedBy(p);
  if (by.includes(fulfiller) || by.length + 1 < required) {
    return { code: ErrorCodes.approvalsNeeded, message: `proposal "${clip(p.id)}" needs ${required} distinct approvers and has ${by.length}; approve it with mcp/approve first`, extra: { approvals: by.length, required } };
  }
  if (by.length > 0 && edited !== undefined && !sameArguments(edited, p.editedArguments ?? p.params["arguments"] ?? {})) {
    return { code: ErrorCodes.approvalMismatch, message: `proposal "${clip(p.id)}" was approved by ${by.join(", ")} with other arguments`, extra: { approved_by: by } };
  }
  return undefined;
}
