/**
 * `npm run bench attention`: how much of a person's attention the gateway asks for.
 *
 * 1. A seeded day (attention-day.ts) replayed against the gateway's own decision point
 *    (policy/authority.ts, through policy/learn/replay.ts) twice: with the space.yaml as
 *    written, and learning — every 30 simulated minutes the gateway's suggestions are
 *    computed from the recorded decisions (policy/learn/suggest.ts) and a simulated person
 *    accepts each whose dry run shows no rejected call (an allow or ask covering no rejected
 *    call; a deny covering no approved one), written into the file in place
 *    (config/rule-edit.ts) and parsed again as a reload would. The person decides each held
 *    call by the seed's truth: approves the harmless, rejects the harmful. Printed: the
 *    person's decisions without and with learning, harmful calls that ran without a person
 *    (goal 0), cards per hour.
 * 2. Suggestions over 10,000 recorded calls: how long computing them takes.
 * 3. Proposal → its card live in a console at 100 proposals/s, p99 (approvals.ts's run).
 */
import { parseSpaceConfig, type SpaceConfig } from "../gateway/index.js";
import { addToolRule } from "../gateway/index.js";
import { pastCalls, personIn } from "../gateway/index.js";
import { type KnownTool, Replayer } from "../gateway/index.js";
import { suggest } from "../gateway/index.js";
import type { AuditEntry } from "../gateway/index.js";
import { DAY_SPACE, DAY_TOOLS, type DayCall, seededDay } from "./attention-day.js";
import { ASK_SPACE, adversaryDays, adversaryTools, FALLBACK_SPACE } from "./attention-adversary.js";
import { benchApprovals } from "./approvals.js";
import { type Row, row } from "./report.js";
import type { Context } from "./scenarios.js";
import { median } from "./stats.js";

const HOURS = 8;
const LEARN_EVERY_MS = 30 * 60_000;

export interface DayFigures {
  calls: number;
  held: number;
  decisions: number;
  decisionsLearning: number;
  harmfulRan: number;
  harmfulRanLearning: number;
  harmful: number;
  accepted: string[];
  denied: number;
}

function entries(call: DayCall, id: string, approve: boolean, by = "pat"): AuditEntry[] {
  const ts = new Date(Date.UTC(2026, 10, 28, 8) + call.at).toISOString();
  const base = {
    ts,
    proposal: id,
    proposer: call.proposer,
    owner: call.owner,
    tool: call.tool,
    method: "tools/call",
    arguments: call.args,
  };
  return [
    { ...base, event: "proposed" },
    approve ? { ...base, event: "approved", by, scope: "once" } : { ...base, event: "rejected", by, reason: "unsafe" },
  ];
}

/** A space to replay a day in: its file as written and its tools' hints. */
export interface Layout {
  name: string;
  yaml: string;
  tools: readonly KnownTool[];
}

/** What a replay counted, per day (index 0 the first day). */
export interface Replayed {
  decisions: number;
  harmfulRan: number;
  accepted: string[];
  denied: number;
  held: number;
  /** Per day: decisions, and harmful calls that ran without a person. */
  days: Array<{ decisions: number; harmfulRan: number; ran: string[] }>;
}

const DAY_MS = 24 * 3_600_000;

/**
 * Replays the calls: `learn` false keeps the file as written; true accepts, every 30 simulated
 * minutes, each suggestion a careful operator would: one whose dry run shows no rejected call
 * (an allow or ask covering none; a deny covering no approved one). People decide each held
 * call by the truth (the harmless approved, the harmful rejected), `people` taking turns.
 */
export function replayLayout(day: readonly DayCall[], layout: Layout, learn: boolean, people: readonly string[] = ["pat"]): Replayed {
  let text = layout.yaml;
  const file = `/bench/${layout.name}.yaml`;
  let config: SpaceConfig = parseSpaceConfig(text, { file, env: {} });
  let replayer = new Replayer(config, layout.tools);
  const audit: AuditEntry[] = [];
  const out: Replayed = { decisions: 0, harmfulRan: 0, accepted: [], denied: 0, held: 0, days: [] };
  let nextLearn = LEARN_EVERY_MS;
  day.forEach((call, i) => {
    const d = Math.floor(call.at / DAY_MS);
    while (out.days.length <= d) out.days.push({ decisions: 0, harmfulRan: 0, ran: [] });
    if (learn && call.at >= nextLearn) {
      while (nextLearn <= call.at) nextLearn += LEARN_EVERY_MS;
      for (const s of suggest(config, pastCalls(audit, personIn(config)), layout.tools)) {
        const clean =
          s.kind === "deny"
            ? s.covers.approved === 0 && s.covers.edited === 0
            : s.covers.rejected === 0 && !Object.values(s.changes).some((c) => c.rejected > 0);
        if (!clean) continue;
        text = addToolRule(text, s.participant, s.kind, s.rule);
        out.accepted.push(`${s.kind} ${s.participant} ${typeof s.rule === "string" ? s.rule : s.rule.tool}`);
      }
      config = parseSpaceConfig(text, { file, env: {} });
      replayer = new Replayer(config, layout.tools);
    }
    const decided = replayer.decide(call)!;
    if (decided.decision === "denied") {
      out.denied++;
      return;
    }
    if (decided.decision === "direct") {
      if (call.harmful) {
        out.harmfulRan++;
        out.days[d]!.harmfulRan++;
        out.days[d]!.ran.push(`${call.proposer} ${call.owner}/${call.tool} ${JSON.stringify(call.args).slice(0, 120)}`);
      }
      return;
    }
    out.held++;
    out.decisions++;
    out.days[d]!.decisions++;
    audit.push(...entries(call, `d${i}`, !call.harmful, people[i % people.length]!));
  });
  return out;
}

/** Replays the day: `learn` false keeps the file as written. */
export function replayDay(day: readonly DayCall[], learn: boolean): Replayed {
  return replayLayout(day, { name: "day", yaml: DAY_SPACE, tools: DAY_TOOLS }, learn);
}

export function benchDay(seed = 36): DayFigures {
  const day = seededDay(seed, 2400, HOURS);
  const without = replayDay(day, false);
  const withLearning = replayDay(day, true);
  return {
    calls: day.length,
    held: without.held,
    decisions: without.decisions,
    decisionsLearning: withLearning.decisions,
    harmfulRan: without.harmfulRan,
    harmfulRanLearning: withLearning.harmfulRan,
    harmful: day.filter((c) => c.harmful).length,
    accepted: withLearning.accepted,
    denied: withLearning.denied,
  };
}

/** How long suggestions over `n` recorded calls take, in ms (median of `rounds`). */
export function benchSuggest(n = 10_000, rounds = 5): { ms: number; suggestions: number } {
  const day = seededDay(7, n, 24);
  const audit: AuditEntry[] = [];
  day.forEach((c, i) => {
    audit.push(...entries(c, `s${i}`, !c.harmful));
  });
  const config = parseSpaceConfig(DAY_SPACE, { file: "/bench/day.yaml", env: {} });
  const times: number[] = [];
  let count = 0;
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    count = suggest(config, pastCalls(audit, personIn(config)), DAY_TOOLS).length;
    times.push(performance.now() - t0);
  }
  return { ms: median(times), suggestions: count };
}

/** The adversary's layouts: as people write them, the tools hinted as their servers declare. */
export function adversaryLayouts(): Layout[] {
  return [
    { name: "fallback: ask, hints as published", yaml: FALLBACK_SPACE, tools: adversaryTools(false) },
    { name: "fallback: ask, writes unannotated", yaml: FALLBACK_SPACE, tools: adversaryTools(true) },
    { name: "explicit ask: for every write", yaml: ASK_SPACE, tools: adversaryTools(false) },
  ];
}

export interface AdversaryFigures {
  layout: string;
  seed: number;
  /** Day-2 decisions without learning, and with. */
  without: number;
  withLearning: number;
  harmful: number;
  /** Harmful calls that ran without a person, with learning, per day. */
  ran: number[];
  /** And without learning (the file as written lets them through). */
  ranWithout: number[];
  examples: string[];
  accepted: number;
}

/** Two days of the adversary under a layout, without learning and with. */
export function benchAdversary(layout: Layout, seed: number): AdversaryFigures {
  const days = adversaryDays(seed);
  const without = replayLayout(days, layout, false, ["pat", "sam"]);
  const learning = replayLayout(days, layout, true, ["pat", "sam"]);
  return {
    layout: layout.name,
    seed,
    without: without.days[1]?.decisions ?? 0,
    withLearning: learning.days[1]?.decisions ?? 0,
    harmful: days.filter((c) => c.harmful).length,
    ran: learning.days.map((d) => d.harmfulRan),
    ranWithout: without.days.map((d) => d.harmfulRan),
    examples: learning.days.flatMap((d) => d.ran).slice(0, 4),
    accepted: learning.accepted.length,
  };
}

/** The seeds the learner was never tuned on are all but the first; every one is printed. */
export const ADVERSARY_SEEDS = [11, 12, 13];

export function adversaryRows(): Row[] {
  return adversaryLayouts().map((layout) => {
    const figs = ADVERSARY_SEEDS.map((seed) => benchAdversary(layout, seed));
    const without = figs.reduce((s, f) => s + f.without, 0);
    const withLearning = figs.reduce((s, f) => s + f.withLearning, 0);
    const ran = figs.reduce((s, f) => s + f.ran.reduce((a, b) => a + b, 0), 0);
    const fewest = Math.min(...figs.map((f) => 1 - f.withLearning / Math.max(1, f.without)));
    return row({
      scenario: "attention",
      label: `adversary, ${layout.name}: day-2 decisions (learning vs not)`,
      unit: "",
      gateway: withLearning,
      naive: without,
      goal: { text: ">= 70% fewer on every seed, 0 harmful run", met: fewest >= 0.7 && ran === 0 },
      details: [
        ...figs.map(
          (f) =>
            `seed ${f.seed}: day 2 ${f.without} → ${f.withLearning} decisions (${Math.round((1 - f.withLearning / Math.max(1, f.without)) * 100)}% fewer); harmful run without a person: day 1 ${f.ran[0] ?? 0}, day 2 ${f.ran[1] ?? 0} of ${f.harmful} (the file as written: ${f.ranWithout.join(" + ")}); ${f.accepted} rule(s) accepted`,
        ),
        ...figs.flatMap((f) => f.examples.map((e) => `  ran (seed ${f.seed}): ${e}`)).slice(0, 6),
      ],
    });
  });
}

export async function attention(ctx: Context): Promise<Row[]> {
  ctx.progress("attention: a seeded day of 2,400 calls, without learning and with");
  const d = benchDay();
  const fewer = 1 - d.decisionsLearning / d.decisions;
  ctx.progress("attention: the adversary's days, three layouts, three seeds");
  const adversary = adversaryRows();
  ctx.progress("attention: suggestions over 10,000 recorded calls");
  const s = benchSuggest();
  ctx.progress("attention: proposal → card at 100/s");
  const card = await benchApprovals(ctx.dir, ctx.progress);
  ctx.noise(card.others);
  return [
    row({
      scenario: "attention",
      label: "a person's decisions over a seeded day (learning vs not)",
      unit: "",
      gateway: d.decisionsLearning,
      naive: d.decisions,
      goal: { text: ">= 80% fewer, 0 harmful run", met: fewer >= 0.8 && d.harmfulRanLearning === 0 },
      details: [
        `${d.calls} calls from 3 agents over 20 tools in ${HOURS} h; ${d.held} held for a person without learning; ${Math.round(fewer * 100)}% fewer with learning`,
        `cards per hour: ${(d.decisions / HOURS).toFixed(0)} without, ${(d.decisionsLearning / HOURS).toFixed(0)} with learning`,
        `harmful calls (${d.harmful} in the day) that ran without a person: ${d.harmfulRan} without learning, ${d.harmfulRanLearning} with; ${d.denied} refused by learnt deny rules`,
        `rules accepted: ${d.accepted.length} (${d.accepted.join("; ")})`,
      ],
    }),
    ...adversary,
    row({
      scenario: "attention",
      label: "suggestions over 10,000 recorded calls",
      unit: "ms",
      gateway: Number(s.ms.toFixed(1)),
      ratio: false,
      goal: { text: "<= 1000 ms", met: s.ms <= 1000 },
      details: [`${s.suggestions} suggestion(s), each with its dry run; median of 5, in this process`],
    }),
    row({
      scenario: "attention",
      label: "proposal → its card live in a console (SSE), p99, 100/s",
      unit: "ms",
      gateway: Number(card.card.p99.toFixed(2)),
      ratio: false,
      goal: { text: "<= 50 ms", met: card.card.p99 <= 50 && card.seen === card.sent },
      details: [
        `p50 ${card.card.p50.toFixed(2)} ms; ${card.seen} of ${card.sent} cards seen at ${card.rate.toFixed(0)}/s; other processes kept ${card.others.toFixed(2)} cores busy`,
      ],
    }),
  ];
}
