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
 * `--against <git-ref> [--rounds N]`: this build beside that commit's, interleaved (bench/against.ts).
 *
 * Both servers run as child processes on 127.0.0.1; the load clients run in this process,
 * the same code for both.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { gatewayCpuMs, pinCores } from "./procs.js";
import { type ChildReport, type Row, table, toJson } from "./report.js";
import type { Context } from "./scenarios.js";
import { benchSpaceYaml, smallSpaceYaml } from "./spaces.js";

type Run = (ctx: Context) => Promise<Row[]>;
/**
 * Each scenario's module is loaded when it runs, not before: under `--against` this code
 * runs against an older build's gateway, which may lack what one scenario imports, and
 * that should cost that scenario, not the whole run.
 */
const SCENARIOS = {
  fanout: async () => (await import("./fanout.js")).fanout,
  rtt: async () => (await import("./rtt.js")).rtt,
  idle: async () => (await import("./idle.js")).idle,
  start: async () => (await import("./start.js")).start,
  slow: async () => (await import("./slow.js")).slow,
  governance: async () => (await import("./extra.js")).governance,
  store: async (): Promise<Run> => {
    const { storeRows } = await import("./store.js");
    return (ctx) => storeRows(ctx.dir, ctx.progress);
  },
  bridge: async () => (await import("./extra.js")).bridge,
  agent: async () => (await import("./extra.js")).agent,
  cluster: async () => (await import("./cluster.js")).cluster,
  approvals: async () => (await import("./approvals.js")).approvals,
  attention: async () => (await import("./attention.js")).attention,
} satisfies Record<string, () => Promise<Run>>;
export type Scenario = keyof typeof SCENARIOS;
export const SCENARIO_NAMES = Object.keys(SCENARIOS) as Scenario[];
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

interface Args {
  scenarios: Scenario[];
  json: boolean;
  /** `--against <git-ref>`: this build against that one, interleaved (bench/against.ts). */
  against?: string | undefined;
  /** `--rounds N` with `--against`: runs of each scenario on each build (default 2). */
  rounds?: number | undefined;
  /** `--child`: one side of an `--against` run; prints rows and CPU as one JSON object. */
  child: boolean;
}

function usage(why: string): never {
  process.stderr.write(
    `bench: ${why}\nusage: node dist/bench/run.js [${SCENARIO_NAMES.join("] [")}] [--json] [--against <git-ref> [--rounds N]]\n`,
  );
  process.exit(2);
}

function parseArgs(argv: string[]): Args {
  const scenarios: Scenario[] = [];
  const args: Args = { scenarios, json: false, child: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--json") args.json = true;
    else if (arg === "--child") args.child = true;
    else if (arg === "--against" || arg === "--rounds") {
      const v = argv[++i];
      if (v === undefined || v.startsWith("--")) usage(`${arg} needs a value`);
      if (arg === "--against") args.against = v;
      else {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1 || n > 20) usage(`--rounds takes a whole number from 1 to 20, not "${v}"`);
        args.rounds = n;
      }
    } else if (arg in SCENARIOS) scenarios.push(arg as Scenario);
    else usage(`unknown argument "${arg}"`);
  }
  if (args.rounds !== undefined && args.against === undefined) usage("--rounds goes with --against");
  if (!scenarios.length) scenarios.push(...SCENARIO_NAMES);
  return args;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.against !== undefined) {
    const { against } = await import("./against.js");
    process.exitCode = await against(args.against, args.scenarios, { rounds: args.rounds ?? 2, json: args.json });
    return;
  }
  const { scenarios, child } = args;
  const json = args.json || child;
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
        const got = await (await SCENARIOS[name]())(ctx);
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
  if (child) {
    const self = process.cpuUsage();
    const report: ChildReport = {
      rows: toJson(rows),
      gatewayCpuMs: gatewayCpuMs(),
      benchCpuMs: (self.user + self.system) / 1000,
      noise: maxNoise,
      failed,
    };
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } else if (json) process.stdout.write(`${JSON.stringify(toJson(rows), null, 2)}\n`);
  if (failed) process.exitCode = 1;
}

await main();
