/**
 * A cluster you can run: `mewgate up --nodes 3` supervises its bus and nodes as one unit.
 * Real processes: up, nats-server, the node processes. A dead node is restarted and said;
 * a kill -9 of up leaves nothing behind; `status` and `down` see every node; a node whose
 * bus goes away with it still exits on SIGTERM within 5 s.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { alive, allGone, Cli, DEMO, descendants, poll, run, tempDir } from "./fixtures/cli/harness.js";
import { NatsServer, natsServerPath } from "../cli/nats.js";
import { spawnGateway, TestClient, waitFor } from "./helpers.js";

const started: Cli[] = [];
const pids: number[] = [];

afterEach(() => {
  for (const c of started.splice(0)) c.kill("SIGKILL");
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
});

const cmdline = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return "";
  }
};

async function upCluster(state: string, extra: string[] = []): Promise<{ cli: Cli; nodes: Array<{ name: string; port: number }> }> {
  const cli = new Cli(["up", DEMO, "--state-dir", state, "--port", "0", "--nodes", "3", ...extra], { stdin: "pipe" });
  started.push(cli);
  await cli.waitLine((l) => l["event"] === "ready", "the ready event", 30_000);
  const nodes = [...cli.stderr.matchAll(/(n[23]) ws:\/\/127\.0\.0\.1:(\d+)\/ws/g)].map((m) => ({ name: m[1]!, port: Number(m[2]) }));
  expect(nodes.map((n) => n.name)).toEqual(["n2", "n3"]);
  pids.push(...descendants(cli.child.pid!));
  return { cli, nodes };
}

describe("mewgate up --nodes 3 runs as one unit", () => {
  it("stops every process it started when up itself is killed -9: nothing is orphaned", { timeout: 90_000 }, async () => {
    const state = tempDir();
    const { cli } = await upCluster(state);
    const tree = descendants(cli.child.pid!);
    expect(tree.some((p) => /nats-server/.test(cmdline(p)))).toBe(true);
    expect(tree.filter((p) => /--node n[23]/.test(cmdline(p)))).toHaveLength(2);
    cli.kill("SIGKILL");
    await cli.exited;
    await allGone(tree, 15_000);
    // And `down` says so, rather than leaving a node behind.
    const down = await run(["down", DEMO, "--state-dir", state]);
    expect(down.stderr + down.stdout).toMatch(/nothing to stop|already exited/);
  });

  it("restarts a node that died, with backoff, and says so; status sees every node", { timeout: 90_000 }, async () => {
    const state = tempDir();
    const { cli, nodes } = await upCluster(state);
    const n2 = descendants(cli.child.pid!).find((p) => /--node n2/.test(cmdline(p)))!;
    expect(n2).toBeDefined();
    process.kill(n2, "SIGKILL");
    await poll("a notice that n2 died", () => /n2[^\n]*(exited|died|killed)/.test(cli.stderr + cli.stdout), 10_000);
    await poll("n2 serving again on its address", async () => {
      const n = descendants(cli.child.pid!).find((p) => /--node n2/.test(cmdline(p)));
      if (!n || n === n2) return false;
      const res = await fetch(`http://127.0.0.1:${nodes[0]!.port}/health`).catch(() => undefined);
      return res?.status === 200;
    }, 30_000);
    expect(cli.stderr + cli.stdout).toMatch(/n2[^\n]*restart/);
    pids.push(...descendants(cli.child.pid!));
    // status names the nodes of the cluster.
    const status = await run(["status", DEMO, "--state-dir", state]);
    expect(status.code).toBe(0);
    for (const n of ["n1", "n2", "n3"]) expect(status.stdout).toContain(n);
    expect(status.stdout).toMatch(/n1 .* up, owns the space/);
    // From any node's address, with -c and -g as the other commands take them.
    const viaN3 = await run(["status", "-c", DEMO, "--state-dir", state, "-g", `ws://127.0.0.1:${nodes[1]!.port}`]);
    expect(viaN3.code).toBe(0);
    expect(viaN3.stdout).toContain("pending proposals");
    // down stops the whole cluster.
    const tree = descendants(cli.child.pid!);
    const down = await run(["down", DEMO, "--state-dir", state]);
    expect(down.code).toBe(0);
    await allGone([cli.child.pid!, ...tree], 15_000);
  });
});

describe("a node and its bus stopped together", () => {
  const bin = natsServerPath();
  let nats: NatsServer;
  beforeAll(async () => {
    nats = new NatsServer(bin!);
    await nats.start();
  });
  afterAll(async () => {
    await nats.stop();
  });

  it("exits within 5 s of SIGTERM even when its nats-server gets SIGTERM at the same moment", { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    const token = "alice-sigterm-token-0123456789";
    writeFileSync(file, `space: {id: stopping}\ngateway: {state_dir: .mewgate, cluster: {url: "nats://127.0.0.1:1"}}\nparticipants:\n  alice: {kind: human, token: ${token}}\n`);
    const node = await spawnGateway(file, { args: ["--cluster", nats.url, "--node", "solo"] });
    pids.push(node.child.pid!);
    await waitFor(async () => ((await (await fetch(`http://127.0.0.1:${node.port}/health`)).json()) as { cluster: { owns: string[] } }).cluster.owns.includes("stopping"), 15_000, "the node owns the space");
    const alice = await TestClient.join(node, "stopping", token);
    alice.send({ kind: "chat", payload: { text: "busy" } });
    const gone = new Promise<void>((r) => node.child.once("exit", () => r()));
    const t0 = Date.now();
    node.child.kill("SIGTERM");
    await nats.stop().catch(() => {});
    await Promise.race([gone, new Promise((r) => setTimeout(r, 8000))]);
    const ms = Date.now() - t0;
    alice.ws.terminate();
    expect({ exited: !alive(node.child.pid!), withinMs: ms < 5000 }).toEqual({ exited: true, withinMs: true });
    // nats.stop removed its temporary store: start a fresh one for whatever runs next.
    nats = new NatsServer(bin!);
    await nats.start();
  });
});
