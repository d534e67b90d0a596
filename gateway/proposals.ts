/**
 * Proposals held by the gateway: the state machine, its persistence and its audit trail.
 * Which transition an envelope asks for, and whether its sender may make it, is decided
 * in decisions.ts; mcp.ts moves a routed proposal on when its call ends.
 *
 *   pending → approved → routed → answered
 *   pending → rejected | withdrawn | expired
 *   approved | routed → failed        (the call could not be made or did not come back)
 *
 * Every transition is appended (and fsync'ed) to `proposals.jsonl` before the caller acts
 * on it, and written to `audit.jsonl` for people. On start the file is replayed: pending proposals
 * come back with their remaining time; ones that were approved or in flight when the
 * gateway died are marked failed, since their call's fate is unknown.
 */
import { join } from "node:path";
import { AppendLog } from "./store.js";

export type ProposalState = "pending" | "approved" | "routed" | "answered" | "rejected" | "withdrawn" | "expired" | "failed";

const NEXT: Record<ProposalState, readonly ProposalState[]> = {
  pending: ["approved", "rejected", "withdrawn", "expired"],
  approved: ["routed", "failed"],
  routed: ["answered", "failed"],
  answered: [],
  rejected: [],
  withdrawn: [],
  expired: [],
  failed: [],
};

export interface Proposal {
  id: string;
  proposer: string;
  /** The participant that would serve the call. */
  owner: string;
  method: string;
  params: Record<string, unknown>;
  /** For tools/call: the tool's name at its owner. */
  tool?: string | undefined;
  /** The JSON-RPC id to use when the call is routed (the caller's, when the gateway made the proposal from a tools/call). */
  rpcId: string | number;
  /** Call chain of the proposer when it proposed, so governance holds across approval. */
  chain: string[];
  state: ProposalState;
  createdAt: string;
  expiresAt: number;
  decidedBy?: string | undefined;
  scope?: "once" | "always" | undefined;
  reason?: string | undefined;
  text?: string | undefined;
  /** Arguments after an approver's edits, when they differ. */
  editedArguments?: Record<string, unknown> | undefined;
  outcome?: "ok" | "error" | undefined;
  /** The original proposal envelope, for welcomes. */
  envelope: unknown;
  /** Size of the envelope as JSON, counted against the pending quotas. */
  bytes?: number | undefined;
}

type Record_ = { type: "proposed"; proposal: Proposal } | { type: "state"; id: string; ts: string; patch: Partial<Proposal> & { state: ProposalState } };

export interface AuditEntry {
  ts: string;
  event: ProposalState | "proposed";
  proposal: string;
  proposer: string;
  owner: string;
  tool?: string | undefined;
  method: string;
  arguments?: unknown;
  by?: string | undefined;
  scope?: string | undefined;
  reason?: string | undefined;
  outcome?: string | undefined;
}

export interface AuditQuery {
  participant?: string | undefined;
  tool?: string | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
}

/** How many ended proposals are remembered, so a late decision gets "already rejected" rather than "unknown". */
const ENDED_MEMORY = 10_000;

export class ProposalBook {
  private readonly open = new Map<string, Proposal>();
  private readonly ended = new Map<string, ProposalState>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly totals = new Map<string, { count: number; bytes: number }>();
  private readonly total = { count: 0, bytes: 0 };
  private readonly log: AppendLog<Record_>;
  private readonly audit: AppendLog<AuditEntry>;

  constructor(
    stateDir: string,
    private readonly onExpire: (p: Proposal) => void,
  ) {
    this.log = new AppendLog(join(stateDir, "proposals.jsonl"));
    // The audit trail is for people: written before the decision takes effect, so a killed
    // process loses nothing, but not fsync'ed — proposals.jsonl is what restores state.
    this.audit = new AppendLog(join(stateDir, "audit.jsonl"), { fsync: false });
  }

  /** Replays the file. Returns proposals that were mid-flight at the crash, now failed. */
  restore(): Proposal[] {
    const all = new Map<string, Proposal>();
    for (const r of this.log.readAll()) {
      if (r.type === "proposed") all.set(r.proposal.id, r.proposal);
      else {
        const p = all.get(r.id);
        if (p) Object.assign(p, r.patch);
      }
    }
    const failed: Proposal[] = [];
    for (const p of all.values()) {
      if (NEXT[p.state].length === 0) this.remember(p);
      else if (p.state === "pending") {
        this.open.set(p.id, p);
        this.count(p, 1);
        this.arm(p);
      } else if (p.state === "approved" || p.state === "routed") {
        this.open.set(p.id, p);
        this.transition(p, { state: "failed", reason: "gateway_restarted" });
        failed.push(p);
      }
    }
    return failed;
  }

  get(id: string): Proposal | undefined {
    return this.open.get(id);
  }

  /** The final state of a proposal that has ended, if it is remembered. */
  endedAs(id: string): ProposalState | undefined {
    return this.ended.get(id);
  }

  pending(): Proposal[] {
    return [...this.open.values()].filter((p) => p.state === "pending");
  }

  /** How many of `proposer`'s proposals are pending, and their bytes. */
  pendingOf(proposer: string): { count: number; bytes: number } {
    return this.totals.get(proposer) ?? { count: 0, bytes: 0 };
  }

  /** How many proposals are pending in the space, and their bytes. */
  pendingTotal(): { count: number; bytes: number } {
    return this.total;
  }

  /** Keeps the pending counts as proposals come and go, so quotas cost nothing to check. */
  private count(p: Proposal, sign: 1 | -1): void {
    const bytes = (p.bytes ??= Buffer.byteLength(JSON.stringify(p.envelope))) * sign;
    const mine = this.totals.get(p.proposer) ?? { count: 0, bytes: 0 };
    mine.count += sign;
    mine.bytes += bytes;
    if (mine.count > 0) this.totals.set(p.proposer, mine);
    else this.totals.delete(p.proposer);
    this.total.count += sign;
    this.total.bytes += bytes;
  }

  add(p: Proposal): void {
    this.log.append({ type: "proposed", proposal: p });
    this.open.set(p.id, p);
    this.count(p, 1);
    this.write(p, "proposed");
    this.arm(p);
  }

  /**
   * Moves a proposal on; persisted before it returns. Throws on a transition the state
   * machine does not allow: callers check `state` first and answer with a clear error.
   */
  transition(p: Proposal, patch: Partial<Proposal> & { state: ProposalState }): void {
    if (!NEXT[p.state].includes(patch.state)) throw new Error(`proposal ${p.id}: ${p.state} → ${patch.state} is not a transition`);
    this.log.append({ type: "state", id: p.id, ts: new Date().toISOString(), patch });
    if (p.state === "pending") this.count(p, -1);
    Object.assign(p, patch);
    this.write(p, patch.state);
    if (p.state !== "pending") this.disarm(p.id);
    if (NEXT[p.state].length === 0) {
      this.open.delete(p.id);
      this.remember(p);
    }
  }

  private remember(p: Proposal): void {
    this.ended.set(p.id, p.state);
    if (this.ended.size > ENDED_MEMORY) this.ended.delete(this.ended.keys().next().value!);
  }

  close(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    this.log.close();
    this.audit.close();
  }

  /** Audit entries matching the filter, oldest first. */
  query(q: AuditQuery = {}): AuditEntry[] {
    return queryAudit(this.audit.readAll(), q);
  }

  private write(p: Proposal, event: AuditEntry["event"]): void {
    this.audit.append({
      ts: new Date().toISOString(),
      event,
      proposal: p.id,
      proposer: p.proposer,
      owner: p.owner,
      tool: p.tool,
      method: p.method,
      arguments: p.editedArguments ?? p.params["arguments"],
      by: event === "proposed" ? undefined : p.decidedBy,
      scope: p.scope,
      reason: p.reason,
      outcome: p.outcome,
    });
  }

  private arm(p: Proposal): void {
    const timer = setTimeout(() => {
      if (p.state !== "pending") return;
      this.transition(p, { state: "expired", reason: "timeout" });
      this.onExpire(p);
    }, Math.max(0, p.expiresAt - Date.now()));
    timer.unref();
    this.timers.set(p.id, timer);
  }

  private disarm(id: string): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }
}

/** Filters audit entries: by a participant in any role, by tool (`owner/tool` or bare tool name), by time. */
export function queryAudit(entries: AuditEntry[], q: AuditQuery): AuditEntry[] {
  return entries.filter((e) => {
    if (q.participant && e.proposer !== q.participant && e.by !== q.participant && e.owner !== q.participant) return false;
    if (q.tool && `${e.owner}/${e.tool}` !== q.tool && e.tool !== q.tool) return false;
    const t = Date.parse(e.ts);
    if (q.since && t < q.since.getTime()) return false;
    if (q.until && t > q.until.getTime()) return false;
    return true;
  });
}

/** Reads an audit file from a state directory without a running gateway (for `mewgate audit`). */
export function readAudit(stateDir: string, q: AuditQuery = {}): AuditEntry[] {
  return queryAudit(new AppendLog<AuditEntry>(join(stateDir, "audit.jsonl")).readAll(), q);
}
