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
 * Marks a history record whose keys were written in canonical order at every depth (its
 * maker built it so: calls/direct-audit.ts), so that `JSON.stringify` of it is its
 * canonical JSON and sealing it skips the sorted copy. Left off any record it does not hold for.
 */
export const IN_ORDER: unique symbol = Symbol("keys in canonical order");

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

/**
 * A record's canonical JSON (its `chain` left out), and a way to make the canonical JSON of
 * the record with its `chain` member: the same text with the member slipped in where its key
 * sorts. Records' own keys ("entry", "type", "ts", …) sort after "chain", so this is
 * usually "{" + member + "," + the rest.
 */
function canonicalWithLink(rest: Record<string, unknown>): { text: string; withLink: (member: string) => string } {
  const sorted = sortedCopy(rest);
  if (sorted !== NOT_SORTABLE) {
    const first = Object.keys(sorted as object)[0];
    if (first === undefined || first > "chain") {
      const text = JSON.stringify(sorted);
      // (Members that JSON leaves out, undefined ones, may have been all there was.)
      return { text, withLink: (member) => (text === "{}" ? `{${member}}` : `{${member},${text.slice(1)}`) };
    }
  }
  const pairs = canonicalPairs(rest);
  let body = "";
  for (let j = 1; j < pairs.length; j += 2) body += `${j > 1 ? "," : ""}${pairs[j]}`;
  return {
    text: `{${body}}`,
    withLink: (member) => {
      const parts: string[] = [];
      let placed = false;
      for (let j = 0; j < pairs.length; j += 2) {
        if (!placed && pairs[j]! > "chain") {
          parts.push(member);
          placed = true;
        }
        parts.push(pairs[j + 1]!);
      }
      if (!placed) parts.push(member);
      return `{${parts.join(",")}}`;
    },
  };
}

function withoutChain(r: Record<string, unknown>): Record<string, unknown> {
  const { chain: _chain, ...rest } = r;
  void _chain;
  return rest;
}

/** `canonicalWithLink` for a record marked IN_ORDER whose keys all sort after "chain": its JSON is already canonical. */
function inOrder(r: unknown): { text: string; withLink: (member: string) => string } | undefined {
  const o = r as Record<string | symbol, unknown>;
  if (o[IN_ORDER] !== true || "chain" in o) return undefined;
  const first = Object.keys(o)[0];
  if (first === undefined || first < "chain") return undefined;
  const text = JSON.stringify(o);
  return { text, withLink: (member) => (text === "{}" ? `{${member}}` : `{${member},${text.slice(1)}`) };
}

/** The head of the chain: the digest the next history record links to. */
export class Chain {
  constructor(public head = "") {}

  /**
   * Returns `txn` with each history record replaced by a chained copy (the caller's
   * objects are left alone), moving the head on. `undo` puts the head back. `json[i]` is
   * record i's JSON when sealing made it already (a history record: its canonical JSON,
   * the text its digest covers with the link slipped in), for the frame to use as it is.
   */
  seal<R>(txn: R[], isHistory: (r: R) => boolean): { records: R[]; json: Array<string | undefined>; undo: () => void } {
    const before = this.head;
    let any = false;
    const json: Array<string | undefined> = new Array(txn.length);
    const records = txn.map((r, i) => {
      if (!isHistory(r)) return r;
      any = true;
      const { text, withLink } = inOrder(r) ?? canonicalWithLink(withoutChain(r as Record<string, unknown>));
      const d = digestText(this.head, text);
      const link: ChainLink = { p: this.head, d };
      const sealed = { ...r, chain: link } as R;
      json[i] = withLink(`"chain":{"d":${JSON.stringify(d)},"p":${JSON.stringify(link.p)}}`);
      this.head = nextPrev(sealed as { type: string; chain: ChainLink }) ?? d;
      return sealed;
    });
    return { records: any ? records : txn, json, undo: () => (this.head = before) };
  }

  /** Follows a record already written (on open): the head moves to it. */
  follow(r: { type: string; chain?: ChainLink; to?: string }): void {
    const next = nextPrev(r);
    if (next !== undefined) this.head = next;
  }
}
