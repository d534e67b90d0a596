/**
 * Tool policy: may this participant call `participant/tool` directly, only through a
 * proposal, or not at all?
 *
 * A participant's `tools: {allow, ask, deny}` globs are compiled once. The decision for a
 * `tools/call`, first that applies:
 *   1. a `deny` glob matches                      → denied
 *   2. a capability granted at runtime matches     → direct   (an "always" approval)
 *   3. an `ask` glob matches                       → proposal
 *   4. an `allow` glob or a configured capability  → direct
 *   5. the tool's annotations: readOnlyHint        → direct
 *      or its server's autoApprove list (mcpServers) names it → direct
 *   6. the space's fallback                        → proposal (default), direct or denied
 * A tool whose definition changed since it was confirmed (ports/pins.ts) is called directly
 * by none of 4–6 until a person approves a call of it, and only by grants given on its
 * current digest (authority.ts).
 * Grants sit above `ask` so that approving "always" really stops the asking; `deny` stays
 * above everything, since it is the operator's explicit word.
 *
 * `allow` globs also compile to MEW capability patterns, which go into the participant's
 * capability list, so MEW clients read the same permissions in their welcome.
 */
import { type Capability, compileGlob, type Matcher } from "./capabilities.js";
import type { ToolPolicy } from "../config/config.js";

export type Decision = "direct" | "proposal" | "denied";
export type Fallback = "allow" | "ask" | "deny";
type Rule = "allow" | "ask" | "deny";

export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  [k: string]: unknown;
}

export class CompiledPolicy {
  private readonly rules: { rule: Rule; test: (name: string) => boolean }[] = [];

  constructor(policy: ToolPolicy | undefined) {
    // Order of the list is the precedence: deny, then ask, then allow.
    for (const rule of ["deny", "ask", "allow"] as const) {
      for (const glob of policy?.[rule] ?? []) this.rules.push({ rule, test: compileGlob(glob) });
    }
  }

  /** The strongest rule whose glob matches `participant/tool`, if any. */
  rule(name: string): Rule | undefined {
    for (const r of this.rules) if (r.test(name)) return r.rule;
    return undefined;
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
   * The tool's definition changed since it was last confirmed (ports/pins.ts): no rule,
   * capability, annotation or fallback lets it be called directly until a person approves
   * a call of the new one. Grants are checked against their digest by the caller.
   */
  unconfirmed?: boolean | undefined;
  /** A grant matches the tool but was given on another definition of it. */
  grantSuspended?: boolean | undefined;
}

/** Why a call that would be direct needs a proposal after its tool changed (pins.ts). */
export const DEFINITION_CHANGED = "the tool's definition changed since it was allowed";

export function decide(input: DecisionInput): Decision {
  return decideWhy(input).decision;
}

/** The decision and, in words for a person, the rule that made it. */
export function decideWhy(input: DecisionInput): { decision: Decision; why: string } {
  const name = `${input.owner}/${input.tool}`;
  const rule = input.policy.rule(name);
  if (rule === "deny") return { decision: "denied", why: `a deny rule matches ${name}` };
  const shape = toolCallShape(input.owner, input.tool);
  if (input.granted(shape)) return { decision: "direct", why: "a grant (an always-approval) covers it" };
  if (rule === "ask") return { decision: "proposal", why: `an ask rule matches ${name}` };
  const direct = (why: string): { decision: Decision; why: string } =>
    input.unconfirmed ? { decision: "proposal", why: `${DEFINITION_CHANGED} (${why}); approving a call confirms the new definition` } : { decision: "direct", why };
  if (rule === "allow") return direct(`an allow rule matches ${name}`);
  if (input.configured(shape)) return direct("the participant's capabilities allow it");
  if (input.annotations?.readOnlyHint === true) return direct("the tool says it is read-only");
  if (input.autoApproved) return direct("its server's autoApprove lists it");
  const decision = input.fallback === "allow" ? "direct" : input.fallback === "deny" ? "denied" : "proposal";
  if (decision === "proposal" && input.grantSuspended) return { decision, why: `${DEFINITION_CHANGED} (a grant was given on its earlier definition)` };
  if (decision === "direct") return direct(`no rule matches: the space's fallback is ${input.fallback}`);
  return { decision, why: `no rule matches and the tool is not read-only: the space's fallback is ${input.fallback}` };
}

/** `fs/read_*` → a MEW pattern allowing tools/call of `read_*` on `fs`. */
export function allowCapabilities(policy: ToolPolicy | undefined): Capability[] {
  return (policy?.allow ?? []).map((glob) => {
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
  if (payload?.method !== "tools/call" || typeof owner !== "string" || typeof tool !== "string" || /[*!?{}[\]]/.test(owner + tool)) return undefined;
  return { owner, tool };
}
