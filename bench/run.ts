/**
 * `npm run bench`: measures the gateway against a naive forwarder in one run and prints
 * both figures, their ratio, the goal and whether it was met. Figures, never pass/fail:
 * the exit code is 0 whatever the figures are, and non-zero only if the bench itself broke.
 *
 *   node dist/bench/run.js [fanout] [rtt] [idle] [start] [slow] [governance] [store] [bridge] [agent] [cluster] [approvals] [attention] [--json]
 *
 * With no scenario named, all run. `--json` prints the rows as JSON on stdout and the
 * human-readable report on stderr. Environment:
 *   BENCH_GATEWAY_NODE_ARGS  node flags for the gateway process ("--cpu-prof --cpu-prof-dir=/tmp/prof")
 *   BENCH_IDLE_CONNECT_S     how long the idle scenario may spend joining (default 30)
 *   BENCH_PIN=0              do not pin servers and clients to separate cores
 *
 * Both servers run as child processes on 127.0.0.1; the load clients run in this process,
 * the same code for both.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_LIMITS } from "../gateway/index.js";
import { pinCores } from "./procs.js";
import { type Row, table, toJson } from "./report.js";
import { agent, bridge, governance } from "./extra.js";
import { fanout } from "./fanout.js";
import { idle } from "./idle.js";
import { rtt } from "./rtt.js";
import type { Context } from "./scenarios.js";
import { slow } from "./slow.js";
import { start } from "./start.js";
import { benchSpaceYaml, smallSpaceYaml } from "./spaces.js";
import { storeRows } from "./store.js";
import { cluster } from "./cluster.js";
import { approvals } from "./approvals.js";
import { attention } from "./attention.js";

const store = (ctx: Context): Promise<Row[]> => storeRows(ctx.dir, ctx.progress);
const SCENARIOS = { fanout, rtt, idle, start, slow, governance, store, bridge, agent, cluster, approvals, attention } as const;
type Scenario = keyof typeof SCENARIOS;
const TITLES: Record<Scenario, string> = {
  fanout: "1. chat fan-out, 100-byte text (deliveries per second, summed over receivers)",
  rtt: "2. mcp/request -> mcp/response round trip, concurrency 1",
  idle: "3. idle connections",
  start: "4. start to accepting connections",
  slow: "5. a participant that stops reading while 10 MB/s flows to it",
  governance: "6. governance: call tracking, proposals, the catalogue",
  store: "7. state store: durable transitions",
  bridge: "8. MCP bridge: added latency",
  agent: "9. LLM agent: its own work per model turn",
  cluster: "10. a cluster of three gateways over NATS, against one gateway",
  approvals: "11. approvals: a proposal's card live in a console, and its preview",
  attention: "12. attention: a person's decisions over a seeded day, with and without learnt rules",
};

function parseArgs(argv: string[]): { scenarios: Scenario[]; json: boolean } {
  const scenarios: Scenario[] = [];
  let json = false;
  for (const arg of argv) {
    if (arg === "--json") json = true;
    else if (arg in SCENARIOS) scenarios.push(arg as Scenario);
    else {
      process.stderr.write(
        `bench: unknown argument "${arg}"\nusage: node dist/bench/run.js [${Object.keys(SCENARIOS).join("] [")}] [--json]\n`,
      );
      process.exit(2);
    }
  }
  return { scenarios: scenarios.length ? scenarios : (Object.keys(SCENARIOS) as Scenario[]), json };
}

async function main(): Promise<void> {
  const { scenarios, json } = parseArgs(process.argv.slice(2));
  // In --json mode stdout carries only the JSON.
  const out = (s: string) => (json ? process.stderr : process.stdout).write(`${s}\n`);
  const dir = mkdtempSync(join(tmpdir(), "mewgate-bench-"));
  let maxNoise = 0;
  const write = (name: string, text: string) => {
    const file = join(dir, name);
    writeFileSync(file, text);
    return file;
  };
  const ctx: Context = {
    dir,
    benchYaml: write("space.yaml", benchSpaceYaml({ participants: 5100, maxBufferedBytes: 64 * 1024 * 1024 })),
    slowYaml: write("slow-space.yaml", benchSpaceYaml({ participants: 2 })),
    slowBufferedBytes: DEFAULT_LIMITS.max_buffered_bytes,
    smallYaml: write("small-space.yaml", smallSpaceYaml()),
    progress: (line) => process.stderr.write(`  .. ${line}\n`),
    noise: (cores) => {
      maxNoise = Math.max(maxNoise, cores);
    },
  };
  mkdirSync(join(dir, "state"), { recursive: true });

  const began = performance.now();
  out(`mewgate bench: node ${process.version}, ${cpus().length} cores, scenarios: ${scenarios.join(" ")}`);
  out(`gateway: node dist/cli/main.js gateway (its own process); naive: node dist/bench/naive.js (its own process); clients: this process`);
  out(`${pinCores()}; each timed round waits up to 3 s for other processes to go quiet`);
  const rows: Row[] = [];
  let failed = false;
  try {
    for (const name of scenarios) {
      out(`\n${TITLES[name]}`);
      try {
        const got = await SCENARIOS[name](ctx);
        rows.push(...got);
        out(table(got));
      } catch (err) {
        // One broken scenario should not cost the figures of the others.
        failed = true;
        out(`  ${name} failed: ${(err as Error).stack ?? String(err)}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }

  out(`\nsummary (${((performance.now() - began) / 1000).toFixed(0)} s)`);
  out(table(rows, false));
  const goals = rows.filter((r) => r.goal);
  out(`${goals.filter((r) => r.goal!.met).length} of ${goals.length} goals met`);
  if (maxNoise >= 0.1) {
    out(
      `note: other processes kept up to ${Math.round(maxNoise * 100)}% of a core busy during some measurements; figures on a shared machine are noisy, rerun on a quiet one to confirm.`,
    );
  }
  if (json) process.stdout.write(`${JSON.stringify(toJson(rows), null, 2)}\n`);
  if (failed) process.exitCode = 1;
}

await main();
