/**
 * A cluster you can run: `mewgate up --nodes 3` supervises its bus and nodes as one unit.
 * Real processes: up, nats-server, the node processes. A dead node is restarted and said;
 * a kill -9 of up leaves nothing behind; `status` and `down` see every node; a node whose
 * bus goes away with it still exits on SIGTERM within 5 s.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { alive, allGone, Cli, DEMO, descendants, poll, ROOT, run, tempDir } from "./fixtures/cli/harness.js";
import { memberRoute } from "../cli/local-cluster.js";
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
    await poll(
      "n2 serving again on its address",
      async () => {
        const n = descendants(cli.child.pid!).find((p) => /--node n2/.test(cmdline(p)));
        if (!n || n === n2) return false;
        const res = await fetch(`http://127.0.0.1:${nodes[0]!.port}/health`).catch(() => undefined);
        return res?.status === 200;
      },
      30_000,
    );
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
    writeFileSync(
      file,
      `space: {id: stopping}\ngateway: {state_dir: .mewgate, cluster: {url: "nats://127.0.0.1:1"}}\nparticipants:\n  alice: {kind: human, token: ${token}}\n`,
    );
    const node = await spawnGateway(file, { args: ["--cluster", nats.url, "--node", "solo"] });
    pids.push(node.child.pid!);
    await waitFor(
      async () =>
        ((await (await fetch(`http://127.0.0.1:${node.port}/health`)).json()) as { cluster: { owns: string[] } }).cluster.owns.includes(
          "stopping",
        ),
      15_000,
      "the node owns the space",
    );
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

describe("the participants up starts, in a cluster", () => {
  const TOKEN = (id: string) => `${id}-ride-token-0123456789`;
  const space = (dir: string, echoToken = true) => {
    const file = join(dir, "space.yaml");
    const echo = join(ROOT, "test", "fixtures", "bridge", "echo.mjs");
    writeFileSync(
      file,
      [
        "space: {id: ride}",
        "calls: {timeout_ms: 4000}",
        "participants:",
        `  me: {kind: human, token: ${TOKEN("me")}}`,
        `  caller: {kind: agent, token: ${TOKEN("caller")}, tools: {allow: ["echo/echo"]}}`,
        `  echo: {kind: mcp, ${echoToken ? `token: ${TOKEN("echo")}, ` : ""}mcp: {command: ${JSON.stringify(process.execPath)}, args: [${JSON.stringify(echo)}]}}`,
        "",
      ].join("\n"),
    );
    return file;
  };
  /** One call of echo/echo by `caller`: its text, or undefined if no answer came within 2 s. */
  const sent: string[] = [];
  const echoOnce = async (caller: TestClient, text: string): Promise<string | undefined> => {
    const id = `call-${text}-${sent.length + 1}`;
    sent.push(id);
    caller.send({
      id,
      kind: "mcp/request",
      to: ["echo"],
      payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "echo", arguments: { text } } },
    });
    const res = await caller
      .next((e) => e.kind === "mcp/response" && (e.correlation_id as string[] | undefined)?.includes(id) === true, 2000)
      .catch(() => undefined);
    const result = (res?.payload as { result?: { content?: Array<{ text?: string }> } } | undefined)?.result;
    return result?.content?.[0]?.text;
  };

  it("spreads them over the nodes up does not run, every other node a fallback, up's own last", () => {
    const nodes = [
      { name: "n2", url: "ws://127.0.0.1:2" },
      { name: "n3", url: "ws://127.0.0.1:3" },
      { name: "n4", url: "ws://127.0.0.1:4" },
    ];
    const n1 = "ws://127.0.0.1:1";
    expect(memberRoute(0, n1, nodes)).toEqual({
      node: "n2",
      url: "ws://127.0.0.1:2",
      fallbackUrls: ["ws://127.0.0.1:3", "ws://127.0.0.1:4", n1],
    });
    expect(memberRoute(4, n1, nodes)).toEqual({
      node: "n3",
      url: "ws://127.0.0.1:3",
      fallbackUrls: ["ws://127.0.0.1:4", "ws://127.0.0.1:2", n1],
    });
    // No other node: n1 alone.
    expect(memberRoute(7, n1, [])).toEqual({ node: "n1", url: n1, fallbackUrls: [] });
  });

  it("keeps a bridged MCP server answering through another node when the node it is connected to is killed -9", {
    timeout: 120_000,
  }, async () => {
    const dir = tempDir();
    const file = space(dir);
    const cli = new Cli(["up", file, "--state-dir", join(dir, "state"), "--port", "0", "--nodes", "3", "--as", "me"], { stdin: "pipe" });
    started.push(cli);
    const listening = await cli.waitLine((l) => l["event"] === "listening", "the listening event", 30_000);
    await cli.waitLine((l) => l["event"] === "ready", "the ready event", 30_000);
    pids.push(...descendants(cli.child.pid!));
    const ports: Record<string, number> = { n1: Number(new URL(listening["url"] as string).port) };
    for (const m of cli.stderr.matchAll(/(n[23]) ws:\/\/127\.0\.0\.1:(\d+)\/ws/g)) ports[m[1]!] = Number(m[2]);
    expect(Object.keys(ports).sort()).toEqual(["n1", "n2", "n3"]);
    // Where up says the bridge joined; without a word, it is inside up itself (n1).
    const via = /\becho via (n\d)\b/.exec(cli.stderr + cli.stdout)?.[1] ?? "n1";
    const nodePid =
      via === "n1" ? cli.child.pid! : descendants(cli.child.pid!).find((p) => new RegExp(`--node ${via}\\b`).test(cmdline(p)));
    expect(nodePid).toBeDefined();
    // The caller sits on another node, which lives on.
    const callerNode = via === "n1" ? "n2" : "n1";
    const caller = await TestClient.join({ port: ports[callerNode]! }, "ride", TOKEN("caller"));
    try {
      await poll("echo answering before the kill", async () => (await echoOnce(caller, "before")) === "before", 20_000, 50);
      const t0 = Date.now();
      process.kill(nodePid!, "SIGKILL");
      // A call every 300 ms (the one that reached the dead node waits for its timeout); the first answer counts, late or not.
      let sentAt = 0;
      const answered = () =>
        caller.received.some(
          (e) =>
            e.kind === "mcp/response" &&
            /^call-after-/.test(String((e.correlation_id as string[] | undefined)?.[0])) &&
            JSON.stringify(e.payload).includes('"text":"after"'),
        );
      await poll(
        "echo answering after its node was killed",
        () => {
          if (answered()) return true;
          if (Date.now() - sentAt >= 300) {
            sentAt = Date.now();
            void echoOnce(caller, "after");
          }
          return false;
        },
        20_000,
        20,
      );
      const ms = Date.now() - t0;
      console.log(`echo answered again ${ms} ms after its node (${via}) was killed -9`);
      expect(ms).toBeLessThan(15_000);
      // No call is left hanging: the one that went through the dead node ends with the call's timeout.
      const afterKill = sent.filter((id) => id.startsWith("call-after-"));
      const answer = (id: string) =>
        caller.received.find((e) => e.kind !== "system/welcome" && (e.correlation_id as string[] | undefined)?.includes(id));
      await poll("an answer to every call sent after the kill", () => afterKill.every(answer), 15_000, 50);
      console.log(`the first call after the kill got: ${JSON.stringify(answer(afterKill[0]!)?.payload).slice(0, 200)}`);
      // up lives on, and said what happened to the bridge.
      expect(alive(cli.child.pid!)).toBe(true);
      await poll("a notice that echo joined through another node", () => /echo: its node went away/.test(cli.stderr + cli.stdout), 10_000);

      // Worse: every node but up's own dies at once (and restarts meanwhile). It lands somewhere that lives.
      const others = descendants(cli.child.pid!).filter((p) => /--node n[23]\b/.test(cmdline(p)));
      pids.push(...others);
      expect(others.length).toBeGreaterThanOrEqual(1);
      const t1 = Date.now();
      for (const p of others) process.kill(p, "SIGKILL");
      const before = caller.received.length;
      sentAt = 0;
      await poll(
        "echo answering after every other node was killed",
        () => {
          if (caller.received.slice(before).some((e) => e.kind === "mcp/response" && JSON.stringify(e.payload).includes('"text":"again"')))
            return true;
          if (Date.now() - sentAt >= 300) {
            sentAt = Date.now();
            void echoOnce(caller, "again");
          }
          return false;
        },
        20_000,
        20,
      );
      console.log(`echo answered again ${Date.now() - t1} ms after n2 and n3 were killed -9 together`);
      expect(alive(cli.child.pid!)).toBe(true);
      // Said once per loss, not once per attempt, and its return said too.
      await poll("a notice that echo is back", () => (cli.stderr + cli.stdout).match(/echo: back in the space/g)?.length === 2, 10_000);
      expect((cli.stderr + cli.stdout).match(/echo: its node went away/g)).toHaveLength(2);
    } finally {
      caller.ws.terminate();
    }
  });

  it("keeps an agent working through another node when the node it is connected to is killed -9", { timeout: 120_000 }, async () => {
    const state = tempDir();
    const cli = new Cli(["up", DEMO, "--state-dir", state, "--port", "0", "--nodes", "3", "--no-greet"], { stdin: "pipe" });
    started.push(cli);
    await cli.waitLine((l) => l["event"] === "ready", "the ready event", 30_000);
    pids.push(...descendants(cli.child.pid!));
    const via = /\bassistant via (n\d)\b/.exec(cli.stderr + cli.stdout)?.[1] ?? "n1";
    const nodePid =
      via === "n1" ? cli.child.pid! : descendants(cli.child.pid!).find((p) => new RegExp(`--node ${via}\\b`).test(cmdline(p)));
    expect(nodePid).toBeDefined();
    process.kill(nodePid!, "SIGKILL");
    await poll("a notice that the assistant is back", () => /assistant: back in the space/.test(cli.stderr + cli.stdout), 20_000);
    // It still hears the person, proposes, and its approved call runs on the files server (itself joined through some node).
    cli.send({ chat: "hello", to: ["assistant"] });
    const proposal = await cli.waitLine((l) => l["kind"] === "mcp/proposal", "the assistant's proposal", 30_000);
    cli.send({ approve: proposal["id"], scope: "once" });
    await poll("hello.txt written", () => existsSync(join(state, "sandbox", "hello.txt")), 30_000);
    expect(alive(cli.child.pid!)).toBe(true);
  });

  it("keeps a bridged MCP server in the space when its token is rotated under it: it joins again with the new one", {
    timeout: 120_000,
  }, async () => {
    const dir = tempDir();
    const file = space(dir, false);
    const state = join(dir, "state");
    const cli = new Cli(["up", file, "--state-dir", state, "--port", "0", "--nodes", "3", "--as", "me"], { stdin: "pipe" });
    started.push(cli);
    const listening = await cli.waitLine((l) => l["event"] === "listening", "the listening event", 30_000);
    await cli.waitLine((l) => l["event"] === "ready", "the ready event", 30_000);
    pids.push(...descendants(cli.child.pid!));
    const caller = await TestClient.join({ port: Number(new URL(listening["url"] as string).port) }, "ride", TOKEN("caller"));
    try {
      await poll("echo answering before the rotation", async () => (await echoOnce(caller, "before")) === "before", 20_000, 50);
      const old = readFileSync(join(state, "tokens", "echo.token"), "utf8").trim();
      // No grace: the session on the old token is closed at once (4412).
      const rotate = await run(["token", "rotate", "echo", file, "--state-dir", state]);
      expect(rotate.code, rotate.stderr).toBe(0);
      expect(readFileSync(join(state, "tokens", "echo.token"), "utf8").trim()).not.toBe(old);
      await poll("echo answering with its new token", async () => (await echoOnce(caller, "rotated")) === "rotated", 20_000, 50);
    } finally {
      caller.ws.terminate();
    }
  });
});
