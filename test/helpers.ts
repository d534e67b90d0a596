/**
 * Test scaffolding: a real gateway on port 0 with a space written to a temp dir, and a
 * thin real-WebSocket client that collects envelopes and waits for them.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "vitest";
import { WebSocket } from "ws";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { Gateway } from "../gateway/edge/server.js";
import { ParticipantError } from "../participants/errors.js";

export interface TestGateway {
  gateway: Gateway;
  url: string;
  port: number;
  dir: string;
  yaml: string;
  stop(): Promise<void>;
}

/** Writes `yaml` into a fresh temp dir and starts a gateway for it on 127.0.0.1:0 (or `port`, to restart on the same address). */
export async function startGateway(
  yaml: string,
  opts: { dir?: string; env?: NodeJS.ProcessEnv; port?: number } = {},
): Promise<TestGateway> {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "mewgate-test-"));
  const file = join(dir, "space.yaml");
  writeFileSync(file, yaml);
  const config = parseSpaceConfig(yaml, { file, env: opts.env ?? {} });
  const gateway = new Gateway({ spaces: [config], host: "127.0.0.1", port: opts.port ?? 0, env: opts.env ?? {} });
  const { port, url } = await gateway.listen();
  return {
    gateway,
    url,
    port,
    dir,
    yaml,
    async stop() {
      await gateway.close();
      if (!opts.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type Env = { kind: string; from: string; id: string; to?: string[]; payload: any; correlation_id?: string[]; [k: string]: unknown };

/** A real ws client that records every envelope it receives. */
export class TestClient {
  readonly received: Env[] = [];
  /** Raw stream frames received, in order. */
  readonly frames: Array<{ data: Buffer; binary: boolean }> = [];
  closeCode: number | undefined;
  closeReason = "";
  private waiters: { pred: (e: Env) => boolean; resolve: (e: Env) => void }[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;
  readonly opened: Promise<void>;

  constructor(readonly ws: WebSocket) {
    this.opened = new Promise((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    this.closed = new Promise((resolve) => {
      ws.on("close", (code, reason) => {
        this.closeCode = code;
        this.closeReason = reason.toString();
        resolve({ code, reason: this.closeReason });
      });
    });
    ws.on("error", () => {});
    ws.on("message", (data, isBinary) => {
      // Stream frames (#<id>#<data>) and binary frames are not envelopes: kept aside.
      const text = data.toString();
      if (isBinary || text.startsWith("#")) return void this.frames.push({ data: Buffer.from(data as Buffer), binary: isBinary });
      const env = JSON.parse(text) as Env;
      this.received.push(env);
      this.waiters = this.waiters.filter((w) => {
        if (!w.pred(env)) return true;
        w.resolve(env);
        return false;
      });
    });
  }

  static connect(gw: { port: number }, query: string, headers: Record<string, string> = {}): TestClient {
    return new TestClient(new WebSocket(`ws://127.0.0.1:${gw.port}/ws?${query}`, { headers }));
  }

  /** Connects with a bearer token and waits for the welcome. */
  static async join(gw: { port: number }, space: string, token: string, extraQuery = ""): Promise<TestClient> {
    const c = TestClient.connect(gw, `space=${space}${extraQuery}`, { authorization: `Bearer ${token}` });
    await c.next((e) => e.kind === "system/welcome");
    return c;
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === "string" ? frame : JSON.stringify(frame));
  }

  /** Resolves with the first envelope (already received or future) matching `pred`. */
  next(pred: (e: Env) => boolean, timeoutMs = 5000): Promise<Env> {
    const seen = this.received.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out waiting; received kinds: ${this.received.map((e) => e.kind).join(", ")}`)),
        timeoutMs,
      );
      this.waiters.push({
        pred,
        resolve: (e) => {
          clearTimeout(timer);
          resolve(e);
        },
      });
    });
  }

  /** Waits for an envelope that arrives after this call. */
  nextNew(pred: (e: Env) => boolean, timeoutMs = 5000): Promise<Env> {
    const start = this.received.length;
    return this.next((e) => this.received.indexOf(e) >= start && pred(e), timeoutMs);
  }

  kinds(): string[] {
    return this.received.map((e) => e.kind);
  }

  close(): void {
    this.ws.close();
  }
}

/** Resolves after `ms`; for asserting that something did NOT arrive. */
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it holds; fails after `timeoutMs` naming `what`. */
export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Polls the gateway's catalogue, as `client` sees it, until `name` is in it. */
export function waitForTool(client: { listTools(): Promise<readonly { name: string }[]> }, name: string, timeoutMs = 5000): Promise<void> {
  return waitFor(async () => (await client.listTools()).some((t) => t.name === name), timeoutMs, `tool ${name}`);
}

/** The ParticipantError a promise rejects with; fails the test if it resolves or rejects with anything else. */
export async function failure(p: Promise<unknown>): Promise<ParticipantError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ParticipantError);
    return err as ParticipantError;
  }
  throw new Error("expected a rejection");
}

/**
 * A minimal MCP tool owner on a plain socket: answers tools/list (in pages of `pageSize`)
 * and tools/call (echoing name and arguments), or runs `onCall` when given.
 */
export async function toolOwner(
  gw: { port: number },
  space: string,
  token: string,
  tools: unknown[],
  opts: { pageSize?: number; onCall?: (env: Env, reply: (result: unknown) => void) => void } = {},
): Promise<TestClient> {
  // The handler is in place before the welcome: the gateway asks for tools right after it.
  const c = TestClient.connect(gw, `space=${space}`, { authorization: `Bearer ${token}` });
  const pageSize = opts.pageSize ?? 100;
  c.ws.on("message", (data) => {
    const env = JSON.parse(data.toString()) as Env;
    if (env.kind !== "mcp/request" || (env.from !== "system:gateway" && env.payload.method !== "tools/call")) return;
    const reply = (body: Record<string, unknown>) =>
      c.send({ kind: "mcp/response", to: [env.from], correlation_id: [env.id], payload: { jsonrpc: "2.0", id: env.payload.id, ...body } });
    if (env.payload.method === "tools/list") {
      const start = Number(env.payload.params?.cursor ?? 0);
      const page = tools.slice(start, start + pageSize);
      const next = start + pageSize < tools.length ? { nextCursor: String(start + pageSize) } : {};
      reply({ result: { tools: page, ...next } });
    } else if (env.payload.method === "tools/call") {
      if (opts.onCall) opts.onCall(env, (result) => reply({ result }));
      else
        reply({
          result: {
            content: [{ type: "text", text: JSON.stringify({ name: env.payload.params.name, args: env.payload.params.arguments }) }],
          },
        });
    }
  });
  await c.next((e) => e.kind === "system/welcome");
  return c;
}

/** Sends one request to system:gateway and waits for its answer. */
export async function askGateway(c: TestClient, method: string, params: Record<string, unknown> = {}): Promise<Env> {
  const id = `gw-${method}-${Math.random()}`;
  c.send({ id, kind: "mcp/request", to: ["system:gateway"], payload: { jsonrpc: "2.0", id, method, params } });
  return c.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(id) === true);
}

export function errorFor(c: TestClient, id: string): Promise<Env> {
  return c.next((e) => e.kind === "system/error" && e.correlation_id?.includes(id) === true);
}

export function responseFor(c: TestClient, id: string): Promise<Env> {
  return c.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(id) === true);
}

/** The built CLI, as the kill -9 and full-disk tests run it: a real gateway process. */
export const CLI_MAIN = join(import.meta.dirname, "..", "dist", "cli", "main.js");

export interface GatewayProcess {
  child: import("node:child_process").ChildProcess;
  port: number;
  /** Everything the process wrote to stderr (its log). */
  stderr(): string;
}

/** Starts `mewgate gateway --config file --port 0` (or `port`) and resolves once it listens (within `startMs`, default 10 s). */
export async function spawnGateway(
  file: string,
  opts: { port?: number; shell?: string; args?: string[]; startMs?: number } = {},
): Promise<GatewayProcess> {
  const { spawn } = await import("node:child_process");
  const args = [CLI_MAIN, "gateway", "--config", file, "--port", String(opts.port ?? 0), ...(opts.args ?? [])];
  // `shell` runs the command after a prefix such as `ulimit -f 64; trap '' XFSZ;`.
  const child = opts.shell
    ? spawn("/bin/sh", ["-c", `${opts.shell} exec "$0" "$@"`, process.execPath, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    : spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`gateway did not start: ${err}`)), opts.startMs ?? 10_000);
    child.stdout!.on("data", (d) => {
      out += d;
      const m = /ws:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited ${code}: ${err}`));
    });
  });
  return { child, port, stderr: () => err };
}

/** SIGKILLs a gateway process and waits for it to be gone. */
export async function killGateway(g: GatewayProcess): Promise<void> {
  if (g.child.exitCode !== null || g.child.signalCode !== null) return;
  const gone = new Promise((r) => g.child.once("exit", r));
  g.child.kill("SIGKILL");
  await gone;
}

/** A `tools/call` request envelope, its envelope id doubling as the JSON-RPC id. */
export const toolCall = (
  id: string,
  to: string,
  name: string,
  args: Record<string, unknown> = {},
  extra: Record<string, unknown> = {},
) => ({
  id,
  kind: "mcp/request",
  to: [to],
  ...extra,
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } },
});

/** A small seeded generator (mulberry32), so a failing randomized run can be replayed. */
export function seeded(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Starts a gateway over `dir`, has `proposer` propose `tool` at `owner`, `approver` approve
 * it, and stops the gateway while the call is at the owner (which never answers); started
 * again over the same state, the gateway holds the proposal `interrupted`. Resolves with
 * the restarted gateway (its `stop` leaves `dir`).
 */
export async function interruptedGateway(
  yaml: string,
  dir: string,
  p: {
    space: string;
    id: string;
    owner: string;
    ownerToken: string;
    tools: unknown[];
    tool: string;
    args: Record<string, unknown>;
    proposerToken: string;
    approverToken: string;
  },
): Promise<TestGateway> {
  const g1 = await startGateway(yaml, { dir });
  let reached = false;
  const owner = await toolOwner(g1, p.space, p.ownerToken, p.tools, {
    onCall: () => {
      reached = true;
    },
  });
  const proposer = await TestClient.join(g1, p.space, p.proposerToken);
  const approver = await TestClient.join(g1, p.space, p.approverToken);
  proposer.send({
    id: p.id,
    kind: "mcp/proposal",
    to: [p.owner],
    payload: { method: "tools/call", params: { name: p.tool, arguments: p.args } },
  });
  await approver.next((e) => e.kind === "mcp/proposal" && e.id === p.id);
  approver.send({ kind: "mcp/approve", correlation_id: [p.id], payload: { scope: "once" } });
  await waitFor(() => reached, 5000, "the approved call reaches its owner");
  for (const c of [owner, proposer, approver]) c.ws.terminate();
  await g1.gateway.close();
  return startGateway(yaml, { dir });
}
