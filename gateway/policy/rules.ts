/**
 * Tool policy: may this participant call `participant/tool` directly, only through a
 * proposal, or not at all?
 *
 * A participant's `tools: {allow, ask, deny, except}` globs are compiled once. The decision
 * for a `tools/call`, first that applies:
 *   1. a `deny` glob matches                      → denied
 *   2. a capability granted at runtime matches     → direct   (an "always" approval)
 *   3. an `except` rule matches                    → direct   (it narrows the asks below)
 *   4. an `ask` glob matches                       → proposal
 *   5. an `allow` glob or a configured capability  → direct
 *   6. the tool's annotations: readOnlyHint        → direct
 *      or its server's autoApprove list (mcpServers) names it → direct
 *   7. the space's fallback                        → proposal (default), direct or denied
 * A tool whose definition changed since it was confirmed (tools/pins.ts) is called directly
 * by none of 3 and 5–7 until a person approves a call of it, and only by grants given on its
 * current digest (authority.ts).
 * Grants sit above `ask` so that approving "always" really stops the asking; `deny` stays
 * above everything, since it is the operator's explicit word.
 *
 * A rule may be `{tool: glob, when: CEL}` (conditions.ts): it applies where its glob matches
 * and its condition holds for the call. A condition that cannot be evaluated (a missing
 * field, a wrong type, arguments past the bounds) fails closed: a `deny` or `ask` applies, an
 * `allow` does not. Asked without the call's arguments (a tool list, a loan), a rule with a
 * condition is passed over: whatever it would decide is decided again, with the arguments,
 * when the call is made.
 *
 * Plain `allow` globs also compile to MEW capability patterns, which go into the participant's
 * capability list, so MEW clients read the same permissions in their welcome (conditional ones
 * do not: a capability cannot look at arguments).
 */
import { type Capability, compileGlob, type Matcher } from "./capabilities.js";
import { rulePosition, type RulePosition, type ToolPolicy, type ToolRule } from "../config/config.js";
import { type Condition, compileCondition, type ConditionInput } from "./conditions.js";

export type Decision = "direct" | "proposal" | "denied";
export type Fallback = "allow" | "ask" | "deny";
export type Rule = "allow" | "ask" | "deny" | "except";

/** Rules whose condition must hold for them to apply: one that cannot say lets nothing through. */
const opens = (r: Rule) => r === "allow" || r === "except";

/** One rule as compiled: its kind, its place in its list (`deny[2]`), its glob and condition. */
export interface CompiledRule {
  rule: Rule;
  /** `deny[2]`: the rule's key in space.yaml under the participant's `tools`. */
  key: string;
  glob: string;
  test: (name: string) => boolean;
  when?: string | undefined;
  condition?: Condition | undefined;
  /** Why the condition did not compile (policy/check.ts reports it; the rule fails closed). */
  broken?: string | undefined;
  at?: RulePosition | undefined;
}

/** What a call is, for conditions: undefined when the arguments are not known (a listing, a loan). */
export interface CallFacts {
  args: unknown;
  /** The caller, or a function giving it (its groups are looked up only by a condition that reads them). */
  caller: ConditionInput["caller"];
  annotations?: Record<string, unknown> | undefined;
  now?: Date;
}

/** A condition looked at on the way to a decision: what it said. */
export interface ConditionTrace {
  key: string;
  when: string;
  result: "true" | "false" | "error";
  error?: string | undefined;
}

/** The rule that applied, and every condition asked on the way. */
export interface RuleMatch {
  rule: CompiledRule;
  /** The condition's say, when the rule has one: `error` means it applied by failing closed. */
  condition?: ConditionTrace | undefined;
}

export function ruleGlob(r: ToolRule): string {
  return typeof r === "string" ? r : r.tool;
}

export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  [k: string]: unknown;
}

export class CompiledPolicy {
  readonly rules: CompiledRule[] = [];
  private readonly conditional: boolean;

  constructor(policy: ToolPolicy | undefined) {
    // Order of the list is the precedence: deny, then except, then ask, then allow.
    for (const rule of ["deny", "except", "ask", "allow"] as const) {
      (policy?.[rule] ?? []).forEach((r, i) => {
        const key = `${rule}[${i}]`;
        const glob = ruleGlob(r);
        const compiled: CompiledRule = { rule, key, glob, test: compileGlob(glob), at: policy && rulePosition(policy, key) };
        if (typeof r !== "string") {
          compiled.when = r.when;
          try {
            compiled.condition = compileCondition(r.when);
          } catch (err) {
            compiled.broken = (err as Error).message;
          }
        }
        this.rules.push(compiled);
      });
    }
    this.conditional = this.rules.some((r) => r.when !== undefined);
  }

  /**
   * The strongest rule that applies to `participant/tool` called with `facts`, if any; every
   * condition asked is pushed on `trace`. Without facts, rules with a condition are passed over.
   */
  match(name: string, facts?: CallFacts, trace?: ConditionTrace[]): RuleMatch | undefined {
    for (const r of this.rules) {
      if (!r.test(name)) continue;
      if (r.when === undefined) return { rule: r };
      if (!facts) continue;
      const said = this.ask(r, name, facts);
      trace?.push(said);
      // Fail closed: a condition that cannot say makes a deny or an ask apply, never an allow or an except.
      if (said.result === "true" || (said.result === "error" && !opens(r.rule))) return { rule: r, condition: said };
    }
    return undefined;
  }

  /** The strongest rule kind that applies (see `match`). */
  rule(name: string, facts?: CallFacts): Rule | undefined {
    if (!this.conditional) for (const r of this.rules) if (r.test(name)) return r.rule;
    return this.match(name, facts)?.rule.rule;
  }

  private ask(r: CompiledRule, name: string, facts: CallFacts): ConditionTrace {
    if (!r.condition) return { key: r.key, when: r.when!, result: "error", error: r.broken };
    const input: ConditionInput = { args: facts.args, caller: facts.caller, tool: { name, annotations: facts.annotations } };
    if (facts.now) input.now = facts.now;
    const out = r.condition.evaluate(input);
    if (out.ok) return { key: r.key, when: r.when!, result: out.value ? "true" : "false" };
    return { key: r.key, when: r.when!, result: "error", error: out.error };
  }
}

/** The normalized envelope a tools/call is checked as: what the capability patterns see. */
export function toolCallShape(owner: string, tool: string): { kind: string; to: string[]; payload: unknown } {
  return { kind: "mcp/request", to: [owner], payload: { method: "tools/call", params: { name: tool } } };
}

export interface DecisionInput {
  policy: CompiledPolicy;
  /** Matches capabilities granted at runtime. */
  granted: Matcher;
  /** Matches the participant's configured capabilities (plus compiled `allow` globs). */
  configured: Matcher;
  owner: string;
  tool: string;
  annotations?: ToolAnnotations | undefined;
  /** The owner's `autoApprove` (mcpServers) lists the tool. */
  autoApproved?: boolean | undefined;
  fallback: Fallback;
  /**
   * The tool's definition changed since it was last confirmed (tools/pins.ts): no rule,
   * capability, annotation or fallback lets it be called directly until a person approves
   * a call of the new one. Grants are checked against their digest by the caller.
   */
  unconfirmed?: boolean | undefined;
  /** A grant matches the tool but was given on another definition of it. */
  grantSuspended?: boolean | undefined;
  /** The call, for rules with conditions; undefined when its arguments are not known. */
  facts?: CallFacts | undefined;
}

/** Which step of the order decided. */
export type Step = "deny" | "grant" | "except" | "ask" | "allow" | "capability" | "read-only" | "auto-approve" | "fallback";

/** A decision with its reason: in words for a person, and as data for explain. */
export interface Reasoned {
  decision: Decision;
  why: string;
  step?: Step;
  /** The rule that applied, with its condition's say. */
  match?: RuleMatch | undefined;
  /** Every condition asked on the way, in order. */
  conditions?: ConditionTrace[];
  /** The grant that made it direct (authority.ts fills it in). */
  grant?: { id: string; from: string };
}

/** Why a call that would be direct needs a proposal after its tool changed (pins.ts). */
export const DEFINITION_CHANGED = "the tool's definition changed since it was allowed";

export function decide(input: DecisionInput): Decision {
  return decideWhy(input).decision;
}

/** How a rule that applied is named for a person: `an ask rule matches fs/write (when args.x > 1 holds)`; explain adds where it is. */
function ruleWords(m: RuleMatch, name: string): string {
  const r = m.rule;
  const cond =
    m.condition === undefined
      ? ""
      : m.condition.result === "true"
        ? ` (when ${r.when} holds)`
        : ` (its condition ${r.when} could not be evaluated, which counts as a match: ${m.condition.error ?? "error"})`;
  const kind = r.rule === "deny" ? "a deny" : r.rule === "ask" ? "an ask" : r.rule === "except" ? "an except" : "an allow";
  return `${kind} rule matches ${name}${cond}${r.rule === "except" ? ", so no ask applies" : ""}`;
}

/** The decision and, in words for a person, the rule that made it. */
export function decideWhy(input: DecisionInput): Reasoned {
  const name = `${input.owner}/${input.tool}`;
  const conditions: ConditionTrace[] = [];
  const match = input.policy.match(name, input.facts, conditions);
  const rule = match?.rule.rule;
  const out = (decision: Decision, why: string, step: Step, m?: RuleMatch): Reasoned => ({ decision, why, step, match: m, conditions });
  if (rule === "deny") return out("denied", ruleWords(match!, name), "deny", match);
  const shape = toolCallShape(input.owner, input.tool);
  if (input.granted(shape)) return out("direct", "a grant (an always-approval) covers it", "grant");
  const direct = (why: string, step: Step, m?: RuleMatch): Reasoned =>
    input.unconfirmed
      ? out("proposal", `${DEFINITION_CHANGED} (${why}); approving a call confirms the new definition`, step, m)
      : out("direct", why, step, m);
  if (rule === "except") return direct(ruleWords(match!, name), "except", match);
  if (rule === "ask") return out("proposal", ruleWords(match!, name), "ask", match);
  if (rule === "allow") return direct(ruleWords(match!, name), "allow", match);
  if (input.configured(shape)) return direct("the participant's capabilities allow it", "capability");
  if (input.annotations?.readOnlyHint === true) return direct("the tool says it is read-only", "read-only");
  if (input.autoApproved) return direct("its server's autoApprove lists it", "auto-approve");
  const decision = input.fallback === "allow" ? "direct" : input.fallback === "deny" ? "denied" : "proposal";
  if (decision === "proposal" && input.grantSuspended)
    return out(decision, `${DEFINITION_CHANGED} (a grant was given on its earlier definition)`, "fallback");
  if (decision === "direct") return direct(`no rule matches: the space's fallback is ${input.fallback}`, "fallback");
  return out(decision, `no rule matches and the tool is not read-only: the space's fallback is ${input.fallback}`, "fallback");
}

/** `fs/read_*` → a MEW pattern allowing tools/call of `read_*` on `fs` (plain globs only: a capability cannot look at arguments). */
export function allowCapabilities(policy: ToolPolicy | undefined): Capability[] {
  return (policy?.allow ?? [])
    .flatMap((r) => (typeof r === "string" ? [r] : []))
    .map((glob) => {
      const slash = glob.indexOf("/");
      const [owner, tool] = slash < 0 ? [glob, "*"] : [glob.slice(0, slash), glob.slice(slash + 1)];
      const cap: Capability = { kind: "mcp/request", payload: { method: "tools/call", params: { name: tool || "*" } } };
      if (owner !== "*") cap["to"] = [owner];
      return cap;
    });
}

/** The capability an "always" approval grants: exactly this tool on this owner. */
export function toolGrant(owner: string, tool: string): Capability {
  return { kind: "mcp/request", to: [owner], payload: { method: "tools/call", params: { name: tool } } };
}

/** The one tool a capability names, if it names exactly one (no globs in owner or name). */
export function specificTool(c: Capability): { owner: string; tool: string } | undefined {
  if (c.kind !== "mcp/request" || !Array.isArray(c["to"]) || c["to"].length !== 1) return undefined;
  const payload = c["payload"] as { method?: unknown; params?: { name?: unknown } } | undefined;
  const owner = c["to"][0];
  const tool = payload?.params?.name;
  if (payload?.method !== "tools/call" || typeof owner !== "string" || typeof tool !== "string" || /[*!?{}[\]]/.test(owner + tool))
    return undefined;
  return { owner, tool };
}
