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
import { pastCalls } from "../gateway/index.js";
import { Replayer } from "../gateway/index.js";
import { suggest } from "../gateway/index.js";
import type { AuditEntry } from "../gateway/index.js";
import { DAY_SPACE, DAY_TOOLS, type DayCall, seededDay } from "./attention-day.js";
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

function entries(call: DayCall, id: string, approve: boolean): AuditEntry[] {
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
    approve ? { ...base, event: "approved", by: "pat", scope: "once" } : { ...base, event: "rejected", by: "pat", reason: "unsafe" },
  ];
}

/** Replays the day: `learn` false keeps the file as written. */
export function replayDay(
  day: readonly DayCall[],
  learn: boolean,
): { decisions: number; harmfulRan: number; accepted: string[]; denied: number; held: number } {
  let text = DAY_SPACE;
  let config: SpaceConfig = parseSpaceConfig(text, { file: "/bench/day.yaml", env: {} });
  let replayer = new Replayer(config, DAY_TOOLS);
  const audit: AuditEntry[] = [];
  let decisions = 0;
  let harmfulRan = 0;
  let denied = 0;
  let held = 0;
  let nextLearn = LEARN_EVERY_MS;
  const accepted: string[] = [];
  day.forEach((call, i) => {
    if (learn && call.at >= nextLearn) {
      nextLearn += LEARN_EVERY_MS;
      for (const s of suggest(config, pastCalls(audit), DAY_TOOLS)) {
        const clean =
          s.kind === "deny"
            ? s.covers.approved === 0 && s.covers.edited === 0
            : s.covers.rejected === 0 && !Object.values(s.changes).some((c) => c.rejected > 0);
        if (!clean) continue;
        text = addToolRule(text, s.participant, s.kind, s.rule);
        accepted.push(`${s.kind} ${s.participant} ${typeof s.rule === "string" ? s.rule : s.rule.tool}`);
      }
      config = parseSpaceConfig(text, { file: "/bench/day.yaml", env: {} });
      replayer = new Replayer(config, DAY_TOOLS);
    }
    const out = replayer.decide(call)!;
    if (out.decision === "denied") {
      denied++;
      return;
    }
    if (out.decision === "direct") {
      if (call.harmful) harmfulRan++;
      return;
    }
    held++;
    decisions++;
    audit.push(...entries(call, `d${i}`, !call.harmful));
  });
  return { decisions, harmfulRan, accepted, denied, held };
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
    count = suggest(config, pastCalls(audit), DAY_TOOLS).length;
    times.push(performance.now() - t0);
  }
  return { ms: median(times), suggestions: count };
}

export async function attention(ctx: Context): Promise<Row[]> {
  ctx.progress("attention: a seeded day of 2,400 calls, without learning and with");
  const d = benchDay();
  const fewer = 1 - d.decisionsLearning / d.decisions;
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
