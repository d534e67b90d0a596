/**
 * Fatigue, measured: signs that people approve without reading, from the audit trail and
 * from what the console fetched.
 *   - time to decide, per person (median and 90th percentile, from a proposal to its decision);
 *   - decisions per person per hour (over the span of their decisions, at least an hour);
 *   - approvals given within QUICK_MS of the proposal on a card whose preview that person
 *     never opened (`opened` says which were: the gateway notes each preview fetched);
 *   - rejection and edit rates per proposer and tool.
 * Served as JSON (operator API), in /metrics and drawn small in the console.
 */
import type { PastCall } from "./history.js";

export const QUICK_MS = 2000;
/** The most proposer/tool rows kept (the busiest). */
const MAX_ROWS = 200;

export interface PersonFatigue {
  person: string;
  decisions: number;
  approvals: number;
  per_hour: number;
  median_seconds: number;
  p90_seconds: number;
  /** Approvals within QUICK_MS on a card whose preview this person never opened. */
  quick_unopened: number;
}

export interface ToolRates {
  proposer: string;
  tool: string;
  decided: number;
  approved: number;
  rejected: number;
  edited: number;
  rejection_rate: number;
  edit_rate: number;
}

export interface Fatigue {
  people: PersonFatigue[];
  tools: ToolRates[];
  quick_ms: number;
}

const at = (sorted: number[], q: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]! : 0;

export function fatigue(calls: readonly PastCall[], opened: (proposal: string, person: string) => boolean): Fatigue {
  const people = new Map<string, { waits: number[]; first: number; last: number; approvals: number; quick: number }>();
  const tools = new Map<string, ToolRates>();
  for (const c of calls) {
    if (c.said === "undecided" || !c.by || !c.decidedAt) continue;
    const decided = Date.parse(c.decidedAt);
    const wait = Math.max(0, decided - Date.parse(c.ts));
    if (!Number.isFinite(wait)) continue;
    const p = people.get(c.by) ?? { waits: [], first: decided, last: decided, approvals: 0, quick: 0 };
    p.waits.push(wait);
    p.first = Math.min(p.first, decided);
    p.last = Math.max(p.last, decided);
    if (c.said !== "rejected") {
      p.approvals++;
      if (wait < QUICK_MS && !opened(c.id, c.by)) p.quick++;
    }
    people.set(c.by, p);
    const key = `${c.proposer}\u0000${c.owner}/${c.tool}`;
    const t = tools.get(key) ?? {
      proposer: c.proposer,
      tool: `${c.owner}/${c.tool}`,
      decided: 0,
      approved: 0,
      rejected: 0,
      edited: 0,
      rejection_rate: 0,
      edit_rate: 0,
    };
    t.decided++;
    t[c.said]++;
    tools.set(key, t);
  }
  const round = (x: number) => Math.round(x * 1000) / 1000;
  return {
    quick_ms: QUICK_MS,
    people: [...people].map(([person, p]) => {
      const sorted = [...p.waits].sort((a, b) => a - b);
      const hours = Math.max(1, (p.last - p.first) / 3_600_000);
      return {
        person,
        decisions: sorted.length,
        approvals: p.approvals,
        per_hour: round(sorted.length / hours),
        median_seconds: round(at(sorted, 0.5) / 1000),
        p90_seconds: round(at(sorted, 0.9) / 1000),
        quick_unopened: p.quick,
      };
    }),
    tools: [...tools.values()]
      .map((t) => ({ ...t, rejection_rate: round(t.rejected / t.decided), edit_rate: round(t.edited / t.decided) }))
      .sort((a, b) => b.decided - a.decided)
      .slice(0, MAX_ROWS),
  };
}
