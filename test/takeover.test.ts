/**
 * Interactive delegation (takeover): an agent asked for a person talks with them directly
 * until it calls complete(result), which answers the call it was asked with. Real agents,
 * a real gateway, loopback model servers. Hostile first: who may take over, for whom, on
 * what call; then takeover and complete, nesting three deep with the person's messages at
 * the top, "stop" unwinding it all, and an idle conversation unwinding by itself.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { formatEnvelope, PLAIN } from "../cli/terminal/format.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { startAgent, type AgentHandle } from "../participants/agent/index.js";
import { ParticipantClient } from "../participants/client.js";
import { ModelServer, openaiReply, type Reply, openaiAgentBlock, openaiToolCall } from "./fixtures/agent/model-server.js";
import { errorFor, startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

let gw: TestGateway | undefined;
const agents: AgentHandle[] = [];
const servers: ModelServer[] = [];
const raw: TestClient[] = [];
const clients: ParticipantClient[] = [];
afterEach(async () => {
  await Promise.all(agents.splice(0).map((a) => a.stop()));
  await Promise.all(clients.splice(0).map((c) => c.close()));
  for (const c of raw.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

const token = (id: string) => `${id}-token-0123`;
const call = openaiToolCall;
const text = (env: Envelope) => (env.payload as { text: string }).text;
async function model(...replies: Reply[]): Promise<ModelServer> {
  const s = await new ModelServer().reply(...replies).start();
  servers.push(s);
  return s;
}
const openai = openaiAgentBlock;
async function agent(space: string, id: string): Promise<AgentHandle> {
  const h = await startAgent({
    id,
    config: gw!.gateway.spaces.get(space)!.config.participants[id]!.agent!,
    client: { url: gw!.url, space, token: token(id), reconnect: false },
    env: {},
  });
  agents.push(h);
  return h;
}
async function person(space: string, id = "alice"): Promise<{ c: ParticipantClient; seen: Envelope[] }> {
  const c = new ParticipantClient({ url: gw!.url, space, token: token(id), reconnect: false });
  clients.push(c);
  const seen: Envelope[] = [];
  c.on("envelope", (e) => seen.push(e));
  await c.connect();
  return { c, seen };
}
const holders = (seen: Envelope[]) =>
  seen.filter((e) => e.kind === "space/conversation").map((e) => (e.payload as { holder: string | null }).holder);
const lastUser = (m: ModelServer, i: number) =>
  (m.requests[i]!.body.messages as Array<{ role: string; content: string }>).filter((x) => x.role === "user").at(-1)?.content;

describe("who may take a conversation over", () => {
  it("refuses an agent not allowed for that person, a call it is not serving, and a caller the person is not talking with", async () => {
    gw = await startGateway(`
space: {id: tk}
participants:
  alice: {kind: human, token: ${token("alice")}}
  bob: {kind: human, token: ${token("bob")}}
  stranger: {kind: agent, token: ${token("stranger")}, capabilities: [{kind: "*"}]}
  helper: {kind: mcp, token: ${token("helper")}, capabilities: [{kind: "*"}], agent: {takeover: ["alice"]}}
`);
    const stranger = await TestClient.join(gw, "tk", token("stranger"));
    raw.push(stranger);
    const held: Array<{ env: Envelope }> = [];
    const helper = await toolOwner(gw, "tk", token("helper"), [{ name: "ask", inputSchema: { type: "object" } }], {
      onCall: (env) => held.push({ env: env as unknown as Envelope }),
    });
    raw.push(helper);
    stranger.send({ id: "t0", kind: "space/takeover", payload: { human: "alice", call: "nope" } });
    expect((await errorFor(stranger, "t0")).payload.error).toBe("no_pending_call");
    // bob calls helper; helper may hold alice's conversation, but bob is not alice and not who she talks with.
    const bob = await TestClient.join(gw, "tk", token("bob"));
    raw.push(bob);
    bob.send({
      id: "c1",
      kind: "mcp/request",
      to: ["helper"],
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ask", arguments: {} } },
    });
    await waitFor(() => held.length === 1, 3000, "the call");
    helper.send({ id: "t1", kind: "space/takeover", payload: { human: "bob", call: held[0]!.env.id } });
    expect((await errorFor(helper, "t1")).payload.message).toMatch(/may not take over bob's conversation/);
    helper.send({ id: "t2", kind: "space/takeover", payload: { human: "alice", call: held[0]!.env.id } });
    expect((await errorFor(helper, "t2")).payload.message).toMatch(/only alice or the agent alice is talking with/);
    helper.send({ id: "t3", kind: "space/takeover", payload: { human: "stranger", call: held[0]!.env.id } });
    expect((await errorFor(helper, "t3")).payload.error).toBe("unknown_recipient");
    // Chatting at alice unasked does not make the stranger someone she talks with.
    stranger.send({ kind: "chat", to: ["alice"], payload: { text: "hello alice" } });
    stranger.send({
      id: "c2",
      kind: "mcp/request",
      to: ["helper"],
      payload: { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "ask", arguments: {} } },
    });
    await waitFor(() => held.length === 2, 3000, "the stranger's call");
    helper.send({ id: "t4", kind: "space/takeover", payload: { human: "alice", call: held[1]!.env.id } });
    expect((await errorFor(helper, "t4")).payload.message).toMatch(/only alice or the agent alice is talking with/);
  });
});

const SPACE = (main: ModelServer, planner: ModelServer, researcher: ModelServer, extra = "") => `
space: {id: trip}
calls: {takeover_idle_ms: ${extra ? 600 : 600000}}
participants:
  alice: {kind: human, token: ${token("alice")}}
  bob: {kind: human, token: ${token("bob")}}
  main: {kind: agent, token: ${token("main")}, tools: {allow: ["planner/ask"]}, agent: ${openai(main, "primary: true")}}
  planner: {kind: agent, token: ${token("planner")}, tools: {allow: ["researcher/ask"]}, agent: ${openai(planner, "offer: {interactive: true}, takeover: [alice]")}}
  researcher: {kind: agent, token: ${token("researcher")}, agent: ${openai(researcher, 'offer: {interactive: true}, takeover: ["*"]')}}
`;

async function start(m: ModelServer, p: ModelServer, r: ModelServer, idle = false): Promise<{ c: ParticipantClient; seen: Envelope[] }> {
  gw = await startGateway(SPACE(m, p, r, idle ? "idle" : ""));
  const alice = await person("trip");
  await agent("trip", "researcher");
  await agent("trip", "planner");
  await waitFor(async () => (await alice.c.listTools()).some((t) => t.name === "planner/ask"), 5000, "planner/ask");
  await waitFor(async () => (await alice.c.listTools()).some((t) => t.name === "researcher/ask"), 5000, "researcher/ask");
  await agent("trip", "main");
  return alice;
}
const chatFrom = (seen: Envelope[], who: string, n = 1) =>
  waitFor(() => seen.filter((e) => e.kind === "chat" && e.from === who).length >= n, 10_000, `${n} chat(s) from ${who}`);

describe("interactive delegation", () => {
  it("hands the person to the planner until it completes; the answer returns to main as its tool's result", {
    timeout: 30_000,
  }, async () => {
    const m = await model(
      openaiReply({ tool_calls: [call("a1", "planner__ask", { message: "plan the trip" })] }),
      openaiReply({ content: "Trip planned: budget 100." }),
    );
    const p = await model(
      openaiReply({ content: "What is your budget?" }),
      openaiReply({ tool_calls: [call("c1", "complete", { result: "budget 100\nConfidence: high" })] }),
    );
    const r = await model();
    const alice = await start(m, p, r);
    alice.c.send({ kind: "chat", payload: { text: "plan my trip" } });
    await chatFrom(alice.seen, "planner");
    expect(holders(alice.seen)).toEqual(["planner"]);
    expect(text(alice.seen.find((e) => e.kind === "chat" && e.from === "planner")!)).toBe("What is your budget?");
    // The console reads the same from the operator API; a late joiner from its welcome.
    const api = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/trip/conversations`, {
      headers: { authorization: `Bearer ${token("alice")}` },
    });
    expect(((await api.json()) as { conversations: unknown[] }).conversations).toEqual([
      { human: "alice", holder: "planner", stack: [expect.objectContaining({ agent: "planner", caller: "main" })] },
    ]);
    const late = await TestClient.join(gw!, "trip", token("bob"));
    raw.push(late);
    expect(late.received.find((e) => e.kind === "system/welcome")!.payload.conversations).toEqual([
      expect.objectContaining({ human: "alice", holder: "planner" }),
    ]);
    // Untargeted, as people talk: it goes to the planner, not to main.
    alice.c.send({ kind: "chat", payload: { text: "100" } });
    await waitFor(
      () => alice.seen.some((e) => e.kind === "chat" && e.from === "main" && text(e) === "Trip planned: budget 100."),
      10_000,
      "main's answer",
    );
    expect(holders(alice.seen)).toEqual(["planner", null]);
    expect(lastUser(p, 1)).toBe("alice: 100");
    expect(m.requests).toHaveLength(2);
    const toolResult = (m.requests[1]!.body.messages as Array<{ role: string; content: string }>).find((x) => x.role === "tool");
    expect(toolResult?.content).toBe("budget 100\n(status success, confidence high)");
  });

  it('nests three deep with the person at the top, and "stop" unwinds it all', { timeout: 30_000 }, async () => {
    const m = await model(
      openaiReply({ tool_calls: [call("a1", "planner__ask", { message: "plan the trip" })] }),
      openaiReply({ content: "All right, stopped." }),
    );
    const p = await model(openaiReply({ tool_calls: [call("p1", "researcher__ask", { message: "find flights" })] }));
    const r = await model(openaiReply({ content: "Which city?" }), openaiReply({ content: "Morning or evening?" }));
    const alice = await start(m, p, r);
    alice.c.send({ kind: "chat", payload: { text: "plan my trip" } });
    await chatFrom(alice.seen, "researcher");
    expect(holders(alice.seen)).toEqual(["planner", "researcher"]);
    const stacked = alice.seen.filter((e) => e.kind === "space/conversation").at(-1)!.payload as {
      stack: Array<{ agent: string; caller: string }>;
    };
    expect(stacked.stack.map((f) => `${f.caller}→${f.agent}`)).toEqual(["main→planner", "planner→researcher"]);
    alice.c.send({ kind: "chat", payload: { text: "Paris" } });
    await chatFrom(alice.seen, "researcher", 2);
    expect(lastUser(r, 1)).toBe("alice: Paris");
    expect(p.requests).toHaveLength(1);
    alice.c.send({ kind: "chat", payload: { text: "stop" } });
    await waitFor(
      () => alice.seen.some((e) => e.kind === "chat" && e.from === "main" && text(e) === "All right, stopped."),
      10_000,
      "main to hear it stopped",
    );
    expect(holders(alice.seen).at(-1)).toBeNull();
    const toolResult = (m.requests[1]!.body.messages as Array<{ role: string; content: string }>).find((x) => x.role === "tool");
    expect(toolResult?.content).toMatch(/unwound: alice said "stop"/);
    // The researcher never heard "stop" as a message.
    expect(r.requests).toHaveLength(2);
    // The terminal says who holds the conversation, and how to end it.
    const view = { me: "alice", width: 120, style: PLAIN, calls: new Map(), proposals: new Set<string>() };
    const nested = alice.seen.filter((e) => e.kind === "space/conversation")[1]!;
    expect(formatEnvelope(nested, view)).toEqual([
      `* researcher now holds alice's conversation (planner → researcher); say "stop" to end it`,
    ]);
  });

  it("unwinds a conversation nobody speaks in for takeover_idle_ms", { timeout: 30_000 }, async () => {
    const m = await model(
      openaiReply({ tool_calls: [call("a1", "planner__ask", { message: "plan the trip" })] }),
      openaiReply({ content: "Let me know when you are back." }),
    );
    const p = await model(openaiReply({ content: "What is your budget?" }));
    const r = await model();
    const alice = await start(m, p, r, true);
    alice.c.send({ kind: "chat", payload: { text: "plan my trip" } });
    await chatFrom(alice.seen, "planner");
    await waitFor(
      () => alice.seen.some((e) => e.kind === "chat" && e.from === "main" && text(e) === "Let me know when you are back."),
      10_000,
      "main after the idle unwind",
    );
    expect(holders(alice.seen)).toEqual(["planner", null]);
    const toolResult = (m.requests[1]!.body.messages as Array<{ role: string; content: string }>).find((x) => x.role === "tool");
    expect(toolResult?.content).toMatch(/nobody spoke for 1 s/);
  });

  it("survives a restart of the gateway in the middle of a takeover: the stack, the call and the person's next message", {
    timeout: 40_000,
  }, async () => {
    const m = await model(
      openaiReply({ tool_calls: [call("a1", "planner__ask", { message: "plan the trip" })] }),
      openaiReply({ content: "Trip planned: budget 100." }),
    );
    const p = await model(
      openaiReply({ content: "What is your budget?" }),
      openaiReply({ tool_calls: [call("c1", "complete", { result: "budget 100" })] }),
    );
    const r = await model();
    const dir = mkdtempSync(join(tmpdir(), "mewgate-takeover-"));
    try {
      const yaml = SPACE(m, p, r);
      gw = await startGateway(yaml, { dir });
      const port = gw.port;
      const again = { initialDelayMs: 50, maxDelayMs: 200, maxAttempts: 100 };
      const c = new ParticipantClient({ url: gw.url, space: "trip", token: token("alice"), reconnect: again });
      clients.push(c);
      const seen: Envelope[] = [];
      c.on("envelope", (e) => seen.push(e));
      await c.connect();
      const start = async (id: string) => {
        const h = await startAgent({
          id,
          config: gw!.gateway.spaces.get("trip")!.config.participants[id]!.agent!,
          client: { url: gw!.url, space: "trip", token: token(id), reconnect: again },
          env: {},
        });
        agents.push(h);
      };
      await start("researcher");
      await start("planner");
      await waitFor(async () => (await c.listTools()).some((t) => t.name === "planner/ask"), 5000, "planner/ask");
      await start("main");
      c.send({ kind: "chat", payload: { text: "plan my trip" } });
      await chatFrom(seen, "planner");

      // The gateway goes away and comes back on the same address and state.
      await gw.stop();
      gw = await startGateway(yaml, { dir, port });
      await waitFor(() => c.status === "open" && c.welcome?.reconnected === true, 10_000, "alice to be back");
      const welcome = c.welcome!.envelope.payload as { conversations?: Array<{ holder: string }> };
      expect(welcome.conversations?.[0]?.holder).toBe("planner");
      await waitFor(
        () =>
          gw!.gateway.spaces
            .get("trip")!
            .participantsView()
            .filter((x) => x["online"]).length === 4,
        10_000,
        "everyone back",
      );

      c.send({ kind: "chat", payload: { text: "100" } });
      await waitFor(
        () => seen.some((e) => e.kind === "chat" && e.from === "main" && text(e) === "Trip planned: budget 100."),
        10_000,
        "main's answer after the restart",
      );
      expect(lastUser(p, 1)).toBe("alice: 100");
      const toolResult = (m.requests[1]!.body.messages as Array<{ role: string; content: string }>).find((x) => x.role === "tool");
      expect(toolResult?.content).toBe("budget 100\n(status success, confidence medium)");
      expect(holders(seen).at(-1)).toBeNull();
    } finally {
      await gw?.stop();
      gw = undefined;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("survives a restart of the holder: the gateway keeps its call, and it takes the conversation up again from the history", {
    timeout: 30_000,
  }, async () => {
    const m = await model(
      openaiReply({ tool_calls: [call("a1", "planner__ask", { message: "plan the trip" })] }),
      openaiReply({ content: "Trip planned: budget 100." }),
    );
    const p = await model(
      openaiReply({ content: "What is your budget?" }),
      openaiReply({ tool_calls: [call("c1", "complete", { result: "budget 100" })] }),
    );
    const r = await model();
    gw = await startGateway(SPACE(m, p, r));
    const alice = await person("trip");
    await agent("trip", "researcher");
    const config = gw.gateway.spaces.get("trip")!.config.participants["planner"]!.agent!;
    const first = new ParticipantClient({ url: gw.url, space: "trip", token: token("planner"), reconnect: false });
    const planner1 = await startAgent({ id: "planner", config, client: first, env: {} });
    await waitFor(async () => (await alice.c.listTools()).some((t) => t.name === "planner/ask"), 5000, "planner/ask");
    await agent("trip", "main");
    alice.c.send({ kind: "chat", payload: { text: "plan my trip" } });
    await chatFrom(alice.seen, "planner");

    // The planner's process dies mid-conversation: its connection drops, no answer is sent.
    await first.close("crash");
    await planner1.closed;
    await new Promise((r) => setTimeout(r, 200));
    expect(holders(alice.seen).at(-1)).toBe("planner");
    // A new planner process joins and takes the conversation up where it was: waiting for alice.
    await agent("trip", "planner");
    alice.c.send({ kind: "chat", payload: { text: "100" } });
    await waitFor(
      () => alice.seen.some((e) => e.kind === "chat" && e.from === "main" && text(e) === "Trip planned: budget 100."),
      10_000,
      "main's answer after the planner restarted",
    );
    const resumed = p.requests[1]!.body.messages as Array<{ role: string; content: string }>;
    expect(resumed.map((x) => `${x.role}: ${x.content}`).slice(1)).toEqual([
      "user: main: a task for alice. You were holding alice's conversation and restarted; what was said since you took it over follows.",
      "assistant: What is your budget?",
      "user: alice: 100",
    ]);
    expect(holders(alice.seen).at(-1)).toBeNull();
  });
});
