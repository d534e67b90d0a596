/**
 * A call that went straight through — allowed by a rule, a capability or a grant (an
 * "always" approval, a loan) — is audited as `event: "called"`, with what allowed it, so the
 * trail holds every routed tool call and not only the proposed ones. Written behind the
 * call (`note`: no call waits on a disk for it) in the same journal and under the same
 * retention (quotas.audit_max_*) as the proposals' records.
 *
 * Bounded: the arguments are kept when their canonical JSON is at most `INLINE_ARGUMENTS`
 * characters; a larger one keeps only its SHA-256 and length. Only `tools/call` is
 * recorded: listings and pings change nothing and would flood the trail.
 */
import { createHash } from "node:crypto";
import { canonical } from "../store/chain.js";
import type { AuditRecord } from "../proposals/book.js";
import type { Plan } from "../ports/plan.js";
import type { Reasoned } from "../policy/rules.js";
import { isoTime } from "../wire/envelope.js";

/** Largest canonical JSON of arguments written into a `called` record whole. */
export const INLINE_ARGUMENTS = 4096;

/** What allowed a direct call, in words: the grant and who gave it, else the rule and where it is, else the step. */
export function allowedBy(reason: Reasoned | undefined): string {
  if (!reason) return "the caller's capabilities";
  if (reason.grant) return `grant ${reason.grant.id} from ${reason.grant.from}`;
  const rule = reason.match?.rule;
  if (rule)
    return `rule tools.${rule.key} (${rule.glob}${rule.when ? ` when ${rule.when}` : ""})${rule.at ? ` at line ${rule.at.line}` : ""}`;
  return `${reason.step ?? "policy"}: ${reason.why}`;
}

export function directCallPlan(
  call: {
    id: string;
    caller: string;
    target: string;
    method: string;
    params: Record<string, unknown> | undefined;
    reason: Reasoned | undefined;
  },
  /** When the call was routed, ms since the epoch. */
  at = Date.now(),
): Plan<AuditRecord> {
  const name = call.params?.["name"];
  const args = call.params?.["arguments"];
  const text = args === undefined ? undefined : canonical(args);
  const inline = text !== undefined && text.length <= INLINE_ARGUMENTS;
  const entry: AuditRecord["entry"] = {
    ts: isoTime(at),
    event: "called",
    proposal: "",
    proposer: call.caller,
    owner: call.target,
    ...(typeof name === "string" ? { tool: name.slice(0, 512) } : {}),
    method: call.method,
    ...(inline
      ? { arguments: args }
      : text !== undefined
        ? {
            arguments_digest: createHash("sha256").update(text).digest("hex"),
            reason: `arguments of ${text.length} characters kept as their digest`,
          }
        : {}),
    scope: allowedBy(call.reason).slice(0, 512),
    outcome: `request ${call.id.slice(0, 200)}`,
  };
  return { records: [{ type: "audit", entry }], apply() {} };
}
