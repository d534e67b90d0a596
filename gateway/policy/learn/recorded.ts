/**
 * The space's recorded calls, as the decision desk and the cards read them: folded from the
 * audit trail (history.ts) and indexed by proposer and tool, rebuilt when a proposal changed
 * since (the space's proposal counters move), at most once per REBUILD_MS — reading the trail
 * costs in proportion to its length, and a console refreshing at every proposal of a busy
 * space must not pay it each time. A card's history may so lag the trail by that much; what
 * bounds a reviewer (`fresh`) never does.
 *
 * `riskOf` is a proposal's risk (risk.ts) over this history: what a card shows and what
 * bounds a reviewer's approval, on whichever path it comes.
 */
import type { AuditEntry } from "../../audit/entry.js";
import { pastCalls, type PastCall } from "./history.js";
import { type Risk, riskOf } from "./risk.js";

/** How many audit entries are read to learn from. */
export const LEARN_WINDOW = 100_000;
const REBUILD_MS = 1000;

export interface Indexes {
  /** Recorded calls by proposer and tool (`proposer\0owner/tool`). */
  index: Map<string, PastCall[]>;
  /** Recorded calls by proposer. */
  byProposer: Map<string, PastCall[]>;
}

/** What a risk needs of a proposal besides its history. */
export interface RiskSubject {
  id: string;
  proposer: string;
  owner: string;
  tool: string;
  args: Record<string, unknown>;
  annotations?: Record<string, unknown> | undefined;
  definitionChanged?: boolean | undefined;
  flagged?: boolean | undefined;
  /** What a guard that holds the call found, in words, masked (policy/guards.ts). */
  guarded?: readonly string[] | undefined;
}

export const indexKey = (proposer: string, owner: string, tool: string) => `${proposer}\u0000${owner}/${tool}`;

export class Recorded {
  private cached: (Indexes & { version: number; at: number }) | undefined;

  constructor(
    /** The audit entries to learn from, oldest first (at most LEARN_WINDOW). */
    private readonly read: () => readonly AuditEntry[],
    /** A number that moves whenever a proposal changes. */
    private readonly version: () => number,
    /** Who is a person (history.ts `personIn`): only their decisions count. */
    private readonly isPerson: (id: string) => boolean,
  ) {}

  /** The recorded calls, folded. */
  calls(): PastCall[] {
    return pastCalls(this.read(), this.isPerson);
  }

  /** The indexes, rebuilt if a proposal changed and REBUILD_MS passed (or at once, `fresh`). */
  indexes(fresh = false): Indexes {
    const version = this.version();
    const c = this.cached;
    if (c && (c.version === version || (!fresh && Date.now() - c.at < REBUILD_MS))) return c;
    const calls = this.calls();
    const index = new Map<string, PastCall[]>();
    const byProposer = new Map<string, PastCall[]>();
    for (const call of calls) {
      const k = indexKey(call.proposer, call.owner, call.tool);
      if (!index.has(k)) index.set(k, []);
      index.get(k)!.push(call);
      if (!byProposer.has(call.proposer)) byProposer.set(call.proposer, []);
      byProposer.get(call.proposer)!.push(call);
    }
    this.cached = { version, at: Date.now(), index, byProposer };
    return this.cached;
  }

  /** The risk of `p` over the history now (`fresh`: never a lagging one). */
  riskOf(p: RiskSubject, fresh = false): Risk {
    const { index, byProposer } = this.indexes(fresh);
    return riskOf({
      id: p.id,
      proposer: p.proposer,
      tool: `${p.owner}/${p.tool}`,
      args: p.args,
      annotations: p.annotations,
      definitionChanged: p.definitionChanged,
      flagged: p.flagged,
      guarded: p.guarded,
      byProposer: byProposer.get(p.proposer) ?? [],
      byTool: index.get(indexKey(p.proposer, p.owner, p.tool)) ?? [],
    });
  }
}
