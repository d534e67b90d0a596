/**
 * Whether what waits on a person still stands, planned here and nowhere else: after a reload
 * (`standAfterReload`: a proposal the new rules no longer allow is cancelled, approvals that no
 * longer count are dropped), and at the approval that would complete a quorum, when the
 * earlier approvals are asked again whether they still count (standing.ts `fallenApprovals`):
 * an approver's runtime groups (from the identity provider, space.ts `runtimeGroups`) or
 * capabilities can shrink without a reload, and a call that needs two people is never routed
 * on the word of one who may no longer decide. Those that no longer count are dropped exactly
 * as a reload drops them (book.ts `planDropApprovals`: written, with an audit entry, before the
 * card or the count changes), and the proposer and the approvers learn where it stands.
 */
import { type Envelope, systemEnvelope } from "../wire/envelope.js";
import type { SpaceHost } from "../ports/host.js";
import { approvedBy } from "./approvals.js";
import { type Proposal, type ProposalBook, runningArguments, whatRuns } from "./book.js";
import { cancelReason, fallenApprovals, type StandingHost as StandingRules } from "./standing.js";

/** What dropping approvals that no longer count uses of the space. */
export type StandingHost = Pick<SpaceHost, "authority" | "config" | "deliver" | "log" | "record" | "verdictOf">;

/** Drops the approvals of `p` that no longer count; resolves with how many were dropped (throws, having changed nothing, if not written). */
export async function dropFallenApprovals(space: StandingHost, proposals: ProposalBook, p: Proposal): Promise<number> {
  const fallen = fallenApprovals({ config: space.config, groups: space.authority.groups, verdict: (...a) => space.verdictOf(...a) }, p);
  if (fallen.length === 0) return 0;
  const before = approvedBy(p);
  await space.record(proposals.planDropApprovals(p, fallen));
  space.log.warn({ proposal: p.id, dropped: fallen }, "approvals that no longer count dropped before the last approval");
  space.deliver(droppedNotice(p, before, fallen, space.config.participants));
  return fallen.length;
}

/**
 * The notice that approvals of `p` were dropped (here, or by a reload): the count now, who no
 * longer counts and why, to the proposer and those who had approved (`before`) still in the space.
 */
export function droppedNotice(
  p: Proposal,
  before: readonly string[],
  fallen: ReadonlyArray<{ by: string; why: string }>,
  present: Readonly<Record<string, unknown>>,
): Envelope {
  const by = approvedBy(p);
  const required = p.required ?? 1;
  const many = fallen.length > 1;
  const text = `${by.length} of ${required}; the approval${many ? "s" : ""} of ${fallen.map((f) => f.by).join(", ")} no longer count${many ? "" : "s"}: ${fallen.map((f) => f.why).join("; ")}`;
  const payload = {
    proposal: p.id,
    required,
    approvals: by.length,
    by,
    text,
    dropped: fallen,
    ...(whatRuns(p).edited ? { arguments: runningArguments(p) } : {}),
  };
  return systemEnvelope("system/approval", payload, {
    to: [...new Set([p.proposer, ...before])].filter((id) => Object.hasOwn(present, id)),
    correlation_id: [p.id],
  });
}

/**
 * After a reload (space/reload.ts): each proposal waiting on a person that the new rules no
 * longer allow is rejected (`policy_changed`, standing.ts `cancelReason`), and the approvals
 * that no longer count are dropped; each written before anyone is told. One that cannot be
 * written stays as it was, and the log says so. Returns what it did, for the reload's report.
 */
export async function standAfterReload(
  space: Pick<SpaceHost, "deliver" | "log" | "record">,
  proposals: ProposalBook,
  standing: StandingRules,
): Promise<{ cancelled: string[]; dropped: string[] }> {
  const cancelled: string[] = [];
  const dropped: string[] = [];
  for (const p of proposals.pending()) {
    const why = cancelReason(standing, p);
    if (why === undefined || proposals.isBusy(p.id)) continue;
    try {
      await space.record(
        proposals.planTransition(p, { state: "rejected", reason: "policy_changed", text: why, decidedBy: "system:gateway" }),
      );
    } catch (err) {
      space.log.error({ proposal: p.id, err: String(err) }, "reload: could not record a cancelled proposal; it stays pending");
      continue;
    }
    cancelled.push(p.id);
    space.deliver(systemEnvelope("mcp/reject", { reason: "policy_changed", text: why }, { to: [p.proposer], correlation_id: [p.id] }));
  }
  for (const p of proposals.pending()) {
    const fallen = fallenApprovals(standing, p);
    if (fallen.length === 0 || proposals.isBusy(p.id)) continue;
    const before = approvedBy(p);
    try {
      await space.record(proposals.planDropApprovals(p, fallen));
    } catch (err) {
      space.log.error({ proposal: p.id, err: String(err) }, "reload: could not record dropped approvals");
      continue;
    }
    for (const f of fallen) dropped.push(`${p.id}: ${f.by} (${f.why})`);
    space.deliver(droppedNotice(p, before, fallen, standing.config.participants));
  }
  return { cancelled, dropped };
}
