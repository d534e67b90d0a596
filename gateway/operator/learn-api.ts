/**
 * The operator API's routes for rules learnt from decisions (gateway/policy/learn/):
 *
 *   GET  policy/suggestions                     the suggested rules, each with its dry run
 *   POST policy/suggestions/<id>/accept {confirm?}  write it into space.yaml, record, reload
 *   POST policy/suggestions/<id>/dismiss        never show it again (remembered in the state dir)
 *   POST policy/dry-run {yaml}                  every recorded call a changed space.yaml would decide otherwise
 *
 * A human reads suggestions and dismisses them; accepting one and a dry run of a whole file
 * are an operator's (capabilities allowing `space/reload`): the first changes the file, the
 * second reads one with the gateway's environment. An accept is checked again at the time:
 * the suggestion must still be made from the trail as it is now, and a rejected call it
 * would cover must have been confirmed by each person who rejected it.
 */
import { type SpaceConfig, parseSpaceConfig } from "../config/config.js";
import { RuleEditError } from "../config/rule-edit.js";
import { compileCapabilities } from "../policy/capabilities.js";
import { restore, serialised, writeRule } from "../policy/learn/accept.js";
import { type PastCall, pastCalls, personIn, replayedCalls } from "../policy/learn/history.js";
import { indexCalls, type LikeThis, likeThis } from "../policy/learn/hint.js";
import { type Risk, riskOf } from "../policy/learn/risk.js";
import { type Fatigue, fatigue } from "../policy/learn/fatigue.js";
import type { ReviewNote } from "../policy/learn/review.js";
import { SuggestionMemory } from "../policy/learn/remembered.js";
import { dryRunView, type KnownTool } from "../policy/learn/replay.js";
import { type Suggestion, suggest } from "../policy/learn/suggest.js";
import { type AuditRecord, type Proposal, runningArguments } from "../proposals/book.js";
import type { ReloadReport } from "../space/reload.js";
import type { Space } from "../space/space.js";

type Reply = { status: number; body: unknown };
const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });

/** How many audit entries are read to learn from. */
export const LEARN_WINDOW = 100_000;
/** The largest space.yaml a dry run takes, in characters. */
const MAX_YAML = 512 * 1024;

export interface LearnHost {
  reload?(opts: { space?: string | undefined; by: string }): Promise<ReloadReport[]>;
}

const memories = new WeakMap<Space, SuggestionMemory>();
function memory(space: Space): SuggestionMemory {
  let m = memories.get(space);
  if (!m) {
    m = new SuggestionMemory(space.config.gateway.state_dir);
    memories.set(space, m);
  }
  return m;
}

function isHuman(space: Space, id: string): boolean {
  return space.config.participants[id]?.kind === "human";
}

function isOperator(space: Space, id: string): boolean {
  const capabilities = space.participantsView().find((p) => p.id === id)?.["capabilities"] as
    | Parameters<typeof compileCapabilities>[0]
    | undefined;
  return capabilities !== undefined && compileCapabilities(capabilities)({ kind: "space/reload" });
}

/** The space's recorded calls and known tools. */
export function learningInput(space: Space): { calls: PastCall[]; tools: KnownTool[] } {
  const calls = pastCalls(space.ledger.audit({}, LEARN_WINDOW), personIn(space.config));
  const tools = space.registry.list().map((t) => ({ participant: t.participant, tool: t.tool, annotations: t.annotations }));
  return { calls, tools };
}

/** The suggestions not dismissed, each saying who confirmed what. */
export function currentSuggestions(space: Space): {
  suggestions: Array<Suggestion & { confirmed?: string[] }>;
  dismissed: number;
  calls: number;
} {
  const { calls, tools } = learningInput(space);
  const m = memory(space);
  const suggestions = suggest(space.config, calls, tools)
    .filter((s) => !m.isDismissed(s.id))
    .map((s) => (s.confirm ? { ...s, confirmed: m.confirmedBy(s.id) } : s));
  return { suggestions, dismissed: m.dismissedCount(), calls: calls.length };
}

export async function learnRoute(
  host: LearnHost,
  space: Space,
  me: string,
  method: string,
  rest: string[],
  body: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Reply> {
  const [what, sid, action] = rest;
  if (what === "dry-run" && method === "POST" && rest.length === 1) return dryRunRoute(space, me, body, env);
  if (what === "fatigue" && method === "GET" && rest.length === 1)
    return isHuman(space, me)
      ? { status: 200, body: fatigueOf(space) }
      : fail(403, "forbidden", "only a human may read the decision figures");
  if (what !== "suggestions") return fail(404, "not_found", "no such route; see docs/operator-api.md");
  if (!isHuman(space, me)) return fail(403, "forbidden", "only a human may read or decide suggested rules");
  if (method === "GET" && rest.length === 1) return { status: 200, body: currentSuggestions(space) };
  if (method !== "POST" || rest.length !== 3 || !sid || (action !== "accept" && action !== "dismiss"))
    return fail(404, "not_found", "POST policy/suggestions/<id>/accept or …/dismiss");
  const found = currentSuggestions(space).suggestions.find((s) => s.id === sid);
  if (!found)
    return fail(
      404,
      "unknown_suggestion",
      `no suggestion "${sid.slice(0, 64)}" now: dismissed, accepted, or the trail no longer supports it`,
    );
  if (action === "dismiss") {
    memory(space).dismiss(found.id, me);
    return { status: 200, body: { ok: true, dismissed: found.id } };
  }
  // A person who rejected a covered call may confirm it whether or not they may change the file.
  if (found.confirm?.by.includes(me) && body["confirm"] === true) memory(space).confirm(found.id, me);
  if (!isOperator(space, me)) {
    if (found.confirm?.by.includes(me) && body["confirm"] === true)
      return { status: 202, body: { ok: true, confirmed: found.id, message: "your confirmation is kept; an operator accepts the rule" } };
    return fail(403, "capability_violation", "only an operator may change space.yaml: your capabilities do not allow space/reload");
  }
  if (!host.reload) return fail(501, "not_supported", "this gateway cannot reload");
  if (found.confirm) {
    const waiting = found.confirm.by.filter((p) => !memory(space).confirmedBy(found.id).includes(p));
    if (waiting.length) {
      return {
        status: 409,
        body: {
          error: {
            code: "needs_confirmation",
            message: `this rule would allow ${found.confirm.calls.length} call(s) a person rejected; each of ${waiting.join(", ")} must accept it with {"confirm": true} first`,
            waiting,
            calls: found.confirm.calls,
          },
        },
      };
    }
  }
  return accept(host, space, me, found, env);
}

async function accept(host: LearnHost, space: Space, me: string, s: Suggestion, env: NodeJS.ProcessEnv): Promise<Reply> {
  const file = space.config.file;
  return serialised(file, async () => {
    let written: Awaited<ReturnType<typeof writeRule>>;
    try {
      written = await writeRule(file, space.config.gateway.state_dir, env, s.participant, s.kind, s.rule);
    } catch (err) {
      const code = err instanceof RuleEditError ? "cannot_edit" : "write_failed";
      return fail(409, code, `space.yaml was not changed: ${(err as Error).message}`);
    }
    const changes = [
      `${s.kind} for ${s.participant}: ${JSON.stringify(s.rule)}`,
      ...Object.entries(s.changes).map(
        ([how, n]) => `${how}: ${n.total} recorded call(s) (${n.approved} approved, ${n.rejected} rejected)`,
      ),
      `backup: ${written.backup}`,
    ];
    const record: AuditRecord = {
      type: "audit",
      entry: {
        ts: new Date().toISOString(),
        event: "rule_accepted",
        proposal: "",
        proposer: me,
        owner: s.participant,
        tool: typeof s.rule === "string" ? s.rule : s.rule.tool,
        method: "policy/suggestion",
        arguments: { suggestion: s.id, kind: s.kind, rule: s.rule },
        changes,
      },
    };
    try {
      await space.ledger.record({ records: [record], apply: () => {} });
    } catch (err) {
      await restore(file, written);
      return fail(503, "store_failed", `space.yaml was put back: the audit trail could not record the accept (${(err as Error).message})`);
    }
    try {
      const reloaded = await host.reload!({ space: space.id, by: me });
      return {
        status: 200,
        body: {
          ok: true,
          accepted: s.id,
          rule: { participant: s.participant, kind: s.kind, rule: s.rule },
          backup: written.backup,
          reloaded,
        },
      };
    } catch (err) {
      return fail(
        422,
        "reload_failed",
        `the rule is in space.yaml (backup ${written.backup}) but the reload failed: ${(err as Error).message}`,
      );
    }
  });
}

function dryRunRoute(space: Space, me: string, body: Record<string, unknown>, env: NodeJS.ProcessEnv): Reply {
  if (!isOperator(space, me))
    return fail(403, "capability_violation", "only an operator may dry-run a space.yaml: your capabilities do not allow space/reload");
  const text = body["yaml"];
  if (typeof text !== "string" || text.length === 0)
    return fail(400, "invalid_payload", "dry-run: yaml must be the changed space.yaml's text");
  if (text.length > MAX_YAML) return fail(400, "invalid_payload", `dry-run: yaml is ${text.length} characters; at most ${MAX_YAML}`);
  let next: SpaceConfig;
  try {
    next = parseSpaceConfig(text, { file: space.config.file, env });
  } catch (err) {
    const issues = (err as { issues?: unknown }).issues;
    return { status: 422, body: { error: { code: "invalid_config", message: (err as Error).message, ...(issues ? { issues } : {}) } } };
  }
  // The direct calls too (nobody saw them): a change that would now hold or deny them is listed.
  const { tools } = learningInput(space);
  return {
    status: 200,
    body: dryRunView(space.config, next, replayedCalls(space.ledger.audit({}, LEARN_WINDOW), personIn(space.config)), tools),
  };
}

/**
 * The indexes a card's hint and risk read, rebuilt when a proposal changed since (the space's
 * proposal counters move), at most once per REBUILD_MS: reading the trail costs in proportion
 * to its length, and a console refreshing at every proposal of a busy space must not pay it
 * each time. A card's history may so lag the trail by that much; what bounds a reviewer
 * (`fresh`) never does.
 */
const hintIndex = new WeakMap<
  Space,
  { version: number; at: number; index: Map<string, PastCall[]>; byProposer: Map<string, PastCall[]> }
>();
const REBUILD_MS = 1000;

function indexes(space: Space, fresh = false): { index: Map<string, PastCall[]>; byProposer: Map<string, PastCall[]> } {
  let version = 0;
  for (const n of space.metrics.proposals.values()) version += n;
  let cached = hintIndex.get(space);
  if (!cached || (cached.version !== version && (fresh || Date.now() - cached.at >= REBUILD_MS))) {
    const calls = pastCalls(space.ledger.audit({}, LEARN_WINDOW), personIn(space.config));
    const byProposer = new Map<string, PastCall[]>();
    for (const c of calls) (byProposer.get(c.proposer) ?? byProposer.set(c.proposer, []).get(c.proposer)!).push(c);
    cached = { version, at: Date.now(), index: indexCalls(calls), byProposer };
    hintIndex.set(space, cached);
  }
  return cached;
}

/** Brings the cards' history up to the trail now (a reviewer's list reads it fresh). */
export function refreshLearning(space: Space): void {
  indexes(space, true);
}

/**
 * What a card shows from the recorded calls: "you approved 5 like this" (hint.ts) and the
 * proposal's risk with its reasons (risk.ts).
 */
export function learnView(
  space: Space,
  viewer: string,
  p: Proposal,
  facts: { annotations?: Record<string, unknown> | undefined; definitionChanged: boolean; flagged: boolean },
  fresh = false,
): { like_this?: LikeThis; risk?: Risk } {
  if (p.method !== "tools/call" || p.tool === undefined) return {};
  const { index, byProposer } = indexes(space, fresh);
  const args = runningArguments(p);
  const like = likeThis(index, viewer, { id: p.id, proposer: p.proposer, owner: p.owner, tool: p.tool, args });
  const risk = riskOf({
    id: p.id,
    proposer: p.proposer,
    tool: `${p.owner}/${p.tool}`,
    args,
    ...facts,
    byProposer: byProposer.get(p.proposer) ?? [],
    byTool: index.get(`${p.proposer}\u0000${p.owner}/${p.tool}`) ?? [],
  });
  return { ...(like ? { like_this: like } : {}), risk };
}

/** Previews opened, by proposal and person, since the gateway started: what "approved without reading" is measured against. */
const opened = new WeakMap<Space, Set<string>>();
const MAX_OPENED = 100_000;

/** The console (or anyone) fetched `proposal`'s preview as `person`. */
export function notePreviewOpened(space: Space, proposal: string, person: string): void {
  let set = opened.get(space);
  if (!set) {
    set = new Set();
    opened.set(space, set);
  }
  // Oldest first out: a Set keeps insertion order.
  if (set.size >= MAX_OPENED) set.delete(set.values().next().value!);
  set.add(`${proposal}\u0000${person}`);
}

/** The space's decision figures (policy/learn/fatigue.ts). */
export function fatigueOf(space: Space): Fatigue {
  const set = opened.get(space);
  return fatigue(
    pastCalls(space.ledger.audit({}, LEARN_WINDOW), personIn(space.config)),
    (proposal, person) => set?.has(`${proposal}\u0000${person}`) === true,
  );
}

/** The decision figures of every space in Prometheus text, for /metrics. */
export function fatigueMetrics(spaces: readonly Space[]): string {
  const out: string[] = [];
  const label = (labels: Record<string, string>) =>
    `{${Object.entries(labels)
      .map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, "_")}"`)
      .join(",")}}`;
  const figures = spaces.map((s) => ({ space: s.id, f: fatigueOf(s) }));
  const metric = (name: string, type: string, help: string, rows: Array<[Record<string, string>, number]>) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [l, v] of rows) out.push(`${name}${label(l)} ${v}`);
  };
  metric(
    "mewgate_person_decisions",
    "gauge",
    "Decisions a person made, over the recorded calls",
    figures.flatMap(({ space, f }) => f.people.map((p): [Record<string, string>, number] => [{ space, person: p.person }, p.decisions])),
  );
  metric(
    "mewgate_person_decisions_per_hour",
    "gauge",
    "A person's decisions per hour, over the span of their decisions",
    figures.flatMap(({ space, f }) => f.people.map((p): [Record<string, string>, number] => [{ space, person: p.person }, p.per_hour])),
  );
  metric(
    "mewgate_person_decide_seconds_median",
    "gauge",
    "A person's median time from a proposal to their decision",
    figures.flatMap(({ space, f }) =>
      f.people.map((p): [Record<string, string>, number] => [{ space, person: p.person }, p.median_seconds]),
    ),
  );
  metric(
    "mewgate_person_quick_unopened_approvals",
    "gauge",
    "Approvals given within 2 s on a card whose preview that person never opened",
    figures.flatMap(({ space, f }) =>
      f.people.map((p): [Record<string, string>, number] => [{ space, person: p.person }, p.quick_unopened]),
    ),
  );
  metric(
    "mewgate_tool_rejection_rate",
    "gauge",
    "Share of a proposer's decided calls of a tool that people rejected",
    figures.flatMap(({ space, f }) =>
      f.tools.map((t): [Record<string, string>, number] => [{ space, proposer: t.proposer, tool: t.tool }, t.rejection_rate]),
    ),
  );
  metric(
    "mewgate_tool_edit_rate",
    "gauge",
    "Share of a proposer's decided calls of a tool that people approved with edited arguments",
    figures.flatMap(({ space, f }) =>
      f.tools.map((t): [Record<string, string>, number] => [{ space, proposer: t.proposer, tool: t.tool }, t.edit_rate]),
    ),
  );
  return `${out.join("\n")}\n`;
}

/** Reviewers' notes on pending proposals (review-api.ts writes them, the card shows them), in memory. */
const reviewNotes = new WeakMap<Space, Map<string, ReviewNote>>();

export function reviewNote(space: Space, proposal: string): ReviewNote | undefined {
  return reviewNotes.get(space)?.get(proposal);
}

export function setReviewNote(space: Space, proposal: string, note: ReviewNote): void {
  let m = reviewNotes.get(space);
  if (!m) {
    m = new Map();
    reviewNotes.set(space, m);
  }
  // Notes of proposals no longer pending go first.
  if (m.size > 10_000) for (const id of m.keys()) if (!space.proposals.pending().some((p) => p.id === id)) m.delete(id);
  m.set(proposal, note);
}
