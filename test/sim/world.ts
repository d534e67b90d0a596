/**
 * A seeded world for deterministic simulation (after Kelpie's DST): the real space and
 * real participant clients in one process, joined by a simulated network, on a simulated
 * clock, with a seeded workload and seeded faults.
 *
 * - Clock: vitest's fake timers drive every setTimeout/setInterval/Date; time moves only
 *   when the world steps to the next timer. Microtasks, setImmediate and file I/O stay
 *   real: after every step the world waits until the state store is idle, so a write
 *   finishing sooner or later cannot reorder what happens next.
 * - Network: each in-process connection is wrapped; every frame, each way, is delivered
 *   after a seeded latency, in order per connection and direction (as a WebSocket keeps
 *   order); a partition holds a participant's frames, both ways, for a while.
 * - Identity: `crypto.randomUUID` and `Math.random` are seeded for the run, so envelope
 *   ids, jitter and the trace are the same for the same seed, byte for byte.
 * - Workload: workers offering `work` (and `risky`, which needs a person's approval) call
 *   each other, sometimes while serving (nested chains); real agents (with a seeded model)
 *   are asked by the workers and by the person in chat, and call tools and each other's
 *   `ask` in turn; a person decides proposals.
 * - Faults: a callee that never answers (timeout), one that is busy (an error), a rejected
 *   proposal, a call to nobody (not found), a worker that leaves, network delay and
 *   partition, a state-store write that fails.
 */
import crypto from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { vi } from "vitest";
import { parseSpaceConfig } from "../../gateway/config/config.js";
import { connectInProcess, type InProcessConnection } from "../../gateway/space/inprocess.js";
import { Space } from "../../gateway/space/space.js";
import { TokenBook } from "../../gateway/identity/tokens.js";
import { startAgent, type AgentHandle } from "../../participants/agent/index.js";
import type { ModelRequest, ModelResponse, Provider } from "../../participants/agent/providers/types.js";
import { ParticipantClient, type IncomingRequest } from "../../participants/client.js";
import { RpcError } from "../../participants/errors.js";
import { seeded } from "../helpers.js";

export const WORKERS = 4;
export const AGENTS = 2;
export const MAX_DEPTH = 3;
const START = Date.UTC(2026, 0, 1);
/** Steps (timers run) one run may take, and simulated time it may cover. */
const MAX_STEPS = 20_000;
const MAX_SIM_MS = 120_000;

export interface Run {
  seed: number;
  /** Every frame through the network, in order: `<ms> <→|←> <participant> <frame>`. */
  trace: string[];
  faults: string[];
  /** Violations seen while running (checked after every step). */
  violations: string[];
  /** Proposals the gateway announced, and what the audit trail says of each at the end. */
  proposals: Map<string, string[]>;
  steps: number;
  simulatedMs: number;
}

/** Runs one seed to quiescence and returns what happened. */
export async function runWorld(seed: number): Promise<Run> {
  const rng = seeded(seed);
  const restore = pinRandomness(seeded(seed ^ 0x5eed));
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"], now: START });
  const dir = mkdtempSync(join(tmpdir(), "mewgate-sim-"));
  const run: Run = { seed, trace: [], faults: [], violations: [], proposals: new Map(), steps: 0, simulatedMs: 0 };
  const clients: ParticipantClient[] = [];
  const agents: AgentHandle[] = [];
  let space: Space | undefined;
  try {
    const config = parseSpaceConfig(spaceYaml(dir), { file: join(dir, "space.yaml"), env: {} });
    space = new Space(config, new TokenBook(), pino({ level: "silent" }));
    const net = new Network(rng, run, () => space!);
    const world = { rng, run, net, space, clients };

    const human = await enter(world, "human");
    human.on("envelope", (env) => {
      if (env.kind !== "mcp/proposal" || env.from === "human") return;
      run.proposals.set(env.id, []);
      // A person decides after a while; about a third of the time, no.
      const approve = rng() < 0.65;
      setTimeout(
        () => {
          if (approve) human.approve(env.id);
          else {
            run.faults.push(`${Date.now() - START} reject ${env.id}`);
            human.reject(env.id, "disagree", "not now");
          }
        },
        50 + Math.floor(rng() * 400),
      );
    });
    const workers: ParticipantClient[] = [];
    for (let i = 0; i < WORKERS; i++) workers.push(await enter(world, `w${i}`, (c) => serve(world, c, i)));
    for (const w of workers) w.announceTools();
    for (let i = 0; i < AGENTS; i++) agents.push(await startSimAgent(world, `a${i}`));

    // The person asks the agents in chat now and then.
    const chats = Math.floor(rng() * 4);
    for (let n = 0; n < chats; n++) {
      const to = `a${Math.floor(rng() * AGENTS)}`;
      setTimeout(() => human.send({ kind: "chat", to: [to], payload: { text: `task ${n} for ${to}` } }), Math.floor(rng() * 5000));
    }

    // The workload: each worker calls others at seeded moments.
    const calls = 6 + Math.floor(rng() * 10);
    for (let n = 0; n < calls; n++) {
      const from = workers[Math.floor(rng() * WORKERS)]!;
      const at = Math.floor(rng() * 5000);
      const target = pickTarget(rng, from.id);
      const timeoutMs = 300 + Math.floor(rng() * 2500);
      setTimeout(
        () => void from.request("system:gateway", "tools/call", { name: target, arguments: { n } }, { timeoutMs }).catch(() => undefined),
        at,
      );
    }
    // Faults at seeded moments.
    if (rng() < 0.4) {
      const who = `w${Math.floor(rng() * WORKERS)}`;
      const at = Math.floor(rng() * 5000);
      const ms = 200 + Math.floor(rng() * 2500);
      setTimeout(() => net.partition(who, ms), at);
    }
    if (rng() < 0.3) {
      const at = Math.floor(rng() * 5000);
      setTimeout(() => failNextWrite(space!, run), at);
    }
    if (rng() < 0.2) {
      const leaver = workers[Math.floor(rng() * WORKERS)]!;
      setTimeout(
        () => {
          run.faults.push(`${Date.now() - START} leave ${leaver.id}`);
          void leaver.close("leaving");
        },
        Math.floor(rng() * 6000),
      );
    }

    // Step to quiescence: every timer run, every write settled, checks after each step.
    for (; run.steps < MAX_STEPS && vi.getTimerCount() > 0 && Date.now() - START < MAX_SIM_MS; run.steps++) {
      await vi.advanceTimersToNextTimerAsync();
      await settle(space);
      checkCalls(space, run);
    }
    run.simulatedMs = Date.now() - START;
    const audit = space.ledger.audit({}, 100_000);
    for (const [id, events] of run.proposals) for (const e of audit) if (e.proposal === id) events.push(e.event);
    for (const p of space.proposals.pending()) run.proposals.get(p.id)?.push("pending");
  } finally {
    for (const a of agents) await a.stop().catch(() => {});
    for (const c of clients) await c.close("end of run").catch(() => {});
    await space?.closeAll(1001, "end of run").catch(() => {});
    vi.useRealTimers();
    restore();
    rmSync(dir, { recursive: true, force: true });
  }
  return run;
}

interface World {
  rng: () => number;
  run: Run;
  net: Network;
  space: Space;
  clients: ParticipantClient[];
}

/** A real agent with a seeded model: it calls a tool it was offered about half the time, at most twice a turn. */
async function startSimAgent(world: World, id: string): Promise<AgentHandle> {
  const { rng } = world;
  const provider: Provider = {
    name: "sim",
    complete: async (request: ModelRequest): Promise<ModelResponse> => {
      await new Promise((r) => setTimeout(r, 5 + Math.floor(rng() * 200)));
      const results = request.messages.filter((m) => m.role === "tool").length;
      const tools = request.tools.filter((t) => t.name !== "complete");
      if (results < 2 && tools.length > 0 && rng() < 0.5) {
        const tool = tools[Math.floor(rng() * tools.length)]!;
        const args = tool.name.endsWith("__ask")
          ? { message: `help ${id}`, priority: rng() < 0.3 ? "HIGH" : "NORMAL", timeout_ms: 500 + Math.floor(rng() * 1500) }
          : {};
        return {
          text: "",
          toolCalls: [{ id: `t${results}`, name: tool.name, arguments: args }],
          stopReason: "tool_use",
          usage: { input: 100, output: 10 },
        };
      }
      return { text: `${id} answers`, toolCalls: [], stopReason: "end_turn", usage: { input: 100, output: 20 } };
    },
  };
  const config = world.space.config.participants[id]!.agent!;
  const connected = startAgent({
    id,
    config,
    provider,
    client: { transport: () => world.net.wrap(connectInProcess(world.space, id), id), reconnect: false },
    env: {},
    callTimeoutMs: 1000,
  });
  for (let i = 0; i < 1000; i++) {
    const done = await Promise.race([connected.then(() => true), Promise.resolve(false)]);
    if (done) break;
    await vi.advanceTimersToNextTimerAsync();
    await settle(world.space);
  }
  return connected;
}

function spaceYaml(dir: string): string {
  const worker = (i: number) =>
    `  w${i}: {kind: service, tools: {allow: ["w*/work", "a*/ask"], ask: ["w*/risky"]}, capabilities: [{kind: "chat"}, {kind: "mcp/response"}, {kind: "mcp/proposal"}, {kind: "mcp/withdraw"}, {kind: "mcp/request", payload: {method: "tools/list"}}, {kind: "mcp/request", payload: {method: "notifications/*"}}]}`;
  return [
    "space: {id: sim}",
    `gateway: {state_dir: ${JSON.stringify(join(dir, "state"))}}`,
    "policy: {proposal_ttl_ms: 3000}",
    `calls: {timeout_ms: 1000, max_timeout_ms: 3000, max_call_depth: ${MAX_DEPTH}, max_pending: 32, breaker_failures: 50}`,
    "participants:",
    "  human: {kind: human}",
    ...Array.from({ length: WORKERS }, (_, i) => worker(i)),
    ...Array.from(
      { length: AGENTS },
      (_, i) =>
        `  a${i}: {kind: agent, tools: {allow: ["w*/work", "a*/ask"]}, agent: {provider: scripted, offer: {max_concurrent: 2}, max_iterations: 4}}`,
    ),
    "",
  ].join("\n");
}

function pickTarget(rng: () => number, self: string): string {
  const r = rng();
  if (r < 0.08) return "ghost/work";
  if (r < 0.2) return `a${Math.floor(rng() * AGENTS)}/ask`;
  const j = Math.floor(rng() * WORKERS);
  const name = `w${j}`;
  // A call to oneself is refused by the tool list (not offered) — the gateway still routes it; keep it: a cycle of one.
  void self;
  return `${name}/${rng() < 0.2 ? "risky" : "work"}`;
}

async function enter(world: World, id: string, setup?: (c: ParticipantClient) => void): Promise<ParticipantClient> {
  const c = new ParticipantClient({
    transport: () => world.net.wrap(connectInProcess(world.space, id), id),
    reconnect: false,
    requestTimeoutMs: 5000,
    proposalTimeoutMs: 10_000,
  });
  setup?.(c);
  world.clients.push(c);
  const joined = c.connect();
  // Joining goes through the simulated network: step the clock until the welcome arrives.
  for (let i = 0; i < 1000 && c.status !== "open"; i++) {
    await vi.advanceTimersToNextTimerAsync();
    await settle(world.space);
  }
  await joined;
  return c;
}

/** A worker: lists `work` and `risky`; serving a call, it answers, calls on, hangs, or is busy. */
function serve(world: World, c: ParticipantClient, i: number): void {
  const { rng, run } = world;
  c.onRequest(async (req: IncomingRequest) => {
    if (req.method === "tools/list") {
      return {
        tools: [
          { name: "work", inputSchema: { type: "object" } },
          { name: "risky", inputSchema: { type: "object" } },
        ],
      };
    }
    const r = rng();
    const delay = Math.floor(rng() * 300);
    if (r < 0.1) {
      run.faults.push(`${Date.now() - START} hang w${i} ${req.envelope.id}`);
      await new Promise<void>((resolve) => req.signal.addEventListener("abort", () => resolve(), { once: true }));
      throw new RpcError(-32000, "gave up");
    }
    if (r < 0.2) {
      run.faults.push(`${Date.now() - START} busy w${i}`);
      throw new RpcError(-32000, `w${i} is busy (at its limit)`);
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    if (r < 0.45) {
      // Delegate on, in the served call's chain.
      const target = `w${Math.floor(rng() * WORKERS)}/work`;
      const inner = await c
        .request(
          "system:gateway",
          "tools/call",
          { name: target, arguments: { via: `w${i}` } },
          { timeoutMs: 200 + Math.floor(rng() * 700) },
        )
        .then(
          () => "ok",
          (err: Error) => `failed: ${err.message.slice(0, 60)}`,
        );
      return { content: [{ type: "text", text: `w${i} after ${target}: ${inner}` }] };
    }
    return { content: [{ type: "text", text: `w${i} done` }] };
  });
}

/** The simulated network: seeded latency, order kept per connection and direction, partitions. */
class Network {
  private readonly last = new Map<string, number>();
  private readonly heldUntil = new Map<string, number>();

  constructor(
    private readonly rng: () => number,
    private readonly run: Run,
    private readonly space: () => Space,
  ) {}

  partition(who: string, ms: number): void {
    this.run.faults.push(`${Date.now() - START} partition ${who} ${ms}ms`);
    this.heldUntil.set(who, Date.now() + ms);
  }

  wrap(inner: InProcessConnection, id: string): InProcessConnection {
    const outer: InProcessConnection = {
      start: () => inner.start(),
      send: (text) =>
        this.schedule(id, "→", text, () => {
          try {
            inner.send(text);
          } catch {
            // the connection closed meanwhile: a frame lost with it
          }
        }),
      close: (code, reason) => inner.close(code, reason),
    };
    inner.onmessage = (text) => this.schedule(id, "←", text, () => outer.onmessage?.(text));
    inner.onclose = (info) => outer.onclose?.(info);
    inner.onerror = (err) => outer.onerror?.(err);
    return outer;
  }

  private schedule(id: string, dir: "→" | "←", text: string, deliver: () => void): void {
    const now = Date.now();
    const key = `${id}${dir}`;
    const latency = 1 + Math.floor(this.rng() * 20);
    const at = Math.max(this.last.get(key) ?? 0, now + latency, this.heldUntil.get(id) ?? 0);
    this.last.set(key, at);
    this.run.trace.push(`${now - START} ${dir} ${id} ${text}`);
    setTimeout(deliver, at - now);
    void this.space;
  }
}

/** Waits until the state store has nothing in flight, so real I/O cannot reorder the run. */
async function settle(space: Space): Promise<void> {
  const journal = (space as unknown as { ledger: { opened: { store: { journal: { queue: { idle: boolean } } } } } }).ledger.opened.store
    .journal;
  // Bounded in real time, generously: a slow disk makes a run slower, never different or failed.
  const until = performance.now() + 60_000;
  while (performance.now() < until) {
    await new Promise((r) => setImmediate(r));
    if (journal.queue.idle) {
      // One more turn for what the last write resolved.
      await new Promise((r) => setImmediate(r));
      return;
    }
  }
  throw new Error("the state store did not settle within 60 s of real time");
}

/** Storage fault: the next write of the store fails, as a full disk would make it. */
function failNextWrite(space: Space, run: Run): void {
  const journal = (space as unknown as { ledger: { opened: { store: { journal: { commit: (txn: unknown[]) => Promise<void> } } } } }).ledger
    .opened.store.journal;
  const real = journal.commit.bind(journal);
  run.faults.push(`${Date.now() - START} store-write-fails`);
  journal.commit = (_txn) => {
    journal.commit = real;
    return Promise.reject(
      Object.assign(new Error("ENOSPC: no space left on device (simulated)"), { code: "write_failed", errno: "ENOSPC" }),
    );
  };
}

/** Invariants on the calls in flight, after every step. */
function checkCalls(space: Space, run: Run): void {
  const pending = (space as unknown as { mcp: { calls: { pending: Map<string, { chain: string[]; internal?: unknown; id: string }> } } })
    .mcp.calls.pending;
  let count = 0;
  for (const call of pending.values()) {
    if (call.internal) continue;
    count++;
    if (new Set(call.chain).size !== call.chain.length)
      run.violations.push(`${Date.now() - START} call ${call.id}: a participant twice in its chain ${call.chain.join(" → ")}`);
    if (call.chain.length > MAX_DEPTH + 1)
      run.violations.push(`${Date.now() - START} call ${call.id}: chain ${call.chain.join(" → ")} deeper than ${MAX_DEPTH}`);
  }
  // Each worker has at most one chain per call it makes, each at most MAX_DEPTH deep; the person makes none.
  const bound = WORKERS * 32 * (MAX_DEPTH + 1);
  if (count > bound) run.violations.push(`${Date.now() - START} ${count} calls pending, over ${bound}`);
}

/** Seeds `crypto.randomUUID` and `Math.random` for the run; returns the undo. */
function pinRandomness(rng: () => number): () => void {
  const realUuid = crypto.randomUUID;
  const realRandom = Math.random;
  let n = 0;
  crypto.randomUUID = () => {
    const hex = Array.from({ length: 32 }, () => Math.floor(rng() * 16).toString(16)).join("");
    n++;
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}` as `${string}-${string}-${string}-${string}-${string}`;
  };
  Math.random = rng;
  syncBuiltinESMExports();
  return () => {
    crypto.randomUUID = realUuid;
    Math.random = realRandom;
    syncBuiltinESMExports();
    void n;
  };
}
