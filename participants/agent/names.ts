/**
 * Reversible function names for `participant/tool`.
 *
 * LLM APIs accept function names matching `^[a-zA-Z0-9_-]{1,64}$`; participant ids may
 * hold `_`, `-` and `.`, and MCP tool names anything. The encoding keeps the common case
 * readable (`fs/read_file` → `fs__read_file`) and is a prefix-free token code, so it
 * decodes uniquely:
 *
 *   `A-Z a-z 0-9 -`      themselves
 *   `/`                   `__`
 *   `_`                   itself when the next character is `a-z`, `0-9` or `-`; else `_U`
 *   other, ≤ U+FF         `_X` + 2 lowercase hex digits      (`.` → `_X2e`)
 *   other, ≤ U+FFFF       `_Y` + 4 lowercase hex digits
 *   other                 `_Z` + 6 lowercase hex digits
 *
 * A decoder at `_` looks at the next character: `_` is the separator, `U`/`X`/`Y`/`Z` an
 * escape, `a-z0-9-` a literal underscore, anything else is not an encoding.
 *
 * An encoding longer than 64 characters (or empty) is shortened to its first characters
 * (at most 52, never ending in `_`) + `_H` + 10 base-36 characters of the SHA-256 of the
 * real name. No full encoding contains `_H` after a character other than `_` (a literal
 * `_` is never followed by `H`, an escape is followed by `U`/`X`/`Y`/`Z`, and only the
 * separator `__` can precede a literal `H`), so a shortened name never equals a full one.
 * Shortened names cannot be decoded by themselves: a `ToolNameMap` built from the current
 * tool list maps them back, and reports the (astronomically unlikely) hash collisions.
 */
import { createHash } from "node:crypto";

export const FUNCTION_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;
export const MAX_FUNCTION_NAME = 64;
const HASH_CHARS = 10;
const PREFIX_MAX = MAX_FUNCTION_NAME - 2 - HASH_CHARS;

const isPlain = (c: string) => /^[A-Za-z0-9-]$/.test(c);
const keepsLiteralUnderscore = (next: string | undefined) => next !== undefined && /^[a-z0-9-]$/.test(next);

/** The full (unshortened) encoding; may be longer than 64 characters. */
export function encodeFull(name: string): string {
  const chars = Array.from(name); // code points: an astral character is one token
  let out = "";
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i]!;
    if (isPlain(c)) out += c;
    else if (c === "/") out += "__";
    else if (c === "_") out += keepsLiteralUnderscore(chars[i + 1]) ? "_" : "_U";
    else {
      const cp = c.codePointAt(0)!;
      if (cp <= 0xff) out += `_X${cp.toString(16).padStart(2, "0")}`;
      else if (cp <= 0xffff) out += `_Y${cp.toString(16).padStart(4, "0")}`;
      else out += `_Z${cp.toString(16).padStart(6, "0")}`;
    }
  }
  return out;
}

/**
 * The function name for `participant/tool` (or any string). Pure and deterministic:
 * the same name always gives the same function name.
 */
export function encodeToolName(name: string): string {
  const full = encodeFull(name);
  if (full.length >= 1 && full.length <= MAX_FUNCTION_NAME) return full;
  return shorten(full, name);
}

function shorten(full: string, name: string): string {
  let prefix = full.slice(0, PREFIX_MAX);
  // The character before `_H` must not be `_` (see the header).
  while (prefix.endsWith("_")) prefix = prefix.slice(0, -1);
  return `${prefix}_H${hashName(name)}`;
}

/** 10 base-36 characters (~51 bits) of SHA-256 of the real name. */
function hashName(name: string): string {
  const digest = createHash("sha256").update(name, "utf8").digest();
  const n = digest.readBigUInt64BE(0) % 36n ** BigInt(HASH_CHARS);
  return n.toString(36).padStart(HASH_CHARS, "0");
}

/** True when `fn` is a shortened (hashed) name, which only a `ToolNameMap` can resolve. */
export function isShortened(fn: string): boolean {
  return fn.length <= MAX_FUNCTION_NAME && /(^|[^_])_H[0-9a-z]{10}$/.test(fn);
}

/**
 * Decodes a full encoding. `undefined` for anything `encodeFull` cannot produce,
 * shortened names included.
 */
export function decodeFull(fn: string): string | undefined {
  let out = "";
  let i = 0;
  while (i < fn.length) {
    const c = fn[i]!;
    if (c !== "_") {
      if (!isPlain(c)) return undefined;
      out += c;
      i++;
      continue;
    }
    const next = fn[i + 1];
    if (next === "_") {
      out += "/";
      i += 2;
    } else if (next === "U") {
      out += "_";
      i += 2;
    } else if (next === "X" || next === "Y" || next === "Z") {
      const width = next === "X" ? 2 : next === "Y" ? 4 : 6;
      const hex = fn.slice(i + 2, i + 2 + width);
      if (!new RegExp(`^[0-9a-f]{${width}}$`).test(hex)) return undefined;
      const cp = parseInt(hex, 16);
      const min = next === "X" ? 0 : next === "Y" ? 0x100 : 0x10000;
      if (cp < min || cp > 0x10ffff) return undefined;
      out += String.fromCodePoint(cp);
      i += 2 + width;
    } else if (next !== undefined && /^[a-z0-9-]$/.test(next)) {
      out += "_";
      i += 1;
    } else {
      return undefined;
    }
  }
  // Non-canonical spellings (`_X2e` for `-`, `_U` where a bare `_` belongs, a surrogate
  // pair as two `_Y` escapes) parse but are not what the encoder writes: refusing them
  // makes decode exactly the inverse of encode.
  return encodeFull(out) === fn ? out : undefined;
}

/** Decodes a function name that is not shortened; `undefined` otherwise. */
export function decodeToolName(fn: string): string | undefined {
  if (!FUNCTION_NAME_PATTERN.test(fn)) return undefined;
  return decodeFull(fn);
}

export interface NameCollision {
  functionName: string;
  /** The real names that encode to `functionName`; none of them is in the map. */
  names: string[];
}

/**
 * Function names for one tool list, both ways. Built once per list (when the space's
 * tools change). Colliding names are left out of the map and reported, so an ambiguous
 * function name can never reach the wrong tool.
 */
export class ToolNameMap {
  private readonly toFn = new Map<string, string>();
  private readonly fromFn = new Map<string, string>();
  readonly collisions: readonly NameCollision[];

  /** `encode` is for tests; the agent uses `encodeToolName`, which scripts and prompts rely on. */
  constructor(names: Iterable<string>, opts: { encode?: (name: string) => string } = {}) {
    const encode = opts.encode ?? encodeToolName;
    const groups = new Map<string, string[]>();
    for (const name of new Set(names)) {
      const fn = encode(name);
      const group = groups.get(fn);
      if (group) group.push(name);
      else groups.set(fn, [name]);
    }
    const collisions: NameCollision[] = [];
    for (const [fn, group] of groups) {
      if (group.length > 1) {
        collisions.push({ functionName: fn, names: group.sort() });
        continue;
      }
      this.toFn.set(group[0]!, fn);
      this.fromFn.set(fn, group[0]!);
    }
    this.collisions = collisions.sort((a, b) => (a.functionName < b.functionName ? -1 : a.functionName > b.functionName ? 1 : 0));
  }

  /** The function name offered to the model for `name`, or `undefined` if not in the map. */
  functionName(name: string): string | undefined {
    return this.toFn.get(name);
  }

  /** The real `participant/tool` for a function name the model used. */
  toolName(functionName: string): string | undefined {
    return this.fromFn.get(functionName);
  }

  get size(): number {
    return this.toFn.size;
  }

  /** `[realName, functionName]` pairs. */
  entries(): IterableIterator<[string, string]> {
    return this.toFn.entries();
  }
}
