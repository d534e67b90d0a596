/**
 * The LLM agent participant end to end: a real gateway on port 0, real SDK participants
 * over WebSocket, and real HTTP model servers on loopback speaking the OpenAI and
 * Anthropic wire formats with scripted replies.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { AgentConfig } from "../gateway/config/config.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { startAgent, type AgentHandle, type AgentOptions } from "../participants/agent/participant.js";
import { HopTracker, mentioned, mentionPattern } from "../participants/agent/triggers.js";
import { ParticipantClient } from "../participants/index.js";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { HangingServer } from "./fixtures/agent/hanging-server.js";
import {
  anthropicReply,
  closedPort,
  ModelServer,
  openaiReply,
  type Reply,
  openaiAgentBlock,
  openaiToolCall,
} from "./fixtures/agent/model-server.js";
import { sleep, startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const FAST = { attempts: 3, baseDelayMs: 5, maxDelayMs: 20, totalTimeMs: 3000, requestTimeoutMs: 2000 };

let gw: TestGateway | undefined;
const clients: ParticipantClient[] = [];
const agents: AgentHandle[] = [];
const servers: { stop(): Promise<void> }[] = [];

afterEach(async () => {
  await Promise.all(agents.splice(0).map((a) => a.stop()));
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
  await gw?.stop();
  gw = undefined;
});

const token = (id: string) => `${id}-token-0123`;

async function modelServer(...replies: Reply[]): Promise<ModelServer> {
  const s = await new ModelServer().reply(...replies).start();
  servers.push(s);
  return s;
}

const openaiAgent = openaiAgentBlock;

/** Records every envelope a participant receives and waits for the ones a test expects. */
class Watcher {
  readonly seen: Envelope[] = [];
  private waiters: { pred: (e: Envelope) => boolean; resolve: (e: Envelope) => void }[] = [];

  constructor(readonly client: ParticipantClient) {
    client.on("envelope", (env) => {
      this.seen.push(env);
      this.waiters = this.waiters.filter((w) => {
        if (!w.pred(env)) return true;
        w.resolve(env);
        return false;
      });
    });
  }

  /** The first matching envelope received after `from` (an index into `seen`, default: now). */
  next(pred: (e: Envelope) => boolean, opts: { from?: number; timeoutMs?: number } = {}): Promise<Envelope> {
    const seen = this.seen.slice(opts.from ?? this.seen.length).find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out; seen: ${this.seen.map((e) => `${e.kind}<${e.from}`).join(", ")}`)),
        opts.timeoutMs ?? 5000,
      );
      this.waiters.push({
        pred,
        resolve: (e) => {
          clearTimeout(timer);
          resolve(e);
        },
      });
    });
  }

  chatsFrom(id: string): Envelope[] {
    return this.seen.filter((e) => e.kind === "chat" && e.from === id);
  }
}

async function join(id: string): Promise<ParticipantClient> {
  const c = new ParticipantClient({ url: gw!.url, space: "lab", token: token(id), reconnect: false });
  clients.push(c);
  await c.connect();
  return c;
}

async function human(id = "alice"): Promise<{ client: ParticipantClient; watch: Watcher }> {
  const client = await join(id);
  return { client, watch: new Watcher(client) };
}

function agentConfig(id: string): AgentConfig {
  const config = gw!.gateway.spaces.get("lab")!.config.participants[id]?.agent;
  if (!config) throw new Error(`no agent block for ${id}`);
  return config;
}

async function agent(id: string, extra: Partial<AgentOptions> = {}): Promise<AgentHandle> {
  const handle = await startAgent({
    id,
    config: agentConfig(id),
    client: { url: gw!.url, space: "lab", token: token(id), reconnect: false },
    env: {},
    retry: FAST,
    ...extra,
  });
  agents.push(handle);
  return handle;
}

/** A tool owner (kind mcp) serving an McpServer; the gateway lists its tools on join. */
async function toolOwner(id: string, register: (server: McpServer) => void): Promise<ParticipantClient> {
  const server = new McpServer({ name: id, version: "1.0.0" });
  register(server);
  const c = new ParticipantClient({ url: gw!.url, space: "lab", token: token(id), reconnect: false });
  clients.push(c);
  await c.serveMcp(server);
  await c.connect();
  return c;
}

function fileTools(server: McpServer): void {
  server.registerTool(
    "read_file",
    { description: "Reads a file", inputSchema: { path: z.string() }, annotations: { readOnlyHint: true } },
    async ({ path }) => ({ content: [{ type: "text", text: `contents of ${path}` }] }),
  );
  server.registerTool(
    "write_file",
    { description: "Writes a file", inputSchema: { path: z.string(), text: z.string() } },
    async ({ text }) => ({
      content: [{ type: "text", text: `wrote ${text.length} bytes` }],
    }),
  );
  server.registerTool("delete_file", { description: "Deletes a file", inputSchema: { path: z.string() } }, async () => ({
    content: [{ type: "text", text: "deleted" }],
  }));
}

const call = openaiToolCall;
const text = (env: Envelope) => (env.payload as { text: string }).text;
const toolMessages = (body: any) => (body.messages as any[]).filter((m) => m.role === "tool");

describe("agent participant: tool calls", () => {
  it("runs a direct call, an approved and a rejected proposal in one turn; the model sees all three results", async () => {
    const model = await modelServer(
      openaiReply({
        content: "Let me do all three.",
        tool_calls: [
          call("c1", "files__read_file", { path: "a.txt" }),
          call("c2", "files__write_file", { path: "b.txt", text: "hello" }),
          call("c3", "files__delete_file", { path: "logs" }),
        ],
      }),
      openaiReply({ content: "Read a.txt and wrote b.txt; deleting the logs was rejected." }),
    );
    gw = await startGateway(`
space: {id: lab, name: Lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  files: {kind: mcp, token: ${token("files")}}
  helper:
    kind: agent
    description: does file chores
    token: ${token("helper")}
    agent: ${openaiAgent(model, "reasoning: true")}
`);
    await toolOwner("files", fileTools);
    const alice = await human();
    await waitForTool(alice.client, "files/delete_file");
    // The scripted human decides on whatever the agent proposes.
    alice.client.on("proposal", (p) => {
      const name = (p.payload as { params: { name: string } }).params.name;
      if (name === "write_file") alice.client.approve(p.id);
      if (name === "delete_file") alice.client.reject(p.id, "unsafe", "keep the logs");
    });
    await agent("helper");

    // alice is the only human and helper the only agent: a broadcast is for the agent.
    const trigger = alice.client.send({ kind: "chat", payload: { text: "read a.txt, write b.txt, delete the logs" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "helper");

    expect(text(reply)).toBe("Read a.txt and wrote b.txt; deleting the logs was rejected.");
    expect(reply.to).toEqual(["alice"]);
    expect(reply.correlation_id).toEqual([trigger]);

    expect(model.requests).toHaveLength(2);
    const first = model.requests[0]!.body;
    expect(first.model).toBe("test-model");
    expect(first.messages[0].role).toBe("system");
    expect(first.messages[0].content).toContain("You are helper");
    expect(first.messages[0].content).toContain("- files/write_file: Writes a file");
    expect(first.messages[1]).toEqual({ role: "user", content: "alice: read a.txt, write b.txt, delete the logs" });
    expect(first.tools.map((t: any) => t.function.name).sort()).toEqual(["files__delete_file", "files__read_file", "files__write_file"]);

    const results = toolMessages(model.requests[1]!.body);
    expect(results).toEqual([
      { role: "tool", tool_call_id: "c1", content: "contents of a.txt" },
      { role: "tool", tool_call_id: "c2", content: "(Proposal approved by alice.)\nwrote 5 bytes" },
      {
        role: "tool",
        tool_call_id: "c3",
        content:
          "Error: Rejected by alice (reason: unsafe): keep the logs. The call was not made. Adapt instead of repeating the same call.",
      },
    ]);

    // Reasoning transparency: start (correlated to the trigger), a thought with the calls, a conclusion.
    const start = alice.watch.seen.find((e) => e.kind === "reasoning/start" && e.from === "helper")!;
    expect(start.correlation_id).toEqual([trigger]);
    const thought = alice.watch.seen.find((e) => e.kind === "reasoning/thought" && e.context === start.id)!;
    expect((thought.payload as { message: string }).message).toContain("Calling files/read_file, files/write_file, files/delete_file.");
    await alice.watch.next((e) => e.kind === "reasoning/conclusion" && e.context === start.id, { from: 0 });
  });

  it("prompts with a tool that appeared after the agent joined", async () => {
    const model = await modelServer(openaiReply({ content: "No tools yet." }), openaiReply({ content: "Now I see it." }));
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  late: {kind: mcp, token: ${token("late")}}
  helper: {kind: agent, token: ${token("helper")}, agent: ${openaiAgent(model)}}
`);
    const alice = await human();
    await agent("helper");
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "what can you do?" } });
    await alice.watch.next((e) => e.kind === "chat" && e.from === "helper");
    expect(model.requests[0]!.body.messages[0].content).toContain("No tools are available to you right now.");
    expect(model.requests[0]!.body.tools).toBeUndefined();

    await toolOwner("late", (s) =>
      s.registerTool(
        "fresh_tool",
        { description: "Brand new", inputSchema: { q: z.string() }, annotations: { readOnlyHint: true } },
        async () => ({ content: [] }),
      ),
    );
    await waitForTool(alice.client, "late/fresh_tool");
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "and now?" } });
    await alice.watch.next((e) => e.kind === "chat" && e.from === "helper" && text(e) === "Now I see it.");
    const system = model.requests[1]!.body.messages[0].content as string;
    expect(system).toContain("- late/fresh_tool: Brand new");
    expect(system).toContain("- late (mcp)");
    expect(model.requests[1]!.body.tools.map((t: any) => t.function.name)).toEqual(["late__fresh_tool"]);
  });

  it("works end to end with the Anthropic provider", async () => {
    const model = await modelServer(
      anthropicReply(
        [
          { type: "text", text: "Reading." },
          { type: "tool_use", id: "toolu_1", name: "files__read_file", input: { path: "a.txt" } },
        ],
        "tool_use",
      ),
      anthropicReply([{ type: "text", text: "It says: contents of a.txt" }]),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  files: {kind: mcp, token: ${token("files")}}
  helper:
    kind: agent
    token: ${token("helper")}
    agent: {provider: anthropic, model: claude-test, base_url: "${model.url}", api_key: "sk-ant-test-0123", max_tokens: 512}
`);
    await toolOwner("files", fileTools);
    const alice = await human();
    await waitForTool(alice.client, "files/read_file");
    // In-process, as `mewgate up` runs its agents.
    const space = gw.gateway.spaces.get("lab")!;
    await agent("helper", { client: { transport: () => connectInProcess(space, "helper"), reconnect: false } });
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "what is in a.txt?" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "helper");
    expect(text(reply)).toBe("It says: contents of a.txt");

    expect(model.requests).toHaveLength(2);
    expect(model.requests[0]!.url).toBe("/v1/messages");
    expect(model.requests[0]!.headers["x-api-key"]).toBe("sk-ant-test-0123");
    expect(model.requests[0]!.body).toMatchObject({
      model: "claude-test",
      max_tokens: 512,
      messages: [{ role: "user", content: [{ type: "text", text: "alice: what is in a.txt?" }] }],
    });
    expect(model.requests[0]!.body.system).toContain("files/read_file");
    const last = model.requests[1]!.body.messages.at(-1);
    expect(last).toEqual({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "contents of a.txt" }] });
  });
});

describe("agent participant: provider failures", () => {
  it("retries a 429 and answers", async () => {
    const model = await modelServer(
      { status: 429, headers: { "retry-after-ms": "20" }, body: { error: { message: "slow down" } } },
      openaiReply({ content: "Hello after a retry." }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  helper: {kind: agent, token: ${token("helper")}, agent: ${openaiAgent(model)}}
`);
    const alice = await human();
    await agent("helper");
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "hi" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "helper");
    expect(text(reply)).toBe("Hello after a retry.");
    expect(model.requests).toHaveLength(2);
    expect(alice.watch.chatsFrom("helper")).toHaveLength(1);
  });

  it("says that the provider is unreachable, answers at once during the cool-down with when it will retry, and tries again after it", async () => {
    const port = await closedPort();
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  helper: {kind: agent, token: ${token("helper")}, agent: ${openaiAgent(`http://127.0.0.1:${port}/v1`)}}
`);
    const lines: { level: number; component?: string; msg: string }[] = [];
    const logger = pino(
      { level: "info" },
      new Writable({
        write(chunk, _enc, done) {
          for (const line of String(chunk).split("\n")) if (line.trim()) lines.push(JSON.parse(line));
          done();
        },
      }),
    );
    const alice = await human();
    const helper = await agent("helper", { logger, providerCooldownMs: 1500 });

    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "are you there?" } });
    const first = await alice.watch.next((e) => e.kind === "chat" && e.from === "helper");
    expect(text(first)).toMatch(
      /^I could not answer: openai: cannot reach http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions \(.*ECONNREFUSED.*\) after 3 attempts\. I will not try again for 2 s/,
    );

    // A second trigger inside the cool-down: no provider call, but an answer at once that
    // says it is waiting and when it will try again.
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "hello??" } });
    const waiting = await alice.watch.next((e) => e.kind === "chat" && e.from === "helper" && e !== first);
    expect(text(waiting)).toMatch(
      /^My model provider is unavailable \(openai: cannot reach .*\)\. I will try again at \d\d:\d\d:\d\d UTC, in [12] s; ask me then\.$/,
    );
    expect(alice.watch.chatsFrom("helper")).toHaveLength(2);
    expect(helper.client.status).toBe("open");
    const status = helper.status();
    expect(status.provider_unavailable_until).toBeDefined();
    expect(status.messages_in_context).toBe(2);
    const warnings = lines.filter((l) => l.component === "agent" && l.level === 40);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.msg).toContain("cannot reach");

    // After the cool-down, a new trigger tries again (and says so again, once).
    await sleep(1300);
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "now?" } });
    await alice.watch.next((e) => e.kind === "chat" && e.from === "helper" && e !== first && e !== waiting);
    expect(alice.watch.chatsFrom("helper")).toHaveLength(3);
  });

  it("says clearly when no model is configured at all", async () => {
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  helper: {kind: agent, token: ${token("helper")}, agent: {provider: auto}}
`);
    const alice = await human();
    await agent("helper");
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "hi" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "helper");
    expect(text(reply)).toContain('agent "helper" has no model: set ANTHROPIC_API_KEY or OPENAI_API_KEY');
  });
});

describe("agent participant: delegation", () => {
  it("coordinator → researcher → tool: the answer flows back with status success", async () => {
    const coordinatorModel = await modelServer(
      openaiReply({ tool_calls: [call("d1", "researcher__ask", { message: "Look up the answer", context: "alice wants a number" })] }),
      openaiReply({ content: "The researcher found 42." }),
    );
    const researcherModel = await modelServer(
      openaiReply({ tool_calls: [call("r1", "lab__lookup", { q: "answer" })] }),
      openaiReply({ content: "The answer is 42." }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  lab: {kind: mcp, token: ${token("lab")}}
  coordinator:
    kind: agent
    token: ${token("coordinator")}
    tools: {allow: ["researcher/ask"]}
    agent: ${openaiAgent(coordinatorModel)}
  researcher:
    kind: agent
    description: finds facts
    token: ${token("researcher")}
    agent: ${openaiAgent(researcherModel, "offer: {name: ask}")}
`);
    const seenByLab: Envelope[] = [];
    const labClient = await toolOwner("lab", (s) =>
      s.registerTool(
        "lookup",
        { description: "Looks things up", inputSchema: { q: z.string() }, annotations: { readOnlyHint: true } },
        async ({ q }) => ({
          content: [{ type: "text", text: `${q} = 42` }],
        }),
      ),
    );
    labClient.on("envelope", (e) => e.kind === "mcp/request" && seenByLab.push(e));
    const alice = await human();
    await agent("researcher");
    await waitForTool(alice.client, "researcher/ask");
    await agent("coordinator");

    alice.client.send({ kind: "chat", to: ["coordinator"], payload: { text: "What is the answer?" } });
    // The handoff, in plain words, then the answer with what the request cost in all.
    const handoff = await alice.watch.next((e) => e.kind === "chat" && e.from === "coordinator");
    expect(text(handoff)).toBe("Now I will ask researcher: Look up the answer");
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "coordinator" && text(e) !== text(handoff));
    expect(text(reply)).toBe("The researcher found 42.");
    // Two model calls each (120 + 30 tokens a call, as the fixture reports): 600 in all.
    expect((reply.payload as any).usage).toMatchObject({ input_tokens: 480, output_tokens: 120 });

    // The researcher's result, as the gateway routed it: the contract's structure plus text.
    const response = alice.watch.seen.find((e) => e.kind === "mcp/response" && e.from === "researcher")!;
    const result = (response.payload as any).result;
    expect(result.content).toEqual([{ type: "text", text: "The answer is 42." }]);
    expect(result.structuredContent).toMatchObject({
      status: "success",
      answer: "The answer is 42.",
      confidence: "medium",
      metadata: { input_tokens: 240, output_tokens: 60, model: "test-model" },
    });
    expect(result.structuredContent.metadata.processing_time_ms).toBeGreaterThanOrEqual(0);
    expect(toolMessages(coordinatorModel.requests[1]!.body)).toEqual([
      { role: "tool", tool_call_id: "d1", content: "The answer is 42.\n(status success, confidence medium)" },
    ]);

    // The researcher ran its own loop on the message, in a conversation of its own.
    const asked = researcherModel.requests[0]!.body;
    expect(asked.messages[1]).toEqual({
      role: "user",
      content: "coordinator: Look up the answer\n\nContext from coordinator:\nalice wants a number",
    });
    expect(asked.messages[0].content).toContain("You are answering a call of your tool researcher/ask from coordinator.");
    expect(toolMessages(researcherModel.requests[1]!.body)).toEqual([{ role: "tool", tool_call_id: "r1", content: "answer = 42" }]);
    // The nested call carried the chain: it names the request the researcher was serving.
    const nested = seenByLab.find((e) => e.from === "researcher")!;
    expect(nested.correlation_id?.length).toBe(1);
    expect(alice.watch.seen.some((e) => e.kind === "mcp/request" && e.from === "coordinator" && e.id === nested.correlation_id![0])).toBe(
      true,
    );
    // The researcher said nothing in chat: its answer went back as the result.
    expect(alice.watch.chatsFrom("researcher")).toHaveLength(0);
  });

  it("refuses the cycle A → B → A; B's model sees the error and the chain still answers", async () => {
    const aModel = await modelServer(
      openaiReply({ tool_calls: [call("a1", "b__ask", { message: "please ask a back" })] }),
      openaiReply({ content: "b answered: it could not ask me back." }),
    );
    const bModel = await modelServer(
      openaiReply({ tool_calls: [call("b1", "a__ask", { message: "loop" })] }),
      openaiReply({ content: "I could not ask a back." }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  a: {kind: agent, token: ${token("a")}, tools: {allow: ["b/ask"]}, agent: ${openaiAgent(aModel, "offer: {}")}}
  b: {kind: agent, token: ${token("b")}, tools: {allow: ["a/ask"]}, agent: ${openaiAgent(bModel, "offer: {}")}}
`);
    const alice = await human();
    await agent("a");
    await agent("b");
    await waitForTool(alice.client, "a/ask");
    await waitForTool(alice.client, "b/ask");

    alice.client.send({ kind: "chat", to: ["a"], payload: { text: "start the loop" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "a" && !text(e).startsWith("Now I will ask"));
    expect(text(reply)).toBe("b answered: it could not ask me back.");

    const [refused] = toolMessages(bModel.requests[1]!.body);
    expect(refused.tool_call_id).toBe("b1");
    expect(refused.content).toMatch(/^Error: unavailable: cycle_detected: call cycle: a → b → a/);
    // a's model was never asked to serve b's call.
    expect(aModel.requests).toHaveLength(2);
    const response = alice.watch.seen.find((e) => e.kind === "mcp/response" && e.from === "b")!;
    expect((response.payload as any).result.structuredContent).toMatchObject({ status: "success", answer: "I could not ask a back." });
  });
});

describe("agent participant: bounded work", () => {
  it("answers a delegated call with timeout or partial, and says in chat when it hit the iteration limit", async () => {
    const hanging = await new HangingServer().start();
    servers.push(hanging);
    const model = await modelServer(
      openaiReply({ content: "Trying.", tool_calls: [call("x1", "nothing__here", {})] }),
      openaiReply({ content: "Still trying.", tool_calls: [call("x2", "nothing__here", {})] }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  slow: {kind: agent, token: ${token("slow")}, agent: ${openaiAgent(`${hanging.url}/v1`, "offer: {}")}}
  brief: {kind: agent, token: ${token("brief")}, agent: ${openaiAgent(model, "offer: {}, max_iterations: 1")}}
`);
    const alice = await human();
    await agent("slow");
    await agent("brief");
    await waitForTool(alice.client, "slow/ask");
    await waitForTool(alice.client, "brief/ask");

    // The caller allows 1.5 s: the agent answers before the gateway gives up, with what it has.
    const timedOut: any = await alice.client.request(
      "system:gateway",
      "tools/call",
      { name: "slow/ask", arguments: { message: "think hard" } },
      { timeoutMs: 1500 },
    );
    expect(timedOut.structuredContent).toMatchObject({ status: "timeout", answer: "slow could not finish in time." });
    expect(timedOut.content[0].text).toBe("[timeout] slow could not finish in time.");
    expect(hanging.connections).toBe(1);

    const partial: any = await alice.client.request("system:gateway", "tools/call", { name: "brief/ask", arguments: { message: "do it" } });
    expect(partial.structuredContent).toMatchObject({
      status: "partial",
      answer: "Trying.",
      confidence: "low",
      warnings: ["brief stopped after 1 model call before finishing"],
    });

    const invalid: any = await alice.client.request("system:gateway", "tools/call", {
      name: "brief/ask",
      arguments: { text: "no message" },
    });
    expect(invalid.isError).toBe(true);
    expect(invalid.structuredContent).toMatchObject({ status: "error", error_code: "INVALID_ARGUMENTS" });

    alice.client.send({ kind: "chat", to: ["brief"], payload: { text: "go" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "brief");
    expect(text(reply)).toBe(
      "Still trying.\n\n(I stopped after 1 model call, the most I make for one message, before finishing. Ask me to continue if you want me to go on.)",
    );
  });
});

describe("agent participant: conversation rules", () => {
  it("recognizes @mentions as words and counts hops through correlation", () => {
    const bob = mentionPattern("bob");
    expect(["@bob hi", "hi @bob.", "(@bob)", "@Bob!"].map((t) => bob.test(t))).toEqual([true, true, true, true]);
    expect(["hi @bob.smith", "mail bob@bob.com", "@bobby", "x@bob"].map((t) => bob.test(t))).toEqual([false, false, false, false]);
    expect(mentioned("ask @ops.team-1 and @carol", ["ops.team-1", "ops", "carol", "bob"])).toEqual(["ops.team-1", "carol"]);

    const hops = new HopTracker(3);
    expect(hops.observe({ id: "h" }, true)).toBe(0);
    hops.set("a1", 1);
    expect(hops.observe({ id: "b1", correlation_id: ["a1"] }, false)).toBe(2);
    expect(hops.observe({ id: "x", correlation_id: ["unknown"] }, false)).toBe(1);
    hops.set("y", 1);
    expect(hops.get("h")).toBeUndefined(); // the oldest is forgotten beyond the capacity
  });

  it("stops an exchange between two agents after three hops", async () => {
    const many = (t: string) => Array.from({ length: 5 }, () => openaiReply({ content: t }));
    const aModel = await modelServer(...many("@b hello from a"));
    const bModel = await modelServer(...many("@a hello from b"));
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  a: {kind: agent, token: ${token("a")}, agent: ${openaiAgent(aModel)}}
  b: {kind: agent, token: ${token("b")}, agent: ${openaiAgent(bModel)}}
`);
    const alice = await human();
    await agent("a");
    await agent("b");
    // Two agents present: a broadcast is for nobody in particular.
    alice.client.send({ kind: "chat", payload: { text: "anyone?" } });
    alice.client.send({ kind: "chat", to: ["a"], payload: { text: "say hello to b" } });
    await alice.watch.next((e) => e.kind === "chat" && e.from === "a" && e.to?.[0] === "b");
    await sleep(300);
    const chats = alice.watch.seen.filter((e) => e.kind === "chat" && e.from !== "alice");
    expect(chats.map((e) => `${e.from}->${e.to!.join(",")}`)).toEqual(["a->alice", "b->a", "a->b"]);
    expect(aModel.requests).toHaveLength(2);
    expect(bModel.requests).toHaveLength(1);
    // b still heard the last one: as context.
    expect(agents[1]!.status().messages_in_context).toBeGreaterThanOrEqual(4);
  });

  it("lets the primary agent answer a broadcast in a space of several agents, and only it", async () => {
    const mainModel = await modelServer(openaiReply({ content: "Primary here." }));
    const otherModel = await modelServer(openaiReply({ content: "I should not speak." }));
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  main: {kind: agent, token: ${token("main")}, agent: ${openaiAgent(mainModel, "primary: true")}}
  other: {kind: agent, token: ${token("other")}, agent: ${openaiAgent(otherModel)}}
`);
    const alice = await human();
    await agent("main");
    await agent("other");
    await waitFor(() => alice.client.participants.has("other") && alice.client.participants.has("main"), 3000, "both agents");
    alice.client.send({ kind: "chat", payload: { text: "anyone?" } });
    const reply = await alice.watch.next((e) => e.kind === "chat" && e.from === "main");
    expect(text(reply)).toBe("Primary here.");
    await sleep(300);
    expect(otherModel.requests).toHaveLength(0);
    expect(alice.watch.chatsFrom("other")).toHaveLength(0);
  });

  it("obeys pause, resume, request-status, compact, forget, clear and shutdown", async () => {
    const model = await modelServer(
      openaiReply({ content: "Hi alice." }),
      openaiReply({ content: "Back again." }),
      openaiReply({ content: "alice greeted helper twice." }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  helper: {kind: agent, token: ${token("helper")}, agent: ${openaiAgent(model, "context_tokens: 5000")}}
`);
    const alice = await human();
    const helper = await agent("helper");
    const control = async (kind: string, payload: Record<string, unknown> = {}, answer = "participant/status") => {
      const id = alice.client.send({ kind, to: ["helper"], payload });
      const env = await alice.watch.next((e) => e.kind === answer && e.from === "helper" && e.correlation_id?.[0] === id);
      expect(env.to).toEqual(["alice"]);
      return env.payload as Record<string, any>;
    };
    const chat = async (t: string) => {
      alice.client.send({ kind: "chat", to: ["helper"], payload: { text: t } });
      return text(await alice.watch.next((e) => e.kind === "chat" && e.from === "helper"));
    };

    expect(await control("participant/request-status")).toMatchObject({
      tokens: 0,
      max_tokens: 5000,
      messages_in_context: 0,
      paused: false,
      state: "idle",
    });
    expect(await chat("hello")).toBe("Hi alice.");
    const status = await control("participant/request-status");
    expect(status).toMatchObject({ messages_in_context: 2, max_tokens: 5000, turns: 1, provider: "openai", model: "test-model" });
    expect(status["tokens"]).toBeGreaterThan(0);
    expect(status["input_tokens_total"]).toBe(120);

    expect(await control("participant/pause", { reason: "test" })).toMatchObject({ paused: true, state: "paused" });
    alice.client.send({ kind: "chat", to: ["helper"], payload: { text: "are you paused?" } });
    await sleep(150);
    expect(model.requests).toHaveLength(1);
    expect(alice.watch.chatsFrom("helper")).toHaveLength(1);
    // The chat while paused is context, not a turn.
    expect(await control("participant/request-status")).toMatchObject({ paused: true, messages_in_context: 3, turns: 1 });

    expect(await control("participant/resume")).toMatchObject({ paused: false, state: "idle" });
    expect(await chat("hello again")).toBe("Back again.");
    expect(model.requests[1]!.body.messages.slice(1).map((m: any) => m.content)).toEqual([
      "alice: hello",
      "Hi alice.",
      "alice: are you paused?",
      "alice: hello again",
    ]);

    // compact: the oldest half is summarized by the model, without tools.
    const compacted = await control("participant/compact", {}, "participant/compact-done");
    expect(compacted["replaced"]).toBeGreaterThan(0);
    expect(model.requests[2]!.body.tools).toBeUndefined();
    expect(model.requests[2]!.body.messages.at(-1).content).toContain("alice: hello");
    const after = await control("participant/request-status");
    expect(after["messages_in_context"]).toBe(5 - compacted["replaced"] + 1);

    expect(await control("participant/forget", { direction: "oldest", entries: 1 })).toMatchObject({ forgotten: 1 });
    expect(await control("participant/clear")).toMatchObject({ messages_in_context: 0, tokens: 0 });

    // A pause with a timeout resumes by itself and says so.
    const pauseId = alice.client.send({ kind: "participant/pause", to: ["helper"], payload: { timeout_seconds: 0.1 } });
    const resumed = await alice.watch.next(
      (e) => e.kind === "participant/status" && e.correlation_id?.[0] === pauseId && (e.payload as any).resumed === "timeout",
    );
    expect(resumed.payload).toMatchObject({ paused: false });

    const left = alice.watch.next(
      (e) => e.kind === "system/presence" && (e.payload as any).event === "leave" && (e.payload as any).participant.id === "helper",
    );
    await control("participant/shutdown", {}, "chat/acknowledge");
    await left;
    expect(await helper.closed).toBe("shutdown");
    expect(helper.status().state).toBe("stopped");
  });
});
