/**
 * Callbacks: an MCP server asks its caller something while serving its call — a form
 * (elicitation), a completion (sampling), its roots — and the space routes it to whoever
 * can answer: the MCP client of `mewgate mcp`, an agent's model, the operator's list.
 * Hostile first: only the target of a pending call may ask, only its caller, only so many
 * times; a call waiting on its caller does not time out; cancelling the call ends the
 * question.
 */
import { createRequire } from "node:module";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startAgent, type AgentHandle } from "../participants/agent/index.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { ModelServer, openaiReply } from "./fixtures/agent/model-server.js";
import {
  errorFor,
  responseFor,
  sleep,
  startGateway,
  TestClient,
  toolCall,
  toolOwner,
  waitFor,
  type Env,
  type TestGateway,
} from "./helpers.js";

const EVERYTHING = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js");
const T = {
  c: "c-token-000007",
  a: "a-token-000001",
  b: "b-token-000002",
  alice: "alice-token-03",
  bob: "bob-token-0004",
  bot: "bot-token-0005",
  fs: "fs-token-00006",
};

let gw: TestGateway | undefined;
const raw: TestClient[] = [];
const bridges: Bridge[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c().catch(() => {});
  for (const b of bridges.splice(0)) await b.stop();
  for (const c of raw.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

const ECHO = { name: "slow", description: "answers when it likes", inputSchema: { type: "object" } };

/** `a` calls `b/slow`; `b` holds each call until the test answers it. */
async function pair(yamlExtra = ""): Promise<{ a: TestClient; b: TestClient; alice: TestClient; c: TestClient; calls: Env[] }> {
  gw = await startGateway(`
space: {id: cb}
calls: {timeout_ms: 400}
participants:
  a: {kind: service, token: ${T.a}, tools: {allow: ["b/*"]}}
  b: {kind: mcp, token: ${T.b}}
  alice: {kind: human, token: ${T.alice}}
  c: {kind: service, token: ${T.c}}
${yamlExtra}`);
  const calls: Env[] = [];
  const b = await toolOwner(gw, "cb", T.b, [ECHO], { onCall: (env) => calls.push(env) });
  const a = await TestClient.join(gw, "cb", T.a);
  const alice = await TestClient.join(gw, "cb", T.alice);
  const c = await TestClient.join(gw, "cb", T.c);
  raw.push(a, b, alice, c);
  return { a, b, alice, c, calls };
}

const elicit = (id: string, to: string, correlation: string[] | undefined, message = "Your name?") => ({
  id,
  kind: "mcp/request",
  to: [to],
  ...(correlation ? { correlation_id: correlation } : {}),
  payload: {
    jsonrpc: "2.0",
    id,
    method: "elicitation/create",
    params: {
      message,
      requestedSchema: { type: "object", properties: { name: { type: "string" } } },
      _meta: { "mewgate/timeout_ms": 5000 },
    },
  },
});

/** A tools/call through the gateway that may take 20 s. */
const longCall = (id: string) => ({
  id,
  kind: "mcp/request",
  to: ["system:gateway"],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "b/slow", arguments: {}, _meta: { "mewgate/timeout_ms": 20_000 } } },
});

const answer = (c: TestClient, req: Env, result: unknown) =>
  c.send({ kind: "mcp/response", to: [req.from], correlation_id: [req.id], payload: { jsonrpc: "2.0", id: req.payload.id, result } });

describe("callbacks: hostile first", () => {
  it("lets only the target of a pending call ask its caller, and only while the call is pending", async () => {
    const { a, b, alice, c, calls } = await pair();
    // Nobody is serving anybody yet: a question to a is a request b may not send.
    b.send(elicit("e0", "a", undefined));
    expect((await errorFor(b, "e0")).payload.error).toBe("capability_violation");
    a.send(toolCall("c1", "system:gateway", "b/slow"));
    await waitFor(() => calls.length === 1, 3000, "b to be called");
    const call = calls[0]!;
    // Correlated to a's call, but asking alice (not the caller): refused.
    b.send(elicit("e1", "alice", [call.id]));
    expect((await errorFor(b, "e1")).payload.error).toBe("capability_violation");
    // c names a's call as if it served it: it does not.
    c.send(elicit("e2", "a", [call.id]));
    expect((await errorFor(c, "e2")).payload.error).toBe("capability_violation");
    // The callee back to its caller, correlated to the call: delivered, and a's answer reaches b.
    b.send(elicit("e3", "a", [call.id], "\u001b[2J who are you?"));
    const asked = await a.next((e) => e.kind === "mcp/request" && e.id === "e3");
    expect(asked.from).toBe("b");
    answer(a, asked, { action: "accept", content: { name: "A" } });
    expect((await responseFor(b, "e3")).payload.result).toEqual({ action: "accept", content: { name: "A" } });
    // Someone else may not answer it: only its target may.
    b.send(elicit("e4", "a", [call.id]));
    const again = await a.next((e) => e.kind === "mcp/request" && e.id === "e4");
    alice.send({
      kind: "mcp/response",
      correlation_id: [again.id],
      payload: { jsonrpc: "2.0", id: again.payload.id, result: { action: "decline" } },
    });
    expect((await alice.next((e) => e.kind === "system/error" && e.payload.error === "forged_response")).payload.error).toBe(
      "forged_response",
    );
    answer(a, again, { action: "decline" });
    await responseFor(b, "e4");
    // Once the call is answered, the door is shut again.
    b.send({
      kind: "mcp/response",
      to: ["a"],
      correlation_id: [call.id],
      payload: { jsonrpc: "2.0", id: call.payload.id, result: { content: [] } },
    });
    await responseFor(a, "c1");
    b.send(elicit("e5", "a", [call.id]));
    expect((await errorFor(b, "e5")).payload.error).toBe("capability_violation");
  });

  it("stops the clock of a call while its caller answers a callback, and not otherwise", async () => {
    const { a, b, calls } = await pair();
    // Without a callback, the 400 ms call timeout holds.
    a.send(toolCall("late", "system:gateway", "b/slow"));
    const timedOut = await responseFor(a, "late");
    expect(timedOut.payload.error.data.reason).toBe("timeout");
    a.send(toolCall("held", "system:gateway", "b/slow"));
    await waitFor(() => calls.length === 2, 3000, "the second call");
    const call = calls[1]!;
    b.send(elicit("q", "a", [call.id]));
    const asked = await a.next((e) => e.kind === "mcp/request" && e.id === "q");
    // a takes twice the call timeout to answer: the call waits with it.
    await sleep(900);
    expect(
      a.received.filter((e) => e.kind === "mcp/response" && e.correlation_id?.includes("held")).map((e) => JSON.stringify(e.payload)),
    ).toEqual([]);
    answer(a, asked, { action: "accept", content: { name: "slowly" } });
    await responseFor(b, "q");
    b.send({
      kind: "mcp/response",
      correlation_id: [call.id],
      payload: { jsonrpc: "2.0", id: call.payload.id, result: { content: [{ type: "text", text: "done" }] } },
    });
    expect((await responseFor(a, "held")).payload.result.content[0].text).toBe("done");
  });

  it("ends the callback when the caller cancels the call, and bounds how many one call may make", async () => {
    const { a, b, calls } = await pair();
    a.send(longCall("c1"));
    await waitFor(() => calls.length === 1, 3000, "b to be called");
    const call = calls[0]!;
    for (let i = 0; i < 64; i++) {
      b.send(elicit(`q${i}`, "a", [call.id]));
      const asked = await a.next((e) => e.kind === "mcp/request" && e.id === `q${i}`);
      answer(a, asked, { action: "decline" });
      await responseFor(b, `q${i}`);
    }
    b.send(elicit("q64", "a", [call.id]));
    const refused = await errorFor(b, "q64");
    expect(refused.payload.error).toBe("too_many_pending");
    expect(refused.payload.message).toMatch(/64 requests back to its caller/);
    // A fresh call may ask again; cancelling it ends the question at both ends.
    a.send(longCall("c2"));
    await waitFor(() => calls.length === 2, 3000, "the second call");
    b.send(elicit("open", "a", [calls[1]!.id]));
    await a.next((e) => e.kind === "mcp/request" && e.id === "open");
    a.send({
      kind: "mcp/request",
      to: ["system:gateway"],
      correlation_id: ["c2"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "c2", reason: "never mind" } },
    });
    const ended = await responseFor(b, "open");
    expect(ended.payload.error.data.reason).toBe("cancelled");
    await a.next(
      (e) => e.kind === "mcp/request" && e.payload.method === "notifications/cancelled" && e.correlation_id?.includes("open") === true,
    );
  });
});

/** An SDK client of the space over /mcp as `who`, with the client capabilities given. */
async function mcpClient(who: string, capabilities: Record<string, unknown>): Promise<Client> {
  const client = new Client({ name: "callbacks-test", version: "1.0.0" }, { capabilities });
  const token = T[who as keyof typeof T];
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw!.port}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  closers.push(() => client.close());
  return client;
}

async function everything(space: string, mcp: Record<string, unknown> = {}): Promise<void> {
  const s = gw!.gateway.spaces.get(space)!;
  const server = { command: process.execPath, args: [EVERYTHING, "stdio"], ...mcp } as never;
  bridges.push(await startBridge({ id: "fs", server, client: { transport: () => connectInProcess(s, "fs"), reconnect: false } }));
}

const SPACE = (fsExtra = "", extra = "") => `
space: {id: ev}
participants:
  alice: {kind: human, token: ${T.alice}, tools: {allow: ["fs/*"], ask: ["fs/echo"]}}
  bob: {kind: human, token: ${T.bob}}
  fs: {kind: mcp, token: ${T.fs}${fsExtra}}
${extra}`;

describe("callbacks from server-everything", () => {
  it("puts the server's form to the MCP client that called the tool, and returns its answer", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE());
    mountHttp(gw.gateway);
    await everything("ev");
    const client = await mcpClient("alice", { elicitation: {} });
    const asked: Array<{ message: string; schema: unknown }> = [];
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      const p = request.params as { message: string; requestedSchema: unknown };
      asked.push({ message: p.message, schema: p.requestedSchema });
      return { action: "accept", content: { name: "Ada Lovelace", check: true, integer: 7 } };
    });
    await waitFor(
      async () => (await client.listTools()).tools.some((t) => t.name === "fs__trigger-elicitation-request"),
      8000,
      "the elicitation tool",
    );
    const result = await client.callTool({ name: "fs__trigger-elicitation-request", arguments: {} });
    const text = (result.content as Array<{ text: string }>).map((c) => c.text).join("\n");
    expect(text).toMatch(/Ada Lovelace/);
    expect(asked).toHaveLength(1);
    expect(asked[0]!.message).toBe("fs asks (fs/trigger-elicitation-request): Please provide inputs for the following fields:");
    // A URL flow: the client gets the URL and says whether the person went; nothing opens by itself.
    const url = await mcpClient("alice", { elicitation: { form: {}, url: {} } });
    const urls: string[] = [];
    url.setRequestHandler(ElicitRequestSchema, async (request) => {
      const p = request.params as { mode?: string; url?: string };
      urls.push(`${p.mode}:${p.url}`);
      return { action: "accept" };
    });
    await waitFor(async () => (await url.listTools()).tools.some((t) => t.name === "fs__trigger-url-elicitation"), 8000, "the URL tool");
    const went = await url.callTool({ name: "fs__trigger-url-elicitation", arguments: { url: "https://example.test/consent" } });
    expect(went.isError).toBeFalsy();
    expect(urls).toEqual(["url:https://example.test/consent"]);
    // The error path (-32042, URL elicitation required) reaches the client as the server's own JSON-RPC error.
    const required = await url
      .callTool({ name: "fs__trigger-url-elicitation", arguments: { url: "https://example.test/consent", errorPath: true } })
      .then(
        (r) => r,
        (err: { code?: number; data?: { elicitations?: unknown[] } }) => err,
      );
    expect((required as { code?: number }).code).toBe(-32042);
    expect((required as { data?: { elicitations?: unknown[] } }).data?.elicitations).toHaveLength(1);
    // A client that cannot fill in forms gets an error result, not a hang.
    const plain = await mcpClient("alice", {});
    const refused = await plain.callTool({ name: "fs__trigger-elicitation-request", arguments: {} });
    expect(refused.isError).toBe(true);
    expect(JSON.stringify(refused.content)).toMatch(/does not support elicitation/);
  });

  it("has the calling agent's model answer the server's sampling request, without tools", { timeout: 30_000 }, async () => {
    const model = await new ModelServer()
      .reply(
        openaiReply({
          tool_calls: [
            {
              id: "t1",
              type: "function",
              function: {
                name: "fs__trigger-sampling-request",
                arguments: JSON.stringify({ prompt: "a haiku about gateways", maxTokens: 60 }),
              },
            },
          ],
        }),
        openaiReply({ content: "Frames pass through the gate" }),
        openaiReply({ content: "The server got its haiku." }),
      )
      .start();
    closers.push(() => model.stop());
    gw = await startGateway(
      SPACE(
        "",
        `  bot: {kind: agent, token: ${T.bot}, tools: {allow: ["fs/*"]}, agent: {provider: openai, model: test-model, base_url: "${model.url}/v1"}}`,
      ),
    );
    await everything("ev");
    const bot: AgentHandle = await startAgent({
      id: "bot",
      config: gw.gateway.spaces.get("ev")!.config.participants["bot"]!.agent!,
      client: { url: gw.url, space: "ev", token: T.bot, reconnect: false },
      env: {},
    });
    closers.push(() => bot.stop());
    const alice = await TestClient.join(gw, "ev", T.alice);
    raw.push(alice);
    // The bridge's tools are in the registry before anyone asks the agent.
    await waitFor(
      () => gw!.gateway.spaces.get("ev")!.registry.resolve("fs/trigger-sampling-request") !== undefined,
      8000,
      "the sampling tool",
    );
    alice.send({ id: "hi", kind: "chat", to: ["bot"], payload: { text: "@bot ask the server for a haiku" } });
    const reply = await alice.next((e) => e.kind === "chat" && e.from === "bot", 15_000);
    expect(reply.payload.text).toBe("The server got its haiku.");
    expect(model.requests).toHaveLength(3);
    const sampling = model.requests[1]!.body as {
      messages: Array<{ role: string; content: string }>;
      tools?: unknown[];
      max_tokens?: number;
    };
    expect(sampling.messages[0]).toMatchObject({ role: "system", content: "You are a helpful test server." });
    expect(sampling.messages.some((m) => m.role === "user" && m.content.includes("a haiku about gateways"))).toBe(true);
    expect(sampling.tools ?? []).toHaveLength(0);
    const toolResult = (model.requests[2]!.body as { messages: Array<{ role: string; content: string }> }).messages.find(
      (m) => m.role === "tool",
    );
    expect(toolResult?.content).toMatch(/Frames pass through the gate/);
  });

  it("passes a server's form up a delegation: MCP client → bot/ask → the bot's tool → back to the MCP client", {
    timeout: 30_000,
  }, async () => {
    const model = await new ModelServer()
      .reply(
        openaiReply({
          tool_calls: [{ id: "t1", type: "function", function: { name: "fs__trigger-elicitation-request", arguments: "{}" } }],
        }),
        openaiReply({ content: "Alice says her name is Grace." }),
      )
      .start();
    closers.push(() => model.stop());
    gw = await startGateway(
      SPACE(
        "",
        `  bot: {kind: agent, token: ${T.bot}, tools: {allow: ["fs/*"]}, agent: {provider: openai, model: test-model, base_url: "${model.url}/v1", offer: {}}}`,
      ).replace(`tools: {allow: ["fs/*"], ask: ["fs/echo"]}`, `tools: {allow: ["fs/*", "bot/*"], ask: ["fs/echo"]}`),
    );
    mountHttp(gw.gateway);
    await everything("ev");
    const bot = await startAgent({
      id: "bot",
      config: gw.gateway.spaces.get("ev")!.config.participants["bot"]!.agent!,
      client: { url: gw.url, space: "ev", token: T.bot, reconnect: false },
      env: {},
    });
    closers.push(() => bot.stop());
    await waitFor(
      () => gw!.gateway.spaces.get("ev")!.registry.resolve("fs/trigger-elicitation-request") !== undefined,
      8000,
      "the elicitation tool",
    );
    const client = await mcpClient("alice", { elicitation: {} });
    const asked: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push((request.params as { message: string }).message);
      return { action: "accept", content: { name: "Grace Hopper" } };
    });
    await waitFor(async () => (await client.listTools()).tools.some((t) => t.name === "bot__ask"), 8000, "bot/ask");
    const result = await client.callTool({ name: "bot__ask", arguments: { message: "ask me my name through the server" } });
    expect(JSON.stringify(result)).toMatch(/Grace\./);
    // Who asks is who sent it (the bot relays it); the tool it is about, as context.
    expect(asked).toEqual(["bot asks (fs/trigger-elicitation-request): Please provide inputs for the following fields:"]);
    // The bot's model saw the server's result, with the name the MCP client gave.
    const toolResult = (model.requests[1]!.body as { messages: Array<{ role: string; content: string }> }).messages.find(
      (m) => m.role === "tool",
    );
    expect(toolResult?.content).toMatch(/Grace Hopper/);
  });

  it("refuses a sampling request to an agent that lends its model to no server (agent.sampling: false)", { timeout: 30_000 }, async () => {
    const model = await new ModelServer()
      .reply(
        openaiReply({ tool_calls: [{ id: "t1", type: "function", function: { name: "b__slow", arguments: "{}" } }] }),
        openaiReply({ content: "done" }),
      )
      .start();
    closers.push(() => model.stop());
    gw = await startGateway(`
space: {id: cb}
participants:
  alice: {kind: human, token: ${T.alice}}
  b: {kind: mcp, token: ${T.b}}
  bot: {kind: agent, token: ${T.bot}, tools: {allow: ["b/*"]}, agent: {provider: openai, model: test-model, base_url: "${model.url}/v1", sampling: false}}
`);
    const calls: Env[] = [];
    const b = await toolOwner(gw, "cb", T.b, [ECHO], { onCall: (env) => calls.push(env) });
    const alice = await TestClient.join(gw, "cb", T.alice);
    raw.push(b, alice);
    const bot = await startAgent({
      id: "bot",
      config: gw.gateway.spaces.get("cb")!.config.participants["bot"]!.agent!,
      client: { url: gw.url, space: "cb", token: T.bot, reconnect: false },
      env: {},
    });
    closers.push(() => bot.stop());
    alice.send({ kind: "chat", to: ["bot"], payload: { text: "go" } });
    await waitFor(() => calls.length === 1, 5000, "bot's call");
    b.send({
      id: "s1",
      kind: "mcp/request",
      to: ["bot"],
      correlation_id: [calls[0]!.id],
      payload: {
        jsonrpc: "2.0",
        id: "s1",
        method: "sampling/createMessage",
        params: { messages: [{ role: "user", content: { type: "text", text: "hi" } }], maxTokens: 10 },
      },
    });
    const refused = await responseFor(b, "s1");
    expect(refused.payload.error).toMatchObject({ code: -32601, message: expect.stringMatching(/lends its model to no tool server/) });
    expect(model.requests).toHaveLength(1);
  });

  it("tells the server the roots space.yaml lists, or those of the participant it names", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE(`, mcp: {command: node, roots: {from: alice}}`));
    mountHttp(gw.gateway);
    const fsConfig = gw.gateway.spaces.get("ev")!.config.participants["fs"]!.mcp!;
    expect(fsConfig.roots).toEqual({ from: "alice" });
    await everything("ev", { roots: fsConfig.roots });
    const client = await mcpClient("alice", { roots: { listChanged: true } });
    client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///srv/project", name: "project" }] }));
    await waitFor(async () => (await client.listTools()).tools.some((t) => t.name === "fs__get-roots-list"), 8000, "the roots tool");
    const listed = await client.callTool({ name: "fs__get-roots-list", arguments: {} });
    expect(JSON.stringify(listed.content)).toMatch(/file:\/\/\/srv\/project/);
    await bridges.pop()!.stop();
    // A fixed list, from space.yaml; no participant is asked.
    await everything("ev", { roots: ["file:///data/a", { uri: "file:///data/b", name: "b" }] });
    let fixed: unknown;
    await waitFor(
      async () => {
        fixed = await client.callTool({ name: "fs__get-roots-list", arguments: {} }).catch(() => undefined);
        return fixed !== undefined && !(fixed as { isError?: boolean }).isError;
      },
      8000,
      "the restarted server's roots tool",
    );
    expect(JSON.stringify(fixed)).toMatch(/file:\/\/\/data\/a/);
    expect(JSON.stringify(fixed)).not.toMatch(/srv\/project/);
    expect(JSON.stringify(fixed)).toMatch(/file:\/\/\/data\/b/);
  });

  it("passes resource updates to the MCP session that subscribed, and tells it of approvals in its log", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE());
    mountHttp(gw.gateway);
    await everything("ev");
    const client = await mcpClient("alice", {});
    expect(client.getServerCapabilities()).toMatchObject({ resources: { subscribe: true, listChanged: true }, logging: {} });
    const updates: string[] = [];
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => void updates.push(n.params.uri));
    const logs: string[] = [];
    client.setNotificationHandler(
      LoggingMessageNotificationSchema,
      async (n) => void logs.push(`${n.params.level}:${JSON.stringify(n.params.data)}`),
    );
    const { resources } = await client.listResources();
    const uri = resources[0]!.uri;
    await client.subscribeResource({ uri });
    await client.callTool({ name: "fs__toggle-subscriber-updates", arguments: {} });
    await waitFor(() => updates.includes(uri), 8000, "a resource update");
    await client.unsubscribeResource({ uri });
    // A call that waits for bob: the client hears it waits, and who approved it.
    const bob = await TestClient.join(gw, "ev", T.bob);
    raw.push(bob);
    await client.setLoggingLevel("info");
    const call = client.callTool({ name: "fs__echo", arguments: { message: "hello" } });
    const proposal = await bob.next((e) => e.kind === "mcp/proposal");
    bob.send({ kind: "mcp/approve", correlation_id: [proposal.id], payload: {} });
    const result = await call;
    expect(JSON.stringify(result.content)).toMatch(/hello/);
    expect(logs.some((l) => l.startsWith("info:") && l.includes("waits for approval"))).toBe(true);
    expect(logs.some((l) => l.includes("bob approved the call"))).toBe(true);
    // Above the level the client asked for, nothing.
    await client.setLoggingLevel("error");
    const before = logs.length;
    const quiet = client.callTool({ name: "fs__echo", arguments: { message: "again" } });
    const second = await bob.nextNew((e) => e.kind === "mcp/proposal");
    bob.send({ kind: "mcp/approve", correlation_id: [second.id], payload: {} });
    await quiet;
    expect(logs.length).toBe(before);
  });
});
