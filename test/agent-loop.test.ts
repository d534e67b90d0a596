import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Conversation } from "../participants/agent/context.js";
import { formatOutcome, runTurn, type CallTool, type LoopEvent, type ToolOutcome } from "../participants/agent/loop.js";
import { OpenAIProvider } from "../participants/agent/providers/openai.js";
import { ScriptedProvider } from "../participants/agent/providers/scripted.js";
import type { Message, ToolResultMessage } from "../participants/agent/providers/types.js";
import { buildToolSet, type SpaceTool } from "../participants/agent/tools.js";
import { closedPort, ModelServer, openaiReply } from "./fixtures/agent/model-server.js";

const spaceTools: SpaceTool[] = [
  { name: "fs/read_file", participant: "fs", tool: "read_file", description: "Read a file", policy: "direct" },
  { name: "fs/write_file", participant: "fs", tool: "write_file", description: "Write a file", policy: "proposal" },
  {
    name: "ops.team/restart service",
    participant: "ops.team",
    tool: "restart service",
    description: "Restart a service",
    policy: "proposal",
  },
];
const tools = buildToolSet(spaceTools, { self: "helper" });
const context = { system: "You are helper.", tools };
const options = { model: "test" };

/** A fake gateway: direct read, approved write, rejected restart; each resolves later, so they overlap. */
function fakeGateway() {
  const calls: { name: string; args: Record<string, unknown> }[] = [];
  let running = 0;
  let maxRunning = 0;
  const callTool: CallTool = async (name, args) => {
    calls.push({ name, args });
    running++;
    maxRunning = Math.max(maxRunning, running);
    await new Promise((r) => setTimeout(r, 20));
    running--;
    switch (name) {
      case "fs/read_file":
        return { type: "result", content: `contents of ${String(args["path"])}` };
      case "fs/write_file":
        return { type: "result", content: "wrote 12 bytes", approvedBy: "alice" };
      default:
        return { type: "error", code: "rejected", by: "alice", reason: "unsafe", message: "not during business hours" };
    }
  };
  return { callTool, calls, maxRunning: () => maxRunning };
}

function results(messages: readonly Message[]): ToolResultMessage[] {
  return messages.filter((m): m is ToolResultMessage => m.role === "tool");
}

describe("agent loop", () => {
  it("runs three tool calls in parallel and the model sees all three results", async () => {
    const provider = new ScriptedProvider([
      {
        text: "On it.",
        tool_calls: [
          { name: "fs/read_file", arguments: { path: "README.md" } },
          { name: "fs/write_file", arguments: { path: "notes.txt", text: "hello world!" } },
          { name: "ops.team/restart service", arguments: { service: "api" } },
        ],
      },
      { when: { after_tool_result: true, tool_error: true }, text: "Read and wrote; the restart was rejected, so I will not retry it." },
    ]);
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "alice: read, write, restart" });
    const gw = fakeGateway();
    const events: LoopEvent[] = [];

    const turn = await runTurn({ provider, conversation, context, callTool: gw.callTool, options, onEvent: (e) => events.push(e) });

    expect(turn).toMatchObject({
      status: "done",
      iterations: 2,
      toolCalls: 3,
      text: "Read and wrote; the restart was rejected, so I will not retry it.",
    });
    expect(turn.usage.input).toBeGreaterThan(0);
    expect(gw.calls.map((c) => c.name)).toEqual(["fs/read_file", "fs/write_file", "ops.team/restart service"]);
    expect(gw.maxRunning()).toBe(3);

    // The second model call carried every result, in call order, errors marked.
    const seen = provider.requests[1]!.messages;
    expect(seen[1]).toMatchObject({ role: "assistant", text: "On it.", toolCalls: [{ id: "call_1" }, { id: "call_2" }, { id: "call_3" }] });
    expect(results(seen)).toEqual([
      { role: "tool", callId: "call_1", name: "fs__read_file", content: "contents of README.md", isError: false },
      { role: "tool", callId: "call_2", name: "fs__write_file", content: "(Proposal approved by alice.)\nwrote 12 bytes", isError: false },
      {
        role: "tool",
        callId: "call_3",
        name: "ops_X2eteam__restart_X20service",
        content:
          "Rejected by alice (reason: unsafe): not during business hours. The call was not made. Adapt instead of repeating the same call.",
        isError: true,
      },
    ]);
    expect(conversation.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "tool", "assistant"]);
    expect(events.map((e) => e.type)).toEqual([
      "model",
      "tool_call",
      "tool_call",
      "tool_call",
      "tool_result",
      "tool_result",
      "tool_result",
      "model",
    ]);
    expect(events[1]).toMatchObject({ type: "tool_call", name: "fs/read_file", functionName: "fs__read_file" });
  });

  it("stops after the maximum number of iterations and says so", async () => {
    const provider = new ScriptedProvider([
      { text: "again", tool_calls: [{ name: "fs/read_file", arguments: { path: "x" } }], repeat: true },
    ]);
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "bob: loop forever" });
    const gw = fakeGateway();
    const turn = await runTurn({ provider, conversation, context, callTool: gw.callTool, options, maxIterations: 3 });
    expect(turn).toMatchObject({ status: "max_iterations", iterations: 3, toolCalls: 3, text: "again" });
    expect(gw.calls).toHaveLength(3);
    // The last results are kept, so the next turn starts from a consistent conversation.
    expect(conversation.messages.at(-1)).toMatchObject({ role: "tool", callId: "call_3" });
  });

  it("answers unknown tools, bad arguments and a throwing callTool with error results", async () => {
    const provider = {
      name: "fake",
      calls: 0,
      async complete() {
        if (this.calls++ > 0) return { text: "ok", toolCalls: [], stopReason: "end_turn" as const };
        return {
          text: "",
          stopReason: "tool_use" as const,
          toolCalls: [
            { id: "a", name: "nope__tool", arguments: {} },
            {
              id: "b",
              name: "fs__read_file",
              arguments: {},
              rawArguments: "{",
              invalidArguments: "arguments are not valid JSON: Unexpected end",
            },
            { id: "c", name: "fs__write_file", arguments: { path: "p" } },
          ],
        };
      },
    };
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "go" });
    const called: string[] = [];
    const callTool: CallTool = async (name) => {
      called.push(name);
      throw new Error("connection lost");
    };
    const turn = await runTurn({ provider, conversation, context, callTool, options });
    expect(turn.status).toBe("done");
    expect(called).toEqual(["fs/write_file"]);
    const [unknown, invalid, thrown] = results(conversation.messages);
    expect(unknown).toMatchObject({
      isError: true,
      content: expect.stringContaining('unknown_tool: no tool is offered as function "nope__tool"'),
    });
    expect(invalid).toMatchObject({ isError: true, content: expect.stringContaining("invalid_arguments: arguments are not valid JSON") });
    expect(thrown).toMatchObject({ isError: true, content: "failed: connection lost" });
  });

  it("cuts huge tool results", async () => {
    const provider = new ScriptedProvider([{ tool_calls: [{ name: "fs/read_file", arguments: { path: "big" } }] }, { text: "done" }]);
    const conversation = new Conversation({ budgetTokens: 100_000 });
    conversation.append({ role: "user", text: "read big" });
    const callTool: CallTool = async () => ({ type: "result", content: "x".repeat(5000) });
    await runTurn({ provider, conversation, context, callTool, options, maxToolResultChars: 1000 });
    const [res] = results(conversation.messages);
    expect(res!.content).toHaveLength(1000 + "\n[… 4000 more characters cut]".length);
    expect(res!.content.endsWith("[… 4000 more characters cut]")).toBe(true);
  });

  it("reports a provider failure as an error turn, keeping the conversation consistent", async () => {
    const port = await closedPort();
    const provider = new OpenAIProvider({ baseUrl: `http://127.0.0.1:${port}`, apiKey: "k", retry: { attempts: 2, baseDelayMs: 1 } });
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "hi" });
    const turn = await runTurn({ provider, conversation, context, callTool: fakeGateway().callTool, options });
    expect(turn.status).toBe("error");
    expect(turn.error).toMatchObject({ code: "unreachable", attempts: 2 });
    expect(turn.iterations).toBe(0);
    expect(conversation.messagesInContext).toBe(1);
  });

  it("stops when aborted during tool calls", async () => {
    const provider = new ScriptedProvider([{ tool_calls: [{ name: "fs/read_file", arguments: {} }], repeat: true }]);
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "go" });
    const controller = new AbortController();
    const callTool: CallTool = async (_name, _args, { signal }) => {
      controller.abort();
      return signal.aborted ? { type: "error", code: "cancelled", message: "the agent stopped" } : { type: "result", content: "?" };
    };
    const turn = await runTurn({ provider, conversation, context, callTool, options, signal: controller.signal });
    expect(turn).toMatchObject({ status: "aborted", iterations: 1 });
    expect(results(conversation.messages)[0]).toMatchObject({ content: "cancelled: the agent stopped", isError: true });
  });

  it("formats timeouts so the model knows the effect is unknown", () => {
    const outcome: ToolOutcome = { type: "error", code: "timeout", message: "no decision on the proposal within 600 s" };
    expect(formatOutcome(outcome)).toBe("Timed out: no decision on the proposal within 600 s. The call may or may not have taken effect.");
  });
});

describe("agent loop over the OpenAI wire format", () => {
  let server: ModelServer;
  beforeEach(async () => {
    server = await new ModelServer().start();
  });
  afterEach(async () => {
    await server.stop();
  });

  it("a turn with a direct call, an approved proposal and a rejected one ends with the model seeing all three", async () => {
    server.reply(
      openaiReply({
        content: null,
        tool_calls: [
          { id: "call_r", type: "function", function: { name: "fs__read_file", arguments: '{"path":"a.txt"}' } },
          { id: "call_w", type: "function", function: { name: "fs__write_file", arguments: '{"path":"b.txt","text":"hi"}' } },
          { id: "call_x", type: "function", function: { name: "ops_X2eteam__restart_X20service", arguments: '{"service":"api"}' } },
        ],
      }),
      openaiReply({ content: "Done; the restart was rejected (unsafe)." }),
    );
    const provider = new OpenAIProvider({ baseUrl: server.url, apiKey: "sk-loop" });
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "alice: do the three things" });
    const gw = fakeGateway();

    const turn = await runTurn({ provider, conversation, context, callTool: gw.callTool, options });

    expect(turn).toMatchObject({ status: "done", iterations: 2, toolCalls: 3, text: "Done; the restart was rejected (unsafe)." });
    expect(turn.usage).toEqual({ input: 240, output: 60 });
    expect(gw.calls).toEqual([
      { name: "fs/read_file", args: { path: "a.txt" } },
      { name: "fs/write_file", args: { path: "b.txt", text: "hi" } },
      { name: "ops.team/restart service", args: { service: "api" } },
    ]);
    const second = server.requests[1]!.body;
    expect(second.tools.map((t: any) => t.function.name)).toEqual(["fs__read_file", "fs__write_file", "ops_X2eteam__restart_X20service"]);
    expect(second.messages.slice(2)).toEqual([
      { role: "assistant", content: null, tool_calls: expect.any(Array) },
      { role: "tool", tool_call_id: "call_r", content: "contents of a.txt" },
      { role: "tool", tool_call_id: "call_w", content: "(Proposal approved by alice.)\nwrote 12 bytes" },
      {
        role: "tool",
        tool_call_id: "call_x",
        content:
          "Error: Rejected by alice (reason: unsafe): not during business hours. The call was not made. Adapt instead of repeating the same call.",
      },
    ]);
  });
});
