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
import { CANONICAL, canonical, inCanonicalOrder } from "../store/chain.js";
import type { AuditRecord } from "../audit/entry.js";
import type { Plan } from "../store/plan.js";
import type { Reasoned } from "../policy/rules.js";
import type { SpaceMetrics } from "../ports/metrics.js";
import type { CallTrace, Tracing } from "../ports/tracing.js";
import { newDecisionId } from "../audit/entry.js";
import { isoTime } from "../wire/envelope.js";

/** Largest canonical JSON of arguments written into a `called` record whole. */
export const INLINE_ARGUMENTS = 4096;

/** `allowedBy` of a rule, made once per rule object (a space's rules live until a reload replaces them). */
const ruleWords = new WeakMap<object, string>();

/** What allowed a direct call, in words: the grant and who gave it, else the rule and where it is, else the step. */
export function allowedBy(reason: Reasoned | undefined): string {
  if (!reason) return "the caller's capabilities";
  if (reason.grant) return `grant ${reason.grant.id} from ${reason.grant.from}`;
  const rule = reason.match?.rule;
  if (rule) {
    let words = ruleWords.get(rule);
    if (words === undefined) {
      words = `rule tools.${rule.key} (${rule.glob}${rule.when ? ` when ${rule.when}` : ""})${rule.at ? ` at line ${rule.at.line}` : ""}`;
      ruleWords.set(rule, words);
    }
    return words;
  }
  return `${reason.step ?? "policy"}: ${reason.why}`;
}

/** Who allowed a direct call, by kind (ports/tracing.ts `DecisionFacts`): an `except` rule is one a person accepted as learned (policy/learn/). */
export function directDecider(reason: Reasoned | undefined): "learned_rule" | "rule" | "grant" | "capability" {
  if (reason?.grant) return "grant";
  const key = reason?.match?.rule.key;
  if (key !== undefined) return key.startsWith("except") ? "learned_rule" : "rule";
  return "capability";
}

/**
 * A tool call policy allowed and the router routed: a decision like a person's (ports/tracing.ts
 * `DecisionFacts`), counted by decider and put on the call's span when the space exports
 * traces. Returns its decision id, which the call's `called` entry keeps.
 */
export function allowedDecision(
  space: { metrics: SpaceMetrics; tracing: Pick<Tracing, "on"> },
  trace: CallTrace | undefined,
  reason: Reasoned | undefined,
): string {
  const id = newDecisionId();
  const decider = directDecider(reason);
  space.metrics.decision("allowed", decider);
  if (space.tracing.on) trace?.decided?.({ id, outcome: "allowed", decider, rule: allowedBy(reason) });
  return id;
}

/**
 * The `called` record of a direct call. Made (ledger.ts `later`) when its batch goes to the
 * journal, from what the call captured when it was routed. Its keys are added in canonical
 * order, so its canonical JSON for the chain (store/chain.ts `CANONICAL`) is one
 * JSON.stringify with the arguments' sorted copy in their place; the record itself keeps the
 * arguments as they were sent. Arguments that cannot be so ordered leave the chain to make it.
 */
export function directCallPlan(
  call: {
    id: string;
    caller: string;
    target: string;
    method: string;
    params: Record<string, unknown> | undefined;
    reason: Reasoned | undefined;
    /** The decision id (router.ts `allowed`), shared with the call's span. */
    decision?: string | undefined;
  },
  /** When the call was routed, ms since the epoch. */
  at = Date.now(),
): Plan<AuditRecord> {
  const name = call.params?.["name"];
  const args = call.params?.["arguments"];
  const ordered = args === undefined ? undefined : inCanonicalOrder(args);
  const text = args === undefined ? undefined : ordered !== undefined ? JSON.stringify(ordered) : canonical(args);
  const inline = text !== undefined && text.length <= INLINE_ARGUMENTS;
  const digest = text !== undefined && !inline ? createHash("sha256").update(text).digest("hex") : undefined;
  // Added in key order, each only when it has a value (a deleted key would slow the object down).
  const entry = {} as AuditRecord["entry"];
  if (inline) entry.arguments = args;
  if (digest !== undefined) entry.arguments_digest = digest;
  if (call.decision !== undefined) entry.decision = call.decision;
  entry.event = "called";
  entry.method = call.method;
  entry.outcome = `request ${call.id.slice(0, 200)}`;
  entry.owner = call.target;
  entry.proposal = "";
  entry.proposer = call.caller;
  if (digest !== undefined) entry.reason = `arguments of ${text!.length} characters kept as their digest`;
  entry.scope = allowedBy(call.reason).slice(0, 512);
  if (typeof name === "string") entry.tool = name.slice(0, 512);
  entry.ts = isoTime(at);
  const record: AuditRecord = { type: "audit", entry };
  // Its canonical JSON for the chain: the same members in the same (sorted) order, the arguments' copy sorted too.
  if (!inline || ordered !== undefined) {
    const made = JSON.stringify({ entry: inline ? { ...entry, arguments: ordered } : entry, type: "audit" });
    Object.defineProperty(record, CANONICAL, { value: made });
  }
  return { records: [record], apply() {} };
}
