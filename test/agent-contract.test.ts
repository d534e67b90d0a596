/**
 * The delegation contract of `<id>/ask`, end to end with real agents on a real gateway and
 * loopback model servers: the handoff reaches the callee's model; confidence, warnings and
 * error codes come back in `structuredContent`; a busy agent takes HIGH before LOW; the
 * caller's timeout_ms holds; tokens and cost roll up a chain of three to the person.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { startAgent, type AgentHandle } from "../participants/agent/index.js";
import { ParticipantClient } from "../participants/client.js";
import { HangingServer } from "./fixtures/agent/hanging-server.js";
import { ModelServer, openaiReply, type Reply, openaiAgentBlock, openaiToolCall } from "./fixtures/agent/model-server.js";
import { startGateway, waitFor, waitForTool, type TestGateway } from "./helpers.js";

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
const call = openaiToolCall;
const text = (env: Envelope) => (env.payload as { text: string }).text;

async function model(...replies: Reply[]): Promise<ModelServer> {
  const s = await new ModelServer().reply(...replies).start();
  servers.push(s);
  return s;
}
const openai = openaiAgentBlock;

async function join(id: string): Promise<ParticipantClient> {
  const c = new ParticipantClient({ url: gw!.url, space: "lab", token: token(id), reconnect: false });
  clients.push(c);
  await c.connect();
  return c;
}

async function agent(id: string): Promise<AgentHandle> {
  const config = gw!.gateway.spaces.get("lab")!.config.participants[id]!.agent!;
  const handle = await startAgent({ id, config, client: { url: gw!.url, space: "lab", token: token(id), reconnect: false }, env: {} });
  agents.push(handle);
  return handle;
}

const ask = (c: ParticipantClient, who: string, args: Record<string, unknown>) =>
  c.request("system:gateway", "tools/call", { name: `${who}/ask`, arguments: args }, { timeoutMs: 20_000 }) as Promise<any>;

describe("the delegation contract", () => {
  it("hands the callee the handoff, and returns confidence, warnings and error codes", async () => {
    const m = await model(
      openaiReply({ content: "It is 7.\nConfidence: high" }),
      openaiReply({ content: "Roughly 7.\nConfidence: low\nWarning: the 2023 figures are all there is" }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  ana: {kind: agent, token: ${token("ana")}, agent: ${openai(m, "offer: {}")}}
`);
    const alice = await join("alice");
    await agent("ana");
    await waitForTool(alice, "ana/ask");
    const tools = await alice.listTools();
    expect(tools.find((t) => t.name === "ana/ask")).toMatchObject({
      inputSchema: { properties: { priority: { enum: ["HIGH", "NORMAL", "LOW"] }, timeout_ms: {} } },
    });

    const sure = await ask(alice, "ana", {
      message: "How many?",
      priority: "high",
      context: {
        original_request: "Build me a business case",
        workflow_position: "step 2 of 3 (numbers)",
        prior_agents: ["cst"],
        prior_outputs: { scenarios: ["base"] },
        constraints: { budget: 5 },
      },
    });
    expect(sure.structuredContent).toMatchObject({ status: "success", answer: "It is 7.", confidence: "high" });
    const seen = m.requests[0]!.body.messages[1].content as string;
    expect(seen).toContain("alice: How many?");
    expect(seen).toContain(
      "Handoff from alice:\nOriginal request: Build me a business case\nWhere this is in the work: step 2 of 3 (numbers)\nWorked on before by: cst",
    );
    expect(seen).toContain('Constraints: {"budget":5}');
    expect(m.requests[0]!.body.messages[0].content).toContain("Confidence: high");

    const limited = await ask(alice, "ana", { message: "And now?" });
    expect(limited.structuredContent).toMatchObject({
      status: "partial",
      answer: "Roughly 7.",
      confidence: "low",
      warnings: ["the 2023 figures are all there is"],
    });
    expect(limited.content[0].text).toContain("Warnings:\n- the 2023 figures are all there is");

    const bad = await ask(alice, "ana", { message: "x", priority: "URGENT" });
    expect(bad.structuredContent).toMatchObject({ status: "error", error_code: "INVALID_ARGUMENTS" });
  });

  it("keeps to the caller's timeout_ms, and a busy agent takes HIGH before LOW", async () => {
    const hanging = await new HangingServer().start();
    servers.push(hanging);
    const m = await model(
      openaiReply({ tool_calls: [call("g1", "gate__wait", {})] }),
      openaiReply({ content: "first done" }),
      openaiReply({ content: "one" }),
      openaiReply({ content: "two" }),
    );
    gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${token("alice")}}
  gate: {kind: mcp, token: ${token("gate")}}
  slow: {kind: agent, token: ${token("slow")}, agent: ${openai(`${hanging.url}/v1`, "offer: {}")}}
  w: {kind: agent, token: ${token("w")}, tools: {allow: ["gate/*"]}, agent: ${openai(m, "offer: {max_concurrent: 1}")}}
`);
    let open!: () => void;
    const opened = new Promise<void>((r) => (open = r));
    const server = new McpServer({ name: "gate", version: "1.0.0" });
    server.registerTool("wait", { description: "waits", inputSchema: { n: z.number().optional() } }, async () => {
      await opened;
      return { content: [{ type: "text", text: "open" }] };
    });
    const gateClient = new ParticipantClient({ url: gw.url, space: "lab", token: token("gate"), reconnect: false });
    clients.push(gateClient);
    await gateClient.serveMcp(server);
    await gateClient.connect();
    const alice = await join("alice");
    await agent("slow");
    const w = await agent("w");
    await waitForTool(alice, "w/ask");
    await waitForTool(alice, "slow/ask");

    const started = Date.now();
    const late = await ask(alice, "slow", { message: "think", timeout_ms: 800 });
    expect(late.structuredContent).toMatchObject({ status: "timeout" });
    expect(Date.now() - started).toBeLessThan(10_000);

    const first = ask(alice, "w", { message: "first task" });
    await waitFor(() => m.requests.length === 1, 5000, "the first ask to reach the model");
    const low = ask(alice, "w", { message: "low task", priority: "LOW" });
    await waitFor(() => w.status().queued_asks === 1, 5000, "the low ask to queue");
    const high = ask(alice, "w", { message: "high task", priority: "HIGH" });
    await waitFor(() => w.status().queued_asks === 2, 5000, "the high ask to queue");
    open();
    await Promise.all([first, low, high]);
    const order = m.requests.slice(2).map((r) => (r.body.messages[1].content as string).replace(/^alice: /, ""));
    expect(order).toEqual(["high task", "low task"]);
  });

  it("rolls tokens and cost up a chain of three, and tells the person the total", async () => {
    const a = await model(openaiReply({ tool_calls: [call("t1", "b__ask", { message: "dig" })] }), openaiReply({ content: "Done: deep." }));
    const b = await model(
      openaiReply({ tool_calls: [call("t2", "c__ask", { message: "deeper" })] }),
      openaiReply({ content: "deep\nConfidence: high" }),
    );
    const c = await model(openaiReply({ content: "bottom\nConfidence: high" }));
    gw = await startGateway(`
space: {id: lab}
prices: {test-model: {input_per_mtok: 1, output_per_mtok: 2}}
participants:
  alice: {kind: human, token: ${token("alice")}}
  a: {kind: agent, token: ${token("a")}, tools: {allow: ["b/ask"]}, agent: ${openai(a)}}
  b: {kind: agent, token: ${token("b")}, tools: {allow: ["c/ask"]}, agent: ${openai(b, "offer: {}")}}
  c: {kind: agent, token: ${token("c")}, agent: ${openai(c, "offer: {}")}}
`);
    const alice = await join("alice");
    await agent("c");
    await agent("b");
    await waitForTool(alice, "c/ask");
    await waitForTool(alice, "b/ask");
    await agent("a");
    const replies: Envelope[] = [];
    alice.on("envelope", (e) => e.kind === "chat" && e.from === "a" && replies.push(e));
    alice.send({ kind: "chat", to: ["a"], payload: { text: "how deep?" } });
    await waitFor(() => replies.some((r) => text(r) === "Done: deep."), 10_000, "a's answer");
    expect(text(replies[0]!)).toBe("Now I will ask b: dig");
    const final = replies.find((r) => text(r) === "Done: deep.")!;
    // Five model calls of 120 in and 30 out: 600 and 150 tokens; at $1 and $2 per million.
    expect((final.payload as any).usage).toEqual({ input_tokens: 600, output_tokens: 150, cost_usd: 0.0009 });
    // b's result carried its own and c's: three calls.
    const toA = a.requests[1]!.body.messages.find((m: any) => m.role === "tool");
    // The caller's model reads the answer and how sure the callee is.
    expect(toA.content).toBe("deep\n(status success, confidence high)");
  });
});
