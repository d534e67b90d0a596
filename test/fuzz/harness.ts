/**
 * The fuzz space and what the fuzzer checks after every batch.
 *
 * The gateway runs as a real process (the built CLI, `mewgate gateway`), so that a frame
 * that kills Node is seen as what it is — a dead process — and not as an error caught by
 * the test runner. Around it, real WebSocket clients:
 *   - `fuzz`, an agent with an agent's default capabilities plus streams and lending, whose
 *     tool policy denies `tools/danger` and asks for `tools/guarded`: the one sending frames;
 *   - `tools`, an MCP tool owner that records every request it receives: a `tools/call` of
 *     anything but `safe` is a failure, since the human here never approves anything;
 *   - `peer`, a well-behaved agent with a pending proposal of its own, and `human`;
 *   - `late`, who joins after each batch and must get a welcome.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WebSocket } from "ws";
import { type GatewayProcess, spawnGateway, waitFor } from "../helpers.js";
import type { Frame, Target } from "./frames.js";

export const TOKENS = {
  human: "fz-human-token-0001",
  peer: "fz-peer-token-00002",
  tools: "fz-tools-token-0003",
  fuzz: "fz-fuzz-token-00004",
  late: "fz-late-token-00005",
} as const;

export const SPACE_YAML = `
space: {id: fz}
gateway:
  limits:
    rate_per_second: 100000
    rate_burst: 100000
    # Short enough to see pings after every seed, long enough that a busy test process still answers them.
    heartbeat_ms: 1000
calls:
  timeout_ms: 2000
participants:
  human: {kind: human, token: ${TOKENS.human}}
  peer:
    kind: agent
    token: ${TOKENS.peer}
    tools: {ask: ["tools/*"]}
  tools: {kind: mcp, token: ${TOKENS.tools}}
  fuzz:
    kind: agent
    token: ${TOKENS.fuzz}
    capabilities:
      - {kind: chat}
      - {kind: "chat/*"}
      - {kind: mcp/proposal}
      - {kind: mcp/withdraw}
      - {kind: mcp/response}
      - {kind: mcp/request, payload: {method: tools/list}}
      - {kind: mcp/request, payload: {method: "notifications/*"}}
      - {kind: "reasoning/*"}
      - {kind: "stream/*"}
      - {kind: "capability/*"}
    tools:
      allow: ["tools/safe"]
      ask: ["tools/guarded"]
      deny: ["tools/danger"]
  late: {kind: agent, token: ${TOKENS.late}}
`;

const TOOLS = ["safe", "danger", "guarded"].map((name) => ({ name, description: `the ${name} tool`, inputSchema: { type: "object" } }));

export const TARGET: Target = {
  space: "fz",
  me: "fuzz",
  others: ["human", "peer", "tools", "late"],
  owner: "tools",
  tools: ["safe", "danger", "guarded"],
  ownProposal: "p-fuzz-1",
  otherProposal: "p-peer-1",
  myToken: TOKENS.fuzz,
  otherToken: TOKENS.peer,
};

export type Env = { kind: string; id?: string; from?: string; to?: string[]; correlation_id?: string[]; payload?: any };

/**
 * A real ws client that records what it receives. Unlike TestClient it survives frames it
 * cannot parse (a broadcast nested 100,000 deep): those are kept as their kind and id only.
 */
export class Watcher {
  readonly received: Env[] = [];
  pings = 0;
  closeCode: number | undefined;
  closeReason = "";
  private waiters: Array<{ pred: (e: Env) => boolean; resolve: (e: Env | undefined) => void }> = [];

  constructor(
    readonly ws: WebSocket,
    onEnvelope?: (e: Env, w: Watcher) => void,
  ) {
    ws.on("error", () => {});
    ws.on("ping", () => this.pings++);
    ws.on("close", (code, reason) => {
      this.closeCode = code;
      this.closeReason = reason.toString();
      for (const w of this.waiters.splice(0)) w.resolve(undefined);
    });
    ws.on("message", (data, binary) => {
      if (binary) return;
      const text = data.toString();
      if (text.startsWith("#")) return;
      let env: Env;
      try {
        env = JSON.parse(text) as Env;
      } catch {
        // Too deep for this process too: what the checks need is in the first fields.
        const head = text.slice(0, 400);
        env = { kind: /"kind":"([^"]*)"/.exec(head)?.[1] ?? "<unreadable>", id: /"id":"([^"]*)"/.exec(head)?.[1] ?? "" };
      }
      // Huge payloads are not kept: nothing checks them, and they would pile up.
      if (text.length > 65_536) env = { kind: env.kind, ...(env.id ? { id: env.id } : {}), ...(env.from ? { from: env.from } : {}) };
      this.received.push(env);
      onEnvelope?.(env, this);
      this.waiters = this.waiters.filter((w) => {
        if (!w.pred(env)) return true;
        w.resolve(env);
        return false;
      });
    });
  }

  get open(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /** Connects with a bearer token; resolves once welcomed, or with the close if refused. */
  static async join(port: number, token: string, onEnvelope?: (e: Env, w: Watcher) => void): Promise<{ w: Watcher; welcomed: boolean }> {
    const w = new Watcher(
      new WebSocket(`ws://127.0.0.1:${port}/ws?space=fz`, { headers: { authorization: `Bearer ${token}` } }),
      onEnvelope,
    );
    const welcome = await w.next((e) => e.kind === "system/welcome", 10_000);
    return { w, welcomed: welcome !== undefined };
  }

  /** The first envelope (already here or still to come) matching `pred`; undefined on close or timeout. */
  next(pred: (e: Env) => boolean, timeoutMs = 5000): Promise<Env | undefined> {
    const seen = this.received.find(pred);
    if (seen) return Promise.resolve(seen);
    if (this.closeCode !== undefined) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(undefined);
      }, timeoutMs);
      const waiter = {
        pred,
        resolve: (e: Env | undefined) => {
          clearTimeout(timer);
          resolve(e);
        },
      };
      this.waiters.push(waiter);
    });
  }

  send(f: Frame): void {
    if (!this.open) return;
    if ("text" in f) this.ws.send(f.text);
    else this.ws.send(f.bytes, { binary: f.binary });
  }

  close(): void {
    this.ws.terminate();
  }
}

/** The tool owner: answers tools/list and safe calls, and writes down every request that should never have come. */
function ownerHandler(violations: string[]) {
  return (e: Env, w: Watcher) => {
    if (e.kind !== "mcp/request" || typeof e.payload !== "object" || e.payload === null) return;
    const p = e.payload as { id?: unknown; method?: unknown; params?: { name?: unknown } };
    const reply = (body: Record<string, unknown>) =>
      w.send({
        text: JSON.stringify({
          kind: "mcp/response",
          to: [e.from],
          correlation_id: [e.id],
          payload: { jsonrpc: "2.0", id: p.id, ...body },
        }),
      });
    const method = String(p.method);
    if (method === "tools/list") return reply({ result: { tools: TOOLS } });
    if (method.startsWith("notifications/")) return;
    if (method === "tools/call" && p.params?.name === "safe" && (e.from === "fuzz" || e.from === "system:gateway"))
      return reply({ result: { content: [{ type: "text", text: "ok" }] } });
    // Anything else reached the owner: a denied tool, an asked tool nobody approved, or a method the caller may not send.
    violations.push(
      `the tool owner received ${method} ${JSON.stringify(p.params?.name ?? "").slice(0, 80)} from ${String(e.from)} (id ${String(e.id)})`,
    );
    reply({ error: { code: -32000, message: "recorded as a violation" } });
  };
}

/** One fuzz space: a gateway process on a state dir, its members, and the checks. */
export class FuzzSpace {
  gw!: GatewayProcess;
  human!: Watcher;
  peer!: Watcher;
  owner!: Watcher;
  fuzz!: Watcher;
  readonly violations: string[] = [];
  private round = 0;
  private constructor(
    readonly dir: string,
    readonly file: string,
  ) {}

  /** A fresh state dir, the gateway started on it, every member joined, two proposals pending. */
  static async open(): Promise<FuzzSpace> {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-fuzz-"));
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE_YAML);
    const s = new FuzzSpace(dir, file);
    try {
      await s.start();
    } catch (err) {
      await s.dispose();
      throw err;
    }
    return s;
  }

  private async start(): Promise<void> {
    this.gw = await spawnGateway(this.file);
    const port = this.gw.port;
    this.owner = await this.must(Watcher.join(port, TOKENS.tools, ownerHandler(this.violations)), "the tool owner");
    this.human = await this.must(Watcher.join(port, TOKENS.human), "the human");
    this.peer = await this.must(Watcher.join(port, TOKENS.peer), "peer");
    await this.connectFuzz();
    // The catalogue holds the owner's tools before anything is fuzzed.
    await waitFor(
      async () => {
        const id = `setup-list-${++this.round}`;
        this.fuzz.send({
          text: JSON.stringify({ id, kind: "mcp/request", to: ["system:gateway"], payload: { jsonrpc: "2.0", id, method: "tools/list" } }),
        });
        const r = await this.fuzz.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(id) === true);
        return JSON.stringify(r?.payload ?? "").includes("tools/guarded");
      },
      10_000,
      "the owner's tools in the catalogue",
    );
    await this.propose(this.peer, TARGET.otherProposal);
    await this.propose(this.fuzz, TARGET.ownProposal);
  }

  private async propose(w: Watcher, id: string): Promise<void> {
    w.send({
      text: JSON.stringify({
        id,
        kind: "mcp/proposal",
        to: ["tools"],
        payload: { method: "tools/call", params: { name: "guarded", arguments: {} } },
      }),
    });
    const seen = await this.human.next((e) => e.kind === "mcp/proposal" && e.id === id, 10_000);
    if (!seen) throw new Error(`setup: proposal ${id} never reached the human`);
  }

  private async must(p: Promise<{ w: Watcher; welcomed: boolean }>, who: string): Promise<Watcher> {
    const { w, welcomed } = await p;
    if (!welcomed)
      throw new Error(
        `setup: ${who} was not welcomed (close ${w.closeCode} ${w.closeReason}); gateway log: ${this.gw.stderr().slice(-2000)}`,
      );
    return w;
  }

  /** (Re)connects the fuzzed member, which the gateway may have closed (too large, not UTF-8, ...). */
  async connectFuzz(): Promise<boolean> {
    const { w, welcomed } = await Watcher.join(this.gw.port, TOKENS.fuzz);
    this.fuzz = w;
    return welcomed;
  }

  /** The gateway's last log line with `msg`, as " (log: ...)", for a report. */
  private logged(msg: string): string {
    let text = "";
    try {
      text = readFileSync(join(this.dir, ".mewgate", "logs", "gateway.log"), "utf8");
    } catch {
      return "";
    }
    const line = text
      .split("\n")
      .reverse()
      .find((l) => l.includes(msg));
    return line ? ` (log: ${line.slice(0, 400)})` : "";
  }

  get alive(): boolean {
    return this.gw.child.exitCode === null && this.gw.child.signalCode === null;
  }

  /** Sends `frames` back to back (as fast as the socket takes them), reconnecting if the gateway closes the member. */
  async send(frames: readonly Frame[]): Promise<void> {
    for (const f of frames) {
      if (!this.alive) return;
      if (!this.fuzz.open && !(await this.connectFuzz())) return;
      this.fuzz.send(f);
    }
    // Every frame handled: the gateway answers a request sent after them (frames of one member are handled in order).
    if (!this.alive || !this.fuzz.open) return;
    const id = `sync-${++this.round}`;
    this.fuzz.send({
      text: JSON.stringify({ id, kind: "mcp/request", to: ["system:gateway"], payload: { jsonrpc: "2.0", id, method: "tools/list" } }),
    });
    await this.fuzz.next((e) => e.correlation_id?.includes(id) === true, 10_000);
  }

  /** What is wrong now, if anything: process, policy, a round trip of a well-behaved member, a join. */
  async check(): Promise<string[]> {
    const failures: string[] = [];
    if (!this.alive) {
      failures.push(
        `the gateway process exited (code ${this.gw.child.exitCode}, signal ${this.gw.child.signalCode}): ${lastLines(this.gw.stderr())}`,
      );
      return failures;
    }
    failures.push(...this.violations);
    const id = `rt-${++this.round}`;
    if (!this.peer.open) failures.push(`the well-behaved peer was disconnected (${this.peer.closeCode} ${this.peer.closeReason})`);
    else {
      this.peer.send({ text: JSON.stringify({ id, kind: "chat", to: ["human"], payload: { text: `round trip ${id}` } }) });
      if (!(await this.human.next((e) => e.kind === "chat" && e.id === id, 10_000)))
        failures.push(
          `a chat from peer to human did not arrive (human ${this.human.open ? "connected" : `closed ${this.human.closeCode}`})`,
        );
    }
    const { w, welcomed } = await Watcher.join(this.gw.port, TOKENS.late);
    if (!welcomed) failures.push(`a new member could not join: closed ${w.closeCode} "${w.closeReason}"${this.logged("admission failed")}`);
    w.close();
    // A socket closed 1006 is often the process dying: give its exit a moment to be seen, and say so.
    if (failures.length > 0) await waitFor(() => !this.alive, 1000).catch(() => {});
    if (!this.alive)
      failures.unshift(
        `the gateway process exited (code ${this.gw.child.exitCode}, signal ${this.gw.child.signalCode}): ${lastLines(this.gw.stderr())}`,
      );
    return failures;
  }

  /** Heartbeats still flow: the peer gets a ping it did not have when this was called. */
  async heartbeat(): Promise<string | undefined> {
    const before = this.peer.pings;
    const ok = await waitFor(() => this.peer.pings > before || !this.alive, 10_000, "a ping").then(
      () => this.alive,
      () => false,
    );
    return ok ? undefined : "no heartbeat ping reached the well-behaved peer within 10 s";
  }

  /** Stops the gateway and starts it again on the same state dir: it opens, and the human joins. */
  async restart(): Promise<string | undefined> {
    await this.stopProcess();
    this.closeClients();
    let gw: GatewayProcess;
    try {
      gw = await spawnGateway(this.file);
    } catch (err) {
      return `the gateway did not start again on its state: ${lastLines(String(err))}`;
    }
    this.gw = gw;
    const { w, welcomed } = await Watcher.join(gw.port, TOKENS.human);
    w.close();
    return welcomed ? undefined : `after a restart the human could not join: closed ${w.closeCode} "${w.closeReason}"`;
  }

  private closeClients(): void {
    for (const w of [this.human, this.peer, this.owner, this.fuzz]) w?.close();
  }

  private async stopProcess(): Promise<void> {
    const child = this.gw?.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await gone;
    clearTimeout(timer);
  }

  async dispose(): Promise<void> {
    this.closeClients();
    await this.stopProcess();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function lastLines(s: string, n = 1200): string {
  return s.length > n ? `…${s.slice(-n)}` : s;
}

/** Replays `chunks` (each sent back to back, then synced) on a fresh space; the failures seen. */
export async function replay(chunks: readonly (readonly Frame[])[]): Promise<string[]> {
  const s = await FuzzSpace.open();
  try {
    for (const c of chunks) {
      await s.send(c);
      if (!s.alive) break;
    }
    return await s.check();
  } finally {
    await s.dispose();
  }
}

/**
 * The fewest frames that reproduce a failure seen after `batches` (each a list of frames
 * sent back to back): the shortest failing prefix, then its last frame alone, then with
 * the frame before it (a frame handled from the backlog needs the write in front of it).
 * Bounded: at most about 20 fresh gateways.
 */
export async function shrink(all: readonly (readonly Frame[])[]): Promise<{ frames: Frame[]; note: string }> {
  // Most failures need only the batch they were seen after: search it alone when it is enough.
  const last = all[all.length - 1];
  const batches = all.length > 1 && last && (await replay([last])).length > 0 ? [last] : all;
  const flat = batches.flatMap((b, i) => b.map((f) => ({ f, b: i })));
  const chunked = (n: number) => {
    const out: Frame[][] = [];
    for (const { f, b } of flat.slice(0, n)) {
      out[b] ??= [];
      out[b]!.push(f);
    }
    return out.filter(Boolean);
  };
  if (batches === all && (await replay(chunked(flat.length))).length === 0)
    return { frames: [], note: "did not reproduce on a fresh gateway (timing); replay the seed" };
  let lo = 1;
  let hi = flat.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((await replay(chunked(mid))).length > 0) hi = mid;
    else lo = mid + 1;
  }
  const culprit = flat[hi - 1]!.f;
  if ((await replay([[culprit]])).length > 0) return { frames: [culprit], note: "this one frame, alone, on a fresh gateway" };
  for (let j = hi - 2; j >= Math.max(0, hi - 8); j--) {
    if ((await replay([[flat[j]!.f, culprit]])).length > 0)
      return { frames: [flat[j]!.f, culprit], note: "these two frames, back to back, on a fresh gateway" };
  }
  return {
    frames: flat.slice(0, hi).map((x) => x.f),
    note: `the first ${hi} frames of ${batches === all ? "the run" : "its last batch"} (no shorter set found)`,
  };
}
