/**
 * Who may decide a proposal, for its card: the participants who pass the bar decisions.ts
 * holds an approver to (not the proposer; one of its approvers, with @groups and the
 * escalation stages reached, if it names any; able to make the call itself; for a
 * two-person rule, not one who approved already), and whether the viewer is one of them,
 * with the reason when not. The console and the terminal draw their buttons from this, so
 * a person who may not decide learns it before clicking, not after.
 */
import type { Proposal } from "../proposals/book.js";
import { approvedBy, approversNow } from "../proposals/approvals.js";
import type { Space } from "../space/space.js";

export interface Deciders {
  /** Who may decide it now (ids), in space.yaml's order. */
  deciders: string[];
  /** Whether the viewer may approve or reject it. */
  mayDecide: boolean;
  /** Why not, in words, when `mayDecide` is false. */
  mayNotDecide?: string;
}

export function decidersOf(space: Space, viewer: string, p: Proposal): Deciders {
  const approvers = approversNow(space.config, p);
  const already = approvedBy(p);
  // The approver's bar: could it make this call itself (the tool policy, directly, or only
  // because the gateway flagged the tool).
  const mayCall = (id: string) => {
    const v = space.authority.call(id, () => false, p.owner, p.method, p.params, true);
    return v.decision === "direct" || (v.decision === "proposal" && v.flagged === true);
  };
  const named = (id: string) => approvers === undefined || space.authority.groups.names(approvers, id);
  const able = (id: string) => id !== p.proposer && named(id) && mayCall(id);
  const deciders = Object.keys(space.config.participants).filter((id) => able(id) && !already.includes(id));
  if (deciders.includes(viewer)) return { deciders, mayDecide: true };
  const why =
    viewer === p.proposer
      ? "it is your own proposal (you may withdraw it)"
      : !named(viewer)
        ? `proposals of ${p.proposer} are decided by ${approvers!.join(", ")}`
        : already.includes(viewer)
          ? "you approved it already; it waits for another approver"
          : "you may not make this call yourself, so you cannot approve or reject it";
  return { deciders, mayDecide: false, mayNotDecide: why };
}
