/**
 * Failover that keeps everyone, against real gateway processes over a real nats-server:
 * the owner of a space is killed -9 while its members come back at once (0–20 ms apart),
 * some of them to the node that is still loading the space; every one of them must still
 * be in the space, and hear it, long after the node-silence window (3 s). `mewgate
 * connect` rides through the same take-over.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CLI_MAIN, type GatewayProcess, killGateway, sleep, spawnGateway, TestClient, toolOwner, waitFor } from "./helpers.js";
import { NatsServer, natsServerPath } from "../cli/nats.js";
import { ParticipantClient } from "../participants/index.js";

const TOKEN = (id: string) => `${id}-failover-token-0123456789`;
const MEMBERS = Array.from({ length: 30 }, (_, i) => `m${i}`);
const SPACE = (id: string) => `
space: {id: ${id}}
gateway: {state_dir: .mewgate, cluster: {url: "nats://127.0.0.1:1", lease_ms: 3000}}
policy: {proposal_ttl_ms: 600000}
participants:
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  bot: {kind: agent, token: ${TOKEN("bot")}, tools: {ask: ["fs/write_file"]}}
${MEMBERS.map((m) => `  ${m}: {kind: human, token: ${TOKEN(m)}}`).join("\n")}
`;

const bin = natsServerPath();
if (!bin) throw new Error("the cluster tests need nats-server (apt-get install nats-server); npm test installs it when it can");

let nats: NatsServer;
const dirs: string[] = [];
const procs: GatewayProcess[] = [];
const riders: Rider[] = [];

beforeAll(async () => {
  nats = new NatsServer(bin);
  await nats.start();
});
afterAll(async () => {
  await nats.stop();
});
afterEach(async () => {
  for (const r of riders.splice(0)) r.stop();
  await Promise.all(procs.splice(0).map(killGateway));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface Node {
  name: string;
  proc: GatewayProcess;
  port: number;
}

const alive = (n: Node) => n.proc.child.exitCode === null && n.proc.child.signalCode === null;

async function cluster(space: string, n: number): Promise<Node[]> {
  const nodes: Node[] = [];
  for (let i = 1; i <= n; i++) {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-failover-"));
    dirs.push(dir);
    const file = pathJoin(dir, "space.yaml");
    writeFileSync(file, SPACE(space));
    const proc = await spawnGateway(file, { args: ["--cluster", nats.url, "--node", `n${i}`] });
    procs.push(proc);
    nodes.push({ name: `n${i}`, proc, port: proc.port });
  }
  return nodes;
}

async function ownerOf(nodes: Node[], space: string, timeoutMs = 15_000): Promise<Node> {
  let found: Node | undefined;
  await waitFor(
    async () => {
      for (const n of nodes.filter(alive)) {
        const h = (await (await fetch(`http://127.0.0.1:${n.port}/health`)).json()) as { cluster: { owns: string[] } };
        if (h.cluster.owns.includes(space)) found = n;
      }
      return found !== undefined;
    },
    timeoutMs,
    `an owner of ${space}`,
  );
  return found!;
}

/** Who the space's owner says is online. */
async function online(node: Node, space: string): Promise<string[]> {
  const res = await fetch(`http://127.0.0.1:${node.port}/api/spaces/${space}/participants`, {
    headers: { authorization: `Bearer ${TOKEN("m0")}` },
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { participants: Array<{ id: string; online: boolean }> };
  return body.participants
    .filter((p) => p.online)
    .map((p) => p.id)
    .sort();
}

/**
 * A member that comes back by itself, as a client would: after a 1012 to the node that
 * closed it (the node lives), after a 1006 to the next live node; `staggerMs` after the close.
 */
class Rider {
  client: TestClient | undefined;
  /** Every connection this member opened, in order. */
  readonly history: TestClient[] = [];
  closes: number[] = [];
  private stopped = false;
  private at: number;

  constructor(
    readonly id: string,
    private readonly nodes: Node[],
    start: number,
    private readonly space: string,
    private readonly staggerMs: number,
  ) {
    this.at = start;
  }

  async join(): Promise<void> {
    for (let attempt = 0; attempt < 40 && !this.stopped; attempt++) {
      const node = this.nodes[this.at % this.nodes.length]!;
      if (!alive(node)) {
        this.at++;
        continue;
      }
      const c = TestClient.connect(node, `space=${this.space}`, { authorization: `Bearer ${TOKEN(this.id)}` });
      this.history.push(c);
      const outcome = await Promise.race([
        c.next((e) => e.kind === "system/welcome", 10_000).then(() => "in" as const),
        c.closed.then(() => "closed" as const),
      ]).catch(() => "closed" as const);
      if (outcome === "in") {
        this.client = c;
        void c.closed.then(({ code }) => this.lost(c, code));
        return;
      }
      c.ws.terminate();
      if (c.closeCode !== 1012) this.at++;
      await sleep(this.staggerMs + 50);
    }
    throw new Error(`${this.id} could not rejoin`);
  }

  private lost(c: TestClient, code: number): void {
    if (this.stopped || this.client !== c) return;
    this.closes.push(code);
    this.client = undefined;
    if (code !== 1012) this.at++;
    setTimeout(() => void this.join().catch(() => {}), this.staggerMs);
  }

  stop(): void {
    this.stopped = true;
    for (const c of this.history) c.ws.terminate();
  }
}

describe("failover that keeps everyone", () => {
  it("keeps every member admitted and hearing the space after a kill -9 of its owner, members back within 0–20 ms", {
    timeout: 90_000,
  }, async () => {
    const nodes = await cluster("keep", 3);
    const owner = await ownerOf(nodes, "keep");
    // State worth a moment's reading: the node taking over loads it while members knock.
    const fs = await toolOwner(owner, "keep", TOKEN("fs"), [{ name: "write_file", inputSchema: { type: "object" } }]);
    const bot = await TestClient.join(owner, "keep", TOKEN("bot"));
    const blob = "x".repeat(200_000);
    for (let i = 0; i < 16; i++) {
      bot.send({
        id: `p${i}`,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { i, blob } } },
      });
      await fs.next((e) => e.kind === "mcp/proposal" && e.id === `p${i}`, 10_000);
    }
    fs.ws.terminate();
    bot.ws.terminate();
    MEMBERS.forEach((m, i) => {
      riders.push(new Rider(m, nodes, i, "keep", i % 21));
    });
    for (const r of riders) await r.join();
    const survivors = nodes.filter((n) => n !== owner);
    // Those on the owner get 1006 at once; those on the others 1012 when their node sees the lease lapse.
    await killGateway(owner.proc);
    const next = await ownerOf(survivors, "keep");
    await waitFor(() => riders.every((r) => r.client !== undefined && r.closes.length > 0), 20_000, "every member back");
    // Past the 3 s in which a silent node's members are dropped, and then some.
    await sleep(5000);
    expect(await online(next, "keep")).toEqual([...MEMBERS].sort());
    // Every member's socket is open, and each hears a chat from every node.
    for (const r of riders) expect({ id: r.id, open: r.client?.closeCode === undefined }).toEqual({ id: r.id, open: true });
    const speaker = riders[0]!.client!;
    speaker.send({ id: "after-failover", kind: "chat", payload: { text: "still here?" } });
    const heard = await Promise.all(
      riders.slice(1).map((r) =>
        r
          .client!.next((e) => e.id === "after-failover", 8000)
          .then(
            () => r.id,
            () => `${r.id} (deaf)`,
          ),
      ),
    );
    expect(heard).toEqual(riders.slice(1).map((r) => r.id));
    // And still is, once more.
    expect(await online(next, "keep")).toEqual([...MEMBERS].sort());
  });

  it("lets `mewgate connect` ride through a take-over: it says what happened, rejoins and hears the space", {
    timeout: 90_000,
  }, async () => {
    const nodes = await cluster("ride", 3);
    const owner = await ownerOf(nodes, "ride");
    const edge = nodes.find((n) => n !== owner)!;
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-connect-"));
    dirs.push(dir);
    const tokenFile = pathJoin(dir, "token");
    writeFileSync(tokenFile, TOKEN("m1"), { mode: 0o600 });
    const child = spawn(
      process.execPath,
      [CLI_MAIN, "connect", "--gateway", `ws://127.0.0.1:${edge.port}`, "--space", "ride", "--token-file", tokenFile, "--json"],
      { stdio: ["pipe", "pipe", "pipe"] },
    );
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    try {
      await waitFor(() => out.includes('"event":"ready"'), 15_000, "connect ready");
      await killGateway(owner.proc);
      await ownerOf(nodes, "ride");
      // It is told, and keeps going: a notice of the loss, then a new welcome.
      await waitFor(() => /"event":"(notice|error)"[^\n]*1012/.test(out), 20_000, "a notice of the take-over").catch((e: Error) => {
        throw new Error(`${e.message}: ${out} ${err}`);
      });
      await waitFor(() => (out.match(/"kind":"system\/welcome"/g) ?? []).length >= 2, 20_000, `a second welcome in ${out} ${err}`);
      expect(child.exitCode).toBe(null);
      const other = await TestClient.join(nodes.find((n) => alive(n) && n !== edge)!, "ride", TOKEN("m2"));
      try {
        other.send({ id: "after-ride", kind: "chat", payload: { text: "you there?" } });
        await waitFor(() => out.includes('"after-ride"'), 10_000, "the chat after the take-over");
        // And what it sends reaches the others.
        child.stdin.write(`${JSON.stringify({ chat: "back" })}\n`);
        await other.next((e) => e.kind === "chat" && e.payload.text === "back", 10_000);
      } finally {
        other.ws.terminate();
      }
    } finally {
      child.stdin.end();
      const code = await Promise.race([exited, sleep(10_000).then(() => "hung" as const)]);
      if (code === "hung") child.kill("SIGKILL");
      expect(code).toBe(0);
    }
  });

  it("has the participant SDK come back through another node when its own is killed -9, and serve again", { timeout: 90_000 }, async () => {
    const nodes = await cluster("sdk", 3);
    const owner = await ownerOf(nodes, "sdk");
    const others = nodes.filter((n) => n !== owner);
    // Connected to the owner, which dies: no close frame (1006), and its address is gone.
    const server = new ParticipantClient({
      url: `ws://127.0.0.1:${owner.port}`,
      fallbackUrls: others.map((n) => `ws://127.0.0.1:${n.port}`),
      space: "sdk",
      token: TOKEN("m3"),
      reconnect: { initialDelayMs: 50, maxDelayMs: 500, maxAttempts: 50 },
    });
    const closes: number[] = [];
    let rejoined = 0;
    server.on("close", (ev) => closes.push(ev.code));
    server.on("welcome", (w) => void (w.reconnected && rejoined++));
    server.onRequest(({ params }) => ({ content: [{ type: "text", text: `served ${JSON.stringify(params)}` }] }));
    await server.connect();
    try {
      await killGateway(owner.proc);
      await ownerOf(others, "sdk");
      await waitFor(() => rejoined > 0 && server.status === "open", 30_000, "the SDK client back in the space");
      expect(closes[0]).toBe(1006);
      // It is in the space, and answers a call routed by the new owner.
      const caller = await TestClient.join(others[0]!, "sdk", TOKEN("m4"));
      try {
        await waitFor(
          async () => {
            caller.send({
              id: `call-${caller.received.length}`,
              kind: "mcp/request",
              to: ["m3"],
              payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "x", arguments: {} } },
            });
            return (await caller.next((e) => e.kind === "mcp/response", 1000).catch(() => undefined)) !== undefined;
          },
          20_000,
          "a call answered by the rejoined participant",
        );
        const res = caller.received.find((e) => e.kind === "mcp/response")!;
        expect(JSON.stringify(res.payload)).toContain("served");
      } finally {
        caller.ws.terminate();
      }
    } finally {
      await server.close();
    }
  });
});
