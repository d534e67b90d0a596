/**
 * MEW v0.4 capabilities: JSON patterns matched against envelopes, compiled once per
 * participant (on join or when its grants change) and run once per inbound envelope.
 *
 * Pattern semantics — our definition of MEW's "JSON pattern". "Absent" means the property is
 * missing (or `undefined`, which JSON cannot carry).
 *  - Object pattern: the value is a non-null, non-array object and every key of the pattern
 *    matches the value's own property of that name. Keys not in the pattern (or whose pattern
 *    is `undefined`) are unconstrained.
 *  - String pattern:
 *      "*"      any present value of any type (string, number, object, ...), never absent.
 *      "!rest"  negation: the value is absent or `rest` (itself a string pattern) does not
 *               match it. So `{kind: "!chat"}` is every kind but chat, and a non-string value
 *               matches `!glob`.
 *      glob     each `*` matches any run of characters, possibly empty; everything else is
 *               literal, regex specials included. There is no escape: a literal `*` in a value
 *               is matched only by a wildcard. Non-string values never match.
 *  - Number / boolean / null pattern: strict equality.
 *  - Array pattern: against an array value, every element pattern matches at least one element
 *    (subset); against anything else, including absent, some element pattern matches (any-of).
 *  - Anything else (non-JSON), or nesting deeper than MAX_PATTERN_DEPTH, matches nothing. No
 *    operator negates a sub-pattern (only string patterns negate), so "matches nothing" can
 *    only narrow a capability: it fails closed.
 * A capability matches an envelope when its object pattern matches the envelope object, so it
 * may constrain `kind`, `payload`, `to`, `context`, ... A capability set matches when any of
 * its capabilities does.
 */

// The type is declared beside its schema (config/config.ts), the lowest floor that names it.
import type { Capability } from "../config/config.js";
import { isRecord } from "../wire/values.js";
export type { Capability };

export type Matcher = (envelope: { kind: string; payload?: unknown; [k: string]: unknown }) => boolean;

/** Deeper sub-patterns match nothing (and `covers` refuses them), so no pattern can blow the stack. */
export const MAX_PATTERN_DEPTH = 32;

type Test = (value: unknown) => boolean;
type StringTest = (s: string) => boolean;
type Rec = Record<string, unknown>;

const BANG = 33; // "!"
const hasOwn = Object.hasOwn;
const never: Test = () => false;
const present: Test = (v) => v !== undefined;
const matchAll: Matcher = () => true;
const matchNone: Matcher = () => false;

function own(v: Rec, k: string): unknown {
  return hasOwn(v, k) ? v[k] : undefined;
}

// ---------------------------------------------------------------------------------------------
// Globs

/**
 * Compiles a `*`-only glob. Literal, prefix and suffix shapes get direct string checks; with
 * two or more stars the middle pieces are found left to right with indexOf. That scan is
 * linear and exact (placing each piece as early as possible never loses a match), unlike a
 * backtracking RegExp, which a granted pattern like `*a*a*a*a*b` could make exponential.
 */
export function compileGlob(pattern: string): StringTest {
  if (!pattern.includes("*")) return (s) => s === pattern;
  const parts = pattern.split("*");
  const head = parts[0]!;
  const tail = parts[parts.length - 1]!;
  const middle = parts.slice(1, -1).filter((p) => p.length > 0);
  const min = head.length + tail.length + middle.reduce((n, p) => n + p.length, 0);
  if (middle.length === 0) {
    if (min === 0) return () => true;
    if (tail === "") return (s) => s.startsWith(head);
    if (head === "") return (s) => s.endsWith(tail);
    return (s) => s.length >= min && s.startsWith(head) && s.endsWith(tail);
  }
  return (s) => {
    if (s.length < min || !s.startsWith(head) || !s.endsWith(tail)) return false;
    const end = s.length - tail.length;
    let at = head.length;
    for (let i = 0; i < middle.length; i++) {
      const piece = middle[i]!;
      const found = s.indexOf(piece, at);
      if (found < 0 || found + piece.length > end) return false;
      at = found + piece.length;
    }
    return true;
  };
}

const GLOB_CACHE_LIMIT = 512;
const globCache = new Map<string, StringTest>();

/** Plain `*` glob match (no `!`, no "any type" rule), e.g. for `participant/tool` policy globs. */
export function matchesGlob(pattern: string, value: string): boolean {
  let test = globCache.get(pattern);
  if (test === undefined) {
    // Patterns come from config and grants, so few are distinct; the limit only bounds abuse.
    if (globCache.size >= GLOB_CACHE_LIMIT) globCache.clear();
    test = compileGlob(pattern);
    globCache.set(pattern, test);
  }
  return test(value);
}

// ---------------------------------------------------------------------------------------------
// Compilation

function compileString(pattern: string): Test {
  let bangs = 0;
  while (pattern.charCodeAt(bangs) === BANG) bangs++;
  const rest = bangs === 0 ? pattern : pattern.slice(bangs);
  let base: Test;
  if (rest === "*") base = present;
  else if (!rest.includes("*")) base = (v) => v === rest;
  else {
    const glob = compileGlob(rest);
    base = (v) => typeof v === "string" && glob(v);
  }
  if (bangs === 0) return base;
  // "!r" is absent-or-not-r; negating that again gives absent-or-r, and so on alternately.
  // Counting instead of recursing keeps a string of a million "!" off the stack.
  return bangs % 2 === 1 ? (v) => v === undefined || !base(v) : (v) => v === undefined || base(v);
}

function compileArray(pattern: readonly unknown[], depth: number): Test {
  const tests = pattern.map((p) => compileNode(p, depth + 1));
  const n = tests.length;
  return (v) => {
    if (Array.isArray(v)) {
      outer: for (let i = 0; i < n; i++) {
        const test = tests[i]!;
        for (let j = 0; j < v.length; j++) if (test(v[j])) continue outer;
        return false;
      }
      return true;
    }
    for (let i = 0; i < n; i++) if (tests[i]!(v)) return true;
    return false;
  };
}

function compileObject(pattern: Rec, depth: number): Test {
  const keys: string[] = [];
  const tests: Test[] = [];
  for (const k of Object.keys(pattern)) {
    const p = pattern[k];
    if (p === undefined) continue;
    keys.push(k);
    tests.push(compileNode(p, depth + 1));
  }
  const n = keys.length;
  return (v) => {
    if (!isRecord(v)) return false;
    for (let i = 0; i < n; i++) {
      const k = keys[i]!;
      // Own properties only: `{constructor: "*"}` must not match through the prototype.
      if (!tests[i]!(hasOwn(v, k) ? v[k] : undefined)) return false;
    }
    return true;
  };
}

function compileNode(pattern: unknown, depth: number): Test {
  if (depth > MAX_PATTERN_DEPTH) return never;
  if (typeof pattern === "string") return compileString(pattern);
  if (typeof pattern === "number" || typeof pattern === "boolean" || pattern === null) {
    return (v) => v === pattern;
  }
  if (Array.isArray(pattern)) return compileArray(pattern, depth);
  if (isRecord(pattern)) return compileObject(pattern, depth);
  return never;
}

/** Compiles one capability into a matcher over envelopes. Never throws. */
export function compileCapability(cap: Capability): Matcher {
  return compileNode(cap, 0);
}

// Only `kind: "*"` constrains anything, and a validated envelope always has a string kind.
function isUniversal(cap: Capability): boolean {
  if (!isRecord(cap) || cap.kind !== "*") return false;
  for (const k of Object.keys(cap)) if (k !== "kind" && cap[k] !== undefined) return false;
  return true;
}

/**
 * Compiles a capability set: an envelope passes when any capability matches. Assumes the
 * envelope was schema-validated (a string `kind`), which lets `{kind: "*"}` short-circuit.
 */
export function compileCapabilities(caps: readonly Capability[]): Matcher {
  if (caps.some(isUniversal)) return matchAll;
  const matchers = caps.map(compileCapability);
  const n = matchers.length;
  if (n === 0) return matchNone;
  if (n === 1) return matchers[0]!;
  return (envelope) => {
    for (let i = 0; i < n; i++) if (matchers[i]!(envelope)) return true;
    return false;
  };
}

// ---------------------------------------------------------------------------------------------
// Subsumption: may a holder of `held` lend `wanted`?

/**
 * True when some single capability in `held` matches every envelope `wanted` matches, so a
 * `capability/grant` of `wanted` lends nothing the granter lacks. Sound, not complete: when
 * in doubt it answers false. (A union of held capabilities jointly covering `wanted` is not
 * recognised.) Never throws.
 */
export function covers(held: readonly Capability[], wanted: Capability): boolean {
  for (const h of held) {
    if (deepEqual(h, wanted, 0) || (isRecord(h) && subsumesObject(h, wanted, 0, true))) return true;
  }
  return false;
}

/** Does pattern `h` match every value (absent included) that pattern `w` matches? */
function subsumes(h: unknown, w: unknown, depth: number): boolean {
  if (h === undefined) return true; // unconstrained
  if (depth > MAX_PATTERN_DEPTH) return false;
  if (deepEqual(h, w, depth)) return true;
  // `w` matches exactly one value, so running `h` on it decides the question exactly.
  if (isSingleton(w)) return compileNode(h, depth)(w);
  if (typeof h === "string") return subsumesString(h, w, depth);
  if (isRecord(h)) return subsumesObject(h, w, depth, false);
  return false; // numbers, booleans, null, arrays: only an equal pattern (checked above)
}

function isSingleton(w: unknown): boolean {
  if (typeof w === "string") return w.charCodeAt(0) !== BANG && !w.includes("*");
  return typeof w === "number" || typeof w === "boolean" || w === null;
}

function subsumesObject(h: Rec, w: unknown, depth: number, envelope: boolean): boolean {
  if (!isRecord(w)) return false;
  for (const k of Object.keys(h)) {
    const hv = h[k];
    // On a validated envelope `kind` is always a present string, so `kind: "*"` constrains
    // nothing there and subsumes every kind pattern, negations included.
    if (envelope && k === "kind" && hv === "*") continue;
    if (!subsumes(hv, own(w, k), depth + 1)) return false;
  }
  return true;
}

function subsumesString(h: string, w: unknown, depth: number): boolean {
  // "*" takes any present value, so it subsumes whatever cannot match an absent one.
  if (h === "*") return !canMatchAbsent(w, depth);
  if (h.charCodeAt(0) !== BANG) {
    // `h` is a glob and matches strings only. `w` must be a glob too (not "*", which also
    // matches non-strings). If `h` matches w's text with w's `*`s read as plain characters,
    // it matches every string `w` does: `h` has no literal `*`, so each `*` character of that
    // text was consumed inside one of h's wildcards, and that wildcard can consume whatever
    // run replaces it instead.
    return typeof w === "string" && w !== "*" && w.charCodeAt(0) !== BANG && compileGlob(h)(w);
  }
  const x = h.slice(1);
  // "!x" vs "!y": both take absent; a present v passing "!y" (not y) must fail x, i.e. x ⊆ y.
  if (typeof w === "string" && w.charCodeAt(0) === BANG) return subsumes(w.slice(1), x, depth + 1);
  // "!x" vs a positive `w`: sound when no present value matches both.
  return disjoint(x, w);
}

/** Provably no present value matches both the string pattern `x` and the pattern `w`. */
function disjoint(x: string, w: unknown): boolean {
  // Only a positive glob `x` is considered: it matches strings and nothing else.
  if (x === "*" || x.charCodeAt(0) === BANG) return false;
  if (isRecord(w)) return true; // an object pattern matches objects only
  if (typeof w !== "string" || w === "*" || w.charCodeAt(0) === BANG) return false;
  if (!x.includes("*")) return !compileGlob(w)(x); // `x` is one literal string: test it
  // A string matching both globs starts with both literal heads and ends with both literal
  // tails, so if either pair clashes there is no such string.
  const xh = literalHead(x),
    wh = literalHead(w),
    xt = literalTail(x),
    wt = literalTail(w);
  return (!xh.startsWith(wh) && !wh.startsWith(xh)) || (!xt.endsWith(wt) && !wt.endsWith(xt));
}

function literalHead(glob: string): string {
  const star = glob.indexOf("*");
  return star < 0 ? glob : glob.slice(0, star);
}

function literalTail(glob: string): string {
  return glob.slice(glob.lastIndexOf("*") + 1); // whole glob when there is no star
}

/** May `w` match an absent value? Errs towards yes. */
function canMatchAbsent(w: unknown, depth: number): boolean {
  if (w === undefined) return true;
  if (typeof w === "string") return w.charCodeAt(0) === BANG;
  if (Array.isArray(w)) return depth > MAX_PATTERN_DEPTH || w.some((e) => canMatchAbsent(e, depth + 1));
  return false;
}

/** Structural equality of JSON patterns; equal patterns compile to equal matchers. */
function deepEqual(a: unknown, b: unknown, depth: number): boolean {
  if (a === b) return true;
  if (depth > MAX_PATTERN_DEPTH || typeof a !== "object" || typeof b !== "object") return false;
  if (a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!deepEqual(a[i], b[i], depth + 1)) return false;
    return true;
  }
  const ra = a as Rec,
    rb = b as Rec;
  const keys = Object.keys(ra);
  if (keys.length !== Object.keys(rb).length) return false;
  for (const k of keys) if (!hasOwn(rb, k) || !deepEqual(ra[k], rb[k], depth + 1)) return false;
  return true;
}
