/**
 * The history chain: every history record (the audit trail) carries `chain: {p, d}`, where
 * `p` is the digest of the history record written before it and
 * `d = sha256(p + "\n" + canonical JSON of the record without its chain)`. Changing,
 * removing, inserting or reordering a record breaks the link at that record, which
 * `verifyHistory` (verify.ts) names.
 *
 * The journal seals each batch as it encodes it (journal.ts), so the chain follows the
 * order of the file exactly; a batch that fails to write gives its links back.
 *
 * Retention may drop records (archive.ts). Where it does, it leaves a `checkpoint` record
 * in their place, itself chained, that says how many were dropped, whose, and the digest
 * of the last one dropped (`to`): the record after the cut links to `to`, so the chain
 * stays checkable across the gap. The first record of the oldest segment links to
 * whatever came before it (segments dropped whole by age); verify says where it starts.
 *
 * What this holds against: a record edited, dropped or slipped in by hand, a participant
 * or a bug that rewrites a file. It does not hold against someone who rewrites the whole
 * chain from the cut on with their own digests (there is no key): an export to a SIEM
 * (`mewgate audit --json`) with the head digest of that moment (`audit verify --json`)
 * pins what was there.
 */
import { createHash } from "node:crypto";

export interface ChainLink {
  /** The digest of the history record before this one ("" for the first ever). */
  p: string;
  /** This record's digest. */
  d: string;
}

/** What retention leaves where it dropped records (archive.ts). */
export interface CheckpointRecord {
  type: "checkpoint";
  ts: string;
  /** Records dropped here, and whose they were. */
  dropped: number;
  participants: string[];
  /** The digest of the last record dropped: the next record links to it. */
  to: string;
  chain?: ChainLink;
}

/**
 * JSON with object keys sorted at every depth and `undefined` members left out — what
 * `JSON.stringify` writes and `JSON.parse` reads back, in one order, so a record hashes
 * the same before it is written and after it is read.
 */
export function canonical(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined || typeof v === "function" ? "null" : canonical(v))).join(",")}]`;
  const keys = Object.keys(value as object)
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined && typeof (value as Record<string, unknown>)[k] !== "function")
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(",")}}`;
}

/** The digest of `record` (its `chain` left out) following `prev`. */
export function digestOf(prev: string, record: object): string {
  const { chain: _chain, ...rest } = record as { chain?: unknown };
  void _chain;
  return createHash("sha256")
    .update(`${prev}\n${canonical(rest)}`, "utf8")
    .digest("hex");
}

/** The digest a chained record links on to: `to` for a checkpoint (the cut), else its own. */
export function nextPrev(record: { type: string; chain?: ChainLink; to?: string }): string | undefined {
  if (!record.chain) return undefined;
  return record.type === "checkpoint" && typeof record.to === "string" ? record.to : record.chain.d;
}

/** The head of the chain: the digest the next history record links to. */
export class Chain {
  constructor(public head = "") {}

  /**
   * Returns `txn` with each history record replaced by a chained copy (the caller's
   * objects are left alone), moving the head on. `undo` puts the head back.
   */
  seal<R>(txn: R[], isHistory: (r: R) => boolean): { records: R[]; undo: () => void } {
    const before = this.head;
    let any = false;
    const records = txn.map((r) => {
      if (!isHistory(r)) return r;
      any = true;
      const d = digestOf(this.head, r as object);
      const sealed = { ...r, chain: { p: this.head, d } } as R;
      this.head = nextPrev(sealed as { type: string; chain: ChainLink }) ?? d;
      return sealed;
    });
    return { records: any ? records : txn, undo: () => (this.head = before) };
  }

  /** Follows a record already written (on open): the head moves to it. */
  follow(r: { type: string; chain?: ChainLink; to?: string }): void {
    const next = nextPrev(r);
    if (next !== undefined) this.head = next;
  }
}
