/**
 * What a learned rule holds each argument to: the narrowest condition that covers every
 * approved call of a pattern and frees nothing that was not seen. Field by field:
 *
 *   - the same value every time (a string, a number, an array, an object): exactly it;
 *   - a few values, each seen more than once: one of them (`in [...]`);
 *   - a path: under a directory a call there was approved in (never the common parent of
 *     sibling directories), deeper only where deeper ones were seen, with an extension seen
 *     (and, for a destructive tool, a file name of the seen shape: `day-[0-9]+.md`), in
 *     plain characters, nothing hidden, secret-like, `..`, `~` or system (`plain_path`);
 *     a hidden or secret-like path only as it was approved, exactly;
 *   - a URL: an origin seen, a plain path, no query;
 *   - a command: one of the seen commands, or of their shapes with the words that varied
 *     held to plain words (`npm test -- <word>`): no shell control syntax, no new flags;
 *   - an array of paths or of text, or of records of text: each item held as above;
 *   - a number that varies: within the range seen;
 *   - free text (a message, a note, a file's content): `clean` at each call (no secret,
 *     personal data, shell syntax, URL or sensitive path: policy/content/signals.ts);
 *   - a value that holds a secret or personal data is never named exactly (space.yaml would
 *     hold it): it is held as free text, which `clean` then refuses;
 *   - a key seen in only some approvals: held as above whenever present;
 *   - a key never seen: refused (`args.all(k, k in [...])`).
 * Anything else (an object that varies, mixed types, a path or command past what can be
 * held) gives no rule, and says why.
 */
import { isCommandKey, isPlainPath, signalsOf } from "../content/signals.js";
import { normalisePath } from "../scope.js";
import { canonical } from "../../store/chain.js";
import type { PastCall } from "./history.js";
import { isRecord } from "../../wire/values.js";

/** At most this many distinct values of a field are listed (`in [...]`). */
export const MAX_SET = 5;
/** At most this many directories a path is held under. */
const MAX_DIRS = 6;
/** The longest value a rule names exactly, in characters of its literal. */
const MAX_LITERAL = 512;
/** How many times a directory must be seen for a destructive tool's rule to hold it. */
export const DIR_SEEN_DESTRUCTIVE = 3;

export interface Shape {
  conjuncts: string[];
  /** Field by field, what the rule allows, in words ("any value" included). */
  scope: string[];
  /** Fields held only by the content check. */
  free: string[];
}

export type Shaped = { ok: true; shape: Shape } | { ok: false; why: string };

const field = (k: string) => `args[${JSON.stringify(k)}]`;

/**
 * The most frequent of `items` (by `count`), at most `max`, when there are more than `max`:
 * only those seen at least twice. The rarer ones are left to keep asking.
 */
function commonest<T>(items: readonly T[], count: (t: T) => number, max: number): { kept: T[]; left: number } {
  if (items.length <= max) return { kept: [...items], left: 0 };
  const kept = [...items]
    .sort((a, b) => count(b) - count(a))
    .filter((t) => count(t) >= 2)
    .slice(0, max);
  return { kept, left: items.length - kept.length };
}
const rarer = (left: number, what: string) => (left ? ` (${left} rarer ${what} keep asking)` : "");
/**
 * A string as a CEL literal: JSON's escapes, plus every control, bidirectional-override and
 * invisible character as `\uXXXX`, so a rule in space.yaml never carries one raw (it would
 * make the file read otherwise than it means).
 */
const quote = (s: string) =>
  JSON.stringify(s).replace(
    /[\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
/** A literal in a regex (RE2 and JavaScript alike); `/` needs no escape, so paths stay readable. */
const reEscape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** A JSON value as a CEL literal (numbers as doubles), or undefined past MAX_LITERAL. */
export function celLiteral(v: unknown): string | undefined {
  const out = lit(v, 0);
  return out !== undefined && out.length <= MAX_LITERAL ? out : undefined;
}

function lit(v: unknown, depth: number): string | undefined {
  if (depth > 8) return undefined;
  if (v === null) return "null";
  if (typeof v === "string") return quote(v);
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "number") return Number.isFinite(v) ? (Number.isInteger(v) ? `${v}.0` : String(v)) : undefined;
  if (Array.isArray(v)) {
    const items = v.map((x) => lit(x, depth + 1));
    return items.every((x) => x !== undefined) ? `[${items.join(", ")}]` : undefined;
  }
  if (typeof v === "object") {
    const entries = Object.keys(v as object)
      .sort()
      .map((k) => {
        const x = lit((v as Record<string, unknown>)[k], depth + 1);
        return x === undefined ? undefined : `${quote(k)}: ${x}`;
      });
    return entries.every((x) => x !== undefined) ? `{${entries.join(", ")}}` : undefined;
  }
  return undefined;
}

const show = (v: unknown) => {
  const s = typeof v === "string" ? JSON.stringify(v) : canonical(v);
  return s.length > 80 ? `${s.slice(0, 79)}…` : s;
};

// --- paths --------------------------------------------------------------------------------

const SAFE_PATH = /^[A-Za-z0-9._/ -]+$/;
const NAME = "[A-Za-z0-9_][A-Za-z0-9._ -]*";
const looksLikePath = (s: string) =>
  !/\s/.test(s) && !s.includes("://") && (s.includes("/") || /^[^.\s][^/\s]*\.[A-Za-z0-9]{1,8}$/.test(s));

function dirOf(p: string): string {
  const i = p.lastIndexOf("/");
  return i < 0 ? "" : p.slice(0, i + 1);
}
const baseOf = (p: string) => p.slice(p.lastIndexOf("/") + 1);
/** Whether `p` is in `d` ("" is the top level: no directory at all), or under it when `deep`. */
const inDir = (p: string, d: string, deep = true) => (d === "" ? dirOf(p) === "" : deep ? p.startsWith(d) : dirOf(p) === d);
function extOf(name: string): string {
  const i = name.lastIndexOf(".");
  return i <= 0 ? "" : name.slice(i);
}

/** A file name's shape as a regex: letters and digit runs generalised, the rest literal (`day-3.md` → `day-[0-9]+\.md` when only the digits vary). */
function nameShapes(names: readonly string[]): string[] | undefined {
  const tokens = (n: string) => n.match(/[A-Za-z]+|[0-9]+|[^A-Za-z0-9]+/g) ?? [];
  const kind = (t: string) => (/^[A-Za-z]/.test(t) ? "L" : /^[0-9]/.test(t) ? "D" : `O${t}`);
  const groups = new Map<string, string[][]>();
  for (const n of names) {
    const ts = tokens(n);
    const key = ts.map(kind).join("\u0000");
    groups.set(key, [...(groups.get(key) ?? []), ts]);
  }
  const { kept } = commonest([...groups.values()], (g) => g.length, MAX_SET);
  if (kept.length === 0) return undefined;
  return kept.map((members) =>
    members[0]!
      .map((t, i) => {
        const all = new Set(members.map((m) => m[i]!));
        if (all.size === 1) return reEscape(t);
        return /^[0-9]/.test(t) ? "[0-9]+" : /^[a-z]+$/.test([...all].join("")) ? "[a-z]+" : "[A-Za-z]+";
      })
      .join(""),
  );
}

interface PathHold {
  /** A regex a plain path must match; with `plain_path` it is the whole hold. */
  regex: string | undefined;
  /** Values only approved exactly (hidden, secret-like). */
  exact: string[];
  words: string;
}

/** How paths `values` are held, or why they cannot be. */
function pathHold(values: readonly string[], destructive: boolean): PathHold | string {
  // Hidden, secret-like or unusual paths, and those right under the root (`/srv`): only exactly as approved.
  const exact = [
    ...new Set(
      values.filter((p) => !isPlainPath(p) || !SAFE_PATH.test(p) || normalisePath(p) !== p || p.endsWith("/") || dirOf(p) === "/"),
    ),
  ];
  const plain = values.filter((p) => !exact.includes(p));
  if (exact.length > MAX_SET) return "paths people approved are too many hidden or unusual ones to hold exactly";
  if (plain.length === 0) return { regex: undefined, exact, words: `path is exactly ${exact.map(show).join(" or ")}` };
  const count = new Map<string, number>();
  for (const p of plain) count.set(dirOf(p), (count.get(dirOf(p)) ?? 0) + 1);
  const dirs = [...count.keys()];
  // A seen directory under another seen one is covered by it (deeper files there were seen).
  const tops = dirs.filter((d) => d !== "" && !dirs.some((o) => o !== d && o !== "" && d.startsWith(o)));
  if (dirs.includes("")) tops.push("");
  const seenIn = (d: string) => plain.filter((p) => inDir(p, d)).length;
  const { kept, left } = commonest(tops, seenIn, MAX_DIRS);
  if (kept.length === 0) return `paths were approved in ${tops.length} directories, none of them twice`;
  if (destructive) {
    const seldom = kept.filter((d) => seenIn(d) < DIR_SEEN_DESTRUCTIVE);
    if (seldom.length === kept.length)
      return `for a destructive tool a directory must be seen ${DIR_SEEN_DESTRUCTIVE} times; none was (${kept.map((d) => d || "(top level)").join(", ")})`;
    // Only directories seen often enough are held; the rest keep asking.
    for (const d of seldom) kept.splice(kept.indexOf(d), 1);
  }
  const alternatives: string[] = [];
  const words: string[] = [];
  for (const d of kept) {
    const under = plain.filter((p) => inDir(p, d));
    const deep = d !== "" && dirs.some((o) => o !== d && o.startsWith(d));
    const names = under.map(baseOf);
    const exts = [...new Set(names.map(extOf))];
    if (exts.length > MAX_SET) return `file names in ${d || "the top level"} have ${exts.length} different extensions`;
    let name: string;
    let nameWords: string;
    if (destructive) {
      const shapes = nameShapes(names);
      if (!shapes) return `file names in ${d || "the top level"} have no common shape`;
      name = shapes.length === 1 ? shapes[0]! : `(?:${shapes.join("|")})`;
      nameWords = `named like ${[...new Set(names)].slice(0, 2).join(", ")}`;
    } else {
      const alts = exts.map((e) => (e === "" ? "[A-Za-z0-9_][A-Za-z0-9_ -]*" : `[A-Za-z0-9_][A-Za-z0-9._ -]*${reEscape(e)}`));
      name = alts.length === 1 ? alts[0]! : `(?:${alts.join("|")})`;
      nameWords = `a ${exts.map((e) => e || "(no extension)").join(" or ")} file`;
    }
    alternatives.push(`${reEscape(d)}${deep ? `(?:${NAME}/)*` : ""}${name}`);
    const seen = seenIn(d);
    words.push(`${nameWords} ${deep ? "in or under" : "directly in"} ${d || "the top level"} (seen ${seen} time${seen === 1 ? "" : "s"})`);
  }
  if (alternatives.length === 0) return "no directory was seen often enough";
  return {
    regex: `^(?:${alternatives.join("|")})$`,
    exact,
    words: `path is ${words.join(", or ")}; nothing hidden or secret-like${exact.length ? ` (besides ${exact.map(show).join(", ")} exactly)` : ""}${rarer(left, "directories")}`,
  };
}

function pathCondition(x: string, h: PathHold): string {
  const parts: string[] = [];
  if (h.regex !== undefined) parts.push(`(plain_path(${x}) && ${x}.matches(${quote(h.regex)}))`);
  if (h.exact.length) parts.push(`${x} in [${h.exact.map(quote).join(", ")}]`);
  return parts.length === 1 ? parts[0]! : `(${parts.join(" || ")})`;
}

// --- URLs -----------------------------------------------------------------------------------

function urlHold(values: readonly string[]): { regex: string; words: string } | string {
  const origins = new Map<string, number>();
  for (const v of values) {
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      return "a URL people approved does not parse";
    }
    if (u.username || u.password || u.search || u.hash) return "URLs people approved carry a query, a fragment or credentials";
    if (u.protocol !== "https:" && u.protocol !== "http:") return "URLs people approved are not http(s)";
    origins.set(u.origin, (origins.get(u.origin) ?? 0) + 1);
  }
  const { kept: o, left } = commonest([...origins.keys()], (x) => origins.get(x)!, MAX_SET);
  if (o.length === 0) return `URLs went to ${origins.size} sites, none of them twice`;
  return {
    regex: `^(?:${o.map(reEscape).join("|")})(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*/?$`,
    words: `url is a page of ${o.join(" or ")} (plain path, no query)${rarer(left, "sites")}`,
  };
}

// --- commands --------------------------------------------------------------------------------

const WORD = /^[A-Za-z0-9._/:=,+@%-]+$/;
const PLACEHOLDER = "[A-Za-z0-9_][A-Za-z0-9._:,+@=]*";

/** How commands `values` are held: their seen shapes, or why not. */
function commandHold(values: readonly string[]): { regex: string; exact: string[]; words: string } | string {
  const plain: string[][] = [];
  const exact = new Set<string>();
  for (const v of values) {
    const words = v.split(" ");
    if (words.every((w) => WORD.test(w))) plain.push(words);
    else exact.add(v);
  }
  if (exact.size > MAX_SET) return "commands people approved use shell syntax in too many forms to hold exactly";
  const groups = new Map<string, string[][]>();
  for (const w of plain) {
    const key = `${w.slice(0, 2).join(" ")}\u0000${w.length}`;
    groups.set(key, [...(groups.get(key) ?? []), w]);
  }
  const { kept, left } = commonest([...groups.values()], (g) => g.length, MAX_SET);
  if (kept.length === 0 && exact.size === 0) return `${groups.size} different commands were approved, none of them twice`;
  const alternatives: string[] = [];
  const words: string[] = [];
  for (const members of kept) {
    const parts: string[] = [];
    const said: string[] = [];
    for (let i = 0; i < members[0]!.length; i++) {
      const seen = new Set(members.map((m) => m[i]!));
      if (seen.size === 1 || i < 2) {
        if (seen.size > 1) return "commands differ in their leading words";
        parts.push(reEscape(members[0]![i]!));
        said.push(members[0]![i]!);
        continue;
      }
      // A word that varied: plain, or a flag whose name stayed the same (`--grep=<word>`).
      const flags = [...seen].map((w) => /^(-{1,2}[A-Za-z0-9-]+=)/.exec(w)?.[1]);
      if (flags.every((f) => f !== undefined && f === flags[0])) {
        parts.push(`${reEscape(flags[0]!)}${PLACEHOLDER}`);
        said.push(`${flags[0]}<word>`);
      } else if (seen.size <= MAX_SET) {
        // A few words seen there: one of those, not any word (`npm run lint|build`, never `npm run deploy`).
        parts.push(`(?:${[...seen].map(reEscape).join("|")})`);
        said.push([...seen].join("|"));
      } else if ([...seen].some((w) => w.startsWith("-") || w.includes("/") || w.includes(".."))) {
        return "a word that varied in approved commands was a flag or a path";
      } else {
        parts.push(PLACEHOLDER);
        said.push("<word>");
      }
    }
    alternatives.push(parts.join(" "));
    words.push(`\`${said.join(" ")}\``);
  }
  return {
    regex: alternatives.length ? `^(?:${alternatives.join("|")})$` : "",
    exact: [...exact],
    words: `one of ${[...words, ...[...exact].map((e) => `\`${e}\` exactly`)].join(", ")}: no other shell syntax or flags${rarer(left, "commands")}`,
  };
}

// --- the whole call ------------------------------------------------------------------------------

const FREE_WORDS = "any text without secrets, shell syntax, URLs or sensitive paths (checked at each call)";

/** One field's hold: a CEL condition over `x`, and its words. */
function holdField(
  k: string,
  x: string,
  values: readonly unknown[],
  opts: { destructive: boolean; command: boolean },
): { cond: string; words: string; free?: boolean } | string {
  // A secret or personal data is never written into a rule (space.yaml would hold it, and a rule
  // naming it would let it through): such values are what the guards read, never what a rule frees.
  const literals = values.map((v) => (signalsOf(v).some((s) => s.kind === "secret" || s.kind === "personal") ? undefined : celLiteral(v)));
  const distinct = [...new Set(literals)];
  if (distinct.length === 1 && distinct[0] !== undefined) return { cond: `${x} == ${distinct[0]}`, words: `${k} is ${show(values[0])}` };
  const repeating = distinct.length <= MAX_SET && distinct.length * 2 <= values.length && distinct.every((d) => d !== undefined);
  const kinds = new Set(values.map((v) => (Array.isArray(v) ? "array" : v === null ? "null" : typeof v)));
  if (kinds.size > 1) return `${k} was given values of different types`;
  const kind = [...kinds][0]!;
  if (kind === "string") {
    const strings = values as string[];
    if (isCommandKey(k) || (opts.command && strings.some((v) => v.includes(" ")))) {
      const h = commandHold(strings);
      if (typeof h === "string") return `${k}: ${h}`;
      const parts = [
        ...(h.regex ? [`${x}.matches(${quote(h.regex)})`] : []),
        ...(h.exact.length ? [`${x} in [${h.exact.map(quote).join(", ")}]`] : []),
      ];
      return { cond: parts.length > 1 ? `(${parts.join(" || ")})` : parts[0]!, words: `${k} is ${h.words}` };
    }
    if (repeating)
      return {
        cond: `${x} in [${distinct.join(", ")}]`,
        words: `${k} is one of ${values
          .filter((_, i) => literals.indexOf(literals[i]) === i)
          .map(show)
          .join(", ")}`,
      };
    if (strings.every((s) => /^https?:\/\//i.test(s))) {
      const h = urlHold(strings);
      if (typeof h === "string") return `${k}: ${h}`;
      return { cond: `${x}.matches(${quote(h.regex)}) && !${x}.contains("..")`, words: `${k}: ${h.words}` };
    }
    if (strings.every(looksLikePath)) {
      const h = pathHold(strings, opts.destructive);
      if (typeof h === "string") return `${k}: ${h}`;
      return { cond: pathCondition(x, h), words: `${k}: ${h.words}` };
    }
    if (strings.some(looksLikePath)) return `${k} held paths and other text`;
    return { cond: `clean(${x})`, words: `${k}: ${FREE_WORDS}`, free: true };
  }
  if (repeating) return { cond: `${x} in [${distinct.join(", ")}]`, words: `${k} is one of ${[...new Set(values.map(show))].join(", ")}` };
  if (kind === "number") {
    const nums = values as number[];
    const lo = Math.min(...nums);
    const hi = Math.max(...nums);
    return { cond: `${x} >= ${celLiteral(lo)} && ${x} <= ${celLiteral(hi)}`, words: `${k} is a number from ${lo} to ${hi}` };
  }
  if (kind === "array") {
    const arrays = values as unknown[][];
    if (opts.command || isCommandKey(k)) return `${k}: the command's words varied beyond ${MAX_SET} seen forms`;
    const items = arrays.flat();
    const most = Math.max(...arrays.map((a) => a.length));
    const size = `size(${x}) <= ${most}`;
    if (items.length === 0) return { cond: `size(${x}) == 0`, words: `${k} is empty` };
    if (items.every((i) => typeof i === "string")) {
      const strings = items as string[];
      if (strings.every(looksLikePath)) {
        const h = pathHold(strings, opts.destructive);
        if (typeof h === "string") return `${k}: ${h}`;
        return { cond: `${size} && ${x}.all(f, ${pathCondition("f", h)})`, words: `${k}: at most ${most}, each ${h.words}` };
      }
      if (strings.some(looksLikePath)) return `${k} held paths and other text`;
      return { cond: `${size} && ${x}.all(s, clean(s))`, words: `${k}: at most ${most} items, ${FREE_WORDS}`, free: true };
    }
    if (items.every((i) => isRecord(i))) {
      const recs = items as Record<string, unknown>[];
      const keys = [...new Set(recs.flatMap((r) => Object.keys(r)))].sort();
      if (recs.some((r) => Object.keys(r).length !== keys.length)) return `${k}: its items have different keys`;
      if (recs.some((r) => Object.values(r).some((v) => typeof v !== "string" || looksLikePath(v))))
        return `${k}: its items hold paths or values other than text`;
      return {
        cond: `${size} && ${x}.all(e, size(e) == ${keys.length} && ${keys.map((kk) => `${quote(kk)} in e`).join(" && ")} && clean(e))`,
        words: `${k}: at most ${most} items of ${keys.join(", ")}, ${FREE_WORDS}`,
        free: true,
      };
    }
    return `${k} holds lists of mixed values`;
  }
  if (kind === "object") return `${k} is an object that varied`;
  if (kind === "boolean") return { cond: `${x} in [true, false]`, words: `${k} is true or false` };
  return `${k} cannot be held`;
}

/**
 * The narrowest condition over arguments that holds for every one of `calls`, or why there is
 * none. `destructive`: file names are held to their seen shape and directories to those seen
 * DIR_SEEN_DESTRUCTIVE times. `command`: the tool runs commands, so every text is one.
 */
export function shapeOf(calls: readonly PastCall[], opts: { destructive: boolean; command: boolean }): Shaped {
  const keys = [...new Set(calls.flatMap((c) => Object.keys(c.args)))].sort();
  if (keys.some((k) => k.length > 128)) return { ok: false, why: "an argument name is over 128 characters" };
  const shape: Shape = {
    conjuncts: [`args.all(k, k in [${keys.map(quote).join(", ")}])`],
    scope: [keys.length ? `only the arguments ${keys.join(", ")}` : "no arguments"],
    free: [],
  };
  for (const k of keys) {
    const present = calls.filter((c) => Object.hasOwn(c.args, k));
    const held = holdField(
      k,
      field(k),
      present.map((c) => c.args[k]),
      opts,
    );
    if (typeof held === "string") return { ok: false, why: held };
    const optional = present.length < calls.length;
    shape.conjuncts.push(optional ? `(!(${quote(k)} in args) || ${held.cond})` : held.cond);
    shape.scope.push(optional ? `${held.words}, when given` : held.words);
    if (held.free) shape.free.push(k);
  }
  return { ok: true, shape };
}
