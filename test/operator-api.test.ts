/**
 * The operator HTTP API against a real gateway: every route, who may do what, and that
 * acting through the API never disturbs the caller's live connection.
 */
import { afterEach, describe, expect, it } from "vitest";
import { sleep, startGateway, TestClient, toolOwner, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", lead: "lead-token-22", agent: "agent-token-3", fs: "fs-token-4444", viewer: "viewer-token-5" };

const SPACE = `
space: {id: ops}
policy: {proposal_ttl_ms: 60000}
participants:
  human: {kind: human, token: ${T.human}}
  lead: {kind: human, token: ${T.lead}, tools: {deny: ["fs/write_file"]}}
  viewer: {kind: agent, token: ${T.viewer}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["fs/write_file"]}}
  fs: {kind: mcp, token: ${T.fs}}
`;

const TOOLS = [
  {
    name: "write_file",
    description: "Write a file",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  },
];

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function api(
  token: string | undefined,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/ops/${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body ? { "content-type": "application/json" } : {}),
      ...headers,
    },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // A refusal before the API (403 from the origin check) is plain text.
  }
  return { status: res.status, body: parsed };
}

async function setup(): Promise<{ human: TestClient; agent: TestClient; fs: TestClient }> {
  gw = await startGateway(SPACE);
  const fs = await toolOwner(gw, "ops", T.fs, TOOLS);
  clients.push(fs);
  const human = await TestClient.join(gw, "ops", T.human);
  const agent = await TestClient.join(gw, "ops", T.agent);
  clients.push(human, agent);
  for (let i = 0; i < 100 && (await api(T.agent, "GET", "tools")).body.tools.length === 0; i++) await sleep(20);
  return { human, agent, fs };
}

const propose = (id: string, args: Record<string, unknown> = { path: "notes.txt" }) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: args } },
});

describe("authentication", () => {
  it("refuses no token, a wrong token, a token in the URL, and a page from another origin", async () => {
    await setup();
    const none = await api(undefined, "GET", "participants");
    expect(none.status).toBe(401);
    expect((await api("wrong-token-0000", "GET", "participants")).status).toBe(401);
    const inUrl = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/ops/participants?token=${T.human}`);
    expect(inUrl.status).toBe(401);
    expect((await api(T.human, "GET", "participants", undefined, { origin: "https://evil.example" })).status).toBe(403);
    expect((await api(T.human, "GET", "nonsense")).status).toBe(404);
    const unknownSpace = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/nope/participants`, {
      headers: { authorization: `Bearer ${T.human}` },
    });
    expect(unknownSpace.status).toBe(404);
  });
});

describe("reading", () => {
  it("lists participants with presence, tools with the caller's policy, and pending proposals in full with why they wait", async () => {
    const { human, agent } = await setup();
    const people = (await api(T.human, "GET", "participants")).body.participants;
    expect(people.find((p: any) => p.id === "agent")).toMatchObject({ kind: "agent", online: true });
    expect(people.find((p: any) => p.id === "lead")).toMatchObject({ online: false });
    expect((await api(T.agent, "GET", "tools")).body.tools[0]).toMatchObject({ name: "fs/write_file", policy: "proposal" });
    expect((await api(T.lead, "GET", "tools")).body.tools[0]).toMatchObject({ policy: "denied" });
    const long = "x".repeat(50_000);
    agent.send(propose("p1", { path: "big.txt", content: long }));
    await human.next((e) => e.id === "p1");
    const [p] = (await api(T.human, "GET", "proposals")).body.proposals;
    expect(p).toMatchObject({ id: "p1", proposer: "agent", tool: "fs/write_file", why: "an ask rule matches fs/write_file", mine: false });
    expect(p.arguments.content).toHaveLength(50_000);
    expect(p.inputSchema.required).toEqual(["path"]);
    expect((await api(T.human, "GET", "proposals/p1")).body.id).toBe("p1");
    expect((await api(T.human, "GET", "proposals/nope")).status).toBe(404);
  });
});

describe("deciding", () => {
  it("approves with edited arguments through the API without disturbing the human's live connection", async () => {
    const { human, agent, fs } = await setup();
    agent.send(propose("p2"));
    await human.next((e) => e.id === "p2");
    const r = await api(T.human, "POST", "proposals/p2/approve", { arguments: { path: "edited.txt" } });
    expect(r).toMatchObject({ status: 200, body: { ok: true, state: "approved" } });
    const call = await fs.next((e) => e.kind === "mcp/request" && e.payload?.method === "tools/call");
    expect(call.payload.params.arguments).toEqual({ path: "edited.txt" });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("p2") === true);
    // The human's terminal saw the approval like anyone else's, and is still connected.
    await human.next((e) => e.kind === "mcp/approve" && e.from === "human");
    expect(human.closeCode).toBeUndefined();
    human.send({ id: "still", kind: "chat", payload: { text: "still here" } });
    await agent.next((e) => e.id === "still");
    // Decided: a second decision is a conflict.
    expect((await api(T.human, "POST", "proposals/p2/reject", { reason: "late" })).status).toBe(409);
  });

  it("refuses what the caller may not do: its own proposal, a tool it may not call, a grant it did not make", async () => {
    const { human, agent } = await setup();
    agent.send(propose("p3"));
    await human.next((e) => e.id === "p3");
    // An agent may not approve at all (its capabilities), and nobody their own proposal.
    expect((await api(T.agent, "POST", "proposals/p3/approve", {})).body.error.code).toBe("capability_violation");
    human.send(propose("mine"));
    await agent.next((e) => e.id === "mine");
    const own = await api(T.human, "POST", "proposals/mine/approve", {});
    expect(own).toMatchObject({ status: 403, body: { error: { code: "self_approval" } } });
    const lacks = await api(T.lead, "POST", "proposals/p3/approve", {});
    expect(lacks).toMatchObject({ status: 403, body: { error: { code: "approver_lacks_capability" } } });
    expect((await api(T.human, "POST", "proposals/nope/approve", {})).status).toBe(404);
    expect((await api(T.human, "POST", "proposals/p3/approve", "not an object" as unknown as object)).status).toBe(400);

    // Always: a grant, listed, which the recipient may not revoke but the granter may.
    expect((await api(T.human, "POST", "proposals/p3/approve", { scope: "always" })).status).toBe(200);
    const [grant] = (await api(T.human, "GET", "grants")).body.grants as any[];
    expect(grant).toMatchObject({ from: "human", recipient: "agent", standing: true });
    expect((await api(T.viewer, "DELETE", `grants/${grant.id}`)).status).toBe(403);
    expect((await api(T.human, "DELETE", `grants/${grant.id}`)).status).toBe(200);
    expect((await api(T.human, "GET", "grants")).body.grants).toEqual([]);
    await agent.next((e) => e.kind === "capability/revoke");
  });

  it("rejects with a reason and text the proposer receives and the audit keeps; withdraws for the proposer only", async () => {
    const { human, agent } = await setup();
    agent.send(propose("p4"));
    agent.send(propose("p5"));
    await human.next((e) => e.id === "p5");
    expect((await api(T.human, "POST", "proposals/p4/reject", { reason: "unsafe", text: "not in /etc, please" })).status).toBe(200);
    const rejected = await agent.next((e) => e.kind === "mcp/reject");
    expect(rejected.payload).toMatchObject({ reason: "unsafe", text: "not in /etc, please" });
    expect((await api(T.human, "POST", "proposals/p5/withdraw", {})).body.error.code).toBe("not_proposer");
    expect((await api(T.agent, "POST", "proposals/p5/withdraw", { reason: "changed my mind" })).status).toBe(200);
    const audit = (await api(T.human, "GET", "audit?participant=agent")).body.entries as any[];
    expect(audit.find((e) => e.event === "rejected")).toMatchObject({ text: "not in /etc, please", by: "human" });
    const all = (await api(T.human, "GET", "proposals?state=all")).body;
    expect(all.past.map((e: any) => e.event)).toEqual(expect.arrayContaining(["rejected", "withdrawn"]));
  });
});

describe("chat and the event stream", () => {
  it("sends chat as the caller and streams what the caller may see", async () => {
    const { agent } = await setup();
    const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/ops/events`, { headers: { authorization: `Bearer ${T.human}` } });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const reader = res.body!.getReader();
    let text = "";
    const sent = await api(T.human, "POST", "chat", { text: "hello from the browser" });
    expect(sent.status).toBe(200);
    const chat = await agent.next((e) => e.kind === "chat" && e.from === "human");
    expect(chat.payload.text).toBe("hello from the browser");
    agent.send(propose("p6"));
    for (let i = 0; i < 50 && !text.includes('"id":"p6"'); i++) text += new TextDecoder().decode((await reader.read()).value);
    expect(text).toContain("event: hello");
    expect(text).toMatch(/event: envelope\ndata: \{[^\n]*"id":"p6"/);
    await reader.cancel();
    expect((await api(T.human, "POST", "chat", { text: "" })).status).toBe(400);
    // A chat the caller's capabilities do not allow is refused like on the wire.
    const viewer = await api(T.fs, "POST", "chat", { text: "hi" });
    expect(viewer.body.error.code).toBe("capability_violation");
  });
});
