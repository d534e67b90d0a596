/**
 * Groups and the two-person rule (proposals/approvals.ts, policy/groups.ts), hostile first:
 * a group that contains the proposer, one participant approving twice through two
 * connections, an approver who approves then rejects, a bar nobody can reach, a crash
 * between the first and the second approval; then the happy path against a real gateway.
 */
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ParticipantClient } from "../participants/index.js";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, parseSpaceConfig } from "../gateway/config/config.js";
import { readAudit } from "../gateway/space/ledger.js";
import {
  errorFor,
  killGateway,
  spawnGateway,
  startGateway,
  TestClient,
  toolOwner,
  waitFor,
  type Env,
  type GatewayProcess,
  type TestGateway,
} from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = (extra = "", agentExtra = "approvers: ['@ops']\n    approvals: 2") => `
space: {id: two}
gateway: {state_dir: .mewgate}
groups:
  ops: [alice, bob, agent]
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  carol: {kind: human, token: ${TOKEN("carol")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {ask: ["fs/write_file"]}
    ${agentExtra}
${extra}`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const propose = (id: string, args: Record<string, unknown> = { path: "a.txt" }) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: args } },
});

const require = createRequire(import.meta.url);
const FILESYSTEM = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const gateways: TestGateway[] = [];
const bridges: Bridge[] = [];
const sdk: ParticipantClient[] = [];
const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(sdk.splice(0).map((c) => c.close()));
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  for (const p of procs.splice(0)) await killGateway(p);
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function start(yaml = SPACE()): Promise<TestGateway> {
  const g = await startGateway(yaml);
  gateways.push(g);
  return g;
}

async function join(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "two", TOKEN(id));
  clients.push(c);
  return c;
}

async function owner(g: { port: number }, runs: Env[]): Promise<TestClient> {
  const c = await toolOwner(g, "two", TOKEN("fs"), TOOLS, {
    onCall: (env, reply) => {
      runs.push(env);
      reply({ content: [{ type: "text", text: "written" }] });
    },
  });
  clients.push(c);
  return c;
}

const progress = (id: string) => (e: Env) => e.kind === "system/approval" && e.correlation_id?.[0] === id;

describe("two-person rule: hostile", () => {
  it("never counts the proposer's own approval, even when it is in the approving group", async () => {
    const g = await start();
    const runs: Env[] = [];
    await owner(g, runs);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("p1"));
    const held = await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p1");
    // The card says what it needs before anyone decides.
    expect(held.payload["mewgate/approvals"]).toEqual({ required: 2, by: [] });
    agent.send({ id: "self", kind: "mcp/approve", correlation_id: ["p1"], payload: {} });
    expect((await errorFor(agent, "self")).payload.code).toBe("self_approval");
    alice.send({ id: "a1", kind: "mcp/approve", correlation_id: ["p1"], payload: {} });
    const one = await agent.next(progress("p1"));
    expect(one.payload).toMatchObject({ required: 2, approvals: 1, by: ["alice"], text: "1 of 2" });
    expect(runs).toHaveLength(0);
  });

  it("counts two approvals by one participant through two connections once", async () => {
    const g = await start();
    const runs: Env[] = [];
    await owner(g, runs);
    const agent = await join(g, "agent");
    const alice1 = await join(g, "alice");
    agent.send(propose("p2"));
    await alice1.next((e) => e.kind === "mcp/proposal" && e.id === "p2");
    alice1.send({ id: "x1", kind: "mcp/approve", correlation_id: ["p2"], payload: {} });
    await agent.next(progress("p2"));
    // A second connection of alice (a WebSocket replaces the first) and the operator API as alice.
    const alice2 = await join(g, "alice");
    alice2.send({ id: "x2", kind: "mcp/approve", correlation_id: ["p2"], payload: {} });
    expect((await errorFor(alice2, "x2")).payload).toMatchObject({ code: "already_approved", approvals: 1, required: 2 });
    const api = await fetch(`http://127.0.0.1:${g.port}/api/spaces/two/proposals/p2/approve`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN("alice")}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(api.status).toBe(409);
    expect(((await api.json()) as { error: { code: string } }).error.code).toBe("already_approved");
    expect(runs).toHaveLength(0);
    const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/two/proposals/p2`, {
      headers: { authorization: `Bearer ${TOKEN("alice")}` },
    });
    const view = (await res.json()) as { approvals: Record<string, unknown>; state: string };
    expect(view.state).toBe("pending");
    expect(view.approvals).toMatchObject({ required: 2, count: 1, by: ["alice"], text: "1 of 2", satisfiable: true });
  });

  it("ends the proposal when an approver who approved then rejects it; nothing runs", async () => {
    const g = await start();
    const runs: Env[] = [];
    await owner(g, runs);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const bob = await join(g, "bob");
    agent.send(propose("p3"));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p3");
    alice.send({ id: "ok", kind: "mcp/approve", correlation_id: ["p3"], payload: {} });
    await agent.next(progress("p3"));
    alice.send({ id: "no", kind: "mcp/reject", correlation_id: ["p3"], payload: { reason: "changed_my_mind" } });
    await agent.next((e) => e.kind === "mcp/reject" && e.correlation_id?.[0] === "p3");
    bob.send({ id: "late", kind: "mcp/approve", correlation_id: ["p3"], payload: {} });
    expect((await errorFor(bob, "late")).payload).toMatchObject({ code: "proposal_not_pending", state: "rejected" });
    expect(runs).toHaveLength(0);
    const trail = readAudit(pathJoin(g.dir, ".mewgate"), { tool: "fs/write_file" }).map((e) => [e.event, e.by]);
    expect(trail).toEqual([
      ["proposed", undefined],
      ["approval", "alice"],
      ["rejected", "alice"],
    ]);
  });

  it("refuses, at load, approvals nobody could give; and says so on the card when a group is short", async () => {
    const only = SPACE("", "approvers: [alice]\n    approvals: 2");
    expect(() => parseSpaceConfig(only, { file: "space.yaml" })).toThrow(ConfigError);
    try {
      parseSpaceConfig(only, { file: "space.yaml" });
    } catch (e) {
      expect(String((e as Error).message)).toMatch(
        /space\.yaml:\d+:\d+.*needs 2 distinct approvers but only 1 can approve \(alice; never the proposer itself\)/s,
      );
    }
    // A typo'd group is an error with a suggestion.
    expect(() => parseSpaceConfig(SPACE("", "approvers: ['@opps']"), { file: "space.yaml" })).toThrow(
      /unknown group "@opps"; did you mean "@ops"\?/,
    );
    // The group has two members besides the proposer, but only alice may make the call: never satisfiable now.
    const g = await start(
      SPACE("", "approvers: ['@ops']\n    approvals: 2").replace("bob: {kind: human,", "bob: {kind: human, tools: {deny: ['fs/*']},"),
    );
    await owner(g, []);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("p4"));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p4");
    const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/two/proposals/p4`, {
      headers: { authorization: `Bearer ${TOKEN("alice")}` },
    });
    const view = (await res.json()) as { approvals: { satisfiable: boolean; why: string } };
    expect(view.approvals.satisfiable).toBe(false);
    expect(view.approvals.why).toMatch(/never be approved/);
  });

  it("a later approver cannot move the first approval onto other arguments, nor approve it always", async () => {
    const g = await start();
    const runs: Env[] = [];
    await owner(g, runs);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const bob = await join(g, "bob");
    agent.send(propose("p5", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p5");
    alice.send({ id: "a", kind: "mcp/approve", correlation_id: ["p5"], payload: { arguments: { path: "b.txt" } } });
    const first = await agent.next(progress("p5"));
    expect(first.payload.arguments).toEqual({ path: "b.txt" });
    bob.send({ id: "b", kind: "mcp/approve", correlation_id: ["p5"], payload: { arguments: { path: "c.txt" } } });
    expect((await errorFor(bob, "b")).payload.code).toBe("approval_mismatch");
    bob.send({ id: "b2", kind: "mcp/approve", correlation_id: ["p5"], payload: { scope: "always" } });
    expect((await errorFor(bob, "b2")).payload.code).toBe("invalid_payload");
    // A bare approval may have been given looking at the card before the edit: it must name what runs.
    bob.send({ id: "b3", kind: "mcp/approve", correlation_id: ["p5"], payload: {} });
    expect((await errorFor(bob, "b3")).payload).toMatchObject({
      code: "approval_mismatch",
      arguments: { path: "b.txt" },
      edited_by: "alice",
    });
    expect(runs).toHaveLength(0);
    bob.send({ id: "b4", kind: "mcp/approve", correlation_id: ["p5"], payload: { arguments: { path: "b.txt" } } });
    await waitFor(() => runs.length === 1, 5000, "the call runs after the second approval");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "b.txt" });
  });

  it("keeps the first approval through a SIGKILL before the second", { timeout: 60_000 }, async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-two-"));
    dirs.push(dir);
    const file = pathJoin(dir, "space.yaml");
    writeFileSync(file, SPACE());
    let g = await spawnGateway(file);
    procs.push(g);
    await owner(g, []);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("p6"));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p6");
    alice.send({ kind: "mcp/approve", correlation_id: ["p6"], payload: {} });
    await agent.next(progress("p6"));
    await killGateway(g);
    for (const c of clients.splice(0)) c.ws.terminate();
    g = await spawnGateway(file);
    procs.push(g);
    const runs: Env[] = [];
    await owner(g, runs);
    const bob = await join(g, "bob");
    const welcome = bob.received.find((e) => e.kind === "system/welcome")!;
    const held = (welcome.payload.proposals as Env[]).find((e) => e.id === "p6")!;
    expect(held.payload["mewgate/approvals"]).toEqual({ required: 2, by: ["alice"] });
    const alice2 = await join(g, "alice");
    alice2.send({ id: "again", kind: "mcp/approve", correlation_id: ["p6"], payload: {} });
    expect((await errorFor(alice2, "again")).payload.code).toBe("already_approved");
    bob.send({ kind: "mcp/approve", correlation_id: ["p6"], payload: {} });
    await waitFor(() => runs.length === 1, 10_000, "the second approval routes the call");
    const trail = readAudit(pathJoin(dir, ".mewgate"), { tool: "fs/write_file" }).map((e) => [e.event, e.by]);
    expect(trail.slice(0, 3)).toEqual([
      ["proposed", undefined],
      ["approval", "alice"],
      ["approved", "bob"],
    ]);
  });
});

describe("two-person rule: interrupted", () => {
  it("needs both approvers again when the gateway stopped after the call was approved", { timeout: 30_000 }, async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-two-int-"));
    dirs.push(dir);
    let g = await startGateway(SPACE(), { dir });
    const held: Env[] = [];
    // The owner never answers: the call is in flight when the gateway stops.
    clients.push(await toolOwner(g, "two", TOKEN("fs"), TOOLS, { onCall: (env) => void held.push(env) }));
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const bob = await join(g, "bob");
    agent.send(propose("i1"));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "i1");
    alice.send({ kind: "mcp/approve", correlation_id: ["i1"], payload: {} });
    await bob.next(progress("i1"));
    bob.send({ kind: "mcp/approve", correlation_id: ["i1"], payload: {} });
    await waitFor(() => held.length === 1, 5000, "the call reaches the tool");
    for (const c of clients.splice(0)) c.ws.terminate();
    await g.gateway.close();
    g = await startGateway(SPACE(), { dir });
    gateways.push(g);
    const runs: Env[] = [];
    await owner(g, runs);
    const alice2 = await join(g, "alice");
    const welcome = alice2.received.find((e) => e.kind === "system/welcome")!;
    const shown = (welcome.payload.proposals as Env[]).find((e) => e.id === "i1")!;
    expect(shown.payload["mewgate/interrupted"]).toBeDefined();
    expect(shown.payload["mewgate/approvals"]).toEqual({ required: 2, by: [] });
    alice2.send({ kind: "mcp/approve", correlation_id: ["i1"], payload: {} });
    const one = await alice2.next(progress("i1"));
    expect(one.payload.text).toBe("1 of 2");
    expect(runs).toHaveLength(0);
    const bob2 = await join(g, "bob");
    bob2.send({ kind: "mcp/approve", correlation_id: ["i1"], payload: {} });
    await waitFor(() => runs.length === 1, 5000, "routed again after both approved again");
  });
});

describe("groups: happy paths", () => {
  it("lets any member of @ops approve, refuses others, and routes after two distinct approvers", async () => {
    const g = await start();
    const runs: Env[] = [];
    await owner(g, runs);
    const agent = await join(g, "agent");
    const carol = await join(g, "carol");
    const alice = await join(g, "alice");
    const bob = await join(g, "bob");
    agent.send(propose("h1", { path: "notes/x.md" }));
    await carol.next((e) => e.kind === "mcp/proposal" && e.id === "h1");
    carol.send({ id: "c", kind: "mcp/approve", correlation_id: ["h1"], payload: {} });
    expect((await errorFor(carol, "c")).payload).toMatchObject({ code: "not_an_approver" });
    expect((await errorFor(carol, "c")).payload.message).toMatch(/@ops/);
    alice.send({ kind: "mcp/approve", correlation_id: ["h1"], payload: {} });
    await carol.next(progress("h1"));
    const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/two/proposals/h1/approve`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN("bob")}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(await res.json()).toMatchObject({ ok: true, state: "approved" });
    await waitFor(() => runs.length === 1, 5000, "routed");
    const answer = await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "h1");
    expect(answer.payload.result.content[0].text).toBe("written");
    const approved = readAudit(pathJoin(g.dir, ".mewgate"), { tool: "fs/write_file" }).find((e) => e.event === "approved");
    expect(approved).toMatchObject({ by: "bob" });
    void bob;
  });

  it("expands @group in a rule's participant part", async () => {
    const yaml = SPACE("", "")
      .replace('tools: {ask: ["fs/write_file"]}', "tools: {deny: ['@servers/*']}")
      .replace("groups:\n  ops: [alice, bob, agent]", "groups:\n  ops: [alice, bob, agent]\n  servers: [fs]");
    const g = await start(yaml);
    await owner(g, []);
    const agent = await join(g, "agent");
    agent.send({
      id: "d",
      kind: "mcp/request",
      to: ["fs"],
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "write_file", arguments: {} } },
    });
    expect((await errorFor(agent, "d")).payload.code).toBe("denied");
  });
});

describe("two-person rule with a real MCP server", () => {
  it("server-filesystem writes only after two members of @ops approved, and everyone watching sees 1 of 2 meanwhile", {
    timeout: 30_000,
  }, async () => {
    const root = realpathSync(mkdtempSync(pathJoin(tmpdir(), "mewgate-two-fs-")));
    dirs.push(root);
    const g = await start();
    bridges.push(
      await startBridge({
        id: "fs",
        server: { command: process.execPath, args: [FILESYSTEM, root] },
        client: { url: g.url, space: "two", token: TOKEN("fs") },
        restart: { initialDelayMs: 50, maxDelayMs: 200 },
      }),
    );
    const agent = await ParticipantClient.connect({ url: g.url, space: "two", token: TOKEN("agent") });
    const alice = await ParticipantClient.connect({ url: g.url, space: "two", token: TOKEN("alice") });
    const bob = await ParticipantClient.connect({ url: g.url, space: "two", token: TOKEN("bob") });
    sdk.push(agent, alice, bob);
    await waitFor(async () => (await agent.listTools()).some((t) => t.name === "fs/write_file"), 10_000, "fs/write_file");
    const watcher = await join(g, "carol");
    const target = pathJoin(root, "deploy.txt");
    const seen = new Promise<string>((resolve) => alice.on("proposal", (p) => resolve(p.id)));
    const write = agent.propose(
      "fs",
      "tools/call",
      { name: "write_file", arguments: { path: target, content: "v2" } },
      { schema: CallToolResultSchema },
    );
    const id = await seen;
    alice.approve(id);
    const one = await watcher.next(progress(id));
    expect(one.payload.text).toBe("1 of 2");
    expect(() => readFileSync(target)).toThrow();
    bob.approve(id);
    expect((await write).isError).toBeFalsy();
    expect(readFileSync(target, "utf8")).toBe("v2");
  });
});
