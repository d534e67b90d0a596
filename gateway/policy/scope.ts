/**
 * Scoped "always": a grant an approval makes may hold only for the arguments that were
 * approved — exactly those, or a path-like field under the approved value's directory.
 *
 * The condition is small structured data, evaluated here without CEL, so it holds whatever
 * else the policy engine can do:
 *   {op: "exact", args}                      every argument as approved (key order aside)
 *   {op: "prefix", field, value: "notes/"}   `args[field]` is a string under `notes/`
 * A grant with a condition counts only for a call whose arguments are known and meet it
 * (authority.ts); anywhere else (tool lists, lending on) it counts for nothing.
 *
 * Paths are compared after `normalisePath`, which refuses rather than guesses: a `..`
 * segment, a backslash, a `%` (a server may decode `%2e%2e%2f`), a control character, or any
 * character NFKC would change (a fullwidth solidus or dot) makes the value match no prefix,
 * so such a call asks again. A prefix always ends in `/`, so `notes/` never covers
 * `notes-private/`. What the path names on disk (a symlink under `notes/`) is the tool's
 * business, not the gateway's: grant prefixes only over trees you trust.
 */
import { canonical } from "../store/chain.js";

export type GrantCondition = { op: "exact"; args: unknown } | { op: "prefix"; field: string; value: string };

/** How an approver limits an "always": the whole arguments, or one field's directory (or a prefix it names). */
export type AlwaysLimit = "tool" | "exact" | { field: string; prefix?: string | undefined };

/** A path with `.` and empty segments dropped, or undefined when it cannot be compared safely. */
export function normalisePath(value: string): string | undefined {
  if (value.length === 0 || value.length > 4096) return undefined;
  if (/[\\%\u0000-\u001f\u007f]/.test(value) || value.normalize("NFKC") !== value) return undefined;
  const absolute = value.startsWith("/");
  const out: string[] = [];
  for (const seg of value.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") return undefined;
    out.push(seg);
  }
  const joined = out.join("/");
  const trailing = value.endsWith("/") && joined !== "" ? "/" : "";
  return (absolute ? "/" : "") + joined + trailing;
}

/** Whether a call with `args` meets the grant's condition. */
export function conditionHolds(c: GrantCondition, args: Record<string, unknown> | undefined): boolean {
  if (args === undefined) return false;
  if (c.op === "exact") return canonical(args) === canonical(c.args);
  if (!Object.hasOwn(args, c.field)) return false;
  const v = args[c.field];
  if (typeof v !== "string") return false;
  const path = normalisePath(v);
  return path?.startsWith(c.value) === true && path.length > c.value.length;
}

/**
 * The condition for an "always" limited by `limit` on a call approved with `args`, or why it
 * cannot be made. A prefix defaults to the directory of the approved value; one the approver
 * names must contain the approved value, and may not be the root.
 */
export function conditionFor(
  limit: AlwaysLimit,
  args: Record<string, unknown> | undefined,
): { condition?: GrantCondition; error?: string } {
  if (limit === "tool") return {};
  if (limit === "exact") return { condition: { op: "exact", args: args ?? {} } };
  const { field } = limit;
  const raw = args && Object.hasOwn(args, field) ? args[field] : undefined;
  if (typeof raw !== "string") return { error: `the approved arguments have no string "${field}" to limit the grant to` };
  const approved = normalisePath(raw);
  if (approved === undefined)
    return {
      error: `"${field}" of the approved call is not a plain path (no "..", "\\", "%" or look-alike characters); approve once, or limit it to the exact arguments`,
    };
  let prefix: string | undefined;
  if (limit.prefix !== undefined) {
    const p = normalisePath(limit.prefix);
    if (p === undefined) return { error: `the prefix is not a plain path` };
    prefix = p.endsWith("/") ? p : `${p}/`;
  } else {
    const cut = approved.replace(/\/$/, "").lastIndexOf("/");
    prefix = cut < 0 ? undefined : approved.slice(0, cut + 1);
  }
  if (prefix === undefined || prefix === "/" || prefix === "")
    return { error: `"${raw}" has no directory to limit the grant to; limit it to the exact arguments instead` };
  if (!approved.startsWith(prefix) || approved.length <= prefix.length)
    return { error: `the approved "${field}" (${approved}) is not under ${prefix}` };
  return { condition: { op: "prefix", field, value: prefix } };
}

/** The condition in words, for grants lists and confirmations. */
export function describeCondition(c: GrantCondition | undefined): string {
  if (c === undefined) return "any arguments";
  if (c.op === "exact") return `only with exactly these arguments: ${truncate(canonical(c.args), 200)}`;
  return `only when ${c.field} is under ${c.value}`;
}

/** The limits an approver may choose for "always" on a call with `args`: the whole tool, these arguments, and each path-like field's directory. */
export function limitOptions(args: Record<string, unknown> | undefined): Array<{ limit: AlwaysLimit; text: string }> {
  const out: Array<{ limit: AlwaysLimit; text: string }> = [
    { limit: "tool", text: "any arguments (the whole tool)" },
    { limit: "exact", text: describeCondition({ op: "exact", args: args ?? {} }) },
  ];
  for (const field of Object.keys(args ?? {})) {
    const made = conditionFor({ field }, args);
    if (made.condition) out.push({ limit: { field }, text: describeCondition(made.condition) });
  }
  return out;
}

function truncate(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}
