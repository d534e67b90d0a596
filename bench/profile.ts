/**
 * Where a gateway's time goes under one kind of load: starts the gateway (this build's, or
 * another's with --gateway), warms it up, then profiles exactly N calls of one kind and
 * prints the profile's summary (profile-summary.ts) and the gateway's CPU per call.
 *
 *   node dist/bench/profile.js rtt|plain|resources|list|proposals [--calls N] [--warmup N]
 *        [--gateway <dist/cli/main.js of another build>] [--out DIR] [--callgrind] [--space bench]
 *
 *   rtt        a tools/call at concurrency 1, tracked, allowed, audited as it goes through
 *   plain      the same exchange as two plain envelopes (bench/ping, bench/pong)
 *   resources  resources/list at concurrency 1 (tracked, not audited)
 *   list       tools/list to system:gateway with 1,000 tools in the space
 *   proposals  proposals approved at once by a scripted approver, 16 in flight
 *
 * The space is the governance scenario's (five participants; bench/governance.ts), or with
 * `--space bench` the round-trip scenario's (5,102 participants; rtt, plain and resources only).
 *
 * The profile is taken through the gateway's inspector (Profiler.start/stop around the N
 * calls), so warm-up and start-up are not in it; it is written to DIR (a temporary one by
 * default) for Chrome's DevTools. With --callgrind the gateway runs under valgrind instead
 * and the instructions it executed for the N calls (collection switched on and off around
 * them with callgrind_control) are printed per call: a figure that does not depend on how
 * busy the machine is, to compare two builds with.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { type Client, closeAll, join, type Target } from "./clients.js";
import { spaceYaml } from "./governance.js";
import { benchSpaceYaml } from "./spaces.js";
import { cpuMs, inspectorSession, pinCores, type ServerProc, sleep, startGateway } from "./procs.js";
import { summarise } from "./profile-summary.js";

const KINDS = ["rtt", "plain", "resources", "list", "proposals"] as const;
type Kind = (typeof KINDS)[number];

interface Options {
  kind: Kind;
  calls: number;
  warmup: number;
  gateway?: string | undefined;
  out: string;
  callgrind: boolean;
  bigSpace: boolean;
}

function parse(argv: string[]): Options {
  const kind = argv[0] as Kind;
  if (!KINDS.includes(kind)) {
    process.stderr.write(
      `usage: node dist/bench/profile.js ${KINDS.join("|")} [--calls N] [--warmup N] [--gateway main.js] [--out DIR] [--callgrind]\n`,
    );
    process.exit(2);
  }
  const value = (name: string) => {
    const i = argv.indexOf(name);
    return i < 0 ? undefined : argv[i + 1];
  };
  const heavy = kind === "list";
  return {
    kind,
    calls: Number(value("--calls") ?? (heavy ? 300 : 5000)),
    warmup: Number(value("--warmup") ?? (heavy ? 100 : 3000)),
    gateway: value("--gateway"),
    out: value("--out") ?? mkdtempSync(pathJoin(tmpdir(), "mewgate-profile-")),
    callgrind: argv.includes("--callgrind"),
    bigSpace: value("--space") === "bench",
  };
}

const text = (data: Buffer) => data.toString("utf8");
let seq = 0;

/** Sends what `frame(id)` makes and resolves on the first frame that `done(text, id)` accepts; bounded. */
function exchange(c: Client, frame: (id: string) => string, done: (s: string, id: string) => boolean): Promise<void> {
  const id = `x${++seq}`;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${c.id}: no answer to ${id} within 10 s`)), 10_000);
    c.onFrame = (data) => {
      const s = text(data);
      if (s.includes('"system/error"')) console.error(s.slice(0, 300));
      if (!done(s, id)) return;
      clearTimeout(timer);
      c.onFrame = undefined;
      resolve();
    };
    c.send(frame(id));
  });
}

const TOOLS = Array.from({ length: 1000 }, (_, i) => ({
  name: i === 0 ? "write" : `tool_${i}`,
  description: `Benchmark tool number ${i}, which does nothing in particular`,
  inputSchema: { type: "object", properties: { path: { type: "string" } } },
  annotations: { readOnlyHint: i !== 0 },
}));

/** The load of one kind: `once()` makes one call (or, for proposals, runs `n` with 16 in flight). */
async function load(kind: Kind, cs: Record<string, Client>): Promise<(n: number) => Promise<void>> {
  const { requester, responder, approver, agent, owner } = cs as Partial<
    Record<"requester" | "responder" | "approver" | "agent" | "owner", Client>
  >;
  const answer = (c: Client) => (data: Buffer) => {
    const s = text(data);
    if (!s.includes('"mcp/request"') && !s.includes('"bench/ping"')) return;
    const env = JSON.parse(s);
    if (env.kind === "bench/ping") {
      c.send(JSON.stringify({ kind: "bench/pong", to: [env.from], correlation_id: [env.id], payload: {} }));
      return;
    }
    if (env.payload.id === undefined) return;
    const result =
      env.payload.method === "tools/list"
        ? { tools: TOOLS }
        : env.payload.method === "resources/list"
          ? { resources: [] }
          : { content: [{ type: "text", text: "ok" }] };
    c.send(
      JSON.stringify({
        kind: "mcp/response",
        to: [env.from],
        correlation_id: [env.id],
        payload: { jsonrpc: "2.0", id: env.payload.id, result },
      }),
    );
  };
  if (responder) responder.onFrame = answer(responder);
  if (owner) owner.onFrame = answer(owner);
  if (approver)
    approver.onFrame = (data) => {
      const s = text(data);
      if (!s.includes('"mcp/proposal"')) return;
      approver.send(JSON.stringify({ kind: "mcp/approve", correlation_id: [JSON.parse(s).id], payload: { scope: "once" } }));
    };
  const request = (to: string, method: string, params?: object) => (id: string) =>
    JSON.stringify({ id, kind: "mcp/request", to: [to], payload: { jsonrpc: "2.0", id: seq, method, ...(params ? { params } : {}) } });
  const answered = (s: string, id: string) => s.includes(`"correlation_id":["${id}"]`);
  const serial = (c: Client, frame: (id: string) => string) => async (n: number) => {
    for (let i = 0; i < n; i++) await exchange(c, frame, answered);
  };
  switch (kind) {
    case "rtt":
      return serial(requester!, request("responder", "tools/call", { name: "echo", arguments: { text: "hello" } }));
    case "resources":
      return serial(requester!, request("responder", "resources/list"));
    case "plain":
      return serial(requester!, (id) => JSON.stringify({ id, kind: "bench/ping", to: ["responder"], payload: { n: seq } }));
    case "list":
      // The owner's tools reach the catalogue first.
      owner!.send(
        JSON.stringify({
          kind: "mcp/request",
          to: ["system:gateway"],
          payload: { jsonrpc: "2.0", method: "notifications/tools/list_changed" },
        }),
      );
      await sleep(500);
      return serial(requester!, request("system:gateway", "tools/list"));
    case "proposals":
      return async (n) => {
        let next = 0;
        const pending = new Map<string, () => void>();
        agent!.onFrame = (data) => {
          const s = text(data);
          if (!s.includes('"mcp/response"')) return;
          for (const id of JSON.parse(s).correlation_id ?? []) pending.get(id)?.();
        };
        const lane = async () => {
          while (next < n) {
            next++;
            const id = `p${++seq}`;
            await new Promise<void>((resolve, reject) => {
              const timer = setTimeout(() => reject(new Error(`proposal ${id} not answered within 10 s`)), 10_000);
              pending.set(id, () => {
                clearTimeout(timer);
                pending.delete(id);
                resolve();
              });
              agent!.send(
                JSON.stringify({
                  id,
                  kind: "mcp/proposal",
                  to: ["owner"],
                  payload: { method: "tools/call", params: { name: "write", arguments: { path: "x" } } },
                }),
              );
            });
          }
        };
        await Promise.all(Array.from({ length: 16 }, lane));
      };
  }
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  process.stderr.write(`${pinCores()}\n`);
  mkdirSync(o.out, { recursive: true });
  const yaml = pathJoin(o.out, "space.yaml");
  writeFileSync(yaml, o.bigSpace ? benchSpaceYaml({ participants: 5100 }) : spaceYaml());
  const wrap = o.callgrind
    ? [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--smc-check=all-non-file",
        `--callgrind-out-file=${pathJoin(o.out, "callgrind.out.%p")}`,
      ]
    : undefined;
  const server: ServerProc = await startGateway(yaml, o.out, { inspect: !o.callgrind, main: o.gateway, wrap });
  const target: Target = { kind: "gateway", base: server.base };
  const clients: Client[] = [];
  try {
    const ids =
      o.kind === "list" ? ["requester", "owner"] : o.kind === "proposals" ? ["approver", "agent", "owner"] : ["requester", "responder"];
    const joined = await Promise.all(ids.map((id) => join(target, id, o.callgrind ? 120_000 : 10_000)));
    clients.push(...joined);
    const run = await load(o.kind, Object.fromEntries(ids.map((id, i) => [id, joined[i]!])));
    process.stderr.write(`warming up: ${o.warmup} ${o.kind}\n`);
    await run(o.warmup);
    if (o.callgrind) {
      execFileSync("callgrind_control", ["-i", "on", String(server.pid)], { stdio: "ignore" });
      await run(o.calls);
      execFileSync("callgrind_control", ["-i", "off", String(server.pid)], { stdio: "ignore" });
    } else {
      const session = await inspectorSession(server, 60_000);
      await session.call("Profiler.enable");
      // 100 µs between samples: a call takes a few hundred.
      await session.call("Profiler.setSamplingInterval", { interval: 100 });
      const cpu0 = cpuMs(server.pid);
      await session.call("Profiler.start");
      const t0 = performance.now();
      await run(o.calls);
      const wall = performance.now() - t0;
      const { profile } = (await session.call("Profiler.stop")) as { profile: Parameters<typeof summarise>[0] };
      const cpu = cpuMs(server.pid) - cpu0;
      session.close();
      const file = pathJoin(o.out, `${o.kind}.cpuprofile`);
      writeFileSync(file, JSON.stringify(profile));
      process.stdout.write(
        `${o.kind}: ${o.calls} calls in ${wall.toFixed(0)} ms (${((wall * 1000) / o.calls).toFixed(0)} µs each); gateway CPU ${((cpu * 1000) / o.calls).toFixed(0)} µs per call (from /proc, profiler included)\n` +
          `profile: ${file}\n\n${summarise(profile, 30, o.calls)}\n`,
      );
    }
  } finally {
    await closeAll(clients);
    await server.stop();
  }
  if (o.callgrind) {
    const out = readdirSync(o.out).filter((f) => f.startsWith("callgrind.out."));
    for (const f of out) {
      const body = readFileSync(pathJoin(o.out, f), "utf8");
      const total = /^totals:\s+(\d+)/m.exec(body)?.[1] ?? /^summary:\s+(\d+)/m.exec(body)?.[1];
      if (total)
        process.stdout.write(
          `${o.kind}: ${o.calls} calls, ${Number(total).toLocaleString("en-US")} instructions in the gateway = ${Math.round(Number(total) / o.calls).toLocaleString("en-US")} per call (${pathJoin(o.out, f)})\n`,
        );
    }
  }
}

await main();
