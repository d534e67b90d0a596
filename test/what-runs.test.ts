/**
 * One "what will run" per proposal (proposals/book.ts `whatRuns`), against a real gateway,
 * hostile first: a fulfilment that repeats the proposed arguments after an edit, two approvers
 * racing an edit, a second approver whose own right does not cover what runs, a proposer whose
 * rules deny what an edit would run, edits that break the tool's input schema (wire, API,
 * fulfilment), a grant from one of two approvers, a peer with chat rights only answering
 * someone else's proposal; then the cards (API, welcome, client) showing what runs, and
 * `policy explain` / `policy test` with groups and quorum.
 */
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { callShape } from "../cli/terminal/format.js";
import { offlineAuthority } from "../cli/policy.js";
import fc from "fast-check";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { Authority } from "../gateway/policy/authority.js";
import { Registry } from "../gateway/tools/registry.js";
import { firstProblem } from "../gateway/wire/arguments-schema.js";
import { ParticipantClient } from "../participants/index.js";
import { ToolCaller } from "../participants/agent/tool-calls.js";
import { CLI_MAIN, errorFor, startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: wr}
gateway: {state_dir: .mewgate}
groups:
  ops: [alice, bob, dave]
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob:
    kind: human
    token: ${TOKEN("bob")}
    tools: {deny: [{tool: "fs/write_file", when: "args.path.startsWith('secret/')"}]}
  dave: {kind: human, token: ${TOKEN("dave")}}
  carol: {kind: human, token: ${TOKEN("carol")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  peer: {kind: agent, token: ${TOKEN("peer")}, capabilities: [{kind: chat}]}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools:
      deny: [{tool: "fs/write_file", when: "args.path.startsWith('etc/')"}]
      ask: ["fs/write_file"]
    approvers: ['@ops']
    approvals: 2
  solo:
    kind: agent
    token: ${TOKEN("solo")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {ask: ["fs/write_file"]}
    approvers: ['@ops']
`;
const TOOLS = [
  {
    name: "write_file",
    inputSchema: {
      type: "object",
      properties: { path: { type: "string" }, content: { type: "string" } },
      required: ["path"],
      additionalProperties: false,
    },
  },
];
const propose = (id: string, args: Record<string, unknown>) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: args } },
});
const fulfil = (id: string, proposal: string, args: Record<string, unknown>) => ({
  id,
  kind: "mcp/request",
  to: ["fs"],
  correlation_id: [proposal],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "write_file", arguments: args } },
});
const progress = (id: string) => (e: Env) => e.kind === "system/approval" && e.correlation_id?.[0] === id;

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const sdk: ParticipantClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(sdk.splice(0).map((c) => c.close()));
  for (const g of gateways.splice(0)) await g.stop();
});

/** A gateway with the tool owner joined and its tool in the catalogue; `runs` collects what reaches the tool. */
async function start(yaml = SPACE): Promise<{ g: TestGateway; runs: Env[] }> {
  const g = await startGateway(yaml);
  gateways.push(g);
  const runs: Env[] = [];
  clients.push(
    await toolOwner(g, "wr", TOKEN("fs"), TOOLS, {
      onCall: (env, reply) => {
        runs.push(env);
        reply({ content: [{ type: "text", text: "written" }] });
      },
    }),
  );
  await waitFor(
    async () => ((await api(g, "alice", "GET", "tools")).body.tools ?? []).some((t: { name: string }) => t.name === "fs/write_file"),
    5000,
    "fs/write_file in the catalogue",
  );
  return { g, runs };
}

async function join(g: TestGateway, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "wr", TOKEN(id));
  clients.push(c);
  return c;
}

async function api(g: TestGateway, as: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/wr/${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN(as)}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

/** Alice approves `id` first, editing its arguments to `args`; resolves once it is counted. */
async function firstEdit(agent: TestClient, alice: TestClient, id: string, args: Record<string, unknown>): Promise<void> {
  alice.send({ id: `${id}-a`, kind: "mcp/approve", correlation_id: [id], payload: { arguments: args } });
  const one = await agent.next(progress(id));
  expect(one.payload).toMatchObject({ text: "1 of 2", arguments: args, edited_by: "alice" });
}

describe("what runs: hostile", () => {
  it("a fulfilment repeating the proposed arguments after an edit runs nothing and counts as no approval", async () => {
    const { g, runs } = await start();
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const dave = await join(g, "dave");
    agent.send(propose("f1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "f1");
    await firstEdit(agent, alice, "f1", { path: "b.txt" });
    // Dave fulfils MEW-style with the original arguments: an edit back, not "no edit".
    dave.send(fulfil("d1", "f1", { path: "a.txt" }));
    expect((await errorFor(dave, "d1")).payload).toMatchObject({ code: "approval_mismatch", arguments: { path: "b.txt" } });
    // Without arguments at all, it did not confirm what runs either.
    dave.send({ ...fulfil("d2", "f1", {}), payload: { jsonrpc: "2.0", id: "d2", method: "tools/call", params: { name: "write_file" } } });
    expect((await errorFor(dave, "d2")).payload.code).toBe("approval_mismatch");
    expect(runs).toHaveLength(0);
    const view = (await api(g, "dave", "GET", "proposals/f1")).body;
    expect(view).toMatchObject({
      state: "pending",
      arguments: { path: "b.txt" },
      proposedArguments: { path: "a.txt" },
      edited: { by: "alice" },
      approvals: { count: 1 },
    });
    // Fulfilling with what runs routes it, once, with the edited arguments.
    dave.send(fulfil("d3", "f1", { path: "b.txt" }));
    await waitFor(() => runs.length === 1, 5000, "the fulfilment runs");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "b.txt" });
  });

  it("two approvers racing an edit: no approval counts for arguments its approver was not shown", async () => {
    const { g, runs } = await start();
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const dave = await join(g, "dave");
    agent.send(propose("r1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "r1");
    await dave.next((e) => e.kind === "mcp/proposal" && e.id === "r1");
    // Both decide at once: alice edits, dave approves the card he saw (no arguments).
    alice.send({ id: "ra", kind: "mcp/approve", correlation_id: ["r1"], payload: { arguments: { path: "b.txt" } } });
    dave.send({ id: "rd", kind: "mcp/approve", correlation_id: ["r1"], payload: {} });
    // Each learns its own outcome: a refusal correlated to what it sent, or a count naming it.
    const outcome = async (c: TestClient, id: string, who: string) =>
      Promise.race([
        c.next((e) => e.kind === "system/error" && e.correlation_id?.includes(id) === true).then((e) => e.payload.code as string),
        c.next((e) => progress("r1")(e) && (e.payload.by as string[]).includes(who)).then(() => "counted"),
      ]);
    const [a, d] = await Promise.all([outcome(alice, "ra", "alice"), outcome(dave, "rd", "dave")]);
    // At most one counted, and nothing ran: one approver is not two.
    expect([a, d].filter((x) => x === "counted").length).toBeLessThanOrEqual(1);
    expect(runs).toHaveLength(0);
    const view = (await api(g, "alice", "GET", "proposals/r1")).body;
    expect(view.state).toBe("pending");
    if (view.approvals.by.includes("alice")) expect(view.arguments).toEqual({ path: "b.txt" });
    if (view.approvals.by.includes("dave")) expect(view.arguments).toEqual({ path: "a.txt" });
    // A console card drawn before the edit approves nothing: it sends what it showed.
    if (view.edited) {
      const stale = await api(g, "dave", "POST", "proposals/r1/approve", { scope: "once", arguments: { path: "a.txt" } });
      expect(stale.status).toBe(409);
      expect(stale.body.error.code).toBe("approval_mismatch");
      expect(runs).toHaveLength(0);
    }
  });

  it("checks the second approver's own right against the arguments that run", async () => {
    const { g, runs } = await start();
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const bob = await join(g, "bob");
    const dave = await join(g, "dave");
    agent.send(propose("s1", { path: "notes/x" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "s1");
    await firstEdit(agent, alice, "s1", { path: "secret/x" });
    // Bob may write notes/x but not secret/x: what runs is secret/x.
    bob.send({ id: "b1", kind: "mcp/approve", correlation_id: ["s1"], payload: {} });
    expect((await errorFor(bob, "b1")).payload.code).toBe("approver_lacks_capability");
    bob.send({ id: "b2", kind: "mcp/approve", correlation_id: ["s1"], payload: { arguments: { path: "secret/x" } } });
    expect((await errorFor(bob, "b2")).payload.code).toBe("approver_lacks_capability");
    bob.send(fulfil("b3", "s1", { path: "secret/x" }));
    expect((await errorFor(bob, "b3")).payload.code).toBe("approver_lacks_capability");
    expect(runs).toHaveLength(0);
    // The card says who could still approve it: not bob.
    dave.send({ id: "d", kind: "mcp/approve", correlation_id: ["s1"], payload: { arguments: { path: "secret/x" } } });
    await waitFor(() => runs.length === 1, 5000, "dave's approval runs it");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "secret/x" });
  });

  it("asks the proposer's tool rules again with what runs: an edit its deny-with-when covers runs nothing", async () => {
    const { g, runs } = await start();
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const solo = await join(g, "solo");
    agent.send(propose("e1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "e1");
    alice.send({ id: "x", kind: "mcp/approve", correlation_id: ["e1"], payload: { arguments: { path: "etc/passwd" } } });
    const refused = await errorFor(alice, "x");
    expect(refused.payload.code).toBe("denied");
    expect(refused.payload.message).toMatch(/policy for "agent", who proposed it, denies this call/);
    expect((await api(g, "alice", "GET", "proposals/e1")).body).toMatchObject({ state: "pending", approvals: { count: 0 } });
    // A single-approval proposal: the same re-check on the only approval.
    solo.send(propose("e2", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "e2");
    alice.send({ id: "y", kind: "mcp/approve", correlation_id: ["e2"], payload: { arguments: { path: "b.txt" } } });
    await waitFor(() => runs.length === 1, 5000, "solo's edited call runs");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "b.txt" });
  });

  it("a reload that adds a deny with when: the now-denied call does not run when approved", async () => {
    const { g, runs } = await start();
    const solo = await join(g, "solo");
    const alice = await join(g, "alice");
    solo.send(propose("w1", { path: "tmp/x" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "w1");
    writeFileSync(
      pathJoin(g.dir, "space.yaml"),
      SPACE.replace(
        'tools: {ask: ["fs/write_file"]}',
        `tools: {deny: [{tool: "fs/write_file", when: "args.path.startsWith('tmp/')"}], ask: ["fs/write_file"]}`,
      ),
    );
    const reloaded = await api(g, "alice", "POST", "reload");
    expect(reloaded.status).toBe(200);
    const left = (await api(g, "alice", "GET", "proposals")).body.proposals.find((p: { id: string }) => p.id === "w1");
    if (left) {
      const r = await api(g, "alice", "POST", "proposals/w1/approve", {});
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe("denied");
    }
    expect(runs).toHaveLength(0);
  });

  it("edited arguments that break the tool's input schema approve nothing, over the wire, the API and a fulfilment; the error names the field", async () => {
    const { g, runs } = await start();
    const solo = await join(g, "solo");
    const alice = await join(g, "alice");
    solo.send(propose("v1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "v1");
    alice.send({ id: "w1", kind: "mcp/approve", correlation_id: ["v1"], payload: { arguments: { path: 5 } } });
    const wire = await errorFor(alice, "w1");
    expect(wire.payload).toMatchObject({ code: "invalid_payload", field: "arguments.path" });
    expect(wire.payload.message).toMatch(/arguments\.path must be a string/);
    // A prototype name is no declared parameter.
    alice.send({ id: "w2", kind: "mcp/approve", correlation_id: ["v1"], payload: { arguments: { path: "a", toString: "x" } } });
    expect((await errorFor(alice, "w2")).payload).toMatchObject({ code: "invalid_payload", field: "arguments.toString" });
    const viaApi = await api(g, "alice", "POST", "proposals/v1/approve", { arguments: { content: "x" } });
    expect(viaApi.status).toBe(400);
    expect(viaApi.body.error).toMatchObject({ code: "invalid_payload", field: "arguments.path" });
    expect(viaApi.body.error.message).toMatch(/arguments\.path is required/);
    alice.send(fulfil("w3", "v1", { path: ["a"] }));
    expect((await errorFor(alice, "w3")).payload).toMatchObject({ code: "invalid_payload", field: "arguments.path" });
    expect(runs).toHaveLength(0);
    expect((await api(g, "alice", "GET", "proposals/v1")).body.state).toBe("pending");
    const good = await api(g, "alice", "POST", "proposals/v1/approve", { arguments: { path: "b.txt", content: "hi" } });
    expect(good.status).toBe(200);
    await waitFor(() => runs.length === 1, 5000, "the fitting edit runs");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "b.txt", content: "hi" });
  });

  it("deeply nested or huge edited arguments get a clear refusal and the gateway keeps serving", async () => {
    const { g, runs } = await start();
    const solo = await join(g, "solo");
    const alice = await join(g, "alice");
    solo.send(propose("n1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "n1");
    const deep = `{"path": "a", "content": ${"[".repeat(5000)}${"]".repeat(5000)}}`;
    alice.ws.send(`{"id": "deep", "kind": "mcp/approve", "correlation_id": ["n1"], "payload": {"arguments": ${deep}}}`);
    const refused = await errorFor(alice, "deep");
    expect(refused.payload.code).toBe("too_deep");
    alice.send({ id: "big", kind: "mcp/approve", correlation_id: ["n1"], payload: { arguments: { path: "x".repeat(300_000) } } });
    expect(["quota_exceeded", "payload_too_large"]).toContain((await errorFor(alice, "big")).payload.code);
    expect(runs).toHaveLength(0);
    expect((await api(g, "alice", "GET", "proposals/n1")).body.state).toBe("pending");
    alice.send({ id: "ok", kind: "mcp/approve", correlation_id: ["n1"], payload: { arguments: { path: "b.txt" } } });
    await waitFor(() => runs.length === 1, 5000, "a fitting edit still runs");
  });

  it("a grant from one of two approvers is refused: the proposer's calls still wait for two", async () => {
    const { g, runs } = await start();
    const alice = await join(g, "alice");
    const agent = await join(g, "agent");
    const grant = { kind: "mcp/request", to: ["fs"], payload: { method: "tools/call", params: { name: "write_file" } } };
    alice.send({ id: "g1", kind: "capability/grant", to: ["agent"], payload: { recipient: "agent", capabilities: [grant] } });
    const refused = await errorFor(alice, "g1");
    expect(refused.payload.code).toBe("grant_exceeds_policy");
    expect(refused.payload.message).toMatch(/needs 2 distinct approvers for fs\/write_file/);
    // A broad grant covering the tool is refused too.
    alice.send({
      id: "g2",
      kind: "capability/grant",
      to: ["agent"],
      payload: { recipient: "agent", capabilities: [{ kind: "mcp/request", to: ["fs"] }] },
    });
    expect((await errorFor(alice, "g2")).payload.code).toBe("grant_exceeds_policy");
    expect((await api(g, "alice", "GET", "grants")).body.grants ?? []).toEqual([]);
    agent.send({
      id: "c1",
      kind: "mcp/request",
      to: ["fs"],
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "write_file", arguments: { path: "a" } } },
    });
    expect((await errorFor(agent, "c1")).payload.code).not.toBe(undefined);
    expect(runs).toHaveLength(0);
  });

  it("a chat tied to a proposal from a peer with chat rights only is an ordinary chat: it answers and withdraws nothing", async () => {
    const { g, runs } = await start();
    const peer = await join(g, "peer");
    const watcher = await join(g, "carol");
    const client = await ParticipantClient.connect({ url: g.url, space: "wr", token: TOKEN("solo") });
    sdk.push(client);
    const caller = new ToolCaller({ client, tool: () => undefined });
    client.on("envelope", (env) => {
      if (env.kind === "chat") caller.noteResponse(env);
    });
    const call = caller.callTool()("fs/write_file", { path: "a.txt" }, { callId: "c1", signal: new AbortController().signal });
    const held = await watcher.next((e) => e.kind === "mcp/proposal" && e.from === "solo");
    // The peer answers it, forging the gateway's mark too.
    peer.send({
      id: "p1",
      kind: "chat",
      to: ["solo"],
      correlation_id: [held.id],
      payload: { text: "never mind", "mewgate/respond": { proposal: held.id, by: "peer" } },
    });
    const seen = await watcher.next((e) => e.kind === "chat" && e.id === "p1");
    expect(seen.payload["mewgate/respond"]).toBeUndefined();
    await waitFor(
      async () => client.proposals.has(held.id) && (await api(g, "alice", "GET", `proposals/${held.id}`)).body.state === "pending",
      2000,
      "still pending",
    );
    // Carol (not of @ops) and the proposer itself may not decide it: the API refuses their Respond, naming why, and sends nothing.
    const refused = await api(g, "carol", "POST", `proposals/${held.id}/respond`, { text: "cancel it\u202e" });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe("not_an_approver");
    expect(refused.body.error.message).toContain("@ops");
    const own = await api(g, "solo", "POST", `proposals/${held.id}/respond`, { text: "I answer myself" });
    expect(own.status).toBe(403);
    expect(own.body.error.code).toBe("self_approval");
    // Dave may decide it: his Respond counts, and the model hears who answered.
    const said = await api(g, "dave", "POST", `proposals/${held.id}/respond`, { text: "use notes/ instead" });
    expect(said.status).toBe(200);
    const answer = await watcher.next((e) => e.kind === "chat" && e.from === "dave");
    expect(answer.payload["mewgate/respond"]).toEqual({ proposal: held.id, by: "dave" });
    expect(watcher.received.filter((e) => e.kind === "chat" && (e.from === "carol" || e.from === "solo"))).toEqual([]);
    const outcome = await call;
    expect(outcome).toMatchObject({ type: "error", code: "responded", by: "dave", message: "use notes/ instead" });
    expect(runs).toHaveLength(0);
  });
});

describe("what runs: quorum and schema, hostile", () => {
  it("a grant made before a quorum rule never makes the call direct", () => {
    const config = parseSpaceConfig(SPACE, { file: "space.yaml" });
    const registry = new Registry();
    registry.set("fs", TOOLS as never);
    const authority = new Authority(config, registry);
    const grants = authority.grants;
    const cap = { kind: "mcp/request", to: ["fs"], payload: { method: "tools/call", params: { name: "write_file" } } };
    // As if recorded before `approvals: 2` was added: alice's grant to agent, and to solo (no quorum).
    grants.apply({
      type: "grant",
      id: "g-agent",
      from: "alice",
      recipient: "agent",
      capabilities: [cap],
      reason: undefined,
      ts: new Date().toISOString(),
    } as never);
    grants.apply({
      type: "grant",
      id: "g-solo",
      from: "alice",
      recipient: "solo",
      capabilities: [cap],
      reason: undefined,
      ts: new Date().toISOString(),
    } as never);
    expect(authority.tool("agent", "fs", "write_file")).toBe("proposal");
    expect(authority.tool("solo", "fs", "write_file")).toBe("direct");
    expect(authority.quorumBypass("agent", [cap])).toMatch(/needs 2 distinct approvers/);
    expect(authority.quorumBypass("solo", [cap])).toBeUndefined();
  });

  it("the schema checker names the field and never takes a prototype name for a declared parameter", () => {
    const schema = TOOLS[0]!.inputSchema;
    const names = fc.constantFrom("constructor", "toString", "__proto__", "valueOf", "hasOwnProperty", "isPrototypeOf");
    fc.assert(
      fc.property(names, fc.jsonValue({ maxDepth: 2 }), (name, value) => {
        const args = JSON.parse(`{"path": "a", ${JSON.stringify(name)}: ${JSON.stringify(value ?? null)}}`) as Record<string, unknown>;
        expect(firstProblem(schema, args)).toEqual({
          field: `arguments.${name}`,
          message: `arguments.${name} is not a parameter of this tool`,
        });
        // Required by name: a prototype name is not present unless it is an own key.
        expect(firstProblem({ type: "object", required: [name] }, {})).toEqual({
          field: `arguments.${name}`,
          message: `arguments.${name} is required`,
        });
      }),
      { numRuns: 100 },
    );
    expect(
      firstProblem({ type: "object", properties: { a: { type: "array", items: { type: ["string", "null"] } } } }, { a: ["x", null, 3] }),
    ).toMatchObject({ field: "arguments.a[2]" });
    expect(firstProblem({ type: "object", properties: { m: { const: "x" } } }, { m: "y" })).toMatchObject({ field: "arguments.m" });
  });

  it("a decision link approves the edited arguments it showed; a link made before the edit is stale", async () => {
    const { g, runs } = await start();
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("l1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "l1");
    const sp = g.gateway.spaces.get("wr")!;
    const before = sp.aids.links.mint(sp.proposals.pending().find((p) => p.id === "l1")!, "dave");
    await firstEdit(agent, alice, "l1", { path: "b.txt" });
    expect((await api(g, "dave", "POST", "links/open", { link: before })).body.error.code).toBe("link_stale");
    const link = sp.aids.links.mint(sp.proposals.pending().find((p) => p.id === "l1")!, "dave");
    const open = await api(g, "dave", "POST", "links/open", { link });
    expect(open.body.proposal).toMatchObject({ arguments: { path: "b.txt" }, edited: { by: "alice" } });
    const decided = await api(g, "dave", "POST", "links/decide", { link, confirm: open.body.confirm, decision: "approve" });
    expect(decided.body).toMatchObject({ ok: true, state: "approved" });
    await waitFor(() => runs.length === 1, 5000, "the link's approval runs it");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "b.txt" });
  });
});

describe("what runs: every card shows it", () => {
  it("the API card, a welcome and a client's remembered proposal show the edited arguments and who edited them", async () => {
    const { g } = await start();
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const bob = await ParticipantClient.connect({ url: g.url, space: "wr", token: TOKEN("bob") });
    sdk.push(bob);
    agent.send(propose("c1", { path: "a.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "c1");
    await waitFor(() => bob.proposals.has("c1"), 5000, "bob sees the proposal");
    await firstEdit(agent, alice, "c1", { path: "b.txt" });
    const view = (await api(g, "bob", "GET", "proposals/c1")).body;
    expect(view).toMatchObject({ arguments: { path: "b.txt" }, proposedArguments: { path: "a.txt" }, edited: { by: "alice" } });
    expect(typeof view.edited.at).toBe("string");
    // The terminal draws from the client's remembered envelope: it follows the edit.
    await waitFor(
      () => (callShape(bob.proposals.get("c1")!).arguments as { path?: string }).path === "b.txt",
      5000,
      "the client's card follows the edit",
    );
    const dave = await join(g, "dave");
    const shown = ((dave.received.find((e) => e.kind === "system/welcome")!.payload.proposals as Env[]) ?? []).find((e) => e.id === "c1")!;
    expect(shown.payload["mewgate/edited"]).toMatchObject({ arguments: { path: "b.txt" }, by: "alice" });
    expect(callShape(shown as never).arguments).toEqual({ path: "b.txt" });
  });
});

describe("policy explain and test: groups and quorum", () => {
  it("explain resolves @ops to its members and says how many approvals; test checks approvals and @group approvers", async () => {
    const config = parseSpaceConfig(SPACE, { file: "space.yaml" });
    const e = offlineAuthority(config, { fs: [{ name: "write_file" }] }).explain("agent", "fs", "write_file", { path: "notes/a" });
    expect(e.decision).toBe("proposal");
    expect([...e.approvers].sort()).toEqual(["alice", "bob", "dave"]);
    expect(e.approvals).toBe(2);
    // Bob may not write secret/: he could not approve that one.
    expect(
      [
        ...offlineAuthority(config, { fs: [{ name: "write_file" }] }).explain("agent", "fs", "write_file", { path: "secret/a" }).approvers,
      ].sort(),
    ).toEqual(["alice", "dave"]);
    const g = await startGateway(SPACE);
    gateways.push(g);
    const cases = pathJoin(g.dir, "cases.yaml");
    writeFileSync(
      cases,
      `space: space.yaml
cases:
  - {caller: agent, tool: fs/write_file, args: {path: notes/a}, expect: ask, approvals: 2, approvers: ["@ops"]}
  - {caller: solo, tool: fs/write_file, args: {path: notes/a}, expect: ask, approvals: 1}
  - {caller: agent, tool: fs/write_file, args: {path: notes/a}, expect: ask, approvals: 1}
`,
    );
    const r = await cli(["policy", "test", cases]);
    expect(r.stdout).toMatch(/cases\.yaml:5:5: .*expected 1 approval\(s\), got 2/);
    expect(r.stdout).toMatch(/2 of 3 case\(s\) pass; 1 fail/);
    expect(r.status).toBe(1);
  });
});

function cli(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI_MAIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += String(d)));
    child.stderr.on("data", (d) => (stderr += String(d)));
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}
