/**
 * Scenario 4 of the bench: start to accepting connections, the gateway against the naive
 * forwarder, each telling where its own start went.
 */
import { readFileSync } from "node:fs";
import { join as joinPath } from "node:path";
import { calm, type ServerProc, startGateway, startNaive } from "./procs.js";
import { type Row, row } from "./report.js";
import { type Context, subdir } from "./scenarios.js";
import { median } from "./stats.js";

export const START = { runs: 5, bigRuns: 3 };

export async function start(ctx: Context): Promise<Row[]> {
  const g: ServerProc[] = [];
  const v: ServerProc[] = [];
  const phases: StartPhases[] = [];
  for (let i = 0; i < START.runs; i++) {
    await calm(1000);
    const dir = subdir(ctx, `start-${i}`);
    const gw = await startGateway(ctx.smallYaml, dir);
    await gw.stop();
    g.push(gw);
    const p = startPhases(joinPath(dir, "gw.log"));
    if (p) phases.push(p);
    const nv = await startNaive();
    await nv.stop();
    v.push(nv);
  }
  const big: ServerProc[] = [];
  for (let i = 0; i < START.bigRuns; i++) {
    const gw = await startGateway(ctx.benchYaml, subdir(ctx, `start-big-${i}`));
    await gw.stop();
    big.push(gw);
  }
  const healthy = (ps: ServerProc[]) => median(ps.map((p) => p.healthyMs));
  const printed = (ps: ServerProc[]) => median(ps.map((p) => p.printedMs));
  const list = (ps: ServerProc[]) => ps.map((p) => p.healthyMs.toFixed(0)).join(" / ");
  ctx.progress(`start: gateway ${list(g)} ms, naive ${list(v)} ms`);
  return [
    row({
      scenario: "start",
      label: "start to accepting (3 participants)",
      unit: "ms",
      gateway: healthy(g),
      naive: healthy(v),
      goal: { text: "<= 250 ms", met: healthy(g) <= 250 },
      details: [
        `spawn -> ws:// line -> /healthz 200, median of ${START.runs}: gateway ${list(g)} ms (ws:// line at ${printed(g).toFixed(0)} ms), naive ${list(v)} ms (ws:// line at ${printed(v).toFixed(0)} ms)`,
        phaseLine(phases, v, healthy(g)),
      ],
    }),
    row({
      scenario: "start",
      label: "start, bench space (5,102 participants)",
      unit: "ms",
      gateway: healthy(big),
      naive: healthy(v),
      details: [`median of ${START.bigRuns}: ${list(big)} ms`],
    }),
  ];
}

/** The gateway's own account of a start (its log's "accepting connections" line), ms since the process began. */
type StartPhases = Record<"node" | "code" | "config" | "gateway" | "listen" | "total", number>;

function startPhases(logFile: string): StartPhases | undefined {
  let text: string;
  try {
    text = readFileSync(logFile, "utf8");
  } catch {
    return undefined;
  }
  for (const line of text.split("\n")) {
    if (!line.includes('"start_ms"')) continue;
    try {
      return (JSON.parse(line) as { start_ms: StartPhases }).start_ms;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * Where the gateway's start went, against the forwarder's own account of its start (on
 * its ws:// line), medians of the runs: what the goal leaves the gateway for loading and
 * running its own code, and what that takes.
 */
function phaseLine(phases: StartPhases[], naive: ServerProc[], gatewayMs: number): string {
  if (phases.length === 0) return "the gateway's log had no start_ms record";
  const m = (k: keyof StartPhases) => median(phases.map((p) => p[k]));
  const own = naive
    .map((p) => /\(node ([\d.]+) ms, code ([\d.]+) ms, accepting at ([\d.]+) ms\)/.exec(p.printed))
    .filter((x) => x !== null);
  const nv = (i: number) => median(own.map((x) => Number(x[i])));
  const f = (x: number) => x.toFixed(0);
  const gatewayOwn = m("code") + m("config") + m("gateway") + m("listen");
  const lines = [
    `inside the gateway (its log, medians): node's own bootstrap ${f(m("node"))} ms, loading and evaluating the code ${f(m("code"))} ms ` +
      `(commander, yaml, zod, pino, ws and the gateway), reading space.yaml ${f(m("config"))} ms, opening the space ${f(m("gateway"))} ms, ` +
      `listening ${f(m("listen"))} ms: accepting at ${f(m("total"))} ms after the process began`,
  ];
  if (own.length) {
    const overhead = gatewayMs - m("total");
    lines.push(
      `inside the forwarder: node ${f(nv(1))} ms, loading ws and http ${f(nv(2))} ms, accepting at ${f(nv(3))} ms; ` +
        `spawning and the first /healthz add ${f(overhead)} ms to either, so 250 ms leaves the gateway ${f(250 - overhead - m("node"))} ms after node's bootstrap, ` +
        `where it takes ${f(gatewayOwn)} ms (the forwarder ${f(nv(3) - nv(1))} ms)`,
    );
  }
  return lines.join("\n    ");
}
