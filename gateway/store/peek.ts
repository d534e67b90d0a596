/**
 * Looking at a JSON line without building it: `peekRecord` checks that the bytes are one
 * JSON value exactly as `JSON.parse` would accept it, and gives a shallow view of it — the
 * scalar members of the top-level object and of its object members (strings only up to
 * `PEEK_STRING` bytes). A migration's first pass reads every line of a file that may hold
 * lines of many MB (a proposal's arguments) this way, in no more memory than the line's
 * bytes: no string of the line, no objects of its contents.
 *
 * Iterative, so no nesting depth overflows the stack (JSON.parse has no such limit either).
 */

/** Longest string put in a view; longer ones are left out of it. */
export const PEEK_STRING = 4096;

export type Peeked = { kind: "object"; view: Record<string, unknown> } | { kind: "other" } | { kind: "invalid" };

const INVALID: Peeked = { kind: "invalid" };
const WS = new Uint8Array(256);
for (const c of [0x20, 0x09, 0x0a, 0x0d]) WS[c] = 1;
const HEX = new Uint8Array(256);
for (const c of "0123456789abcdefABCDEF") HEX[c.charCodeAt(0)] = 1;
const ESCAPE = new Uint8Array(256);
for (const c of '"\\/bfnrt') ESCAPE[c.charCodeAt(0)] = 1;

export function peekRecord(b: Buffer): Peeked {
  const n = b.length;
  /** Open containers: true for an array; and the view each one fills (depth 1 and 2 objects). */
  const arrays: boolean[] = [];
  const views: Array<Record<string, unknown> | undefined> = [];
  let root: Record<string, unknown> | undefined;
  let key: string | undefined;
  let i = skipWs(b, 0);

  value: for (;;) {
    if (i >= n) return INVALID;
    const c = b[i]!;
    const into = views.at(-1);
    let scalar: unknown;
    let end: number;
    if (c === 0x7b || c === 0x5b) {
      let view: Record<string, unknown> | undefined;
      if (c === 0x7b && arrays.length === 0) view = root = Object.create(null) as Record<string, unknown>;
      else if (c === 0x7b && arrays.length === 1 && into && key !== undefined)
        view = into[key] = Object.create(null) as Record<string, unknown>;
      arrays.push(c === 0x5b);
      views.push(view);
      i = skipWs(b, i + 1);
      if (b[i] === (c === 0x7b ? 0x7d : 0x5d)) {
        i++;
      } else if (c === 0x7b) {
        const k = memberKey(b, i, view);
        if (k === undefined) return INVALID;
        [i, key] = k;
        continue;
      } else continue;
      arrays.pop();
      views.pop();
    } else {
      if (c === 0x22) end = skipString(b, i);
      else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) end = skipNumber(b, i);
      else end = skipLiteral(b, i);
      if (end < 0) return INVALID;
      if (into && key !== undefined && !arrays.at(-1)) {
        if (c !== 0x22) scalar = JSON.parse(b.toString("latin1", i, end));
        else if (end - i <= PEEK_STRING) scalar = JSON.parse(b.toString("utf8", i, end));
        if (scalar !== undefined) into[key] = scalar;
      }
      i = end;
    }
    // After a value: the next member or element, or the end of containers.
    for (;;) {
      i = skipWs(b, i);
      if (arrays.length === 0) return i === n ? (root ? { kind: "object", view: root } : { kind: "other" }) : INVALID;
      const array = arrays.at(-1)!;
      if (b[i] === 0x2c) {
        i = skipWs(b, i + 1);
        if (array) continue value;
        const k = memberKey(b, i, views.at(-1));
        if (k === undefined) return INVALID;
        [i, key] = k;
        continue value;
      }
      if (b[i] !== (array ? 0x5d : 0x7d)) return INVALID;
      i++;
      arrays.pop();
      views.pop();
    }
  }
}

/** A member's key and colon at `i`: the index of its value and the key (decoded only when a view wants it). */
function memberKey(b: Buffer, i: number, view: Record<string, unknown> | undefined): [number, string | undefined] | undefined {
  if (b[i] !== 0x22) return undefined;
  const end = skipString(b, i);
  if (end < 0) return undefined;
  const key = view && end - i <= PEEK_STRING ? (JSON.parse(b.toString("utf8", i, end)) as string) : undefined;
  const colon = skipWs(b, end);
  if (b[colon] !== 0x3a) return undefined;
  return [skipWs(b, colon + 1), key];
}

function skipWs(b: Buffer, i: number): number {
  while (i < b.length && WS[b[i]!]) i++;
  return i;
}

/** The index after the string starting at `i`, or -1. */
function skipString(b: Buffer, i: number): number {
  const n = b.length;
  for (i++; i < n; ) {
    const c = b[i]!;
    if (c === 0x22) return i + 1;
    if (c < 0x20) return -1;
    if (c !== 0x5c) {
      i++;
      continue;
    }
    const e = b[i + 1];
    if (e === 0x75) {
      if (!(HEX[b[i + 2]!] && HEX[b[i + 3]!] && HEX[b[i + 4]!] && HEX[b[i + 5]!]) || i + 5 >= n) return -1;
      i += 6;
    } else if (e !== undefined && ESCAPE[e]) i += 2;
    else return -1;
  }
  return -1;
}

/** The index after the number starting at `i` (-? int frac? exp?), or -1. */
function skipNumber(b: Buffer, i: number): number {
  const digits = (from: number) => {
    let j = from;
    while (b[j]! >= 0x30 && b[j]! <= 0x39) j++;
    return j;
  };
  if (b[i] === 0x2d) i++;
  if (b[i] === 0x30) i++;
  else if (b[i]! >= 0x31 && b[i]! <= 0x39) i = digits(i);
  else return -1;
  if (b[i] === 0x2e) {
    const j = digits(i + 1);
    if (j === i + 1) return -1;
    i = j;
  }
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++;
    if (b[i] === 0x2b || b[i] === 0x2d) i++;
    const j = digits(i);
    if (j === i) return -1;
    i = j;
  }
  return i;
}

function skipLiteral(b: Buffer, i: number): number {
  for (const word of ["true", "false", "null"]) if (b.toString("latin1", i, i + word.length) === word) return i + word.length;
  return -1;
}
