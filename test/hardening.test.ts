/**
 * Hostile participants against the policy decision point, grants, cancellation,
 * fulfilments, quotas and the welcome. Each test first reproduces an attack that worked
 * on the first wave, then checks the safe outcome.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  askGateway,
  errorFor,
  responseFor,
  sleep,
  startGateway,
  TestClient,
  toolCall as call,
  toolOwner,
  type Env,
  type TestGateway,
  waitFor,
} from "./helpers.js";

const T = {
  human: "human-token-1",
  lead: "lead-token-22",
  agent: "agent-token-3",
  other: "other-token-4",
  narrow: "narrow-token-5",
  helper: "helper-token-6",
  fs: "fs-token-77777",
  b: "b-token-888888",
};

const NARROW = `[{kind: chat}, {kind: capability/grant}, {kind: capability/revoke}, {kind: mcp/proposal}, {kind: mcp/response}, {kind: mcp/request, payload: {method: "notifications/*"}}]`;

const SPACE = (extra = "") => `
space: {id: hard}
policy: {proposal_ttl_ms: 60000}
calls: {timeout_ms: 3000}
participants:
  human: {kind: human, token: ${T.human}}
  lead: {kind: human, token: ${T.lead}, tools: {deny: ["fs/delete"]}}
  agent:
    kind: agent
    token: ${T.agent}
    tools: {allow: ["fs/list_*", "b/*"], ask: ["fs/write_file"], deny: ["fs/delete"]}
  other: {kind: agent, token: ${T.other}, tools: {allow: ["fs/list_*"]}}
  narrow: {kind: agent, token: ${T.narrow}, capabilities: ${NARROW}}
  helper: {kind: agent, token: ${T.helper}, capabilities: ${NARROW}}
  fs: {kind: mcp, token: ${T.fs}}
  b: {kind: mcp, token: ${T.b}, tools: {allow: ["fs/*"]}}
${extra}`;

const TOOLS = [
  { name: "write_file", description: "Write a file", inputSchema: { type: "object" } },
  { name: "list_dir", description: "List a directory", inputSchema: { type: "object" } },
  { name: "delete", description: "Delete a file", inputSchema: { type: "object" } },
];

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function join(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "hard", token);
  clients.push(c);
  return c;
}

async function owner(token: string, opts: Parameters<typeof toolOwner>[4] & { tools?: unknown[] } = {}): Promise<TestClient> {
  const c = await toolOwner(gw!, "hard", token, opts.tools ?? TOOLS, opts);
  clients.push(c);
  return c;
}

/** Every tool in the catalogue as `c` sees it, following tools/list cursors. */
async function allTools(c: TestClient): Promise<Array<{ name: string }>> {
  const tools: Array<{ name: string }> = [];
  let cursor: string | undefined;
  for (let page = 0; page < 100; page++) {
    const res = await askGateway(c, "tools/list", cursor ? { cursor } : {});
    tools.push(...res.payload.result.tools);
    cursor = res.payload.result.nextCursor;
    if (!cursor) break;
  }
  return tools;
}

async function waitForTools(c: TestClient, n: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if ((await allTools(c)).length >= n) return;
    await sleep(20);
  }
  throw new Error(`the registry never reached ${n} tools`);
}

const toolCap = (owner: string, tool: string) => ({
  kind: "mcp/request",
  to: [owner],
  payload: { method: "tools/call", params: { name: tool } },
});

/** Whether `c` received a tools/call (or anything) with envelope id `id`. */
const got = (c: TestClient, id: string) => c.received.some((e) => e.id === id);

describe("one policy decision point", () => {
  it("puts an mcp/request without a JSON-RPC id through policy, and answers it as a request when allowed", async () => {
    gw = await startGateway(SPACE());
    const fs = await owner(T.fs);
    const agent = await join(T.agent);
    await waitForTools(agent, 3);
    const idless = (id: string, name: string) => ({
      id,
      kind: "mcp/request",
      to: ["fs"],
      payload: { jsonrpc: "2.0", method: "tools/call", params: { name } },
    });

    // The attack: on the first wave these were "notifications" and reached the tool.
    agent.send(idless("n-deny", "delete"));
    agent.send(idless("n-ask", "write_file"));
    expect((await errorFor(agent, "n-deny")).payload.code).toBe("denied");
    expect((await errorFor(agent, "n-ask")).payload.code).toBe("proposal_required");

    // Allowed: routed as a request, the envelope id standing in for the JSON-RPC id.
    agent.send(idless("n-ok", "list_dir"));
    const routed = await fs.next((e) => e.id === "n-ok");
    expect(routed.payload.id).toBe("n-ok");
    const res = await responseFor(agent, "n-ok");
    expect(res.payload.result.content[0].text).toContain("list_dir");

    // Neither id: there is nothing to answer, so it is refused, not routed.
    agent.send({ kind: "mcp/request", to: ["fs"], payload: { jsonrpc: "2.0", method: "tools/call", params: { name: "list_dir" } } });
    const err = await agent.next((e) => e.kind === "system/error" && e.payload.code === "invalid_envelope");
    expect(err.payload.message).toContain("is a request");
    await sleep(50);
    expect(got(fs, "n-deny") || got(fs, "n-ask")).toBe(false);
    expect(fs.received.filter((e) => e.kind === "mcp/request" && e.payload.method === "tools/call")).toHaveLength(1);
  });

  it("holds a grant to its granter's own policy, at grant time and at the time of use", async () => {
    gw = await startGateway(SPACE());
    const fs = await owner(T.fs);
    const lead = await join(T.lead);
    const narrow = await join(T.narrow);
    await waitForTools(lead, 3);

    // The attack: lend a tool your own deny forbids you.
    lead.send({ id: "g-deny", kind: "capability/grant", payload: { recipient: "narrow", capabilities: [toolCap("fs", "delete")] } });
    const refused = await errorFor(lead, "g-deny");
    expect(refused.payload.code).toBe("grant_exceeds_policy");

    // A wide grant is checked tool by tool when used: the denied tool stays out of reach.
    lead.send({
      id: "g-wide",
      kind: "capability/grant",
      payload: { recipient: "narrow", capabilities: [{ kind: "mcp/request", to: ["fs"], payload: { method: "tools/call" } }] },
    });
    await narrow.next((e) => e.kind === "system/welcome" && e.id !== narrow.received[0]!.id);
    narrow.send(call("use-delete", "fs", "delete"));
    expect((await errorFor(narrow, "use-delete")).payload.code).toBe("proposal_required");
    narrow.send(call("use-write", "fs", "write_file", { path: "a" }));
    await responseFor(narrow, "use-write");
    expect(got(fs, "use-delete")).toBe(false);
    expect(got(fs, "use-write")).toBe(true);
  });

  it("takes down the grants lent on from a revoked one, and they stay down after a restart", async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-hard-"));
    gw = await startGateway(SPACE(), { dir });
    await owner(T.fs);
    const human = await join(T.human);
    const narrow = await join(T.narrow);
    const helper = await join(T.helper);
    await waitForTools(human, 3);

    human.send({ id: "g1", kind: "capability/grant", payload: { recipient: "narrow", capabilities: [toolCap("fs", "write_file")] } });
    await narrow.next((e) => e.id === "g1");
    narrow.send({ id: "g2", kind: "capability/grant", payload: { recipient: "helper", capabilities: [toolCap("fs", "write_file")] } });
    await helper.next((e) => e.id === "g2");
    helper.send(call("before", "fs", "write_file"));
    await responseFor(helper, "before");

    human.send({ id: "r1", kind: "capability/revoke", payload: { recipient: "narrow", grant_id: "g1" } });
    const fell = await helper.next((e) => e.kind === "capability/revoke" && e.from === "system:gateway");
    expect(fell.payload).toMatchObject({ recipient: "helper", grant_id: "g2" });
    expect(fell.payload.reason).toContain("r1");
    helper.send(call("after", "fs", "write_file"));
    expect((await errorFor(helper, "after")).payload.code).toBe("proposal_required");
    // narrow cannot lend it again, having lost it.
    narrow.send({ id: "g3", kind: "capability/grant", payload: { recipient: "helper", capabilities: [toolCap("fs", "write_file")] } });
    expect((await errorFor(narrow, "g3")).payload.code).toBe("grant_exceeds_held");

    const port = gw.port;
    for (const c of clients.splice(0)) c.ws.terminate();
    await gw.stop();
    gw = await startGateway(SPACE(), { dir, port });
    await owner(T.fs);
    const helper2 = await join(T.helper);
    await waitForTools(helper2, 3);
    helper2.send(call("restarted", "fs", "write_file"));
    expect((await errorFor(helper2, "restarted")).payload.code).toBe("proposal_required");
    rmSync(dir, { recursive: true, force: true });
  });

  it("refuses a fulfilment that names another tool than its proposal", async () => {
    gw = await startGateway(SPACE());
    const fs = await owner(T.fs);
    const human = await join(T.human);
    const agent = await join(T.agent);
    await waitForTools(agent, 3);
    agent.send({
      id: "p1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "notes.txt" } } },
    });
    await human.next((e) => e.id === "p1");

    // The attack: "fulfil" the harmless proposal with a different, destructive call.
    human.send(call("f-bad", "fs", "delete", { path: "/" }, { correlation_id: ["p1"] }));
    const err = await errorFor(human, "f-bad");
    expect(err.payload.code).toBe("fulfilment_mismatch");
    expect(err.payload.message).toContain("fs/write_file");
    await sleep(50);
    expect(got(fs, "f-bad")).toBe(false);

    // The proposal is still pending and a proper fulfilment goes through.
    human.send(call("f-ok", "fs", "write_file", { path: "notes.txt" }, { correlation_id: ["p1"] }));
    const res = await responseFor(agent, "p1");
    expect(res.payload.result.content[0].text).toContain("write_file");
  });
});

describe("cancellation", () => {
  it("cancels the caller's own call through system:gateway, and nobody else's", async () => {
    gw = await startGateway(SPACE());
    const held: Env[] = [];
    const fs = await owner(T.fs, { onCall: (env) => held.push(env) });
    const agent = await join(T.agent);
    const other = await join(T.other);
    await waitForTools(agent, 3);
    agent.send({
      id: "c1",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", id: "c1", method: "tools/call", params: { name: "fs/list_dir" } },
    });
    await fs.next((e) => e.id === "c1");

    // The attack: cancel someone else's call, through the gateway or directly.
    other.send({
      id: "x1",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "c1" } },
    });
    other.send({
      id: "x2",
      kind: "mcp/request",
      to: ["fs"],
      correlation_id: ["c1"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "c1" } },
    });
    expect((await errorFor(other, "x1")).payload.code).toBe("not_caller");
    expect((await errorFor(other, "x2")).payload.code).toBe("not_caller");
    await sleep(50);
    expect(fs.received.some((e) => e.payload?.method === "notifications/cancelled")).toBe(false);

    // The caller's own cancellation reaches the target, and the call is over.
    agent.send({
      id: "k1",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "c1", reason: "changed my mind" } },
    });
    const cancelled = await fs.next((e) => e.payload?.method === "notifications/cancelled");
    expect(cancelled.payload.params).toMatchObject({ requestId: "c1" });
    fs.send({ kind: "mcp/response", correlation_id: ["c1"], payload: { jsonrpc: "2.0", id: "c1", result: {} } });
    expect((await fs.next((e) => e.kind === "system/error")).payload.code).toBe("no_pending_call");
    expect(held).toHaveLength(1);
  });

  it("withdraws a proposal the gateway made for a call the caller then cancels", async () => {
    gw = await startGateway(SPACE());
    await owner(T.fs);
    const human = await join(T.human);
    const agent = await join(T.agent);
    await waitForTools(agent, 3);
    agent.send({
      id: "w1",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "fs/write_file", arguments: { path: "a" } } },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "w1");
    agent.send({
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 7 } },
    });
    const withdrawn = await human.next((e) => e.kind === "mcp/withdraw" && e.correlation_id?.includes("w1") === true);
    expect(withdrawn.payload.reason).toBe("cancelled");
    human.send({ id: "late", kind: "mcp/approve", correlation_id: ["w1"], payload: {} });
    expect((await errorFor(human, "late")).payload.code).toBe("proposal_not_pending");
  });

  it("propagates a cancellation down a delegation chain, ending every call in it", async () => {
    gw = await startGateway(SPACE());
    const fs = await owner(T.fs, { onCall: () => {} });
    // b serves "work" by calling fs/list_dir, correlated to the call it serves.
    const b = await owner(T.b, {
      tools: [{ name: "work", inputSchema: { type: "object" } }],
      onCall: (env) => b.send(call("sub", "fs", "list_dir", {}, { correlation_id: [env.id] })),
    });
    const agent = await join(T.agent);
    await waitForTools(agent, 4);
    agent.send(call("top", "b", "work"));
    await fs.next((e) => e.id === "sub");

    agent.send({
      kind: "mcp/request",
      to: ["b"],
      correlation_id: ["top"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "top" } },
    });
    const atB = await b.next((e) => e.payload?.method === "notifications/cancelled");
    expect(atB.from).toBe("agent");
    const subEnded = await b.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("sub") === true);
    expect(subEnded.payload.error.data.reason).toBe("cancelled");
    const atFs = await fs.next((e) => e.payload?.method === "notifications/cancelled");
    expect(atFs.payload.params.requestId).toBe("sub");
  });
});

describe("quotas", () => {
  it("refuses calls and proposals over the argument quota, naming it", async () => {
    gw = await startGateway(SPACE("quotas: {argument_bytes: 2048}"));
    const fs = await owner(T.fs);
    const agent = await join(T.agent);
    await waitForTools(agent, 3);
    const big = { data: "x".repeat(4000) };
    agent.send(call("big-call", "fs", "list_dir", big));
    agent.send({
      id: "big-prop",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: big } },
    });
    for (const id of ["big-call", "big-prop"]) {
      const err = await errorFor(agent, id);
      expect(err.payload).toMatchObject({ code: "quota_exceeded", quota: "argument_bytes", limit: 2048 });
    }
    await sleep(50);
    expect(got(fs, "big-call")).toBe(false);
  });

  it("bounds pending proposal bytes per participant and pending proposals per space, and others do not notice", async () => {
    gw = await startGateway(SPACE("quotas: {pending_bytes: 3000, space_pending_proposals: 3}"));
    await owner(T.fs);
    const human = await join(T.human);
    const agent = await join(T.agent);
    const narrow = await join(T.narrow);
    await waitForTools(agent, 3);
    const prop = (id: string, size: number) => ({
      id,
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { d: "y".repeat(size) } } },
    });
    agent.send(prop("a1", 1200));
    agent.send(prop("a2", 1200));
    agent.send(prop("a3", 1200));
    expect((await errorFor(agent, "a3")).payload.quota).toBe("pending_bytes");
    // Another participant is not affected by agent's bytes ...
    narrow.send(prop("n1", 100));
    await human.next((e) => e.id === "n1");
    // ... but the space as a whole is full now.
    narrow.send(prop("n2", 100));
    const full = await errorFor(narrow, "n2");
    expect(full.payload.quota).toBe("space_pending_proposals");
    expect(full.payload.message).toContain("the space");
  });

  it("bounds the grants one participant may make", async () => {
    gw = await startGateway(SPACE("quotas: {grants: 1}"));
    const human = await join(T.human);
    await join(T.narrow);
    human.send({ id: "q1", kind: "capability/grant", payload: { recipient: "narrow", capabilities: [{ kind: "chat/x" }] } });
    await human.next((e) => e.kind === "system/error" || e.id === "q1", 1000).catch(() => undefined);
    human.send({ id: "q2", kind: "capability/grant", payload: { recipient: "narrow", capabilities: [{ kind: "chat/y" }] } });
    expect((await errorFor(human, "q2")).payload).toMatchObject({ code: "quota_exceeded", quota: "grants" });
  });
});

describe("a welcome that always fits", () => {
  it("lets a joiner in past large pending proposals and a large catalogue, and pages the rest", async () => {
    const FRAME = 65_536;
    gw = await startGateway(SPACE(`gateway: {limits: {max_payload_bytes: ${FRAME}}}`));
    const tools = Array.from({ length: 300 }, (_, i) => ({
      name: `tool_${i}`,
      description: "d".repeat(1000),
      inputSchema: { type: "object" },
    }));
    await owner(T.fs, { tools: [...TOOLS, ...tools], pageSize: 30 });
    const agent = await join(T.agent);
    await waitForTools(agent, 303);
    for (let i = 0; i < 6; i++) {
      agent.send({
        id: `big-${i}`,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { d: "z".repeat(40_000) } } },
      });
    }
    const errors = () => agent.received.filter((e) => e.kind === "system/error");
    // Until all six are written (on a busy machine that takes more than a moment), or one is refused.
    const space = gw.gateway.spaces.get("hard")!;
    await waitFor(() => space.proposals.pending().length === 6 || errors().length > 0, 10_000, "six proposals written");
    expect(errors()).toEqual([]);

    // The human who would reject them gets in, with a welcome under the frame limit.
    const sizes: number[] = [];
    const human = TestClient.connect(gw, "space=hard", { authorization: `Bearer ${T.human}` });
    clients.push(human);
    human.ws.on("message", (data: Buffer) => sizes.push(data.length));
    const welcome = await human.next((e) => e.kind === "system/welcome");
    expect(human.closeCode).toBeUndefined();
    expect(sizes[0]).toBeLessThanOrEqual(FRAME);
    expect(welcome.payload.proposals).toHaveLength(6);
    const elided = welcome.payload.proposals[0].payload.params.arguments["mewgate/elided"];
    expect(elided.fetch.method).toBe("proposals/get");
    expect(welcome.payload.tools_cursor).toEqual(expect.any(String));
    expect(welcome.payload.tools.length).toBeLessThan(303);

    // The rest: every tool through tools/list pages, each page a frame, and a proposal in full.
    const names = new Set<string>(welcome.payload.tools.map((t: { name: string }) => t.name));
    let cursor: string | undefined = welcome.payload.tools_cursor;
    for (let i = 0; cursor && i < 50; i++) {
      const page = await askGateway(human, "tools/list", { cursor });
      for (const t of page.payload.result.tools) names.add(t.name);
      cursor = page.payload.result.nextCursor;
    }
    expect(names.size).toBe(303);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(FRAME);
    const full = await askGateway(human, "proposals/get", elided.fetch.params);
    expect(full.payload.result.proposal.payload.params.arguments.d).toHaveLength(40_000);
    const listedPage = await askGateway(human, "proposals/list");
    expect(listedPage.payload.result.total).toBe(6);
    const bad = await askGateway(human, "tools/list", { cursor: "not-ours" });
    expect(bad.payload.error.code).toBe(-32602);
  });
});
