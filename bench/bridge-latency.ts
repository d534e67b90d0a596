/**
 * What the bridge costs: a `tools/call` through SDK participant → gateway → bridge → stdio
 * MCP server and back, against the same call made directly with the MCP SDK `Client` to
 * another instance of the same server, in the same run.
 *
 * Everything runs in this process except the two servers (a tiny echo server,
 * test/fixtures/bridge/echo.mjs): the gateway on 127.0.0.1:0, the caller and the bridge
 * over real WebSockets. After a warm-up the two kinds of call alternate in blocks, the
 * order flipping per block, so drift (GC, CPU frequency, other load) lands on both.
 * Figures in microseconds; the goal is at most 500 µs added at p50.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { parseSpaceConfig } from "../gateway/index.js";
import { connectInProcess } from "../gateway/index.js";
import { Gateway } from "../gateway/index.js";
import { WebSocket, WebSocketServer } from "ws";
import { ParticipantClient } from "../participants/client.js";
import { startBridge } from "../participants/bridge/bridge.js";
import { percentile } from "./stats.js";

export interface BridgeLatencyOptions {
  /** Measured calls of each kind. Default 1000. */
  iterations?: number;
  /** Unmeasured calls of each kind first. Default 200. */
  warmup?: number;
  /** Calls per block before switching kind. Default 50. */
  block?: number;
  /**
   * How the bridge joins the gateway: over a WebSocket like an external `mewgate bridge`
   * (default), or in-process as `mewgate up` runs it. The caller always uses a WebSocket.
   */
  bridgeTransport?: "websocket" | "in-process";
}

export interface LatencyFigures {
  p50: number;
  p99: number;
}

export interface BridgeLatencyResult {
  direct: LatencyFigures;
  bridged: LatencyFigures;
  /**
   * A bare WebSocket round trip in this process (ws client → ws echo server → back): the two
   * loopback hops the bridged call adds over the direct one, with no gateway or bridge work.
   */
  hops: LatencyFigures;
}

const CALLER_TOKEN = "bench-caller-token";
const BRIDGE_TOKEN = "bench-bridge-token";

/** The repository root (where package.json is), whether this runs from bench/ or dist/bench/. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "mewgate") return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("bench: cannot find the mewgate package root");
    dir = up;
  }
}

export async function benchBridgeLatency(opts: BridgeLatencyOptions = {}): Promise<BridgeLatencyResult> {
  const iterations = opts.iterations ?? 1000;
  const warmup = opts.warmup ?? 200;
  const block = opts.block ?? 50;
  const echoServer = join(repoRoot(), "test", "fixtures", "bridge", "echo.mjs");
  const dir = mkdtempSync(join(tmpdir(), "mewgate-bench-bridge-"));
  const file = join(dir, "space.yaml");
  // Rate limits and heartbeats out of the way: the bench measures routing, not throttles.
  const yaml = [
    "space: {id: bench}",
    "gateway:",
    "  limits: {rate_per_second: 1000000, rate_burst: 1000000, heartbeat_ms: 0}",
    "participants:",
    `  caller: {kind: human, token: ${CALLER_TOKEN}}`,
    `  echo: {kind: mcp, token: ${BRIDGE_TOKEN}}`,
    "",
  ].join("\n");
  writeFileSync(file, yaml);
  const gateway = new Gateway({ spaces: [parseSpaceConfig(yaml, { file, env: {} })], host: "127.0.0.1", port: 0, env: {} });
  const { url } = await gateway.listen();

  const server = { command: process.execPath, args: [echoServer] };
  const space = gateway.spaces.get("bench")!;
  const bridge = await startBridge({
    id: "echo",
    server,
    client:
      opts.bridgeTransport === "in-process"
        ? { transport: () => connectInProcess(space, "echo"), reconnect: false }
        : { url, space: "bench", token: BRIDGE_TOKEN },
  });
  const caller = await ParticipantClient.connect({ url, space: "bench", token: CALLER_TOKEN });
  const direct = new Client({ name: "mewgate-bench", version: "0.1.0" });
  await direct.connect(new StdioClientTransport({ ...server, stderr: "ignore" }));

  const echo = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false });
  echo.on("connection", (ws) => ws.on("message", (data) => ws.send(data as Buffer)));
  await new Promise<void>((resolve) => echo.once("listening", () => resolve()));
  const raw = new WebSocket(`ws://127.0.0.1:${(echo.address() as AddressInfo).port}`, { perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => raw.once("open", () => resolve()).once("error", reject));

  const params = { name: "echo", arguments: { text: "ping" } };
  // About the size of the bridged call's envelopes.
  const frame = JSON.stringify({
    protocol: "mew/v0.4",
    id: "0d6f1c8e-7a43-4c1e-9d0b-2f6a7b1c9e55",
    kind: "mcp/request",
    to: ["echo"],
    payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params },
  });
  const viaBridge = () => caller.request("echo", "tools/call", params);
  const viaClient = () => direct.callTool(params);
  const viaHops = () =>
    new Promise<void>((resolve) => {
      raw.once("message", () => resolve());
      raw.send(frame);
    });
  const samples = { direct: [] as number[], bridged: [] as number[], hops: [] as number[] };
  const run = async (call: () => Promise<unknown>, n: number, into?: number[]) => {
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      await call();
      const us = Number(process.hrtime.bigint() - t0) / 1000;
      into?.push(us);
    }
  };

  try {
    await run(viaClient, warmup);
    await run(viaBridge, warmup);
    await run(viaHops, warmup);
    for (let done = 0, k = 0; done < iterations; done += block, k++) {
      const n = Math.min(block, iterations - done);
      if (k % 2 === 0) {
        await run(viaClient, n, samples.direct);
        await run(viaBridge, n, samples.bridged);
        await run(viaHops, n, samples.hops);
      } else {
        await run(viaHops, n, samples.hops);
        await run(viaBridge, n, samples.bridged);
        await run(viaClient, n, samples.direct);
      }
    }
  } finally {
    raw.close();
    echo.close();
    await direct.close().catch(() => {});
    await caller.close();
    await bridge.stop();
    await gateway.close();
    rmSync(dir, { recursive: true, force: true });
  }

  const figures = (xs: number[]): LatencyFigures => {
    const sorted = [...xs].sort((a, b) => a - b);
    return { p50: Math.round(percentile(sorted, 50)), p99: Math.round(percentile(sorted, 99)) };
  };
  return { direct: figures(samples.direct), bridged: figures(samples.bridged), hops: figures(samples.hops) };
}
