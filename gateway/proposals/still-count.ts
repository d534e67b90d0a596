/**
 * At the approval that would complete a quorum, the earlier approvals are asked again whether
 * they still count (standing.ts `fallenApprovals`): an approver's runtime groups (from the
 * identity provider, space.ts `runtimeGroups`) or capabilities can shrink without a reload,
 * and a call that needs two people is never routed on the word of one who may still decide.
 * Those that no longer count are dropped exactly as a reload drops them (book.ts
 * `planDropApprovals`: written, with an audit entry, before the card or the count changes),
 * and the proposer and the approvers learn where it stands.
 */
import { type Envelope, systemEnvelope } from "../wire/envelope.js";
import type { SpaceHost } from "../ports/host.js";
import { approvedBy } from "./approvals.js";
import { type Proposal, type ProposalBook, runningArguments, whatRuns } from "./book.js";
import { fallenApprovals } from "./standing.js";

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
