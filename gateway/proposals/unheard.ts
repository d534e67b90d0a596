/**
 * What became of a proposal its proposer could not hear. A proposal that ends (answered,
 * failed, rejected, withdrawn, expired) while its proposer has no connection to the space
 * sends its answer or decision to nobody: an MCP client whose task it is (the MCP faces'
 * approvals as tasks) would find it "not found" from its next session, although the call
 * may have run. So such an end is written with the proposal's last record (`unheard` on the
 * proposal: book.ts), the call's answer with it, and kept for the proposer alone to ask
 * for (`proposals/get` on `system:gateway`, requests/endpoint.ts) for as long as its
 * `tools/call` asked (`_meta["mewgate/task_ttl_ms"]`, the task's TTL: between a minute and a
 * day, an hour when it did not say). It is durable like the rest of the book: a restart
 * keeps it, a compaction writes it again until its time is up.
 *
 * Bounded: at most `MAX_PER_PROPOSER` ends kept per proposer (past it an end is not kept),
 * and at most `MAX_BYTES` of answers in all (past it, or for an answer bigger than
 * `MAX_ANSWER_BYTES`, the end is kept without its answer, saying why).
 *
 * Kept slim: the proposal's id, who proposed it and to whom, the tool, and how it ended;
 * never its arguments (they are in its `proposed` record and the audit trail).
 */

/** The `tools/call` `_meta` key by which a proposer says how long it wants an unheard end kept (ms). */
export const TASK_TTL_META_KEY = "mewgate/task_ttl_ms";
export const UNHEARD_DEFAULT_MS = 60 * 60_000;
const MIN_MS = 60_000;
const MAX_MS = 24 * 60 * 60_000;
export const MAX_PER_PROPOSER = 100;
export const MAX_BYTES = 32 * 1024 * 1024;
export const MAX_ANSWER_BYTES = 4 * 1024 * 1024;

/** The answer of a call, as its `mcp/response` payload carried it. */
export interface Answer {
  result?: unknown;
  error?: unknown;
}

/** How an unheard end is kept: until when, and the call's answer (or why not). */
export interface UnheardEnd {
  /** Kept until then (ms since the epoch). */
  until: number;
  /** When it ended. */
  at: string;
  /** The call's answer: set when the call ran and was answered (or failed at the gateway) and the answer fit. */
  answer?: Answer | undefined;
  /** Why the answer is not here although the call ended (too big, or too many bytes kept). */
  dropped?: string | undefined;
  /** The answer's size as JSON. */
  bytes?: number | undefined;
}

/** What keeping needs of a proposal (book.ts `Proposal` is one). */
export interface Ended {
  id: string;
  proposer: string;
  owner: string;
  method: string;
  tool?: string | undefined;
  params: Record<string, unknown>;
  state: string;
  createdAt: string;
  decidedBy?: string | undefined;
  reason?: string | undefined;
  text?: string | undefined;
  outcome?: string | undefined;
  unheard?: UnheardEnd | undefined;
}

/** The unheard ends kept, oldest first. */
export class Unheard<P extends Ended> {
  private readonly kept = new Map<string, P>();
  private readonly counts = new Map<string, number>();
  private bytes = 0;

  /**
   * The mark of `p` ending now while its proposer is away, with the call's answer if it has
   * one; undefined when the proposer already has as many ends kept as it may.
   */
  mark(p: P, answer: Answer | undefined, now = Date.now()): UnheardEnd | undefined {
    this.sweep(now);
    if ((this.counts.get(p.proposer) ?? 0) >= MAX_PER_PROPOSER) return undefined;
    const base = { until: now + keepFor(p.params), at: new Date(now).toISOString() };
    if (answer === undefined) return base;
    // The answer alone: its JSON-RPC envelope (id, version) was the call's.
    const only: Answer = answer.error !== undefined ? { error: answer.error } : { result: answer.result };
    const bytes = Buffer.byteLength(JSON.stringify(only));
    if (bytes > MAX_ANSWER_BYTES) return { ...base, bytes, dropped: `the answer was ${bytes} bytes, more than the gateway keeps` };
    if (this.bytes + bytes > MAX_BYTES) return { ...base, bytes, dropped: "the gateway keeps no more answers nobody heard just now" };
    return { ...base, bytes, answer: only };
  }

  /** Keeps `p` (ended, marked), slimmed; one whose time is up is not kept. */
  keep(p: P, now = Date.now()): void {
    const end = p.unheard;
    if (!end || end.until <= now) return;
    this.drop(p.id);
    const slim = {
      ...p,
      params: typeof p.params["name"] === "string" ? { name: p.params["name"] } : {},
      envelope: undefined,
      chain: [],
      editedArguments: undefined,
      approvals: undefined,
      droppedApprovals: undefined,
    };
    this.kept.set(p.id, slim);
    this.counts.set(p.proposer, (this.counts.get(p.proposer) ?? 0) + 1);
    if (end.answer !== undefined) this.bytes += end.bytes ?? 0;
  }

  /** The end of `id` kept for `proposer`; nobody else's. */
  of(id: unknown, proposer: string, now = Date.now()): P | undefined {
    this.sweep(now);
    const p = typeof id === "string" ? this.kept.get(id) : undefined;
    return p && p.proposer === proposer ? p : undefined;
  }

  /** Every end still kept: what a compaction writes again. */
  live(now = Date.now()): P[] {
    this.sweep(now);
    return [...this.kept.values()];
  }

  private sweep(now: number): void {
    for (const p of this.kept.values()) if (p.unheard!.until <= now) this.drop(p.id);
  }

  private drop(id: string): void {
    const p = this.kept.get(id);
    if (!p) return;
    this.kept.delete(id);
    const n = (this.counts.get(p.proposer) ?? 1) - 1;
    if (n > 0) this.counts.set(p.proposer, n);
    else this.counts.delete(p.proposer);
    if (p.unheard?.answer !== undefined) this.bytes -= p.unheard.bytes ?? 0;
  }
}

/** How long the proposer asked an unheard end be kept (its `tools/call`'s `_meta`), within the bounds. */
function keepFor(params: Record<string, unknown>): number {
  const meta = params["_meta"];
  const asked = typeof meta === "object" && meta !== null ? (meta as Record<string, unknown>)[TASK_TTL_META_KEY] : undefined;
  if (typeof asked !== "number" || !Number.isFinite(asked)) return UNHEARD_DEFAULT_MS;
  return Math.min(MAX_MS, Math.max(MIN_MS, Math.floor(asked)));
}

/** A proposal named for its proposer: who, to whom, which tool; never its arguments. */
function named(p: Ended): Record<string, unknown> {
  return {
    id: p.id,
    from: p.proposer,
    to: [p.owner],
    kind: "mcp/proposal",
    ts: p.createdAt,
    payload: { method: p.method, params: p.tool === undefined ? {} : { name: p.tool } },
  };
}

/** An approved proposal whose call runs now, as `proposals/get` answers its proposer. */
export function runningView(p: Ended): { proposal: Record<string, unknown>; running: Record<string, unknown> } {
  return { proposal: named(p), running: { state: p.state, ...(p.decidedBy === undefined ? {} : { by: p.decidedBy }) } };
}

/**
 * An unheard end as `proposals/get` answers its proposer: the proposal named (never its
 * arguments) and how it ended — the decision, the outcome, and the call's answer if kept.
 */
export function unheardView(
  p: Ended,
  budget = Number.POSITIVE_INFINITY,
): { proposal: Record<string, unknown>; ended: Record<string, unknown> } {
  const end = p.unheard!;
  // The answer came in one frame; with what surrounds it here it may not fit one again.
  const fits = end.answer === undefined || (end.bytes ?? 0) <= budget - 2048;
  const dropped = fits ? end.dropped : `the answer was ${end.bytes} bytes, more than one frame holds with the rest of this reply`;
  return {
    proposal: named(p),
    ended: {
      state: p.state,
      at: end.at,
      ...(p.decidedBy === undefined ? {} : { by: p.decidedBy }),
      ...(p.reason === undefined ? {} : { reason: p.reason }),
      ...(p.text === undefined ? {} : { text: p.text }),
      ...(p.outcome === undefined ? {} : { outcome: p.outcome }),
      ...(end.answer === undefined || !fits ? {} : { answer: end.answer }),
      ...(dropped === undefined ? {} : { dropped }),
    },
  };
}
