/**
 * Caps (issue 50): calls and cost per minute, per agent, tool or person, hostile first: a flood
 * of calls at once lets exactly the cap through; a restart keeps the minute's counts; a cap
 * that holds waits for a person (never an agent); then three real gateway processes over a real
 * nats-server with the owner killed -9 mid-minute: the node that takes the space over goes on
 * counting from where the dead one stopped. The console's API and /metrics show the counts.
 *
 * A cap counts whole minutes of the clock: a test that would straddle one waits for the next
 * to start (at most `MARGIN_MS`, so each test is given a minute), and no assertion depends on
 * where in a minute it runs.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NatsServer, natsServerPath } from "../cli/nats.js";
import {
  type GatewayProcess,
  killGateway,
  sleep,
  spawnGateway,
  startGateway,
  TestClient,
  type TestGateway,
  toolCall,
  toolOwner,
  waitFor,
} from "./helpers.js";

const T = (id: string) => `${id}-caps-token-0123456789`;
const TOOLS = [{ name: "search", inputSchema: { type: "object" } }];
const MARGIN_MS = 25_000;

/** Waits for the next minute when less than `margin` of this one is left. */
async function freshMinute(margin = MARGIN_MS): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < margin) await sleep(left + 50);
}

const SPACE = `
space: {id: capped}
costs: {"web/search": 0.4}
caps:
  - {name: per-agent, per: agent, calls_per_minute: 3, action: refuse, tools: ["web/*"], callers: [bot]}
  - {name: spend, per: tool, cost_per_minute: 1, action: hold, tools: ["web/*"], callers: [helper]}
participants:
  alice: {kind: human, token: ${T("alice")}}
  web: {kind: mcp, token: ${T("web")}}
  bot: {kind: agent, token: ${T("bot")}, tools: {allow: ["web/*"]}}
  helper: {kind: agent, token: ${T("helper")}, tools: {allow: ["web/*"]}, capabilities: [{kind: "*"}]}
`;

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await gw?.stop();
  gw = undefined;
});

async function join(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "capped", T(id));
  clients.push(c);
  return c;
}

/** Sends `n` calls at once and counts the answers and the refusals by code. */
async function burst(c: TestClient, prefix: string, n: number): Promise<{ ok: number; codes: string[] }> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}${i}`);
  for (const id of ids) c.send(toolCall(id, "web", "search", { q: id }));
  let ok = 0;
  const codes: string[] = [];
  for (const id of ids) {
    const e = await c.next((x) => x.correlation_id?.includes(id) === true && (x.kind === "mcp/response" || x.kind === "system/error"));
    if (e.kind === "mcp/response") ok++;
    else codes.push(String(e.payload.code));
  }
  return { ok, codes };
}

describe("caps on one gateway, hostile first", { timeout: 60_000 }, () => {
  it("a flood at once lets exactly the cap through; a restart keeps the minute's count", async () => {
    await freshMinute();
    // Our own directory, so that stopping the first gateway leaves its state for the second.
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-caps-"));
    gw = await startGateway(SPACE, { dir });
    const port = gw.port;
    clients.push(await toolOwner(gw, "capped", T("web"), TOOLS));
    const bot = await join(gw, "bot");
    const first = await burst(bot, "a", 20);
    expect(first.ok).toBe(3);
    expect(first.codes).toEqual(Array(17).fill("cap_exceeded"));
    const refused = await bot.next((e) => e.kind === "system/error" && e.payload.code === "cap_exceeded");
    expect(refused.payload.message).toMatch(/per-agent: bot has made 3 of 3 calls this minute/);
    // The console's API and /metrics say the same.
    const api = await fetch(`http://127.0.0.1:${port}/api/spaces/capped/policy/caps`, {
      headers: { authorization: `Bearer ${T("alice")}` },
    });
    expect(((await api.json()) as { uses: unknown[] }).uses).toEqual([
      { cap: "per-agent", per: "agent", subject: "bot", calls: 3, cost: 1.2, calls_per_minute: 3 },
    ]);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toContain('mewgate_cap_calls{space="capped",cap="per-agent",per="agent",subject="bot"} 3');
    // Restarted on the same state, the minute's count stands.
    for (const c of clients.splice(0)) c.close();
    await gw.stop();
    gw = await startGateway(SPACE, { dir, port });
    clients.push(await toolOwner(gw, "capped", T("web"), TOOLS));
    const again = await join(gw, "bot");
    expect(await burst(again, "b", 2)).toEqual({ ok: 0, codes: ["cap_exceeded", "cap_exceeded"] });
    rmSync(dir, { recursive: true, force: true });
  });

  it("a cost cap that holds: past it the call waits for a person, and no agent may release it", async () => {
    await freshMinute();
    gw = await startGateway(SPACE);
    clients.push(await toolOwner(gw, "capped", T("web"), TOOLS));
    const helper = await join(gw, "helper");
    const alice = await join(gw, "alice");
    const bot = await join(gw, "bot");
    // 0.4 + 0.4 fit in 1; a third (1.2) does not.
    expect(await burst(helper, "h", 2)).toEqual({ ok: 2, codes: [] });
    helper.send(toolCall("h3", "web", "search", { q: "third" }));
    const held = await helper.next((e) => e.kind === "system/error" && e.correlation_id?.includes("h3") === true);
    expect(held.payload).toMatchObject({ code: "proposal_required", cap: { cap: "spend", what: "cost", limit: 1 } });
    // Proposed, it waits; an agent (with every capability) may not approve it, a person may.
    helper.send({
      id: "p1",
      kind: "mcp/proposal",
      to: ["web"],
      payload: { method: "tools/call", params: { name: "search", arguments: { q: "third" } } },
    });
    const card = await alice.next((e) => e.kind === "mcp/proposal" && e.from === "helper");
    expect(card.payload["mewgate/cap"]).toMatchObject({ cap: "spend" });
    bot.send({ id: "b1", kind: "mcp/approve", correlation_id: [card.id], payload: { scope: "once" } });
    expect((await bot.next((e) => e.kind === "system/error" && e.correlation_id?.includes("b1") === true)).payload.code).toMatch(
      /guard_held|capability_violation/,
    );
    alice.send({ id: "a1", kind: "mcp/approve", correlation_id: [card.id], payload: { scope: "once" } });
    await helper.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(card.id) === true);
  });
});

const APPROVALS = `
space: {id: capped}
caps:
  - {name: approvals, per: person, calls_per_minute: 1, action: refuse, tools: ["web/*"], callers: [asker]}
  - {name: burst, per: agent, calls_per_minute: 2, action: hold, tools: ["web/*"], callers: [runner]}
participants:
  alice: {kind: human, token: ${T("alice")}}
  bob: {kind: human, token: ${T("bob")}}
  web: {kind: mcp, token: ${T("web")}}
  asker: {kind: agent, token: ${T("asker")}, tools: {ask: ["web/*"]}}
  runner: {kind: agent, token: ${T("runner")}, tools: {allow: ["web/*"]}}
  trusted: {kind: agent, token: ${T("trusted")}, tools: {allow: ["web/*"]}, capabilities: [{kind: "*"}]}
`;

const propose = (c: TestClient, id: string) =>
  c.send({ id, kind: "mcp/proposal", to: ["web"], payload: { method: "tools/call", params: { name: "search", arguments: { q: id } } } });
const approve = (c: TestClient, id: string, proposal: string) =>
  c.send({ id, kind: "mcp/approve", correlation_id: [proposal], payload: { scope: "once" } });
const errorTo = (c: TestClient, id: string) => c.next((e) => e.kind === "system/error" && e.correlation_id?.includes(id) === true);
const answerOf = (c: TestClient, proposal: string) =>
  c.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(proposal) === true);

describe("caps and approvals, hostile first", { timeout: 60_000 }, () => {
  it("an approval lifts no cap that refuses: past a person's cap their approval is refused and the proposal waits; another person's runs it", async () => {
    await freshMinute();
    gw = await startGateway(APPROVALS);
    clients.push(await toolOwner(gw, "capped", T("web"), TOOLS));
    const asker = await join(gw, "asker");
    const alice = await join(gw, "alice");
    const bob = await join(gw, "bob");
    propose(asker, "q1");
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "q1");
    approve(alice, "ok1", "q1");
    await answerOf(asker, "q1");
    propose(asker, "q2");
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "q2");
    approve(alice, "ok2", "q2");
    const refused = await errorTo(alice, "ok2");
    expect(refused.payload.code).toBe("cap_exceeded");
    expect(refused.payload.message).toMatch(/approvals: alice has made 1 of 1 calls this minute.*the proposal stays pending/);
    // Nothing ran for it; it is still there for someone else.
    await sleep(100);
    expect(asker.received.some((e) => e.kind === "mcp/response" && e.correlation_id?.includes("q2"))).toBe(false);
    approve(bob, "ok3", "q2");
    await answerOf(asker, "q2");
    const uses = gw.gateway.spaces.get("capped")!.authority.caps.uses();
    expect(uses.map((u) => `${u.cap}:${u.subject}:${u.calls}`)).toEqual(["approvals:alice:1", "approvals:bob:1"]);
  });

  it("a cap that holds, reached after the call was proposed, still holds it: an agent may not release it, a person may", async () => {
    await freshMinute();
    gw = await startGateway(APPROVALS);
    clients.push(await toolOwner(gw, "capped", T("web"), TOOLS));
    const runner = await join(gw, "runner");
    const trusted = await join(gw, "trusted");
    const alice = await join(gw, "alice");
    // Proposed under the cap (runner may call it itself, and asks anyway): the card carries no cap.
    propose(runner, "r0");
    const card = await alice.next((e) => e.kind === "mcp/proposal" && e.id === "r0");
    expect(card.payload["mewgate/cap"]).toBeUndefined();
    // Then its two calls this minute are made directly.
    expect(await burst(runner, "r", 2)).toEqual({ ok: 2, codes: [] });
    runner.send(toolCall("r9", "web", "search", { q: "third" }));
    expect((await errorTo(runner, "r9")).payload).toMatchObject({ code: "proposal_required", cap: { cap: "burst", what: "calls" } });
    approve(trusted, "t1", "r0");
    expect((await errorTo(trusted, "t1")).payload.code).toBe("guard_held");
    approve(alice, "a1", "r0");
    await answerOf(runner, "r0");
  });
});

describe("caps across a cluster", { timeout: 60_000 }, () => {
  const bin = natsServerPath();
  if (!bin) throw new Error("the cluster tests need nats-server (apt-get install nats-server); npm test installs it when it can");
  let nats: NatsServer;
  const dirs: string[] = [];
  const procs: GatewayProcess[] = [];
  beforeAll(async () => {
    nats = new NatsServer(bin);
    await nats.start();
  });
  afterAll(async () => {
    await nats.stop();
  });
  afterEach(async () => {
    await Promise.all(procs.splice(0).map(killGateway));
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  const CLUSTERED = SPACE.replace(
    "space: {id: capped}",
    'space: {id: capped}\ngateway: {state_dir: .mewgate, cluster: {url: "nats://127.0.0.1:1", lease_ms: 3000}}',
  ).replace("calls_per_minute: 3", "calls_per_minute: 5");

  async function ownerOf(ports: number[]): Promise<number> {
    let found: number | undefined;
    await waitFor(
      async () => {
        for (const p of ports) {
          const h = (await (await fetch(`http://127.0.0.1:${p}/health`).catch(() => undefined))?.json().catch(() => undefined)) as
            | { cluster?: { owns: string[] } }
            | undefined;
          if (h?.cluster?.owns.includes("capped")) found = p;
        }
        return found !== undefined;
      },
      15_000,
      "an owner of the space",
    );
    return found!;
  }

  it("three nodes, the owner killed mid-minute: the next owner counts on from the bus", async () => {
    await freshMinute();
    const nodes: Array<{ proc: GatewayProcess; port: number }> = [];
    for (let i = 1; i <= 3; i++) {
      const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-caps-"));
      dirs.push(dir);
      writeFileSync(pathJoin(dir, "space.yaml"), CLUSTERED);
      const proc = await spawnGateway(pathJoin(dir, "space.yaml"), { args: ["--cluster", nats.url, "--node", `c${i}`] });
      procs.push(proc);
      nodes.push({ proc, port: proc.port });
    }
    const owner = await ownerOf(nodes.map((n) => n.port));
    const others = nodes.filter((n) => n.port !== owner);
    // Members come in through a node that is not the owner, as they would behind a load balancer.
    const web = await toolOwner({ port: others[0]!.port }, "capped", T("web"), TOOLS);
    const bot = await TestClient.join({ port: others[1]!.port }, "capped", T("bot"));
    clients.push(web, bot);
    expect(await burst(bot, "x", 3)).toEqual({ ok: 3, codes: [] });
    // Written behind the calls; then the owner dies.
    await sleep(300);
    await killGateway(nodes.find((n) => n.port === owner)!.proc);
    const next = await ownerOf(others.map((n) => n.port));
    expect(next).not.toBe(owner);
    for (const c of clients.splice(0)) c.close();
    const web2 = await toolOwner({ port: others[0]!.port }, "capped", T("web"), TOOLS);
    const bot2 = await TestClient.join({ port: others[1]!.port }, "capped", T("bot"));
    clients.push(web2, bot2);
    await sleep(200);
    // 3 of 5 were counted before the kill: 2 more, then the cap.
    const after = await burst(bot2, "y", 4);
    expect(after).toEqual({ ok: 2, codes: ["cap_exceeded", "cap_exceeded"] });
  }, 60_000);
});
