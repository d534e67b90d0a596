/**
 * The pieces space.yaml's schema is built from (config.ts, limits.ts): strict
 * mappings whose unknown keys suggest the nearest known one, numbers and booleans that
 * also accept their string spelling (for `${ENV}`), and messages that read "expected X,
 * found Y" so a user can fix a value without seeing the schema.
 */
import * as z from "zod";

// ---------------------------------------------------------------------------------------------
// Schema helpers: every message reads "expected X, found Y" so a user can fix the value blind.

export function show(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = Array.isArray(value) ? "a list" : "a mapping"; // circular, via YAML anchors
  }
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}

/** What a value is, without showing it (for secrets). */
export function kindOf(value: unknown): string {
  if (typeof value === "number") return "a number (quote it to make it a string)";
  return value === null ? "null" : Array.isArray(value) ? "a list" : typeof value === "object" ? "a mapping" : `a ${typeof value}`;
}

/** Schema-level error map: one phrase covers the type check and every range check of a field. */
export const expected =
  (what: string, found: (input: unknown) => string = show) =>
  (iss: { input?: unknown }) =>
    iss.input === undefined ? "required key is missing" : `expected ${what}, found ${found(iss.input)}`;

export const TYPE_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  boolean: "true or false",
  object: "a mapping",
  record: "a mapping",
  array: "a list",
};

/** Fallback messages for issues whose schema has no phrase of its own. */
export function defaultMessage(iss: z.core.$ZodRawIssue): string {
  const found = `, found ${show(iss.input)}`;
  switch (iss.code) {
    case "invalid_type":
      if (iss.input === undefined) return "required key is missing";
      return `expected ${TYPE_NAMES[iss.expected] ?? iss.expected}${found}`;
    case "invalid_value": {
      const values = iss.values.map(show);
      return `expected ${values.length === 1 ? values[0] : `one of ${values.join(", ")}`}${found}`;
    }
    case "too_small":
    case "too_big": {
      const bound = String(iss.code === "too_small" ? iss.minimum : iss.maximum);
      const side = iss.code === "too_small" ? "at least" : "at most";
      if (iss.origin === "string") return `expected ${side} ${bound} characters${found}`;
      if (iss.origin === "array") return `expected ${side} ${bound} items${found}`;
      const op = iss.code === "too_small" ? (iss.inclusive ? ">=" : ">") : iss.inclusive ? "<=" : "<";
      return `expected a number ${op} ${bound}${found}`;
    }
    case "invalid_key":
      return iss.issues[0]?.message ?? `invalid key${found}`;
    case "unrecognized_keys":
      return iss.keys.map(() => "unknown key").join("\n");
    default:
      return `invalid value${found}`;
  }
}

export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

/** The closest candidate, or undefined when nothing is close enough to be a plausible typo. */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.floor(word.length / 3)) + 1;
  for (const c of candidates) {
    const d = editDistance(word.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [c, d];
  }
  return best;
}

export const unknownKey = (key: string, known: readonly string[]) => {
  const near = suggest(key, known);
  return near ? `unknown key; did you mean ${JSON.stringify(near)}?` : `unknown key; expected one of ${known.join(", ")}`;
};

/**
 * A strict mapping. zod reports all unknown keys of an object as one issue; the messages are
 * joined by newlines here and split again in parseSpaceConfig so each key gets its own line:col.
 * A null value (a key with nothing under it, e.g. everything commented out) counts as empty.
 */
export function section<S extends z.core.$ZodLooseShape>(shape: S) {
  const known = Object.keys(shape);
  const schema = z.strictObject(shape, {
    error: (iss) => (iss.code === "unrecognized_keys" ? iss.keys.map((k) => unknownKey(k, known)).join("\n") : undefined),
  });
  return z.preprocess((v) => (v === null ? {} : v), schema);
}

/*
 * ${ENV} substitution always yields strings (a token of digits stays a string, a description
 * that happens to read "1.0" stays text). Numeric and boolean fields therefore also accept the
 * string spelling of their value, which is what makes `port: ${PORT}` work; quoted "7420"
 * is accepted for the same reason, which costs nothing.
 */
export const NUMBER = /^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/;
export const numeric = <T extends z.ZodType>(schema: T) =>
  z.preprocess((v) => (typeof v === "string" && NUMBER.test(v.trim()) ? Number(v) : v), schema);
export const boolean = () =>
  z.preprocess((v) => (v === "true" ? true : v === "false" ? false : v), z.boolean({ error: expected("true or false") }));

// setTimeout/setInterval silently treat anything above 2^31-1 ms as 1 ms.
export const MAX_TIMER_MS = 2_147_483_647;

export function int(min: number, max = Number.MAX_SAFE_INTEGER) {
  const what = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer from ${min} to ${max}`;
  return numeric(
    z
      .int({ error: expected(what) })
      .min(min)
      .max(max),
  );
}
