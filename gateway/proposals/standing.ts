/**
 * Whether a proposal still stands under the space's rules as they are now (after a reload,
 * space/reload.ts): its proposer may still propose the call it holds — with the arguments
 * that will run, the first approver's edits if any, since a rule's `when:` reads them — and
 * each approval already given came from someone who may still decide it. An approval from a
 * participant a reload removed, or one no longer among the proposer's approvers, or one who
 * may no longer make the call itself, no longer counts: a call that needs two people is
 * never routed on the word of one who remains.
 *
 * Pure: the caller supplies the decision point (`verdict`, policy/authority.ts `call`, with
 * the participant's capabilities as they stand) and the groups.
 */
import type { SpaceConfig } from "../config/config.js";
import type { Verdict } from "../policy/authority.js";
import type { Groups } from "../policy/groups.js";
import { approversNow } from "./approvals.js";
import { OPEN_OWNER, type Proposal, runningParams, whatRuns } from "./book.js";

export interface StandingHost {
  readonly config: SpaceConfig;
  readonly groups: Pick<Groups, "names">;
  /** The decision point for `caller` making the call now, whether or not it is connected. `confirming`: the approver's bar. */
  verdict(caller: string, owner: string, method: string, params: Record<string, unknown>, confirming: boolean): Verdict;
}

/** Why `p` cannot stand under the rules as they are now, if it cannot: its proposer or owner is gone, or its call (with the arguments that will run) is denied. */
export function cancelReason(host: StandingHost, p: Proposal): string | undefined {
  const { participants } = host.config;
  if (!Object.hasOwn(participants, p.proposer)) return `${p.proposer} is no longer a participant of the space`;
  // A proposal held open names its owner only when fulfilled.
  if (p.owner === OPEN_OWNER) return undefined;
  if (!Object.hasOwn(participants, p.owner)) return `${p.owner}, which would serve the call, is no longer a participant of the space`;
  // Other methods are proposed because the proposer may not send them: only tool rules can deny a proposal outright.
  if (p.method !== "tools/call" || p.tool === undefined) return undefined;
  const v = host.verdict(p.proposer, p.owner, p.method, runningParams(p), false);
  if (v.decision !== "denied") return undefined;
  const which = v.reason?.why ? ` (${v.reason.why})` : "";
  const edited = whatRuns(p).edited ? " with the edited arguments that would run" : "";
  return `the space's rules, reloaded, deny ${p.proposer} ${p.owner}/${p.tool}${edited}${which}`;
}

/** The approvals of `p` given by someone who may no longer decide it, each with why. */
export function fallenApprovals(host: StandingHost, p: Proposal): Array<{ by: string; why: string }> {
  const out: Array<{ by: string; why: string }> = [];
  const seen = new Set<string>();
  const named = approversNow(host.config, p);
  for (const a of p.approvals ?? []) {
    if (seen.has(a.by)) continue;
    seen.add(a.by);
    const why = fallen(host, p, a.by, named);
    if (why !== undefined) out.push({ by: a.by, why });
  }
  return out;
}

function fallen(host: StandingHost, p: Proposal, by: string, named: string[] | undefined): string | undefined {
  if (!Object.hasOwn(host.config.participants, by)) return `${by} is no longer a participant of the space`;
  if (named && !host.groups.names(named, by))
    return `${by} is no longer among those who decide proposals of ${p.proposer} (${named.join(", ")})`;
  if (p.owner === OPEN_OWNER) return undefined;
  const v = host.verdict(by, p.owner, p.method, runningParams(p), true);
  if (v.decision === "direct" || (v.decision === "proposal" && v.flagged === true)) return undefined;
  return `${by} may no longer make this call itself, so cannot approve it`;
}
