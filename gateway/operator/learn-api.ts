/**
 * The operator API's routes for rules learnt from decisions (gateway/policy/learn/):
 *
 *   GET  policy/suggestions                     the suggested rules, each with its dry run, and
 *                                               the repeated patterns with none, each saying why
 *   POST policy/suggestions/<id>/accept {confirm?}  write it into space.yaml, record, reload; or,
 *                                               with confirm, a rejecter's word for the calls
 *                                               they rejected, or a second person's word
 *   POST policy/suggestions/<id>/dismiss        never show it again (remembered in the state dir)
 *   POST policy/dry-run {yaml}                  every recorded call a changed space.yaml would decide otherwise
 *
 * A human reads suggestions and dismisses them; accepting one and a dry run of a whole file
 * are an operator's (capabilities allowing `space/reload`): the first changes the file, the
 * second reads one with the gateway's environment (the one its reload reads the file with,
 * so `${MEWGATE_SANDBOX}` and the like resolve as they do for a reload). An accept is checked
 * again at the time: the suggestion must still be made from the trail as it is now; each
 * rejected call it would cover must have been confirmed, that very call, by the person who
 * rejected it; and a destructive or open-world tool's rule must have a second person's word
 * (one of those who decide the proposer's calls, not the one accepting), where there is one.
 */
import { type SpaceConfig, parseSpaceConfig } from "../config/config.js";
import { RuleEditError } from "../config/rule-edit.js";
import { compileCapabilities } from "../policy/capabilities.js";
import { restore, serialised, writeRule } from "../policy/learn/accept.js";
import { type PastCall, personIn, replayedCalls } from "../policy/learn/history.js";
import { type LikeThis, likeThis } from "../policy/learn/hint.js";
import type { Risk, RiskCode } from "../policy/learn/risk.js";
import { LEARN_WINDOW } from "../policy/learn/recorded.js";
import { type Fatigue, fatigue } from "../policy/learn/fatigue.js";
import type { ReviewNote } from "../policy/learn/review.js";
import { SuggestionMemory } from "../policy/learn/remembered.js";
import { dryRunView, type KnownTool } from "../policy/learn/replay.js";
import { learn, type Suggestion, type Withheld } from "../policy/learn/suggest.js";
import { type Proposal, runningArguments } from "../proposals/book.js";
import type { AuditRecord } from "../audit/entry.js";
import type { ReloadReport } from "../space/reload.js";
import type { Space } from "../space/space.js";

type Reply = { status: number; body: unknown };
const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });

/** The largest space.yaml a dry run takes, in characters. */
const MAX_YAML = 512 * 1024;

export interface LearnHost {
  reload?(opts: { space?: string | undefined; by: string }): Promise<ReloadReport[]>;
  /** The environment the gateway reads space.yaml with (its reload's). */
  configEnv?(): NodeJS.ProcessEnv;
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
  const calls = space.recorded.calls();
  const tools = space.registry.list().map((t) => ({ participant: t.participant, tool: t.tool, annotations: t.annotations }));
  return { calls, tools };
}

export type SuggestionView = Suggestion & { confirmed?: string[]; seconded?: string[] };

/** The suggestions not dismissed, each saying who confirmed what; the patterns with none, and why. */
export function currentSuggestions(space: Space): {
  suggestions: SuggestionView[];
  withheld: Withheld[];
  dismissed: number;
  calls: number;
} {
  const { calls, tools } = learningInput(space);
  const m = memory(space);
  const learned = learn(space.config, calls, tools);
  const suggestions = learned.suggestions
    .filter((s) => !m.isDismissed(s.id))
    .map((s) => ({
      ...s,
      ...(s.confirm ? { confirmed: m.confirmedBy(s.id, s.confirm.rejected) } : {}),
      ...(s.second ? { seconded: m.secondedBy(s.id) } : {}),
    }));
  return { suggestions, withheld: learned.withheld, dismissed: m.dismissedCount(), calls: calls.length };
}

/** Who must still give their word before `s` may be accepted by `me`: rejecters, and a second person. */
function waitingFor(s: SuggestionView, me: string): { rejecters: string[]; second: string[] } {
  const rejecters = (s.confirm?.by ?? []).filter((p) => !(s.confirmed ?? []).includes(p));
  const others = (s.second?.people ?? []).filter((p) => p !== me);
  const seconded = (s.seconded ?? []).some((p) => p !== me && others.includes(p));
  return { rejecters, second: s.second && others.length && !seconded ? others : [] };
}

export async function learnRoute(
  host: LearnHost,
  space: Space,
  me: string,
  method: string,
  rest: string[],
  body: Record<string, unknown>,
  env: NodeJS.ProcessEnv = host.configEnv?.() ?? process.env,
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
  // A person who rejected a covered call may confirm it (those very calls), and one who decides
  // the proposer's calls may give a destructive tool's rule the second word, whether or not
  // they may change the file.
  let gave: string | undefined;
  if (body["confirm"] === true) {
    const mine = found.confirm?.rejected[me];
    if (mine) {
      memory(space).confirm(found.id, me, mine);
      gave = `you confirmed the ${mine.length} call(s) you rejected that it covers`;
    }
    if (found.second?.people.includes(me)) {
      memory(space).second(found.id, me);
      gave = gave ? `${gave}, and gave your word as a second person` : "you gave your word as a second person";
    }
  }
  if (!isOperator(space, me)) {
    if (gave) return { status: 202, body: { ok: true, confirmed: found.id, message: `${gave}; an operator accepts the rule` } };
    return fail(403, "capability_violation", "only an operator may change space.yaml: your capabilities do not allow space/reload");
  }
  if (!host.reload) return fail(501, "not_supported", "this gateway cannot reload");
  const now = currentSuggestions(space).suggestions.find((s) => s.id === sid) ?? found;
  const waiting = waitingFor(now, me);
  if (waiting.rejecters.length)
    return {
      status: 409,
      body: {
        error: {
          code: "needs_confirmation",
          message: `this rule would allow ${now.confirm!.calls.length} call(s) a person rejected; each of ${waiting.rejecters.join(", ")} must accept it with {"confirm": true} first, for the calls they rejected`,
          waiting: waiting.rejecters,
          calls: now.confirm!.calls,
        },
      },
    };
  if (waiting.second.length)
    return {
      status: 409,
      body: {
        error: {
          code: "needs_second_person",
          message: `${typeof now.rule === "string" ? now.rule : now.rule.tool} is destructive or open-world: one of ${waiting.second.join(", ")} (not the one accepting) must confirm it with {"confirm": true} before it stands`,
          waiting: waiting.second,
        },
      },
    };
  return accept(host, space, me, now, env);
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
 * What a card shows from the recorded calls (policy/learn/recorded.ts): "you approved 5 like
 * this" (hint.ts) and the proposal's risk with its reasons (risk.ts).
 */
export function learnView(
  space: Space,
  viewer: string,
  p: Proposal,
  facts: {
    annotations?: Record<string, unknown> | undefined;
    definitionChanged: boolean;
    flagged: boolean;
    guarded?: readonly string[] | undefined;
  },
  fresh = false,
): { like_this?: LikeThis; risk?: Risk } {
  if (p.method !== "tools/call" || p.tool === undefined) return {};
  const { index } = space.recorded.indexes(fresh);
  const args = runningArguments(p);
  const subject = { id: p.id, proposer: p.proposer, owner: p.owner, tool: p.tool, args };
  const risk = space.recorded.riskOf({ ...subject, ...facts });
  // "You approved 36 like this" is no comfort for a call that holds what those did not (a
  // secret, shell syntax, a sensitive path, a host or place never seen): the card says the
  // reasons instead.
  const unlike = risk.reasons.some((r) => NEW_OR_DANGEROUS.has(r.code));
  const like = unlike ? undefined : likeThis(index, viewer, subject);
  return { ...(like ? { like_this: like } : {}), risk };
}

/** Risk reasons that make a call unlike the ones people approved, whatever its directory. */
const NEW_OR_DANGEROUS = new Set<RiskCode>([
  "secret",
  "shell",
  "sensitive_path",
  "hidden_path",
  "traversal",
  "control",
  "new_host",
  "new_path",
  "definition_changed",
  "flagged",
  "guard",
  "personal",
]);

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
  return fatigue(space.recorded.calls(), (proposal, person) => set?.has(`${proposal}\u0000${person}`) === true);
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
