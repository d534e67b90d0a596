/**
 * A cluster of real gateway processes over a real nats-server (Debian's, with JetStream):
 * members on different nodes chat, call and approve; the owner is killed with proposals
 * pending; the bus itself is killed and restarted.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { askGateway, type Env, type GatewayProcess, killGateway, sleep, spawnGateway, TestClient, toolOwner, waitFor } from "./helpers.js";
import { NatsServer, natsServerPath } from "../cli/nats.js";
import { send } from "./fuzz/http.js";

const TOKEN = (id: string) => `${id}-cluster-token-0123456789`;
// Leases longer than the default (1.5 s): on a loaded test machine an owner starved of CPU
// for a whole lease is taken over, as it should be, which these tests are not about. How
// fast a take-over is, is measured by the bench (npm run bench cluster), not asserted here.
const SPACE = (leaseMs = 3000) => `
space: {id: team}
gateway: {state_dir: .mewgate, cluster: {url: "nats://127.0.0.1:1", lease_ms: ${leaseMs}}}
policy: {proposal_ttl_ms: 600000}
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  bot: {kind: agent, token: ${TOKEN("bot")}, tools: {ask: ["fs/write_file"]}}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];

const bin = natsServerPath();
if (!bin) throw new Error("the cluster tests need nats-server (apt-get install nats-server); npm test installs it when it can");

let nats: NatsServer;
const dirs: string[] = [];
const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];

beforeAll(async () => {
  nats = new NatsServer(bin);
  await nats.start();
});
afterAll(async () => {
  await nats.stop();
});
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(procs.splice(0).map(killGateway));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface Node {
  name: string;
  proc: GatewayProcess;
  port: number;
}

/** Starts `n` gateway processes of one cluster, each with its own state directory, on a space of its own name. */
async function cluster(space: string, n: number, leaseMs?: number, limits = ""): Promise<Node[]> {
  const yaml = SPACE(leaseMs)
    .replace("id: team", `id: ${space}`)
    .replace("state_dir: .mewgate,", `state_dir: .mewgate, ${limits ? `limits: {${limits}},` : ""}`);
  const nodes: Node[] = [];
  for (let i = 1; i <= n; i++) {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-cluster-"));
    dirs.push(dir);
    const file = pathJoin(dir, "space.yaml");
    writeFileSync(file, yaml);
    const proc = await spawnGateway(file, { args: ["--cluster", nats.url, "--node", `n${i}`] });
    procs.push(proc);
    nodes.push({ name: `n${i}`, proc, port: proc.port });
  }
  return nodes;
}

async function health(node: Node): Promise<{ cluster: { node: string; owns: string[] } }> {
  const res = await fetch(`http://127.0.0.1:${node.port}/health`);
  return (await res.json()) as { cluster: { node: string; owns: string[] } };
}

async function ownerOf(nodes: Node[], space: string, timeoutMs = 5000): Promise<Node> {
  let found: Node | undefined;
  await waitFor(
    async () => {
      for (const n of nodes)
        if (n.proc.child.exitCode === null && n.proc.child.signalCode === null && (await health(n)).cluster.owns.includes(space)) found = n;
      return found !== undefined;
    },
    timeoutMs,
    `an owner of ${space}`,
  );
  return found!;
}

async function join(node: Node, space: string, id: string): Promise<TestClient> {
  const c = await TestClient.join(node, space, TOKEN(id));
  clients.push(c);
  return c;
}

describe("a cluster over NATS", () => {
  it("answers a request whose target is no URL, or not valid percent-encoding, with a 4xx and keeps serving", async () => {
    // Found beside the fuzz suite: passing a request on to a space's owner parsed its target with new URL() and
    // decodeURIComponent, which threw in the request handler and stopped the node.
    const [node] = await cluster("oddpaths", 1);
    await ownerOf([node!], "oddpaths");
    for (const target of ["//", "//[", "/api/spaces/%ZZ/me", "/api/spaces/oddpaths%ZZ/me"]) {
      const status = await send(
        node!.port,
        Buffer.from(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${node!.port}\r\nConnection: close\r\n\r\n`),
      );
      expect({ target, clientError: status !== undefined && status >= 400 && status < 500 }).toEqual({ target, clientError: true });
    }
    expect(node!.proc.child.exitCode).toBe(null);
    expect((await health(node!)).cluster.owns).toContain("oddpaths");
  });

  it("refuses, across nodes, what it refuses locally: a wrong token, a forged from, a self-approval", async () => {
    const nodes = await cluster("hostile", 2);
    const owner = await ownerOf(nodes, "hostile");
    const edge = nodes.find((n) => n !== owner)!;
    const wrong = TestClient.connect(edge, "space=hostile", { authorization: "Bearer nope" });
    clients.push(wrong);
    expect((await wrong.closed).code).toBe(4401);
    const claimed = TestClient.connect(edge, "space=hostile&participant=bob", { authorization: `Bearer ${TOKEN("alice")}` });
    clients.push(claimed);
    expect((await claimed.closed).code).toBe(4403);
    const unknown = TestClient.connect(edge, "space=nowhere", { authorization: `Bearer ${TOKEN("alice")}` });
    clients.push(unknown);
    expect((await unknown.closed).code).toBe(4404);

    const bob = await join(edge, "hostile", "bob");
    const alice = await join(owner, "hostile", "alice");
    bob.send({ id: "forged", kind: "chat", from: "alice", payload: { text: "I am alice" } });
    const err = await bob.next((e) => e.kind === "system/error" && e.correlation_id?.[0] === "forged");
    expect(err.payload.code).toBe("from_mismatch");
    await toolOwner(edge, "hostile", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
    const bot = await join(edge, "hostile", "bot");
    bot.send({
      id: "p-self",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: {} } },
    });
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p-self");
    bot.send({ id: "self-approve", kind: "mcp/approve", correlation_id: ["p-self"], payload: {} });
    const refused = await bot.next((e) => e.kind === "system/error" && e.correlation_id?.[0] === "self-approve");
    expect(refused.payload.code).toBe("capability_violation");
    // A frame that is not JSON, through the edge, is answered and costs nothing else.
    bob.send("{not json");
    expect((await bob.next((e) => e.kind === "system/error" && e.payload.code === "invalid_json")).payload.code).toBe("invalid_json");
  });

  it("lets members on different nodes chat, call and approve, in order", async () => {
    const nodes = await cluster("across", 3);
    const owner = await ownerOf(nodes, "across");
    const [e1, e2] = nodes.filter((n) => n !== owner) as [Node, Node];
    const alice = await join(e1, "across", "alice");
    const bob = await join(e2, "across", "bob");
    expect(alice.received[0]!.payload.participants.map((p: { id: string }) => p.id)).not.toContain("alice");
    // Chat across nodes, in order.
    for (let i = 0; i < 50; i++) alice.send({ id: `c${i}`, kind: "chat", payload: { text: `hello ${i}` } });
    await bob.next((e) => e.id === "c49");
    expect(bob.received.filter((e) => e.kind === "chat").map((e) => e.payload.text)).toEqual(
      Array.from({ length: 50 }, (_, i) => `hello ${i}`),
    );
    // A call that needs approval: proposed on one node, approved on another, run on a third.
    const calls: Env[] = [];
    await toolOwner(owner, "across", TOKEN("fs"), TOOLS, {
      onCall: (env, reply) => {
        calls.push(env);
        reply({ content: [{ type: "text", text: "written" }] });
      },
    }).then((c) => clients.push(c));
    const bot = await join(e1, "across", "bot");
    bot.send({
      id: "p1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "x" } } },
    });
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "p1");
    expect(calls).toHaveLength(0);
    bob.send({ id: "a1", kind: "mcp/approve", correlation_id: ["p1"], payload: {} });
    const result = await bot.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("p1") === true, 8000);
    expect(JSON.stringify(result.payload)).toContain("written");
    expect(calls).toHaveLength(1);
    expect(calls[0]!.from).toBe("bot");
    // The operator API of the space answers on a node that does not own it.
    const res = await fetch(`http://127.0.0.1:${e2.port}/api/spaces/across/participants`, {
      headers: { authorization: `Bearer ${TOKEN("bob")}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-mewgate-node")).toBe(owner.name);
    // A request another node already passed on is never passed on again: stale views of
    // the owner on two nodes cannot bounce it between them.
    const bounced = await fetch(`http://127.0.0.1:${e2.port}/api/spaces/across/participants`, {
      headers: { authorization: `Bearer ${TOKEN("bob")}`, "x-mewgate-passed-to": "n9" },
    });
    expect(bounced.status).toBe(503);
  });

  it("takes the space over after a kill -9 of its owner, with the pending proposals still approvable", { timeout: 60_000 }, async () => {
    const nodes = await cluster("takeover", 3);
    const owner = await ownerOf(nodes, "takeover");
    const [e1, e2] = nodes.filter((n) => n !== owner) as [Node, Node];
    const bob = await join(e2, "takeover", "bob");
    await toolOwner(e1, "takeover", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
    const bot = await join(e1, "takeover", "bot");
    const ids = Array.from({ length: 20 }, (_, i) => `k${i}`);
    for (const id of ids)
      bot.send({
        id,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { id } } },
      });
    // Acknowledged: bob (an approver) has seen each of them.
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "k19");
    bob.send({ id: "d0", kind: "mcp/reject", correlation_id: ["k0"], payload: { reason: "no" } });
    await bot.next((e) => e.kind === "mcp/reject" && e.correlation_id?.[0] === "k0");

    await killGateway(owner.proc);
    const next = await ownerOf([e1, e2], "takeover", 15_000);
    // The members were told to reconnect; they come back through any node.
    await waitFor(() => bob.closeCode !== undefined, 5000, "bob's socket closed");
    expect(bob.closeCode).toBe(1012);
    const bob2 = await join(next === e1 ? e2 : e1, "takeover", "bob");
    const listed = await askGateway(bob2, "proposals/list", {});
    const pending = new Set((listed.payload.result.proposals as Array<{ id: string }>).map((p) => p.id));
    for (const id of ids.slice(1)) expect(pending.has(id), `${id} is still pending`).toBe(true);
    expect(pending.has("k0")).toBe(false);
    const calls: Env[] = [];
    await toolOwner(next, "takeover", TOKEN("fs"), TOOLS, {
      onCall: (env, reply) => {
        calls.push(env);
        return reply({ content: [{ type: "text", text: "ok" }] });
      },
    }).then((c) => clients.push(c));
    const bot2 = await join(next, "takeover", "bot");
    bob2.send({ id: "d5", kind: "mcp/approve", correlation_id: ["k5"], payload: {} });
    await bot2.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("k5") === true, 8000);
    expect(calls.map((c) => c.payload.params.arguments.id)).toEqual(["k5"]);
  });

  it("loses and repeats nothing when the bus itself is killed and restarted mid-traffic", { timeout: 60_000 }, async () => {
    // A lease longer than the outage: the owner keeps the space through it.
    const nodes = await cluster("partition", 3, 6000);
    const owner = await ownerOf(nodes, "partition");
    const [e1, e2] = nodes.filter((n) => n !== owner) as [Node, Node];
    const alice = await join(e1, "partition", "alice");
    const bob = await join(e2, "partition", "bob");
    await toolOwner(owner, "partition", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
    const bot = await join(e1, "partition", "bot");
    const N = 300;
    const sending = (async () => {
      for (let i = 0; i < N; i++) {
        alice.send({ id: `m${i}`, kind: "chat", payload: { text: `m${i}` } });
        if (i % 10 === 0)
          bot.send({
            id: `p${i}`,
            kind: "mcp/proposal",
            to: ["fs"],
            payload: { method: "tools/call", params: { name: "write_file", arguments: { i } } },
          });
        await sleep(4);
      }
    })();
    await sleep(300);
    await nats.kill();
    await sleep(400);
    await nats.start();
    await sending;
    await bob.next((e) => e.id === `m${N - 1}`, 15_000);
    const chats = bob.received.filter((e) => e.kind === "chat").map((e) => e.id);
    expect(chats).toEqual(Array.from({ length: N }, (_, i) => `m${i}`));
    // Every proposal reached the approver once; none was refused for the outage.
    await waitFor(() => bob.received.filter((e) => e.kind === "mcp/proposal").length >= N / 10, 10_000, "every proposal");
    const proposals = bob.received.filter((e) => e.kind === "mcp/proposal").map((e) => e.id);
    expect(proposals).toEqual(Array.from({ length: N / 10 }, (_, i) => `p${i * 10}`));
    expect(bot.received.filter((e) => e.kind === "system/error")).toEqual([]);
    // Still one owner, the same, and its state took every proposal.
    expect((await ownerOf(nodes, "partition")).name).toBe(owner.name);
    const listed = await askGateway(bob, "proposals/list", {});
    expect(listed.payload.result.proposals).toHaveLength(N / 10);
    expect(alice.closeCode).toBeUndefined();
  });

  it("survives the kill of a node that is not the owner: its members come back through another", { timeout: 60_000 }, async () => {
    const nodes = await cluster("edgekill", 3);
    const owner = await ownerOf(nodes, "edgekill");
    const [e1, e2] = nodes.filter((n) => n !== owner) as [Node, Node];
    const bob = await join(e2, "edgekill", "bob");
    await toolOwner(owner, "edgekill", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
    const bot = await join(e1, "edgekill", "bot");
    bot.send({
      id: "q1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: {} } },
    });
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "q1");
    await killGateway(e1.proc);
    // The owner hears the node is gone and says bot left.
    const left = await bob.next(
      (e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "bot",
      8000,
    );
    expect(left.payload.reason).toBe("node_lost");
    const bot2 = await join(e2, "edgekill", "bot");
    expect(bot2.received[0]!.kind).toBe("system/welcome");
    const listed = await askGateway(bob, "proposals/list", {});
    expect((listed.payload.result.proposals as Array<{ id: string }>).map((p) => p.id)).toEqual(["q1"]);
    bob.send({ id: "ok", kind: "mcp/approve", correlation_id: ["q1"], payload: {} });
    await bot2.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("q1") === true, 8000);
  });

  it("drops a member on another node that stops reading, as a slow consumer, and keeps serving the rest", { timeout: 60_000 }, async () => {
    const nodes = await cluster("slow", 2, undefined, "max_buffered_bytes: 262144, rate_per_second: 100000, rate_burst: 100000");
    const owner = await ownerOf(nodes, "slow");
    const edge = nodes.find((n) => n !== owner)!;
    const alice = await join(owner, "slow", "alice");
    const bob = await join(edge, "slow", "bob");
    (bob.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const chunk = { kind: "chat", payload: { text: "y".repeat(60_000) } };
    let left = false;
    void alice
      .next((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "bob", 30_000)
      .then(
        () => (left = true),
        () => {},
      );
    for (let round = 0; round < 1000 && !left; round++) {
      for (let i = 0; i < 10; i++) alice.send(chunk);
      await sleep(20);
    }
    expect(left).toBe(true);
    const leave = alice.received.find((e) => e.kind === "system/presence" && e.payload.event === "leave")!;
    expect(leave.payload.reason).toBe("slow_consumer");
    // The node and its link to the owner serve on: a member joining there hears alice.
    // (It joins now, not during the flood, which a loaded test process might not keep up with.)
    const bot = await join(edge, "slow", "bot");
    alice.send({ id: "after", kind: "chat", payload: { text: "still here" } });
    await bot.next((e) => e.id === "after", 15_000);
  });

  it("shrugs off garbage on the bus: malformed attach requests and link frames cost nothing", { timeout: 30_000 }, async () => {
    const nodes = await cluster("garbage", 2);
    const owner = await ownerOf(nodes, "garbage");
    const edge = nodes.find((n) => n !== owner)!;
    const alice = await join(edge, "garbage", "alice");
    const bob = await join(owner, "garbage", "bob");
    const { connect } = await import("nats");
    const nc = await connect({ servers: nats.url.replace("nats://", "") });
    try {
      const enc = new TextEncoder();
      const answers: string[] = [];
      for (const body of [
        "not json",
        "{}",
        JSON.stringify({ conn: 1, node: "x" }),
        JSON.stringify({ conn: "c", node: "x", boot: "b", digest: "AAAA", echo: "yes" }),
        JSON.stringify({ conn: "x".repeat(500), node: "x", boot: "b", digest: "AAAA" }),
      ]) {
        answers.push(new TextDecoder().decode((await nc.request("mewgate.attach.garbage", enc.encode(body), { timeout: 3000 })).data));
      }
      for (const a of answers) expect(JSON.parse(a)).toMatchObject({ ok: false });
      // A guessed connection id with a wrong token's digest is refused like a wrong token.
      const wrong = JSON.parse(
        new TextDecoder().decode(
          (
            await nc.request(
              "mewgate.attach.garbage",
              enc.encode(JSON.stringify({ conn: "n9.b.1", node: "n9", boot: "b", digest: "AAAA" })),
              { timeout: 3000 },
            )
          ).data,
        ),
      );
      expect(wrong).toMatchObject({ ok: false, code: 4401 });
      for (const junk of [
        new Uint8Array([0, 0, 0, 9, 1, 2]),
        enc.encode("\u0000\u0000\u0000\u0005F a 1"),
        new Uint8Array(10_000).fill(0xff),
      ])
        nc.publish("mewgate.up.garbage", junk);
      await nc.flush();
    } finally {
      await nc.close();
    }
    alice.send({ id: "still", kind: "chat", payload: { text: "fine" } });
    await bob.next((e) => e.id === "still");
  });

  it("removes a member on another node that is kicked, and hands a replaced connection over without a leave", {
    timeout: 30_000,
  }, async () => {
    const nodes = await cluster("kick", 3);
    const owner = await ownerOf(nodes, "kick");
    const [e1, e2] = nodes.filter((n) => n !== owner) as [Node, Node];
    const alice = await join(owner, "kick", "alice");
    const bot = await join(e1, "kick", "bot");
    const bob = await join(e1, "kick", "bob");
    // bob connects again through another node: the first connection is replaced, nobody sees a leave.
    const bob2 = await join(e2, "kick", "bob");
    expect((await bob.closed).code).toBe(4409);
    alice.send({ id: "to-bob", kind: "chat", to: ["bob"], payload: { text: "which bob?" } });
    await bob2.next((e) => e.id === "to-bob");
    // Kicked: its socket closes, and the space says it left.
    alice.send({ id: "kick-bot", kind: "space/kick", payload: { participant_id: "bot", reason: "done" } });
    expect((await bot.closed).code).toBe(4401);
    const left = await bob2.next((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "bot");
    expect(left.payload.participant.id).toBe("bot");
    expect(
      alice.received.some((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "bob"),
    ).toBe(false);
  });
});
