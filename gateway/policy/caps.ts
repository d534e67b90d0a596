/**
 * Caps: how many calls (and how much cost) a person, an agent, a tool or a caller may run in a
 * minute (space.yaml `caps:` and `costs:`, config/guards.ts). The decision point asks `over`
 * before a call (authority.ts: past a cap, the call is refused or held for a person); the router
 * counts each call as it leaves (`plan`, calls/router.ts), whichever path it took.
 *
 * Counted where the space's state is kept: each count is a `cap` record in the space's store,
 * written behind the call, so the counts survive a restart (the journal) and a node killed
 * mid-minute (a cluster keeps a space's state on NATS JetStream, cluster/bus-store.ts, and the
 * node that takes the space over reads them back). Windows are whole minutes of the clock
 * (UTC): a count belongs to the minute it was made in, and a minute past is forgotten.
 *
 *   person  the person a call acts for: the caller when it is a human, or the person who
 *           approved it (calls/person.ts); an agent's unheld call counts for no person;
 *   agent   the caller, when it is an agent;
 *   tool    `participant/tool`, whoever calls it;
 *   caller  the caller, whatever it is.
 * A call's cost is `costs:` (the first glob that matches `participant/tool`), else the tool's
 * own `_meta["mewgate/cost"]` as its server declared it, else 0.
 */
import type { SpaceConfig } from "../config/config.js";
import type { CapConfig } from "../config/guards.js";
import type { Plan } from "../store/plan.js";
import type { Registry } from "../tools/registry.js";
import { compileGlob } from "./capabilities.js";
import { expandRuleGlob, type Groups } from "./groups.js";
import { type ErrorCode, ErrorCodes } from "../wire/error-codes.js";

/** One count, as the store keeps it: `calls` and `cost` added to `key` in `minute`. */
export interface CapRecord {
  type: "cap";
  key: string;
  minute: number;
  calls: number;
  cost: number;
}

/** A cap a call would break. */
export interface CapBreach {
  cap: string;
  per: CapConfig["per"];
  subject: string;
  action: CapConfig["action"];
  /** `calls` or `cost`, with the limit and what was used this minute. */
  what: "calls" | "cost";
  limit: number;
  used: number;
  text: string;
}

/** One cap's use this minute, for the console and `/metrics`. */
export interface CapUse {
  cap: string;
  per: CapConfig["per"];
  subject: string;
  calls: number;
  cost: number;
  calls_per_minute?: number;
  cost_per_minute?: number;
}

interface Compiled {
  name: string;
  config: CapConfig;
  tools: (name: string) => boolean;
}

export const minuteOf = (ms: number) => Math.floor(ms / 60_000);
/** Most distinct subjects counted in a minute: past it a new subject is counted under one shared key. */
const MAX_KEYS = 50_000;

export class Caps {
  private compiled: Compiled[] = [];
  private costs: Array<[(name: string) => boolean, number]> = [];
  /** This minute's counts by `cap\0subject`. */
  private counts = new Map<string, { calls: number; cost: number }>();
  private minute = 0;

  constructor(
    private readonly config: Pick<SpaceConfig, "caps" | "costs" | "groups" | "participants">,
    private readonly groups: Groups,
    private readonly registry: Registry,
    /** The clock the minutes are read from: a replay (learn/replay.ts) sets it to each recorded call's time. */
    public now: () => number = Date.now,
  ) {
    this.reset();
  }

  /** Compiles the caps again (the space was reloaded); the counts stay. */
  reset(): void {
    this.compiled = this.config.caps.map((c, i) => {
      const globs = c.tools.flatMap((t) => expandRuleGlob(t, this.config.groups)).map((t) => compileGlob(t));
      return { name: c.name ?? `caps[${i}]`, config: c, tools: (n: string) => globs.some((t) => t(n)) };
    });
    this.costs = Object.entries(this.config.costs).map(([glob, cost]) => [compileGlob(glob), cost]);
  }

  get any(): boolean {
    return this.compiled.length > 0;
  }

  /** The cost of one call of `owner/tool`. */
  costOf(owner: string, tool: string): number {
    const name = `${owner}/${tool}`;
    for (const [test, cost] of this.costs) if (test(name)) return cost;
    const declared = this.registry.get(owner, tool)?._meta?.["mewgate/cost"];
    return typeof declared === "number" && Number.isFinite(declared) && declared >= 0 ? declared : 0;
  }

  private subject(c: Compiled, caller: string, owner: string, tool: string, approver?: string): string | undefined {
    switch (c.config.per) {
      case "person": {
        const who = approver ?? caller;
        return this.config.participants[who]?.kind === "human" ? who : undefined;
      }
      case "agent":
        return this.config.participants[caller]?.kind === "agent" ? caller : undefined;
      case "tool":
        return `${owner}/${tool}`;
      default:
        return caller;
    }
  }

  private applying(caller: string, owner: string, tool: string, approver?: string): Array<{ c: Compiled; subject: string }> {
    const out: Array<{ c: Compiled; subject: string }> = [];
    for (const c of this.compiled) {
      if (!c.tools(`${owner}/${tool}`)) continue;
      if (!c.config.callers.includes("*") && !this.groups.names(c.config.callers, caller)) continue;
      const subject = this.subject(c, caller, owner, tool, approver);
      if (subject !== undefined) out.push({ c, subject });
    }
    return out;
  }

  /** This minute's counts, the earlier ones forgotten. */
  private current(): Map<string, { calls: number; cost: number }> {
    const m = minuteOf(this.now());
    if (m !== this.minute) {
      this.minute = m;
      this.counts = new Map();
    }
    return this.counts;
  }

  private keyOf(c: Compiled, subject: string): string {
    const k = `${c.name}\u0000${subject}`;
    const counts = this.current();
    return counts.has(k) || counts.size < MAX_KEYS ? k : `${c.name}\u0000(others)`;
  }

  /** The names of the caps that count a call of `owner/tool` by `caller` (for explain). */
  names(caller: string, owner: string, tool: string): string[] {
    return this.applying(caller, owner, tool).map(({ c }) => c.name);
  }

  /**
   * The first cap one more call of `owner/tool` by `caller` would break this minute, if any (a
   * refusal before a hold). `approver`: the person whose approval runs it (per-person caps count
   * that person); `only`: the caps of one action.
   */
  over(
    caller: string,
    owner: string,
    tool: string,
    opts: { approver?: string | undefined; only?: CapConfig["action"] } = {},
  ): CapBreach | undefined {
    if (!this.any) return undefined;
    let found: CapBreach | undefined;
    const cost = this.costOf(owner, tool);
    for (const { c, subject } of this.applying(caller, owner, tool, opts.approver)) {
      if (opts.only !== undefined && c.config.action !== opts.only) continue;
      const used = this.current().get(this.keyOf(c, subject)) ?? { calls: 0, cost: 0 };
      const breach = (what: "calls" | "cost", limit: number, was: number): CapBreach => ({
        cap: c.name,
        per: c.config.per,
        subject,
        action: c.config.action,
        what,
        limit,
        used: was,
        text:
          what === "calls"
            ? `${c.name}: ${subject} has made ${was} of ${limit} calls this minute`
            : `${c.name}: ${subject} has spent ${round(was)} of ${limit} this minute; this call costs ${round(cost)}`,
      });
      const b =
        c.config.calls_per_minute !== undefined && used.calls + 1 > c.config.calls_per_minute
          ? breach("calls", c.config.calls_per_minute, used.calls)
          : c.config.cost_per_minute !== undefined && used.cost + cost > c.config.cost_per_minute + 1e-9
            ? breach("cost", c.config.cost_per_minute, used.cost)
            : undefined;
      if (b && (found === undefined || (b.action === "refuse" && found.action === "hold"))) found = b;
    }
    return found;
  }

  /** The count of one call that leaves now (`approver`: the person whose approval let it run), applied at once and written behind. */
  plan(caller: string, owner: string, tool: string, approver?: string): Plan<CapRecord> | undefined {
    if (!this.any) return undefined;
    const cost = this.costOf(owner, tool);
    const minute = minuteOf(this.now());
    const records: CapRecord[] = this.applying(caller, owner, tool, approver).map(({ c, subject }) => ({
      type: "cap",
      key: this.keyOf(c, subject),
      minute,
      calls: 1,
      cost,
    }));
    if (records.length === 0) return undefined;
    return {
      records,
      apply: () => {
        for (const r of records) this.apply(r);
      },
    };
  }

  /** Counts a record (from a plan, or read back from the store): one of an earlier minute is forgotten. */
  apply(r: CapRecord): void {
    if (r.minute !== minuteOf(this.now())) return;
    const counts = this.current();
    const was = counts.get(r.key) ?? { calls: 0, cost: 0 };
    counts.set(r.key, { calls: was.calls + (Number(r.calls) || 0), cost: was.cost + (Number(r.cost) || 0) });
  }

  /** Forgets every count (a `policy test` case starts from none). */
  clear(): void {
    this.counts = new Map();
  }

  /** This minute's counts as records, for a compacted store. */
  snapshot(): CapRecord[] {
    const minute = minuteOf(this.now());
    return [...this.current()].map(([key, v]) => ({ type: "cap", key, minute, calls: v.calls, cost: v.cost }));
  }

  /** This minute's use of every cap, for the console and `/metrics`. */
  uses(): CapUse[] {
    const out: CapUse[] = [];
    for (const [key, v] of this.current()) {
      const [name, subject] = key.split("\u0000") as [string, string];
      const c = this.compiled.find((x) => x.name === name);
      if (!c) continue;
      out.push({
        cap: name,
        per: c.config.per,
        subject,
        calls: v.calls,
        cost: round(v.cost),
        ...(c.config.calls_per_minute !== undefined ? { calls_per_minute: c.config.calls_per_minute } : {}),
        ...(c.config.cost_per_minute !== undefined ? { cost_per_minute: c.config.cost_per_minute } : {}),
      });
    }
    return out.sort((a, b) => a.cap.localeCompare(b.cap) || a.subject.localeCompare(b.subject));
  }
}

const round = (n: number) => Math.round(n * 1e6) / 1e6;

/** The part of a verdict (authority.ts `Verdict`) the caps read and write. */
type VerdictLike =
  | { decision: "direct" | "proposal"; cap?: CapBreach; reason?: unknown }
  | { decision: "denied"; code: ErrorCode; message: string; extra?: Record<string, unknown>; reason?: unknown };

/**
 * The caps' say on a call the rules and guards let through: past a cap, `refuse` denies it
 * (`cap_exceeded`) and `hold` makes it a proposal for a person. `confirming` (the approver's
 * bar) is not capped here: a person's approval is what a hold waits for, and the caps that
 * refuse meet the approved call where it leaves (calls/guarded.ts `capRefusal`), counted for
 * the person who approved it.
 */
export function capped<V extends VerdictLike>(caps: Caps, verdict: V, caller: string, owner: string, tool: string, confirming: boolean): V {
  if (verdict.decision === "denied" || confirming || !caps.any) return verdict;
  const breach = caps.over(caller, owner, tool);
  if (!breach) return verdict;
  if (breach.action === "refuse")
    return {
      decision: "denied",
      code: ErrorCodes.capExceeded,
      message: `a cap of the space is reached (${breach.text}); try again next minute`,
      extra: { tool: `${owner}/${tool}`, cap: breach },
      ...(verdict.reason ? { reason: verdict.reason } : {}),
    } as unknown as V;
  return { ...verdict, decision: "proposal", cap: breach };
}

/** What explain says of the caps: those that count the call (by name), and the one it would break this minute, with what it does. */
export function explainCaps(
  caps: Caps,
  caller: string,
  owner: string,
  tool: string,
  verdict: VerdictLike,
): { view: { applying: string[]; breach?: CapBreach }; said: string } | undefined {
  const applying = caps.names(caller, owner, tool);
  if (!applying.length) return undefined;
  const breach =
    verdict.decision === "denied"
      ? verdict.code === ErrorCodes.capExceeded
        ? (verdict.extra?.["cap"] as CapBreach | undefined)
        : undefined
      : verdict.cap;
  if (!breach) return { view: { applying }, said: "" };
  const did = breach.action === "refuse" ? "refuses it until next minute" : "holds it for a person";
  return { view: { applying, breach }, said: `and a cap ${did}: ${breach.text}` };
}
