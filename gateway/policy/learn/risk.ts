/**
 * A proposal's risk, stated: a level (low, medium, high) from facts the gateway holds, with
 * each reason in words, so a person sees why a card is in front of them and which deserve a
 * closer look. The facts, from the first call on, at every depth of the arguments:
 *   - the tool's hints, with MCP's defaults where it declares none: destructive (high) unless
 *     it says it is read-only or not destructive, open-world (medium) unless it says not;
 *   - its definition changed since it was confirmed (high), or the gateway flagged its texts (high);
 *   - what the arguments hold (policy/content/): a secret, shell syntax in a command or a
 *     download-and-run anywhere, a `..` or escape, control characters, a secret-like or system
 *     path (high); a hidden or home path, personal data (an email, a phone or card number) (medium);
 *   - a guard of the space holds the call (policy/guards.ts): what it found (high), so no
 *     reviewer's bound lets it through without a person;
 *   - a URL to a host none of this proposer's calls that ran went to (medium);
 *   - a path outside every directory this proposer's calls that ran touched (medium);
 *   - the first call of this tool by this proposer (none of its earlier ones ran) (medium);
 *   - a person rejected calls like this before (medium);
 *   - large arguments, so a large change to read (medium past 4 KiB, high past 64 KiB);
 *   - what the server says of the tool's risk (SEP-2793's annotations, `serverRisk`): its
 *     `riskLevel` (high or critical: high; medium: medium), `reversibility` (none: high;
 *     manual: medium), `blastRadius` (organization or global: high; cluster or namespace:
 *     medium), `approvalRecommendation: multi` (medium). Read only to add a reason: a server
 *     that calls its tool low-risk lowers nothing, and a value outside the vocabulary is ignored.
 * Low means none of these: nothing new and nothing dangerous, and `summary` says both.
 */
import { isCommandTool, type Signal, signalsOf } from "../content/signals.js";
import type { PastCall } from "./history.js";

export type RiskLevel = "low" | "medium" | "high";

export type RiskCode =
  | "destructive"
  | "open_world"
  | "definition_changed"
  | "flagged"
  | "secret"
  | "personal"
  | "guard"
  | "shell"
  | "sensitive_path"
  | "hidden_path"
  | "traversal"
  | "control"
  | "new_host"
  | "new_path"
  | "first_use"
  | "rejected_before"
  | "large"
  | "server_risk"
  | "irreversible"
  | "blast_radius"
  | "multi_approval";

export interface RiskReason {
  code: RiskCode;
  level: Exclude<RiskLevel, "low">;
  text: string;
}

export interface Risk {
  level: RiskLevel;
  reasons: RiskReason[];
  /** The level in words: what is new or dangerous, or that nothing is. */
  summary: string;
}

export interface RiskFacts {
  proposer: string;
  tool: string;
  args: Record<string, unknown>;
  annotations?: Record<string, unknown> | undefined;
  definitionChanged?: boolean | undefined;
  flagged?: boolean | undefined;
  /** What a guard of the space that holds the call found (policy/guards.ts), in words, masked. */
  guarded?: readonly string[] | undefined;
  /** This proposer's recorded calls, every tool. */
  byProposer: readonly PastCall[];
  /** This proposer's recorded calls of this tool. */
  byTool: readonly PastCall[];
  /** The proposal's own id, left out of its history. */
  id: string;
}

/** What a tool's hints say, MCP's defaults filling in what it does not (destructive and open-world unless read-only). */
export interface Traits {
  readOnly: boolean;
  destructive: boolean;
  openWorld: boolean;
  /** Whether it declares any hint at all. */
  declared: boolean;
}

export function traitsOf(a: Record<string, unknown> | undefined): Traits {
  const readOnly = a?.["readOnlyHint"] === true;
  return {
    readOnly,
    destructive: !readOnly && a?.["destructiveHint"] !== false,
    openWorld: !readOnly && a?.["openWorldHint"] !== false,
    declared: a !== undefined && Object.keys(a).some((k) => k.endsWith("Hint")),
  };
}

/**
 * What a server says of its tool's risk in the annotations SEP-2793 proposes (`riskLevel`,
 * `reversibility`, `blastRadius`, `approvalRecommendation`), as reasons: only values of the
 * draft's vocabulary, and only those that raise the risk.
 */
export function serverRisk(tool: string, a: Record<string, unknown> | undefined): RiskReason[] {
  if (!a) return [];
  const out: RiskReason[] = [];
  const said = (k: string): string | undefined => (typeof a[k] === "string" ? (a[k] as string) : undefined);
  const level = said("riskLevel");
  if (level === "high" || level === "critical")
    out.push({ code: "server_risk", level: "high", text: `its server says ${tool}'s risk is ${level}` });
  else if (level === "medium") out.push({ code: "server_risk", level: "medium", text: `its server says ${tool}'s risk is medium` });
  const undo = said("reversibility");
  if (undo === "none") out.push({ code: "irreversible", level: "high", text: `its server says ${tool} cannot be undone` });
  else if (undo === "manual") out.push({ code: "irreversible", level: "medium", text: `its server says ${tool} is undone only by hand` });
  const blast = said("blastRadius");
  if (blast === "organization" || blast === "global")
    out.push({
      code: "blast_radius",
      level: "high",
      text: `its server says ${tool} reaches a whole ${blast === "global" ? "world" : "organization"}`,
    });
  else if (blast === "cluster" || blast === "namespace")
    out.push({ code: "blast_radius", level: "medium", text: `its server says ${tool} reaches a whole ${blast}` });
  if (said("approvalRecommendation") === "multi")
    out.push({ code: "multi_approval", level: "medium", text: `its server recommends more than one approver for ${tool}` });
  return out;
}

const KIB = 1024;
const SIGNAL_REASON: Record<Signal["kind"], { code: RiskCode; level: "medium" | "high" } | undefined> = {
  secret: { code: "secret", level: "high" },
  personal: { code: "personal", level: "medium" },
  shell: { code: "shell", level: "high" },
  sensitive: { code: "sensitive_path", level: "high" },
  traversal: { code: "traversal", level: "high" },
  control: { code: "control", level: "high" },
  hidden: { code: "hidden_path", level: "medium" },
  url: undefined,
  // Arguments past what the reading takes (a value nested or numerous beyond its bounds); size alone is `large` below.
  large: { code: "large", level: "medium" },
};

/** Every path-looking string in a value (a `/`, no space, not a URL), at every depth, bounded. */
function pathsIn(v: unknown, out: string[] = [], budget = { left: 2000 }): string[] {
  if (--budget.left < 0) return out;
  if (typeof v === "string") {
    if (v.includes("/") && !/\s/.test(v) && !v.includes("://") && v.length <= 4096) out.push(v);
  } else if (Array.isArray(v)) for (const x of v) pathsIn(x, out, budget);
  else if (typeof v === "object" && v !== null) for (const x of Object.values(v)) pathsIn(x, out, budget);
  return out;
}

const dirOf = (v: string) => v.slice(0, v.lastIndexOf("/") + 1);
/** A directory a past path counts for: never the root, never empty. */
const touched = (d: string) => d !== "" && d !== "/" && !d.split("/").includes("..");

export function riskOf(f: RiskFacts): Risk {
  const reasons: RiskReason[] = [];
  const traits = traitsOf(f.annotations);
  const undeclared = traits.declared ? "" : " (it declares no hints: MCP's default)";
  if (traits.destructive)
    reasons.push({
      code: "destructive",
      level: "high",
      text: f.annotations?.["destructiveHint"] === true ? `${f.tool} says it is destructive` : `${f.tool} may be destructive${undeclared}`,
    });
  if (traits.openWorld)
    reasons.push({ code: "open_world", level: "medium", text: `${f.tool} may reach outside the space (open-world)${undeclared}` });
  if (f.definitionChanged)
    reasons.push({ code: "definition_changed", level: "high", text: `${f.tool}'s definition changed since it was confirmed` });
  if (f.flagged) reasons.push({ code: "flagged", level: "high", text: `the gateway flagged ${f.tool}'s description` });
  for (const g of f.guarded?.slice(0, 8) ?? []) reasons.push({ code: "guard", level: "high", text: `a guard holds it for a person: ${g}` });
  reasons.push(...serverRisk(f.tool, f.annotations));
  const signals = signalsOf(f.args, isCommandTool(f.tool));
  const said = new Set<string>();
  for (const s of signals) {
    const r = SIGNAL_REASON[s.kind];
    if (!r) continue;
    const text = `${s.field} holds ${s.detail}`;
    if (said.has(text)) continue;
    said.add(text);
    reasons.push({ code: r.code, level: r.level, text });
  }
  const past = f.byTool.filter((c) => c.id !== f.id);
  // A use is a call that ran: approved as proposed or edited (a pending or withdrawn one is no use).
  const ran = (c: PastCall) => c.said === "approved" || c.said === "edited";
  if (!past.some(ran)) reasons.push({ code: "first_use", level: "medium", text: `the first call of ${f.tool} by ${f.proposer}` });
  const rejected = past.filter((c) => c.said === "rejected").length;
  if (rejected)
    reasons.push({
      code: "rejected_before",
      level: "medium",
      text: `people rejected ${rejected} call(s) of ${f.tool} by ${f.proposer} before`,
    });
  const history = f.byProposer.filter((c) => c.id !== f.id && ran(c));
  const hosts = new Set<string>();
  const dirs = new Set<string>();
  for (const c of history) {
    for (const s of signalsOf(c.args)) if (s.host) hosts.add(s.host);
    for (const p of pathsIn(c.args)) if (touched(dirOf(p))) dirs.add(dirOf(p));
  }
  for (const s of signals) {
    if (s.kind === "url" && s.host !== undefined && !hosts.has(s.host))
      reasons.push({
        code: "new_host",
        level: "medium",
        text: `${s.field} goes to ${s.host}, where none of ${f.proposer}'s calls went before`,
      });
  }
  const seenPaths = new Set<string>();
  for (const p of pathsIn(f.args)) {
    const d = dirOf(p);
    if (seenPaths.has(d)) continue;
    seenPaths.add(d);
    if (!touched(d) || ![...dirs].some((seen) => d.startsWith(seen)))
      reasons.push({
        code: "new_path",
        level: "medium",
        text: `${JSON.stringify(p.slice(0, 80))} is outside every directory ${f.proposer} touched before${dirs.size ? "" : " (none yet)"}`,
      });
  }
  let size = 0;
  try {
    size = JSON.stringify(f.args).length;
  } catch {
    size = 0;
  }
  if (size > 4 * KIB)
    reasons.push({
      code: "large",
      level: size > 64 * KIB ? "high" : "medium",
      text: `its arguments are ${Math.round(size / KIB)} KiB to read`,
    });
  const level: RiskLevel = reasons.some((r) => r.level === "high") ? "high" : reasons.length ? "medium" : "low";
  const summary =
    level === "low"
      ? `low: nothing new (${f.proposer} has run ${past.filter(ran).length} call(s) of ${f.tool}, in places it used before) and nothing dangerous found (no secret, shell syntax, unseen host or sensitive path)`
      : `${level}: ${reasons
          .filter((r) => r.level === level)
          .map((r) => r.text)
          .slice(0, 3)
          .join("; ")}`;
  return { level, reasons, summary };
}
