/**
 * Suggested rules: the narrowest rule that covers a repeated pattern in what people
 * decided, each with its dry run over every recorded call.
 *
 * A pattern is one proposer calling one tool. From its approvals (at least MIN_REPEAT, an
 * approval that edited the arguments does not count) an `allow` is drawn whose CEL condition
 * holds only for what was seen:
 *   - every argument key is one that was seen (`args.all(k, k in [...])`);
 *   - a value the same in every approval is required exactly (`args["branch"] == "main"`);
 *   - a value seen in a few forms, each more than once, is required to be one of them (`in [...]`);
 *   - a path seen in several forms is required under the deepest directory common to them
 *     all (never its parent, never a sibling: the prefix ends in `/`), in plain characters
 *     only, with no `..` and no hidden segment unless one was approved;
 *   - any other value (a file's content) is free, and only if something else constrains.
 * A pattern with nothing to constrain gets no `allow`: that would widen past what was seen.
 * From repeated rejections the same way, a `deny` (the whole tool, when its proposer never
 * had a call of it approved).
 *
 * What a suggestion never does: cover a call a person rejected unless each such person
 * confirms (`confirm`); allow a tool whose hints say destructive or open-world (it becomes a
 * scoped `ask`, which states the pattern and keeps asking); change a call a `deny` decides
 * or one that needs more than one approval (quorum); or decide nothing (a rule above it
 * already does). Each is checked by replaying the recorded calls (replay.ts), not assumed.
 */
import { createHash } from "node:crypto";
import type { SpaceConfig, ToolRule } from "../../config/config.js";
import { requiredApprovals } from "../../proposals/approvals.js";
import { compileCondition, MAX_SOURCE } from "../conditions.js";
import { normalisePath } from "../scope.js";
import type { PastCall, PeopleSaid } from "./history.js";
import { type Change, type KnownTool, loosens, Replayer } from "./replay.js";

/** How many like decisions make a pattern. */
export const MIN_REPEAT = 3;
/** At most this many distinct values of a field are listed (`in [...]`); more, and the field is free or a path prefix. */
export const MAX_SET = 5;
/** The longest value a rule names exactly. */
const MAX_VALUE = 256;
/** How many calls a suggestion lists in each part of its dry run (the counts are always whole). */
export const MAX_LISTED = 200;

export type RuleKind = "allow" | "ask" | "deny";

/** A call as a suggestion lists it. */
export interface ListedCall {
  id: string;
  ts: string;
  proposer: string;
  tool: string;
  args: Record<string, unknown>;
  said: PeopleSaid;
  by?: string | undefined;
}

export interface Suggestion {
  /** Stable for the same rule: what dismissals and accepts name. */
  id: string;
  participant: string;
  kind: RuleKind;
  rule: ToolRule;
  /** The pattern, in words. */
  why: string;
  /** What the rule covers and how, in words (`path under notes/2026/`, `branch is "main"`). */
  scope: string[];
  /** Notes: why it is an `ask`, what it does not cover. */
  notes: string[];
  /** Every recorded call the rule's glob and condition cover, by what people decided. */
  covers: Record<PeopleSaid, number>;
  /** Those calls, listed (at most MAX_LISTED per part). */
  listed: Record<PeopleSaid, ListedCall[]>;
  /** Every recorded call whose decision would change, by how (`proposal → direct`). */
  changes: Record<string, Record<PeopleSaid | "total", number>>;
  /** Rejected calls it would cover: each rejecter must confirm before it can be accepted. */
  confirm?: { calls: string[]; by: string[] } | undefined;
}

interface Shape {
  conjuncts: string[];
  scope: string[];
  /** Whether something besides the key list constrains the call. */
  constrains: boolean;
}

const SAFE_PATH = /^[A-Za-z0-9._/ -]+$/;

function celValue(v: unknown): string | undefined {
  if (typeof v === "string") return v.length <= MAX_VALUE ? JSON.stringify(v) : undefined;
  if (typeof v === "boolean") return v ? "true" : "false";
  // Conditions see every number as a double (conditions.ts).
  if (typeof v === "number" && Number.isFinite(v)) return Number.isInteger(v) ? `${v}.0` : String(v);
  return undefined;
}

const field = (k: string) => `args[${JSON.stringify(k)}]`;

/** The directory of a normal relative or absolute path (`notes/a.md` → `notes/`), or "" for none. */
function dirOf(p: string): string {
  const i = p.lastIndexOf("/");
  return i < 0 ? "" : p.slice(0, i + 1);
}

/** The deepest directory (ending in `/`) every path is under, or "" for none. */
function commonDir(paths: readonly string[]): string {
  let common = dirOf(paths[0]!);
  for (const p of paths.slice(1)) {
    while (common !== "" && !p.startsWith(common)) common = dirOf(common.slice(0, -1));
  }
  return common === "/" ? "" : common;
}

/** The narrowest condition over arguments that holds for every one of `calls`' arguments. */
function shapeOf(calls: readonly PastCall[]): Shape | undefined {
  const keys = [...new Set(calls.flatMap((c) => Object.keys(c.args)))].sort();
  if (keys.some((k) => k.length > 128)) return undefined;
  const out: Shape = {
    conjuncts: [`args.all(k, k in [${keys.map((k) => JSON.stringify(k)).join(", ")}])`],
    scope: [`only the arguments ${keys.length ? keys.join(", ") : "(none)"}`],
    constrains: keys.length === 0,
  };
  for (const k of keys) {
    const values = calls.map((c) => c.args[k]);
    // A key absent from some call stays free: it may be left out.
    if (values.some((v) => v === undefined)) continue;
    const literals = values.map(celValue);
    const distinct = [...new Set(literals)];
    if (distinct.length === 1 && distinct[0] !== undefined) {
      out.conjuncts.push(`${field(k)} == ${distinct[0]}`);
      out.scope.push(`${k} is ${distinct[0]}`);
      out.constrains = true;
      continue;
    }
    if (values.every((v) => typeof v === "string")) {
      const paths = values as string[];
      const normal = paths.every((p) => SAFE_PATH.test(p) && normalisePath(p) === p && !p.endsWith("/"));
      const dir = normal ? commonDir(paths) : "";
      if (dir !== "" && dir.length <= MAX_VALUE) {
        // Each segment under the prefix in plain characters; none hidden (nor `..`) unless a hidden one was approved.
        const hidden = paths.some((p) => /(^|\/)\./.test(p.slice(dir.length)));
        const seg = hidden ? "[A-Za-z0-9._][A-Za-z0-9._ -]*" : "[A-Za-z0-9_][A-Za-z0-9._ -]*";
        const re = `^${dir.replace(/[.]/g, "\\.")}(${seg}/)*${seg}$`;
        out.conjuncts.push(
          `${field(k)}.startsWith(${JSON.stringify(dir)}) && !${field(k)}.contains("..") && ${field(k)}.matches(${JSON.stringify(re)})`,
        );
        out.scope.push(`${k} under ${dir}${hidden ? "" : " (no hidden files)"}`);
        out.constrains = true;
        continue;
      }
    }
    // A set only of values that repeat: a value seen once each time is free (a message, a file's content).
    if (distinct.length <= MAX_SET && distinct.length * 2 <= values.length && distinct.every((d) => d !== undefined)) {
      out.conjuncts.push(`${field(k)} in [${distinct.join(", ")}]`);
      out.scope.push(`${k} is one of ${distinct.join(", ")}`);
      out.constrains = true;
    }
  }
  return out;
}

const isRiskyTool = (a: Record<string, unknown> | undefined) => a?.["destructiveHint"] === true || a?.["openWorldHint"] === true;

/** The space.yaml with `rule` added at the end of `participant`'s `kind` list (nothing else changed). */
export function withRule(config: SpaceConfig, participant: string, kind: RuleKind, rule: ToolRule): SpaceConfig {
  const p = config.participants[participant]!;
  const tools = { ...(p.tools ?? {}) };
  tools[kind] = [...(tools[kind] ?? []), rule];
  return { ...config, participants: { ...config.participants, [participant]: { ...p, tools } } };
}

export function suggestionId(participant: string, kind: RuleKind, rule: ToolRule): string {
  return createHash("sha256")
    .update(JSON.stringify([participant, kind, rule]))
    .digest("hex")
    .slice(0, 16);
}

const EMPTY = (): Record<PeopleSaid, number> => ({ approved: 0, rejected: 0, edited: 0, undecided: 0 });

function listed(c: PastCall): ListedCall {
  return {
    id: c.id,
    ts: c.ts,
    proposer: c.proposer,
    tool: `${c.owner}/${c.tool}`,
    args: c.args,
    said: c.said,
    ...(c.by ? { by: c.by } : {}),
  };
}

/**
 * The suggestions for a space: its policy as it is, what it has recorded, the tools it knows.
 * Oldest pattern first; each with its dry run.
 */
export function suggest(config: SpaceConfig, calls: readonly PastCall[], tools: readonly KnownTool[] = []): Suggestion[] {
  const annotations = new Map(tools.map((t) => [`${t.participant}/${t.tool}`, t.annotations]));
  const groups = new Map<string, PastCall[]>();
  for (const c of calls) {
    const key = `${c.proposer}\u0000${c.owner}/${c.tool}`;
    const list = groups.get(key);
    if (list) list.push(c);
    else groups.set(key, [c]);
  }
  const current = new Replayer(config, tools);
  const out: Suggestion[] = [];
  for (const group of groups.values()) {
    const first = group[0]!;
    if (!config.participants[first.proposer] || first.owner === "" || /[*?{}[\]!@]/.test(first.owner + first.tool)) continue;
    const approved = group.filter((c) => c.said === "approved");
    const rejected = group.filter((c) => c.said === "rejected");
    if (approved.length >= MIN_REPEAT) {
      const s = allowFor(config, current, group, approved, annotations.get(`${first.owner}/${first.tool}`), tools);
      if (s) out.push(s);
    }
    if (rejected.length >= MIN_REPEAT) {
      const s = denyFor(config, current, group, rejected, tools);
      if (s) out.push(s);
    }
  }
  return out;
}

interface Candidate {
  participant: string;
  kind: RuleKind;
  rule: ToolRule;
  when: string | undefined;
  scope: string[];
}

/** Evaluates the candidate over the group: which calls its glob and condition cover. */
function covered(c: Candidate, group: readonly PastCall[], config: SpaceConfig): PastCall[] {
  if (c.when === undefined) return [...group];
  const cond = compileCondition(c.when);
  const p = config.participants[c.participant];
  const caller = { id: c.participant, kind: p?.kind ?? "service", groups: [] as string[] };
  return group.filter((call) => {
    const r = cond.evaluate({ args: call.args, caller, tool: { name: `${call.owner}/${call.tool}` } });
    // As rules.ts: an allow whose condition cannot say does not apply; a deny or an ask does.
    return r.ok ? r.value : c.kind !== "allow";
  });
}

function condition(shape: Shape): string | undefined {
  const when = shape.conjuncts.join(" && ");
  if (when.length > MAX_SOURCE) return undefined;
  try {
    compileCondition(when);
  } catch {
    return undefined;
  }
  return when;
}

function finish(
  config: SpaceConfig,
  current: Replayer,
  tools: readonly KnownTool[],
  c: Candidate,
  group: readonly PastCall[],
  why: string,
  notes: string[],
): Suggestion | undefined {
  // Already in the file (accepted before, or written by hand): nothing to suggest.
  const existing = config.participants[c.participant]?.tools?.[c.kind] ?? [];
  const glob = typeof c.rule === "string" ? c.rule : c.rule.tool;
  if (
    existing.some(
      (r) => JSON.stringify(r) === JSON.stringify(c.rule) || (c.kind === "ask" && (typeof r === "string" ? r : r.tool) === glob),
    )
  )
    return undefined;
  // Each call of the pattern decided under the file as it is and with the rule, by the one
  // decision point; the calls the new rule decides are those whose deciding rule is it (when
  // the participant's lists name no @group, whose rules are spelt out and renumbered: then its
  // condition is asked directly). One evaluation of the condition per call.
  const after = new Replayer(withRule(config, c.participant, c.kind, c.rule), tools);
  const key = `${c.kind}[${existing.length}]`;
  const lists = Object.values(config.participants[c.participant]?.tools ?? {}) as unknown[];
  const spelt = lists.some(
    (l) => Array.isArray(l) && l.some((r) => String(typeof r === "string" ? r : (r as { tool?: unknown })?.tool).startsWith("@")),
  );
  const matched = spelt ? new Set(covered(c, group, config)) : undefined;
  const cover: PastCall[] = [];
  const changes: Change[] = [];
  const summary: Suggestion["changes"] = {};
  for (const call of group) {
    const b = after.decide(call);
    if (matched ? !matched.has(call) : b?.rule !== key) continue;
    cover.push(call);
    const a = current.decide(call);
    let how: string | undefined;
    if (a?.decision !== b?.decision) how = `${a?.decision ?? "unknown participant"} → ${b?.decision ?? "unknown participant"}`;
    else if (a && b && a.decision === "proposal" && a.approvals !== b.approvals) how = `approvals ${a.approvals} → ${b.approvals}`;
    if (how === undefined) continue;
    changes.push({ call, before: a, after: b, how });
    summary[how] ??= { total: 0, approved: 0, rejected: 0, edited: 0, undecided: 0 };
    const sum = summary[how]!;
    sum.total++;
    sum[call.said]++;
  }
  // Never loosens a deny or a quorum: no call leaves a deny, none needs fewer approvals.
  if (
    changes.some(
      (ch) =>
        ch.before?.decision === "denied" ||
        (ch.before?.decision === "proposal" && ch.after?.decision === "proposal" && ch.after.approvals < ch.before.approvals),
    )
  )
    return undefined;
  if (c.kind === "deny" && changes.some(loosens)) return undefined;
  // A rule that would decide nothing (one above it already does) is no suggestion; a scoped ask states a pattern and may change nothing.
  if (c.kind !== "ask" && changes.length === 0) return undefined;
  const covers = EMPTY();
  const list: Record<PeopleSaid, ListedCall[]> = { approved: [], rejected: [], edited: [], undecided: [] };
  for (const call of cover) {
    covers[call.said]++;
    if (list[call.said].length < MAX_LISTED) list[call.said].push(listed(call));
  }
  // A rejected call its condition matches needs its rejecter's word, even one a rule above would decide today.
  const rejectedCovered =
    c.kind === "allow"
      ? covered(
          c,
          group.filter((x) => x.said === "rejected"),
          config,
        )
      : [];
  return {
    id: suggestionId(c.participant, c.kind, c.rule),
    participant: c.participant,
    kind: c.kind,
    rule: c.rule,
    why,
    scope: c.scope,
    notes,
    covers,
    listed: list,
    changes: summary,
    ...(rejectedCovered.length
      ? { confirm: { calls: rejectedCovered.map((x) => x.id), by: [...new Set(rejectedCovered.map((x) => x.by!))].sort() } }
      : {}),
  };
}

function allowFor(
  config: SpaceConfig,
  current: Replayer,
  group: PastCall[],
  approved: PastCall[],
  annotations: Record<string, unknown> | undefined,
  tools: readonly KnownTool[],
): Suggestion | undefined {
  const first = group[0]!;
  const glob = `${first.owner}/${first.tool}`;
  // Never loosens a quorum: a call that needs two people stays with two people.
  if (requiredApprovals(config, first.proposer, first.owner, first.tool) > 1) return undefined;
  // Calls the file already lets through (a read-only tool, an allow) need no rule.
  if (approved.every((c) => current.decide(c)?.decision !== "proposal")) return undefined;
  const shape = shapeOf(approved);
  if (!shape?.constrains) return undefined;
  const when = condition(shape);
  if (when === undefined) return undefined;
  const risky = isRiskyTool(annotations);
  const kind: RuleKind = risky ? "ask" : "allow";
  const notes: string[] = [];
  if (risky)
    notes.push(
      `${glob} says it is ${annotations?.["destructiveHint"] === true ? "destructive" : "open-world"}: offered as a scoped ask (it keeps asking), never an allow`,
    );
  const people = [...new Set(approved.map((c) => c.by!))].sort();
  const why = `${people.join(", ")} approved ${approved.length} call(s) of ${glob} by ${first.proposer} like this`;
  return finish(
    config,
    current,
    tools,
    { participant: first.proposer, kind, rule: { tool: glob, when }, when, scope: shape.scope },
    group,
    why,
    notes,
  );
}

function denyFor(
  config: SpaceConfig,
  current: Replayer,
  group: PastCall[],
  rejected: PastCall[],
  tools: readonly KnownTool[],
): Suggestion | undefined {
  const first = group[0]!;
  const glob = `${first.owner}/${first.tool}`;
  const people = [...new Set(rejected.map((c) => c.by!))].sort();
  const why = `${people.join(", ")} rejected ${rejected.length} call(s) of ${glob} by ${first.proposer} like this`;
  const approvedAny = group.some((c) => c.said === "approved" || c.said === "edited");
  let candidate: Candidate;
  if (!approvedAny)
    candidate = {
      participant: first.proposer,
      kind: "deny",
      rule: glob,
      when: undefined,
      scope: [`every call of ${glob} by ${first.proposer}`],
    };
  else {
    const shape = shapeOf(rejected);
    if (!shape?.constrains) return undefined;
    const when = condition(shape);
    if (when === undefined) return undefined;
    candidate = { participant: first.proposer, kind: "deny", rule: { tool: glob, when }, when, scope: shape.scope };
  }
  // A deny that would refuse a call a person approved is no pattern of rejections.
  if (covered(candidate, group, config).some((c) => c.said === "approved" || c.said === "edited")) return undefined;
  return finish(config, current, tools, candidate, group, why, []);
}

export type { Change };
