/**
 * 3. idle connections: memory per member and the time to join them, the gateway against
 * the naive forwarder.
 */
import { type Client, closeAll, joinMany, quiet } from "./clients.js";
import { type HeapFigures, collectGarbage, cpuMs, openFileLimit, rss, sleep, startGateway, startNaive } from "./procs.js";
import { type Row, row } from "./report.js";
import { type Context, KIB, MIB, ids, subdir } from "./scenarios.js";

export const IDLE = {
  connections: 5000,
  concurrency: 200,
  /**
   * How long joins may go on: past this budget the bench stops joining and measures what it
   * has, and the naive forwarder gets the same number. BENCH_IDLE_CONNECT_S raises it.
   */
  connectBudgetMs: Number(process.env["BENCH_IDLE_CONNECT_S"] ?? 30) * 1000,
  settleQuietMs: 1000,
  settleMaxMs: 20_000,
};

interface IdleResult {
  connections: number;
  /** RSS after a full GC, before and after joining. */
  before: number;
  after: number;
  heapBefore: HeapFigures;
  heapAfter: HeapFigures;
  connectMs: number;
  settleMs: number;
  settled: boolean;
  framesPerClient: number;
  serverCpuMs: number;
}

/** Samples RSS until it moves less than 1% over `stableMs`, at most `maxMs`. */
async function stableRss(pid: number, stableMs: number, maxMs: number): Promise<number> {
  const deadline = performance.now() + maxMs;
  let last = rss(pid);
  while (performance.now() < deadline) {
    await sleep(stableMs);
    const now = rss(pid);
    if (Math.abs(now - last) < last * 0.01) return now;
    last = now;
  }
  return last;
}

async function idleRun(ctx: Context, kind: "gateway" | "naive", connections: number): Promise<IdleResult> {
  const server =
    kind === "gateway" ? await startGateway(ctx.benchYaml, subdir(ctx, "idle"), { inspect: true }) : await startNaive({ inspect: true });
  let clients: Client[] = [];
  try {
    // RSS is read after a full GC each time, so the figure is what the connections keep,
    // not what start-up or the joins left for the collector.
    const heapBefore = await collectGarbage(server);
    const before = await stableRss(server.pid, 250, 3000);
    const cpu0 = cpuMs(server.pid);
    const t0 = performance.now();
    clients = await joinMany(server, ids("p", 0, connections), IDLE.concurrency, {
      deadline: t0 + IDLE.connectBudgetMs,
      timeoutMs: 20_000,
    });
    const connectMs = performance.now() - t0;
    // On the gateway every join is announced to everyone already there; wait until that
    // traffic is over and memory stops moving before reading RSS.
    const t1 = performance.now();
    const settled = await quiet(clients, IDLE.settleQuietMs, IDLE.settleMaxMs);
    const heapAfter = await collectGarbage(server);
    const after = await stableRss(server.pid, 500, 5000);
    const settleMs = performance.now() - t1;
    const framesPerClient = clients.reduce((n, c) => n + c.received, 0) / Math.max(1, clients.length);
    return {
      connections: clients.length,
      before,
      after,
      heapBefore,
      heapAfter,
      connectMs,
      settleMs,
      settled,
      framesPerClient,
      serverCpuMs: cpuMs(server.pid) - cpu0,
    };
  } finally {
    // Stop the server first: a gateway shutting down closes everyone without announcing
    // each leave to everyone left, which closing the clients first would cost.
    await server.stop();
    await closeAll(clients);
  }
}

export async function idle(ctx: Context): Promise<Row[]> {
  const limit = openFileLimit();
  // Each side holds one descriptor per connection; leave room for everything else.
  const wanted = Math.max(100, Math.min(IDLE.connections, Math.floor(limit - 500)));
  ctx.progress(
    `idle: ulimit -n ${limit}, opening ${wanted} connections, ${IDLE.concurrency} handshakes at once, for at most ${IDLE.connectBudgetMs / 1000} s`,
  );
  const g = await idleRun(ctx, "gateway", wanted);
  ctx.progress(
    `idle, gateway: ${g.connections} connections in ${(g.connectMs / 1000).toFixed(1)} s, ${((g.after - g.before) / g.connections / KIB).toFixed(1)} KiB each`,
  );
  // The same number for the naive forwarder, so the two are compared at the same size.
  const v = await idleRun(ctx, "naive", g.connections);
  ctx.progress(
    `idle, naive: ${v.connections} connections in ${(v.connectMs / 1000).toFixed(1)} s, ${((v.after - v.before) / v.connections / KIB).toFixed(1)} KiB each`,
  );
  const per = (r: IdleResult) => (r.after - r.before) / r.connections / KIB;
  const heapPer = (r: IdleResult) => (r.heapAfter.heapUsed - r.heapBefore.heapUsed) / r.connections / KIB;
  const describe = (name: string, r: IdleResult) =>
    `${name}: RSS ${(r.before / MIB).toFixed(1)} -> ${(r.after / MIB).toFixed(1)} MiB, JS heap ${(r.heapBefore.heapUsed / MIB).toFixed(1)} -> ${(r.heapAfter.heapUsed / MIB).toFixed(1)} MiB (${heapPer(r).toFixed(1)} KiB per connection); ${r.connections.toLocaleString("en-US")} joined in ${(r.connectMs / 1000).toFixed(1)} s using ${(r.serverCpuMs / 1000).toFixed(1)} s of server CPU, settled in ${(r.settleMs / 1000).toFixed(1)} s${r.settled ? "" : " (still busy at the time limit)"}; ${Math.round(r.framesPerClient).toLocaleString("en-US")} frames received per client`;
  const n = g.connections;
  const short = n < wanted;
  const details = [
    `ulimit -n ${limit}; ${IDLE.concurrency} handshakes at once; joins stop after ${IDLE.connectBudgetMs / 1000} s; RSS read after a full GC (inspector)`,
  ];
  if (short)
    details.push(
      `the gateway joined only ${n.toLocaleString("en-US")} of ${wanted.toLocaleString("en-US")} within ${IDLE.connectBudgetMs / 1000} s, so both are measured at ${n.toLocaleString("en-US")}`,
    );
  details.push(describe("gateway", g), describe("naive", v));
  return [
    row({
      scenario: "idle",
      label: `idle RSS per connection (${n.toLocaleString("en-US")}${short ? ` of ${wanted.toLocaleString("en-US")}` : ""})`,
      unit: "KiB",
      gateway: per(g),
      naive: per(v),
      goal: { text: "<= 1.50", met: per(g) / per(v) <= 1.5 },
      details,
    }),
    row({
      scenario: "idle",
      label: `idle, time to join ${n.toLocaleString("en-US")}`,
      unit: "ms",
      gateway: g.connectMs,
      naive: v.connectMs,
      goal: { text: "<= 3.00", met: g.connectMs / v.connectMs <= 3 },
      details: [joinBound(g, v)],
    }),
  ];
}

/**
 * What joining costs beyond the forwarder: MEW announces every join to every member
 * (system/presence), n(n-1)/2 frames for n joins; past `presence.each_up_to` (200 by default)
 * the gateway sums them up instead (one frame per member per `presence.summary_ms`), and a
 * welcome lists that many others and counts the rest.
 */
function joinBound(g: IdleResult, v: IdleResult): string {
  const n = g.connections;
  const presence = (n * (n - 1)) / 2;
  return `MEW's way (each join to every member) would be ${presence.toLocaleString("en-US")} presence deliveries for ${n.toLocaleString("en-US")} joins; past presence.each_up_to the gateway sums them up, and each member received ${Math.round(g.framesPerClient).toLocaleString("en-US")} frames in all (welcome and summaries; the forwarder's ${Math.round(v.framesPerClient)}); server CPU per join: gateway ${((g.serverCpuMs * 1000) / n).toFixed(0)} µs, naive ${((v.serverCpuMs * 1000) / n).toFixed(0)} µs`;
}
