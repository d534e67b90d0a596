/**
 * What a guard did to a call (policy/guards.ts) is audited as `event: "guarded"`: the findings,
 * masked (a value never repeated: `ghp_…(40)`), the action, and whether it was the arguments
 * or the result, with the request (and the proposal it carries out, if any). Written behind
 * the call (`note`), in the same journal and retention as the rest of the trail.
 */
import type { AuditRecord } from "../audit/entry.js";
import type { Plan } from "../store/plan.js";
import type { GuardOn, GuardVerdict } from "../policy/guards.js";

export function guardPlan(
  g: { id: string; caller: string; target: string; tool: string; on: GuardOn; verdict: GuardVerdict; proposal?: string | undefined },
  now = new Date(),
): Plan<AuditRecord> {
  const did =
    g.verdict.action === "deny" ? (g.on === "results" ? "result withheld" : "denied") : g.verdict.action === "hold" ? "held" : "redacted";
  const entry: AuditRecord["entry"] = {
    ts: now.toISOString(),
    event: "guarded",
    proposal: g.proposal ?? "",
    proposer: g.caller,
    owner: g.target,
    tool: g.tool.slice(0, 512),
    method: "tools/call",
    scope: `${g.on === "results" ? "result" : "arguments"} ${did}`,
    findings: g.verdict.findings.slice(0, 32).map((f) => ({
      guard: f.guard,
      action: f.action,
      detector: f.detector,
      what: f.what,
      field: f.field.slice(0, 200),
      masked: f.masked.slice(0, 120),
      ...(f.encoding ? { encoding: f.encoding.slice(0, 200) } : {}),
    })),
    outcome: `request ${g.id.slice(0, 200)}`,
  };
  return { records: [{ type: "audit", entry }], apply() {} };
}
