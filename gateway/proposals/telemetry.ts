/**
 * What each decision on a proposal is, for telemetry (ports/tracing.ts `DecisionFacts`,
 * ports/metrics.ts `decision`): the end of a wait for a person — approved, rejected, expired,
 * withdrawn — with the decision id its audit entry and receipt carry, and who decided by
 * kind. The space counts every one and, when it exports traces, puts it on the wait's span
 * with the rule that asked and the gateway's risk (space/compose.ts).
 */
import type { DecisionFacts } from "../ports/tracing.js";
import { awaiting, type Proposal } from "./book.js";
import type { DeciderKind } from "./receipts.js";

/** The decision a change of `p` is, if it is one: a wait for a person that ended (an interruption is nobody's). */
export function decisionOf(
  p: Proposal,
  event: string,
  from: string | undefined,
  kindOf: (id: string, p: Proposal) => DeciderKind,
): DecisionFacts | undefined {
  if (from === undefined || !awaiting(from as Proposal["state"]) || p.decision === undefined) return undefined;
  if (event === "approved" || event === "rejected")
    return { id: p.decision, outcome: event, decider: p.decidedBy === undefined ? "agent" : kindOf(p.decidedBy, p), by: p.decidedBy };
  if (event === "expired") return { id: p.decision, outcome: "expired", decider: "timeout" };
  if (event === "withdrawn") return { id: p.decision, outcome: "withdrawn", decider: "proposer", by: p.decidedBy };
  return undefined;
}
