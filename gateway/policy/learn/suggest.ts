/**
 * Suggested rules: the narrowest rule that covers a repeated pattern in what people
 * decided, each with its dry run over every recorded call.
 *
 * A pattern is one proposer calling one tool. From its approvals by people (at least
 * MIN_REPEAT; an approval that edited the arguments does not count, nor one by an agent or a
 * reviewer: history.ts) a rule is drawn whose CEL condition frees nothing that was not seen
 * (shape.ts says how each argument is held, and refuses where it cannot be). Where an `ask`
 * rule holds the tool, the rule is an `except`, narrowing that ask (an `allow` below it could
 * never fire); elsewhere an `allow`. From repeated rejections the same way, a `deny` (the
 * whole tool, when its proposer never had a call of it approved).
 *
 * A tool that is destructive or open-world — as it says, or by MCP's defaults when it says
 * nothing and is not read-only — needs more: MIN_REPEAT_RISKY approvals, directories seen
 * several times, file names of the seen shape, and a second person's confirmation before
 * the rule is accepted (`second`), where a second person may decide the proposer's calls.
 *
 * What a suggestion never does: cover a call a person rejected unless each such person
 * confirms (`confirm`, per rejected call); change a call a `deny` decides or one that needs
 * more than one approval (quorum); or decide nothing. Each is checked by replaying the
 * recorded calls (replay.ts), not assumed. A repeated pattern with no suggestion says why
 * (`withheld`).
 */
import { createHash } from "node:crypto";
import { rulePosition, type SpaceConfig, type ToolRule } from "../../config/config.js";
import { requiredApprovals } from "../quorum.js";
import { compileCondition, MAX_SOURCE } from "../conditions.js";
import { isCommandTool } from "../content/signals.js";
import { Groups } from "../groups.js";
import type { PastCall, PeopleSaid } from "./history.js";
import { type Change, type KnownTool, loosens, Replayer } from "./replay.js";
import { traitsOf } from "./risk.js";
import { canonical } from "../../store/chain.js";
import { celLiteral, MAX_SET, shapeOf, type Shape } from "./shape.js";

export { MAX_SET };

/** How many like approvals make a pattern. */
export const MIN_REPEAT = 3;
/** How many for a destructive or open-world tool. */
export const MIN_REPEAT_RISKY = 5;
/** How many calls a suggestion lists in each part of its dry run (the counts are always whole). */
export const MAX_LISTED = 200;

export type RuleKind = "allow" | "except" | "deny";

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
  /** What accepting it does, in one sentence. */
  summary: string;
  /** Field by field, what the rule lets through (`path is a .md file directly in notes/`, `text: any text without …`). */
  scope: string[];
  /** Notes: what it narrows, what it needs, what it does not cover. */
  notes: string[];
  /** Every recorded call the rule's glob and condition cover, by what people decided. */
  covers: Record<PeopleSaid, number>;
  /** Those calls, listed (at most MAX_LISTED per part). */
  listed: Record<PeopleSaid, ListedCall[]>;
  /** Every recorded call whose decision would change, by how (`proposal → direct`). */
  changes: Record<string, Record<PeopleSaid | "total", number>>;
  /** Rejected calls it would cover: each rejecter must confirm, for these very calls, before it can be accepted. */
  confirm?: { calls: string[]; by: string[]; rejected: Record<string, string[]> } | undefined;
  /** A destructive or open-world tool: one of these people, besides whoever accepts, confirms it first. */
  second?: { people: string[] } | undefined;
}

/** A repeated pattern with no suggestion, and why. */
export interface Withheld {
  participant: string;
  tool: string;
  approved: number;
  why: string;
}

export interface Learned {
  suggestions: Suggestion[];
  withheld: Withheld[];
}

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

/** The people who may decide `proposer`'s calls: its approvers (groups spelt out) that are people, else every person. */
export function deciders(config: SpaceConfig, proposer: string): string[] {
  const named = config.participants[proposer]?.approvers;
  const ids = named ? new Groups(config).expand(named) : Object.keys(config.participants);
  return ids.filter((id) => id !== proposer && config.participants[id]?.kind === "human").sort();
}

/**
 * The suggestions for a space and the repeated patterns it offers none for: its policy as it
 * is, what it has recorded, the tools it knows. Oldest pattern first; each with its dry run.
 */
export function learn(config: SpaceConfig, calls: readonly PastCall[], tools: readonly KnownTool[] = []): Learned {
  const annotations = new Map(tools.map((t) => [`${t.participant}/${t.tool}`, t.annotations]));
  const groups = new Map<string, PastCall[]>();
  for (const c of calls) {
    const key = `${c.proposer}\u0000${c.owner}/${c.tool}`;
    const list = groups.get(key);
    if (list) list.push(c);
    else groups.set(key, [c]);
  }
  const current = new Replayer(config, tools);
  const out: Learned = { suggestions: [], withheld: [] };
  for (const group of groups.values()) {
    const first = group[0]!;
    if (!config.participants[first.proposer] || first.owner === "" || /[*?{}[\]!@]/.test(first.owner + first.tool)) continue;
    const approved = group.filter((c) => c.said === "approved");
    const rejected = group.filter((c) => c.said === "rejected");
    if (approved.length >= 2) {
      const s = allowFor(config, current, group, approved, annotations.get(`${first.owner}/${first.tool}`), tools);
      if (typeof s === "string")
        out.withheld.push({ participant: first.proposer, tool: `${first.owner}/${first.tool}`, approved: approved.length, why: s });
      else if (s) out.suggestions.push(s);
    }
    if (rejected.length >= MIN_REPEAT) {
      const s = denyFor(config, current, group, rejected, tools);
      if (s && typeof s !== "string") out.suggestions.push(s);
    }
  }
  return out;
}

/** The suggestions alone (`learn`). */
export function suggest(config: SpaceConfig, calls: readonly PastCall[], tools: readonly KnownTool[] = []): Suggestion[] {
  return learn(config, calls, tools).suggestions;
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
    // As rules.ts: an allow or except whose condition cannot say does not apply; a deny does.
    return r.ok ? r.value : c.kind === "deny";
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

/** Where a rule is, for a person: `the ask at line 12` (or its key when the file does not say). */
function ruleAt(config: SpaceConfig, participant: string, key: string): string {
  const tools = config.participants[participant]?.tools;
  const at = tools && rulePosition(tools, key);
  const kind = key.slice(0, key.indexOf("["));
  return `the ${kind} rule ${key}${at ? ` at line ${at.line}` : ""}`;
}

function finish(
  config: SpaceConfig,
  current: Replayer,
  tools: readonly KnownTool[],
  c: Candidate,
  group: readonly PastCall[],
  why: string,
  notes: string[],
): Suggestion | string {
  // Already in the file (accepted before, or written by hand): nothing to suggest.
  const existing = config.participants[c.participant]?.tools?.[c.kind] ?? [];
  if (existing.some((r) => JSON.stringify(r) === JSON.stringify(c.rule))) return "the rule is in space.yaml already";
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
  const fromDeny = changes.find((ch) => ch.before?.decision === "denied");
  if (fromDeny)
    return `${ruleAt(config, c.participant, fromDeny.before?.rule ?? "deny[?]")} refuses some of these calls; a learned rule never overrides a deny`;
  if (
    changes.some(
      (ch) => ch.before?.decision === "proposal" && ch.after?.decision === "proposal" && ch.after.approvals < ch.before.approvals,
    )
  )
    return "it would lower a quorum";
  if (c.kind === "deny" && changes.some(loosens)) return "a deny here would let something through";
  // A rule that would decide nothing (one above it already does) is no suggestion.
  if (changes.length === 0) {
    const decider = group.map((call) => current.decide(call)?.rule).find((r) => r !== undefined);
    return decider
      ? `${ruleAt(config, c.participant, decider)} decides these calls before any rule learnt here could`
      : "it would change nothing";
  }
  const covers = EMPTY();
  const list: Record<PeopleSaid, ListedCall[]> = { approved: [], rejected: [], edited: [], undecided: [] };
  for (const call of cover) {
    covers[call.said]++;
    if (list[call.said].length < MAX_LISTED) list[call.said].push(listed(call));
  }
  // A rejected call its condition matches needs its rejecter's word, even one a rule above would decide today.
  const rejectedCovered =
    c.kind !== "deny"
      ? covered(
          c,
          group.filter((x) => x.said === "rejected"),
          config,
        )
      : [];
  const rejected: Record<string, string[]> = {};
  for (const x of rejectedCovered) {
    rejected[x.by!] ??= [];
    rejected[x.by!]!.push(x.id);
  }
  const verb = c.kind === "deny" ? "may never call" : "may call";
  const glob = typeof c.rule === "string" ? c.rule : c.rule.tool;
  return {
    id: suggestionId(c.participant, c.kind, c.rule),
    participant: c.participant,
    kind: c.kind,
    rule: c.rule,
    why,
    summary: `${c.participant} ${verb} ${glob}${c.kind === "deny" ? "" : " without asking"}${c.when === undefined ? "" : ", only as follows"}`,
    scope: c.scope,
    notes,
    covers,
    listed: list,
    changes: summary,
    ...(rejectedCovered.length ? { confirm: { calls: rejectedCovered.map((x) => x.id), by: Object.keys(rejected).sort(), rejected } } : {}),
  };
}

function allowFor(
  config: SpaceConfig,
  current: Replayer,
  group: PastCall[],
  approved: PastCall[],
  annotations: Record<string, unknown> | undefined,
  tools: readonly KnownTool[],
): Suggestion | string | undefined {
  const first = group[0]!;
  const glob = `${first.owner}/${first.tool}`;
  // Calls the file already lets through (a read-only tool, an allow) need no rule.
  const decided = approved.map((c) => current.decide(c));
  if (decided.every((d) => d?.decision !== "proposal")) return undefined;
  // Never loosens a quorum: a call that needs two people stays with two people.
  const needs = requiredApprovals(config, first.proposer, first.owner, first.tool);
  if (needs > 1) return `it needs ${needs} approvals: a learned rule never stands in for a second person`;
  const traits = traitsOf(annotations);
  const risky = traits.destructive || traits.openWorld;
  const what = traits.destructive ? "destructive" : "open-world";
  const how = traits.declared ? "" : " (it declares no hints, so MCP's defaults apply)";
  const least = risky ? MIN_REPEAT_RISKY : MIN_REPEAT;
  if (approved.length < least)
    return `${least - approved.length} more approval(s) like these${risky ? `: ${glob} is ${what}${how}, so a rule needs ${least}` : ""}`;
  const shaped = shapeOf(approved, { destructive: risky, command: isCommandTool(glob) });
  if (!shaped.ok) return shaped.why;
  const when = condition(shaped.shape);
  if (when === undefined) return "the rule it would take is too long to read";
  // Where an ask holds these calls, an allow below it could never fire: the rule narrows the ask.
  const asks = [...new Set(decided.map((d) => d?.rule).filter((r): r is string => r?.startsWith("ask[") === true))];
  const kind: RuleKind = asks.length ? "except" : "allow";
  const notes: string[] = [];
  if (asks.length)
    notes.push(`narrows ${asks.map((k) => ruleAt(config, first.proposer, k)).join(" and ")}: the calls it covers are no longer asked`);
  if (shaped.shape.free.length)
    notes.push(`${shaped.shape.free.join(", ")} may be any text that passes the content check at each call; anything else is asked`);
  let second: Suggestion["second"];
  if (risky) {
    const people = deciders(config, first.proposer);
    second = { people };
    notes.push(
      people.length > 1
        ? `${glob} is ${what}${how}: a second person (${people.join(", ")}, besides whoever accepts) must confirm before it stands`
        : `${glob} is ${what}${how}; only ${people[0] ?? "the operator"} decides ${first.proposer}'s calls, so their accept stands alone`,
    );
  }
  const people = [...new Set(approved.map((c) => c.by!))].sort();
  const why = `${people.join(", ")} approved ${approved.length} call(s) of ${glob} by ${first.proposer} like this`;
  const s = finish(
    config,
    current,
    tools,
    { participant: first.proposer, kind, rule: { tool: glob, when }, when, scope: shaped.shape.scope },
    group,
    why,
    notes,
  );
  if (typeof s === "string") return s;
  // A rule that would cover fewer of the approvals it came from than make a pattern frees what no pattern supports.
  if (s.covers.approved < least)
    return `only ${s.covers.approved} of the ${approved.length} approvals pass what the rule holds (their content is what the check asks a person about)`;
  return second ? { ...s, second } : s;
}

function denyFor(
  config: SpaceConfig,
  current: Replayer,
  group: PastCall[],
  rejected: PastCall[],
  tools: readonly KnownTool[],
): Suggestion | string | undefined {
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
    // Only what was rejected, exactly (a map's equality takes its keys too): the harmless rest keeps asking.
    const distinct = [...new Map(rejected.map((c) => [canonical(c.args), c.args])).values()];
    if (distinct.length > MAX_SET) return undefined;
    const literals = distinct.map(celLiteral);
    if (literals.some((l) => l === undefined)) return undefined;
    const when = literals.map((l) => `args == ${l}`).join(" || ");
    if (when.length > MAX_SOURCE) return undefined;
    candidate = {
      participant: first.proposer,
      kind: "deny",
      rule: { tool: glob, when },
      when,
      scope: [`exactly the arguments rejected (${distinct.length} form${distinct.length === 1 ? "" : "s"})`],
    };
  }
  // A deny that would refuse a call a person approved is no pattern of rejections.
  if (covered(candidate, group, config).some((c) => c.said === "approved" || c.said === "edited")) return undefined;
  return finish(config, current, tools, candidate, group, why, []);
}

export type { Change };
