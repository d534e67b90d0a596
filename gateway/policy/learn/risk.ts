/**
 * A proposal's risk, stated: a level (low, medium, high) from facts the gateway holds, with
 * each reason in words, so a person sees why a card is in front of them and which deserve a
 * closer look. The facts:
 *   - the tool's hints: destructive (high), open-world (medium);
 *   - its definition changed since it was confirmed (high), or the gateway flagged its texts (high);
 *   - a path-like argument outside every directory this proposer's calls that ran touched (medium);
 *   - the first call of this tool by this proposer (none of its earlier ones ran) (medium);
 *   - a person rejected calls like this before (medium);
 *   - large arguments, so a large change to read (medium past 4 KiB, high past 64 KiB).
 * Low means none of these: a pattern people have approved, on a tool that says it is safe.
 */
import type { PastCall } from "./history.js";

export type RiskLevel = "low" | "medium" | "high";

export interface RiskReason {
  code: "destructive" | "open_world" | "definition_changed" | "flagged" | "new_path" | "first_use" | "rejected_before" | "large";
  level: Exclude<RiskLevel, "low">;
  text: string;
}

export interface Risk {
  level: RiskLevel;
  reasons: RiskReason[];
}

export interface RiskFacts {
  proposer: string;
  tool: string;
  args: Record<string, unknown>;
  annotations?: Record<string, unknown> | undefined;
  definitionChanged?: boolean | undefined;
  flagged?: boolean | undefined;
  /** This proposer's recorded calls, every tool. */
  byProposer: readonly PastCall[];
  /** This proposer's recorded calls of this tool. */
  byTool: readonly PastCall[];
  /** The proposal's own id, left out of its history. */
  id: string;
}

const dirOf = (v: string) => v.slice(0, v.lastIndexOf("/") + 1);
const KIB = 1024;

export function riskOf(f: RiskFacts): Risk {
  const reasons: RiskReason[] = [];
  if (f.annotations?.["destructiveHint"] === true)
    reasons.push({ code: "destructive", level: "high", text: `${f.tool} says it is destructive` });
  if (f.annotations?.["openWorldHint"] === true)
    reasons.push({ code: "open_world", level: "medium", text: `${f.tool} reaches outside the space (open-world)` });
  if (f.definitionChanged)
    reasons.push({ code: "definition_changed", level: "high", text: `${f.tool}'s definition changed since it was confirmed` });
  if (f.flagged) reasons.push({ code: "flagged", level: "high", text: `the gateway flagged ${f.tool}'s description` });
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
  if (history.length >= 3) {
    const dirs = new Set<string>();
    for (const c of history) for (const v of Object.values(c.args)) if (typeof v === "string" && v.includes("/")) dirs.add(dirOf(v));
    for (const [k, v] of Object.entries(f.args)) {
      if (typeof v !== "string" || !v.includes("/")) continue;
      const d = dirOf(v);
      if (d.includes("..") || ![...dirs].some((seen) => d.startsWith(seen) && seen !== "")) {
        reasons.push({ code: "new_path", level: "medium", text: `${k} is outside every directory ${f.proposer} touched before` });
      }
    }
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
  return { level, reasons };
}
