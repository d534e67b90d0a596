/**
 * 5. a participant that stops reading while 10 MB/s flows to it: how far the server's
 * memory grows and whether it lets the participant go.
 */
import { type Client, closeAll, join, quiet, type Target } from "./clients.js";
import { calm, rss, startGateway, startNaive } from "./procs.js";
import { type Row, row } from "./report.js";
import { type Context, KIB, MIB, subdir, until } from "./scenarios.js";

export const SLOW = { bytesPerSecond: 10_000_000, frameBytes: 64 * KIB, maxMs: 10_000, tickMs: 5 };

interface SlowResult {
  before: number;
  peak: number;
  ranMs: number;
  sentBytes: number;
  /** ms after the start when the sender saw the slow participant leave. */
  leftAfter?: number;
  leaveReason?: string;
  socketClosed: boolean;
}

async function slowRun(ctx: Context, kind: "gateway" | "naive"): Promise<SlowResult> {
  await calm();
  const server = kind === "gateway" ? await startGateway(ctx.slowYaml, subdir(ctx, "slow")) : await startNaive();
  const clients: Client[] = [];
  try {
    const target: Target = server;
    const sender = await join(target, "p0");
    clients.push(sender);
    const slow = await join(target, "p1");
    clients.push(slow);
    slow.pauseReading();
    await quiet([sender], 200, 2000);
    const before = rss(server.pid);
    let peak = before;

    const result: Partial<SlowResult> = {};
    const t0 = performance.now();
    sender.onFrame = (data) => {
      if (!data.includes('"system/presence"')) return;
      const env = JSON.parse(data.toString("utf8")) as { payload?: { event?: string; participant?: { id?: string }; reason?: string } };
      if (env.payload?.event === "leave" && env.payload.participant?.id === slow.id && result.leftAfter === undefined) {
        result.leftAfter = performance.now() - t0;
        result.leaveReason = env.payload.reason;
      }
    };

    // One frame of exactly frameBytes, sent on a schedule that keeps the average at the
    // target rate however late the timer fires.
    const text = "x".repeat(SLOW.frameBytes - JSON.stringify({ kind: "chat", payload: { text: "" } }).length);
    const frame = Buffer.from(JSON.stringify({ kind: "chat", payload: { text } }));
    let sent = 0;
    const ticker = setInterval(() => {
      const due = Math.min(Math.floor((((performance.now() - t0) / 1000) * SLOW.bytesPerSecond) / frame.length) + 1, 10_000);
      while (sent < due) {
        sender.send(frame);
        sent++;
      }
      peak = Math.max(peak, rss(server.pid));
    }, SLOW.tickMs);
    await until(() => result.leftAfter !== undefined || slow.closed, SLOW.maxMs);
    clearInterval(ticker);
    const ranMs = performance.now() - t0;
    peak = Math.max(peak, rss(server.pid));
    return { before, peak, ranMs, sentBytes: sent * frame.length, socketClosed: slow.closed, ...result };
  } finally {
    await server.stop();
    await closeAll(clients);
  }
}

export async function slow(ctx: Context): Promise<Row[]> {
  const g = await slowRun(ctx, "gateway");
  ctx.progress(
    `slow reader, gateway: +${((g.peak - g.before) / MIB).toFixed(1)} MiB, ${g.leftAfter !== undefined ? `left after ${(g.leftAfter / 1000).toFixed(1)} s` : "never left"}`,
  );
  const v = await slowRun(ctx, "naive");
  ctx.progress(`slow reader, naive: +${((v.peak - v.before) / MIB).toFixed(1)} MiB in ${(v.ranMs / 1000).toFixed(1)} s`);
  const growth = (r: SlowResult) => (r.peak - r.before) / MIB;
  const disconnected = (r: SlowResult) =>
    r.leftAfter !== undefined
      ? `yes, after ${(r.leftAfter / 1000).toFixed(1)} s${r.leaveReason ? ` (${r.leaveReason})` : ""}`
      : r.socketClosed
        ? `socket closed after ${(r.ranMs / 1000).toFixed(1)} s`
        : `no (ran ${(r.ranMs / 1000).toFixed(1)} s)`;
  const sentLine = (name: string, r: SlowResult) =>
    `${name}: RSS ${(r.before / MIB).toFixed(1)} -> peak ${(r.peak / MIB).toFixed(1)} MiB; ${(r.sentBytes / MIB).toFixed(1)} MiB sent in ${(r.ranMs / 1000).toFixed(1)} s`;
  return [
    row({
      scenario: "slow",
      label: "slow reader, RSS growth",
      unit: "MiB",
      gateway: growth(g),
      naive: growth(v),
      ratio: false,
      goal: { text: "<= 64 MiB", met: growth(g) <= 64 },
      details: [
        `${SLOW.frameBytes / KIB} KiB frames at ${SLOW.bytesPerSecond / 1e6} MB/s for up to ${SLOW.maxMs / 1000} s; gateway max_buffered_bytes ${await defaultBufferedBytes()} (its default)`,
        sentLine("gateway", g),
        sentLine("naive", v),
      ],
    }),
    row({
      scenario: "slow",
      label: "slow reader, disconnected",
      unit: "",
      gateway: disconnected(g),
      naive: disconnected(v),
      goal: { text: "disconnect", met: g.leftAfter !== undefined || g.socketClosed },
    }),
  ];
}

/** The gateway's default max_buffered_bytes, for the report; loaded here so a build without gateway/index.js (an older one under --against) still runs the rest. */
async function defaultBufferedBytes(): Promise<string> {
  try {
    const { DEFAULT_LIMITS } = await import("../gateway/index.js");
    return DEFAULT_LIMITS.max_buffered_bytes.toLocaleString("en-US");
  } catch {
    return "(unknown)";
  }
}
