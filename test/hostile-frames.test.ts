/**
 * Frames a hostile participant sends to stop the gateway, lock others out or slip past
 * policy (issue 23's first findings), against the real gateway over real sockets:
 * - payloads nested 100, 1,000 and 100,000 deep, of every kind, sent alone and while they
 *   wait in the sender's backlog behind a proposal's write (that path once crashed Node);
 * - a deeply nested stream/request, which once stayed registered and broke every welcome;
 * - an invite whose puppet called what its inviter's policy denies.
 */
import { afterEach, describe, expect, it } from "vitest";
import { ROUTES } from "../gateway/space/kinds.js";
import { errorFor, startGateway, TestClient, toolOwner, type Env, type TestGateway } from "./helpers.js";

const T = {
  human: "human-token-0001",
  agent: "agent-token-0002",
  lead: "lead-token-00003",
  tools: "tools-token-0004",
  late: "late-token-000005",
};

const SPACE = `
space: {id: hostile}
participants:
  human: {kind: human, token: ${T.human}}
  late: {kind: human, token: ${T.late}}
  agent: {kind: agent, token: ${T.agent}}
  lead:
    kind: agent
    token: ${T.lead}
    capabilities: [{kind: chat}, {kind: mcp/request}, {kind: space/invite}]
    tools:
      deny: [tools/danger]
      ask: [tools/risky]
      allow: [tools/safe]
  tools: {kind: mcp, token: ${T.tools}}
`;

const TOOLS = ["safe", "risky", "danger"].map((name) => ({ name, description: `${name} tool`, inputSchema: { type: "object" } }));

/** `n` arrays, each inside the next: [[[ ... ]]]. Built from text: a 100,000-deep value cannot be serialized. */
function nestedJson(n: number): string {
  return "[".repeat(n) + "]".repeat(n);
}

/** Every kind the gateway routes (its table, so a kind added there is tried here too), and a kind nobody handles. */
const KINDS = [...ROUTES.keys(), "game/move"];

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
async function join(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "hostile", token);
  clients.push(c);
  return c;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

/** The space still works for everyone else: a chat goes round, and a newcomer gets a welcome. */
async function stillServing(human: TestClient, agent: TestClient, tag: string): Promise<void> {
  agent.send({ id: `alive-${tag}`, kind: "chat", payload: { text: `alive ${tag}` } });
  await human.next((e) => e.id === `alive-${tag}`);
  const late = await join(T.late);
  expect(late.received[0]?.kind).toBe("system/welcome");
  late.ws.terminate();
}

describe("frames nested too deep", () => {
  it("refuses every kind nested 100, 1,000 and 100,000 deep with too_deep, alone and from the backlog, and keeps serving", {
    timeout: 60_000,
  }, async () => {
    gw = await startGateway(SPACE);
    const human = await join(T.human);
    const owner = await toolOwner(gw, "hostile", T.tools, TOOLS);
    clients.push(owner);
    const agent = await join(T.agent);
    let n = 0;
    for (const depth of [100, 1_000, 100_000]) {
      for (const kind of KINDS) {
        for (const behindAWrite of [false, true]) {
          const id = `deep-${n++}`;
          if (behindAWrite) {
            // A proposal makes the agent's later frames wait for its write: they are handled from the backlog.
            agent.send({
              id: `${id}-p`,
              kind: "mcp/proposal",
              to: ["tools"],
              payload: { method: "tools/call", params: { name: "risky", arguments: {} } },
            });
          }
          agent.send(
            `{"id":"${id}","kind":"${kind}","to":["human"],"payload":{"method":"tools/call","params":{"name":"safe","arguments":{"x":${nestedJson(depth)}}},"participant_id":"x","recipient":"human","capabilities":${nestedJson(depth)}}}`,
          );
          const err = await errorFor(agent, id);
          expect(err.payload.code, `${kind} at ${depth}`).toBe("too_deep");
          expect(err.payload.message).toContain("gateway.limits.max_depth");
        }
      }
      await stillServing(human, agent, String(depth));
    }
    // Nothing of those frames reached anyone.
    expect(human.received.filter((e) => e.id?.startsWith("deep-") && !e.id.endsWith("-p"))).toEqual([]);
    expect(owner.received.filter((e) => e.kind === "mcp/request" && e.payload?.method === "tools/call")).toEqual([]);
  });

  it("delivers a frame exactly at the limit and refuses one a level deeper", async () => {
    gw = await startGateway(SPACE.replace("space: {id: hostile}", "space: {id: hostile}\ngateway: {limits: {max_depth: 16}}"));
    const human = await join(T.human);
    const agent = await join(T.agent);
    // The frame is 1, its payload 2, and the payload's field holds 14 more: 16 in all.
    agent.send(`{"id":"at","kind":"chat","payload":{"text":"deep","x":${nestedJson(14)}}}`);
    const got = await human.next((e) => e.id === "at");
    expect(JSON.stringify(got.payload.x)).toBe(nestedJson(14));
    agent.send(`{"id":"over","kind":"chat","payload":{"text":"deep","x":${nestedJson(15)}}}`);
    expect((await errorFor(agent, "over")).payload.code).toBe("too_deep");
  });

  it("answers a deeply nested operator API body with 400, not a crash", async () => {
    gw = await startGateway(SPACE);
    const human = await join(T.human);
    for (const path of ["/api/spaces/hostile/chat", "/participants/human/messages?space=hostile"]) {
      const res = await fetch(`http://127.0.0.1:${gw.port}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${T.human}`, "content-type": "application/json" },
        body: `{"kind":"chat","text":"x","payload":{"x":${nestedJson(50_000)}}}`,
      });
      expect(res.status, path).toBe(400);
      expect(await res.text()).toContain("deep");
    }
    const late = await join(T.late);
    expect(late.received[0]?.kind).toBe("system/welcome");
    expect(human.ws.readyState).toBe(human.ws.OPEN);
  });
});

describe("a stream request that cannot be announced", () => {
  it("is refused before it is registered, so every later joiner still gets in", async () => {
    gw = await startGateway(SPACE);
    const agent = await join(T.agent);
    // A person may open streams by default; the hostile sender here is one.
    const human = await join(T.human);
    human.send(`{"id":"s1","kind":"stream/request","to":["gateway"],"payload":{"direction":"upload","description":${nestedJson(10_000)}}}`);
    expect((await errorFor(human, "s1")).payload.code).toBe("too_deep");
    const late = await join(T.late);
    const welcome = late.received[0]!;
    expect(welcome.kind).toBe("system/welcome");
    expect(welcome.payload.active_streams ?? []).toEqual([]);
    // A well-formed request still opens a stream that newcomers are told of.
    human.send({ id: "s2", kind: "stream/request", to: ["gateway"], payload: { direction: "upload", description: "logs" } });
    await human.next((e) => e.kind === "stream/open");
    const later = TestClient.connect(gw, "space=hostile", { authorization: `Bearer ${T.late}` });
    clients.push(later);
    const w2 = await later.next((e) => e.kind === "system/welcome");
    expect(JSON.stringify(w2.payload)).toContain("logs");
    expect(agent.ws.readyState).toBe(agent.ws.OPEN);
  });
});

describe("an invited participant", () => {
  it("calls only what its inviter may call directly: an invite cannot launder a denied or asked tool", { timeout: 20_000 }, async () => {
    gw = await startGateway(SPACE);
    const calls: string[] = [];
    const owner = await toolOwner(gw, "hostile", T.tools, TOOLS, {
      onCall: (env: Env, reply) => {
        calls.push(env.payload.params.name as string);
        reply({ content: [{ type: "text", text: "done" }] });
      },
    });
    clients.push(owner);
    const lead = await join(T.lead);

    // Naming the denied tool in the invite is refused as a grant of it would be.
    lead.send({
      id: "i0",
      kind: "space/invite",
      payload: {
        participant_id: "puppet0",
        initial_capabilities: [{ kind: "mcp/request", to: ["tools"], payload: { method: "tools/call", params: { name: "danger" } } }],
      },
    });
    expect((await errorFor(lead, "i0")).payload).toMatchObject({ code: "grant_exceeds_policy" });

    // A wide capability is accepted, and holds the puppet to the inviter's policy at use.
    lead.send({ id: "i1", kind: "space/invite", payload: { participant_id: "puppet", initial_capabilities: [{ kind: "mcp/request" }] } });
    const ack = await lead.next((e) => e.kind === "space/invite-ack");
    const puppet = await join(ack.payload.token as string);
    const call = (id: string, name: string) =>
      puppet.send({
        id,
        kind: "mcp/request",
        to: ["tools"],
        payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: {} } },
      });

    call("c-danger", "danger");
    expect((await errorFor(puppet, "c-danger")).payload.code).toBe("denied");
    call("c-risky", "risky");
    const risky = await puppet.next(
      (e) => e.correlation_id?.includes("c-risky") === true && (e.kind === "system/error" || e.kind === "mcp/response"),
    );
    expect(risky.kind).toBe("system/error");
    call("c-safe", "safe");
    const safe = await puppet.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("c-safe") === true);
    expect(safe.payload.result).toBeDefined();
    expect(calls).toEqual(["safe"]);
  });
});
