/**
 * Descriptor floods against a real gateway process run under `ulimit -n 1024` (the common
 * default): half-open HTTP connections and raw TCP sockets that never send a byte must not
 * lock out a human joining or an operator calling the API, and a configuration that needs
 * more descriptors than the process may open is lowered to fit, with a warning that says so.
 */
import { readdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { Agent, request } from "node:http";
import { DEFAULT_LIMITS, type Limits } from "../gateway/config/limits.js";
import { descriptorLimit, fitLimits, HTTP_SLACK } from "../gateway/edge/descriptors.js";
import {
  killGateway,
  seeded,
  sleep,
  spawnGateway,
  startGateway,
  TestClient,
  waitFor,
  type GatewayProcess,
  type TestGateway,
} from "./helpers.js";

const T = { human: "human-token-1", ops: "ops-token-22", agent: "agent-token-3" };
const SPACE = (limits = "") => `
space: {id: fds}
gateway:
  limits: {${limits}}
participants:
  human: {kind: human, token: ${T.human}}
  ops: {kind: human, token: ${T.ops}}
  agent: {kind: agent, token: ${T.agent}}
`;
/** What the flood writes: a request line and one header, never the blank line that ends them. */
const PARTIAL = "GET /ws?space=fds HTTP/1.1\r\nHost: 127.0.0.1\r\n";
const ULIMIT = "ulimit -n 1024;";

const gateways: GatewayProcess[] = [];
const inProcess: TestGateway[] = [];
const sockets: Socket[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const g of gateways.splice(0)) await killGateway(g);
  for (const g of inProcess.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function spawn(limits: string, ulimit = ULIMIT): Promise<GatewayProcess> {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-fds-"));
  dirs.push(dir);
  const file = join(dir, "space.yaml");
  writeFileSync(file, SPACE(limits));
  const g = await spawnGateway(file, { shell: ulimit, args: ["--log-file", "-"] });
  gateways.push(g);
  // The log reaches stderr on its own schedule: wait for the line that ends the start.
  await waitFor(() => logLines(g).some((l) => l.msg === "gateway listening"), 10_000, "the gateway's listening line");
  return g;
}

/** The gateway's log lines (pino JSON on stderr). */
function logLines(g: GatewayProcess): Array<Record<string, any>> {
  const text = g.stderr();
  // Complete lines only: the last may still be on its way.
  return text
    .slice(0, text.lastIndexOf("\n") + 1)
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, any>);
}

function fitWarning(g: GatewayProcess): Record<string, any> | undefined {
  return logLines(g).find((l) => l.level === 40 && l.descriptors !== undefined);
}

/** The descriptors the gateway process holds right now. */
function openDescriptors(g: GatewayProcess): number {
  return readdirSync(`/proc/${g.child.pid}/fd`).length;
}

interface Flood {
  sockets: Socket[];
  /** Indexes of the sockets the gateway closed. */
  closed: Set<number>;
}

/**
 * Opens `n` TCP sockets from 127.0.0.1, each writing `write` (or nothing) and never
 * finishing its headers; resolves once every one is connected or closed. Opened in
 * batches, so the gateway's accept queue is not what decides who gets in.
 */
async function flood(port: number, n: number, write: string | undefined, into: Flood = { sockets: [], closed: new Set() }): Promise<Flood> {
  const BATCH = 50;
  for (let start = 0; start < n; start += BATCH) {
    const batch: Promise<void>[] = [];
    for (let i = start; i < Math.min(n, start + BATCH); i++) {
      const index = into.sockets.length;
      const s = connect({ host: "127.0.0.1", port });
      into.sockets.push(s);
      sockets.push(s);
      s.on("error", () => {});
      batch.push(
        new Promise<void>((resolve) => {
          s.once("connect", () => {
            if (write !== undefined) s.write(write);
            resolve();
          });
          s.once("close", () => {
            into.closed.add(index);
            resolve();
          });
        }),
      );
    }
    await Promise.race([Promise.all(batch), sleep(10_000)]);
  }
  return into;
}

/** Whether the first `n` sockets of `sockets` are still open after the last arrived (each must see the gateway's close within a few ms otherwise). */
const openCount = (f: Flood, from: number, to: number) => {
  let n = 0;
  for (let i = from; i < to; i++) if (!f.closed.has(i)) n++;
  return n;
};

/** A human joins over WebSocket and must have its welcome within a second; the operator API must answer within a second too. */
async function humanAndOperatorGetIn(port: number): Promise<{ joinMs: number; apiMs: number }> {
  const t0 = performance.now();
  const human = TestClient.connect({ port }, "space=fds", { authorization: `Bearer ${T.human}` });
  clients.push(human);
  const welcome = await human.next((e) => e.kind === "system/welcome", 1000);
  const joinMs = performance.now() - t0;
  expect(welcome.payload.you.id).toBe("human");
  const t1 = performance.now();
  const res = await fetch(`http://127.0.0.1:${port}/api/spaces/fds/me`, {
    headers: { authorization: `Bearer ${T.ops}` },
    signal: AbortSignal.timeout(1000),
  });
  const apiMs = performance.now() - t1;
  expect(res.status).toBe(200);
  expect(((await res.json()) as { id?: string }).id).toBe("ops");
  return { joinMs, apiMs };
}

describe("descriptor floods under ulimit -n 1024", () => {
  it("the test runner holds enough descriptors for the floods", () => {
    // Each flood is at most 1,200 sockets here, and the runner needs its own beside them.
    expect(descriptorLimit().limit).toBeGreaterThanOrEqual(2048);
  });

  it("1,100 half-open connections from one address: a human joins within a second and the operator API answers", {
    timeout: 60_000,
  }, async () => {
    const g = await spawn("");
    const f = await flood(g.port, 1100, PARTIAL);
    // Counted from the first byte: one address holds at most max_per_address sockets
    // (lowered to fit if need be), the oldest half-open ones evicted for the newer.
    const warning = fitWarning(g);
    const perAddress: number = warning?.effective?.max_per_address ?? 256;
    await waitFor(() => f.closed.size >= 1100 - perAddress - 1, 10_000, "the oldest half-open sockets to be evicted");
    // The youngest are the ones held: the flood still holds when the human comes.
    expect(openCount(f, 1000, 1100)).toBe(100);
    expect(openDescriptors(g)).toBeLessThan(400);
    const { joinMs, apiMs } = await humanAndOperatorGetIn(g.port);
    expect(joinMs).toBeLessThan(1000);
    expect(apiMs).toBeLessThan(1000);
    // The flood was still there when they got in.
    expect(openCount(f, 1050, 1100)).toBe(50);
    expect(g.child.exitCode).toBe(null);
  });

  it("past the descriptor budget (max_per_address set high), the oldest half-open socket goes, not the newcomer", {
    timeout: 60_000,
  }, async () => {
    const g = await spawn("max_per_address: 100000");
    const warning = fitWarning(g);
    expect(warning, "the gateway warns that its limits do not fit 1,024 descriptors").toBeDefined();
    const ceiling: number = warning!.effective.sockets;
    expect(ceiling).toBeLessThan(1024);
    const f = await flood(g.port, 1100, PARTIAL);
    await waitFor(() => f.closed.size >= 1100 - ceiling, 10_000, "the oldest half-open sockets to be evicted");
    expect(f.closed.size).toBeLessThan(1100 - ceiling + 16);
    expect(openCount(f, 1000, 1100)).toBe(100);
    // Under the process's limit, with room left for the journal, the log and the accept
    // that lets the next newcomer in: at most the ceiling and one newcomer over it.
    const { in_use, headroom } = warning!.descriptors;
    expect(openDescriptors(g)).toBeLessThanOrEqual(in_use + ceiling + 8);
    expect(in_use + ceiling + headroom).toBeLessThanOrEqual(1024);
    const { joinMs, apiMs } = await humanAndOperatorGetIn(g.port);
    expect(joinMs).toBeLessThan(1000);
    expect(apiMs).toBeLessThan(1000);
    expect(openCount(f, 1050, 1100)).toBe(50);
    // A second human joins too, and the first is still there.
    const ops = TestClient.connect({ port: g.port }, "space=fds", { authorization: `Bearer ${T.ops}` });
    clients.push(ops);
    await ops.next((e) => e.kind === "system/welcome", 1000);
    expect(clients[0]!.closeCode).toBe(undefined);
  });

  it("raw sockets that never send a byte are counted from the first byte and evicted before half-open requests", {
    timeout: 60_000,
  }, async () => {
    const g = await spawn("max_per_address: 100000");
    const ceiling: number = fitWarning(g)!.effective.sockets;
    // 300 that started a request, then silent ones up to the ceiling: nothing evicted yet.
    const f = await flood(g.port, 300, PARTIAL);
    const silentFrom = f.sockets.length;
    await flood(g.port, ceiling - 300, undefined, f);
    const silentTo = f.sockets.length;
    expect(f.closed.size).toBe(0);
    // Silent for longer than the grace a fresh socket gets to send its request (it may not
    // have been read yet): now they are first in line, ahead of the older half-open ones.
    await sleep(1200);
    await flood(g.port, 100, PARTIAL, f);
    await waitFor(() => f.closed.size >= 100, 10_000, "silent sockets to be evicted");
    expect(openCount(f, 0, silentFrom)).toBe(silentFrom);
    expect(openCount(f, silentTo, f.sockets.length)).toBe(100);
    expect([...f.closed].every((i) => i >= silentFrom && i < silentTo)).toBe(true);
    // The oldest silent ones went first.
    expect(openCount(f, silentFrom, silentFrom + 90)).toBe(0);
    const { joinMs } = await humanAndOperatorGetIn(g.port);
    expect(joinMs).toBeLessThan(1000);
  });

  it("warns at start with the numbers when the configured limits need more descriptors than the process has, and lowers them", async () => {
    const g = await spawn("");
    const warning = fitWarning(g);
    expect(warning).toBeDefined();
    expect(warning!.msg).toContain("descriptor");
    expect(warning!.descriptors.limit).toBe(1024);
    expect(warning!.descriptors.in_use).toBeGreaterThan(0);
    // The old ceiling: max_connections + operator_reserve + mcp_sessions + 64.
    expect(warning!.configured.sockets).toBe(1000 + 16 + 256 + 64);
    expect(warning!.effective.sockets).toBeLessThanOrEqual(1024 - warning!.descriptors.in_use - warning!.descriptors.headroom);
    expect(warning!.effective.max_connections).toBeLessThan(1000);
    expect(warning!.effective.mcp_sessions).toBeLessThan(256);
    // The reserve is kept whole: it is what lets a person in when the gateway is full.
    expect(warning!.effective.operator_reserve).toBe(16);
  });

  it("says nothing when the limits fit, and never raises them", async () => {
    const g = await spawn("max_connections: 200, mcp_sessions: 32, max_per_address: 50");
    expect(fitWarning(g)).toBeUndefined();
    const listening = logLines(g).find((l) => l.msg === "gateway listening");
    expect(listening?.sockets).toMatchObject({ ceiling: 200 + 16 + 32 + 64, descriptors: 1024 });
  });
});

describe("per-address counting from the first byte", () => {
  it("one address holds at most max_per_address sockets, even ones that never send a byte", async () => {
    const gw = await startGateway(SPACE("max_per_address: 20"));
    inProcess.push(gw);
    const f = await flood(gw.port, 60, undefined);
    await waitFor(() => f.closed.size >= 60 - 21, 5000, "the oldest silent sockets to be evicted");
    expect(openCount(f, 50, 60)).toBe(10);
    // A participant from the same address still gets in: the oldest silent socket makes room.
    const agent = TestClient.connect(gw, "space=fds", { authorization: `Bearer ${T.agent}` });
    clients.push(agent);
    await agent.next((e) => e.kind === "system/welcome", 2000);
  });
});

describe("per-address counting from the first byte, with HTTP", () => {
  it("plain HTTP counts against max_per_address, and an idle keep-alive socket makes room for a participant", async () => {
    const gw = await startGateway(SPACE("max_per_address: 2"));
    inProcess.push(gw);
    const agent = new Agent({ keepAlive: true, maxSockets: 2 });
    const get = () =>
      new Promise<number>((resolve, reject) => {
        const req = request({ host: "127.0.0.1", port: gw.port, path: "/healthz", agent }, (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        });
        req.on("error", reject);
        req.end();
      });
    // Two requests at once: two keep-alive sockets, idle once answered.
    expect(await Promise.all([get(), get()])).toEqual([200, 200]);
    const kept = Object.values(agent.freeSockets).flat();
    expect(kept).toHaveLength(2);
    const gone = kept.map((s) => new Promise<void>((resolve) => s!.once("close", () => resolve())));
    // A participant from the same address: the longest idle keep-alive goes, not the newcomer.
    const human = TestClient.connect(gw, "space=fds", { authorization: `Bearer ${T.human}` });
    clients.push(human);
    await human.next((e) => e.kind === "system/welcome", 2000);
    await Promise.race(gone);
    // Now the address holds a WebSocket and a keep-alive: a second WebSocket makes room the same way ...
    const agentWs = TestClient.connect(gw, "space=fds", { authorization: `Bearer ${T.agent}` });
    clients.push(agentWs);
    await agentWs.next((e) => e.kind === "system/welcome", 2000);
    await Promise.all(gone);
    // ... and with two WebSockets and nothing to evict, plain HTTP is refused, naming the limit.
    const refused = await fetch(`http://127.0.0.1:${gw.port}/healthz`);
    expect(refused.status).toBe(429);
    expect(await refused.text()).toContain("max_per_address");
    agent.destroy();
  });

  it("cuts a half-open socket at the headers deadline, whether it sent part of a request or nothing", async () => {
    // join_timeout_ms 1000: headers are due within 2 s.
    const gw = await startGateway(SPACE("join_timeout_ms: 1000"));
    inProcess.push(gw);
    const t0 = performance.now();
    const f = await flood(gw.port, 2, undefined);
    f.sockets[1]!.write(PARTIAL);
    await waitFor(() => f.closed.size === 2, 6000, "both half-open sockets to be cut");
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1900);
  });
});

describe("fitting the limits to the descriptors", () => {
  it("reads the same soft limit the shell reports", () => {
    const shell = spawnSync("/bin/sh", ["-c", "ulimit -n"], { encoding: "utf8" }).stdout.trim();
    const { limit, source } = descriptorLimit();
    expect(source).toBe("/proc/self/limits");
    expect(String(limit === Infinity ? "unlimited" : limit)).toBe(shell);
  });

  it("never raises a limit, keeps every socket cap under the budget, and keeps the operator reserve", () => {
    const rand = seeded(23);
    const pick = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
    for (let i = 0; i < 2000; i++) {
      const configured: Limits = {
        ...DEFAULT_LIMITS,
        max_connections: pick(1, 100_000),
        operator_reserve: pick(0, 200),
        max_per_address: pick(1, 100_000),
        max_unauthenticated: pick(1, 100_000),
        mcp_sessions: pick(1, 10_000),
      };
      const budget = pick(-100, 120_000);
      const fit = fitLimits(configured, budget);
      const l = fit.limits;
      const seed = `case ${i}: ${JSON.stringify({ configured, budget })}`;
      for (const k of Object.keys(configured) as Array<keyof Limits>) expect(l[k], seed).toBeLessThanOrEqual(configured[k]);
      expect(l.max_connections + l.operator_reserve + l.mcp_sessions, seed).toBeLessThanOrEqual(fit.sockets);
      expect(l.max_connections, seed).toBeGreaterThanOrEqual(1);
      if (fit.lowered.length === 0) {
        expect(fit.sockets, seed).toBe(configured.max_connections + configured.operator_reserve + configured.mcp_sessions + HTTP_SLACK);
      } else {
        // Some sockets even with too few descriptors: a gateway under `ulimit -n 64` serves a few.
        expect(fit.sockets, seed).toBe(Math.max(8, budget));
        expect(l.max_per_address, seed).toBeLessThanOrEqual(fit.sockets);
        // The reserve is whole while it is at most an eighth of the sockets.
        if (configured.operator_reserve * 8 <= fit.sockets) expect(l.operator_reserve, seed).toBe(configured.operator_reserve);
      }
    }
  });
});
