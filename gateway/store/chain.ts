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
import * as crypto from "node:crypto";

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
 * the same before it is written and after it is read. Parsing it gives back the value, and
 * `canonical` of that is the same text again.
 *
 * Made by one `JSON.stringify` of a copy whose keys were added in sorted order, which
 * JSON.stringify keeps — except integer-like keys ("7"), which every object lists first in
 * numeric order, and an own "__proto__": a value holding one is written member by member
 * (`canonicalPairs`).
 */
export function canonical(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  const sorted = sortedCopy(value);
  return sorted === NOT_SORTABLE ? slowCanonical(value) : JSON.stringify(sorted);
}

const NOT_SORTABLE = Symbol("not sortable");

/**
 * A history record's canonical JSON (without its `chain`), made by whoever made the record
 * when that was cheaper there (calls/direct-audit.ts): sealing then hashes it as it is.
 * Non-enumerable, so neither JSON nor a copy carries it. test/chain-seal.test.ts holds a
 * maker to `canonical` of the record.
 */
export const CANONICAL: unique symbol = Symbol("canonical JSON");

/** `v` with every object's keys in canonical order, or undefined where that cannot be (an integer-like key, an own "__proto__"). */
export function inCanonicalOrder(v: unknown): unknown {
  if (v === null || typeof v !== "object") return v;
  const sorted = sortedCopy(v);
  return sorted === NOT_SORTABLE ? undefined : sorted;
}
const INDEX = /^(?:0|[1-9]\d*)$/;

/** Sorts `keys` in place as `Array.prototype.sort()` would (by UTF-16 code units). */
function sortKeys(keys: string[]): void {
  if (keys.length > 12) {
    keys.sort();
    return;
  }
  // Insertion sort for the handful of keys a record's objects have: it skips sort()'s string
  // comparator. (Past a dozen, sort() itself: a hostile object's thousands of keys.)
  for (let i = 1; i < keys.length; i++) {
    const k = keys[i]!;
    let j = i;
    while (j > 0 && keys[j - 1]! > k) {
      keys[j] = keys[j - 1]!;
      j--;
    }
    keys[j] = k;
  }
}

/** A copy of `v` with every object's keys added in sorted order, or NOT_SORTABLE where an integer-like key would not keep its place. */
function sortedCopy(v: object): unknown {
  if (Array.isArray(v)) {
    const out = new Array<unknown>(v.length);
    for (let i = 0; i < v.length; i++) {
      const x: unknown = v[i];
      if (x !== null && typeof x === "object") {
        const c = sortedCopy(x);
        if (c === NOT_SORTABLE) return NOT_SORTABLE;
        out[i] = c;
      } else out[i] = x;
    }
    return out;
  }
  const keys = Object.keys(v);
  for (const k of keys) {
    const c = k.charCodeAt(0);
    // An own "__proto__" (JSON.parse makes one) would set the copy's prototype instead.
    if ((c >= 48 && c <= 57 && INDEX.test(k)) || k === "__proto__") return NOT_SORTABLE;
  }
  sortKeys(keys);
  const out: Record<string, unknown> = {};
  for (const k of keys) {
    const x = (v as Record<string, unknown>)[k];
    if (x !== null && typeof x === "object") {
      const c = sortedCopy(x);
      if (c === NOT_SORTABLE) return NOT_SORTABLE;
      out[k] = c;
    } else out[k] = x;
  }
  return out;
}

/** `canonical` member by member: for values with integer-like keys. */
function slowCanonical(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      out += (i ? "," : "") + (v === undefined || typeof v === "function" ? "null" : slowCanonical(v));
    }
    return `${out}]`;
  }
  const pairs = canonicalPairs(value as Record<string, unknown>);
  let out = "{";
  for (let i = 1; i < pairs.length; i += 2) out += `${i > 1 ? "," : ""}${pairs[i]}`;
  return `${out}}`;
}

/**
 * An object's members as canonical JSON, sorted by key: `[key, '"key":value', key, …]`.
 * What `slowCanonical` joins; `Chain.seal` slips the `chain` member in among them.
 */
function canonicalPairs(o: Record<string, unknown>): string[] {
  const keys: string[] = [];
  for (const k of Object.keys(o)) {
    const v = o[k];
    if (v !== undefined && typeof v !== "function") keys.push(k);
  }
  sortKeys(keys);
  const out: string[] = new Array(keys.length * 2);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    out[2 * i] = k;
    out[2 * i + 1] = `${JSON.stringify(k)}:${slowCanonical(o[k])}`;
  }
  return out;
}

/** The digest of `record` (its `chain` left out) following `prev`. */
export function digestOf(prev: string, record: object): string {
  const { chain: _chain, ...rest } = record as { chain?: unknown };
  void _chain;
  return digestText(prev, canonical(rest));
}

/** `crypto.hash` (Node 20.12) hashes a short string in one call, about twice as fast as a Hash object; older Nodes get the object. */
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: "hex") => string }).hash;

function digestText(prev: string, text: string): string {
  const data = `${prev}\n${text}`;
  return oneShot ? oneShot("sha256", data, "hex") : crypto.createHash("sha256").update(data, "utf8").digest("hex");
}

/** The digest a chained record links on to: `to` for a checkpoint (the cut), else its own. */
export function nextPrev(record: { type: string; chain?: ChainLink; to?: string }): string | undefined {
  if (!record.chain) return undefined;
  return record.type === "checkpoint" && typeof record.to === "string" ? record.to : record.chain.d;
}

/** The canonical JSON its maker already made of a record (`CANONICAL`), else made here; its `chain` left out either way. */
function canonicalOf(r: unknown): string {
  const o = r as Record<string | symbol, unknown>;
  const made = o[CANONICAL];
  if (typeof made === "string" && !("chain" in o)) return made;
  const { chain: _chain, ...rest } = o as Record<string, unknown>;
  void _chain;
  return canonical(rest);
}

/** The head of the chain: the digest the next history record links to. */
export class Chain {
  constructor(public head = "") {}

  /**
   * Returns `txn` with each history record replaced by a chained copy (the caller's
   * objects are left alone), moving the head on. `undo` puts the head back. The copy is
   * written as it is (its members in their order: a person reading the trail sees the
   * arguments as they were sent); only its digest is over the canonical JSON.
   */
  seal<R>(txn: R[], isHistory: (r: R) => boolean): { records: R[]; undo: () => void } {
    const before = this.head;
    let any = false;
    const records = txn.map((r) => {
      if (!isHistory(r)) return r;
      any = true;
      const d = digestText(this.head, canonicalOf(r));
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
