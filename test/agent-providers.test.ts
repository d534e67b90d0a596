import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { encodeToolName } from "../participants/agent/names.js";
import { AnthropicProvider, toAnthropicMessages } from "../participants/agent/providers/anthropic.js";
import { backoffDelay, retryAfterMs } from "../participants/agent/providers/http.js";
import { createProvider } from "../participants/agent/providers/index.js";
import { OpenAIProvider } from "../participants/agent/providers/openai.js";
import { ScriptedProvider, ScriptError } from "../participants/agent/providers/scripted.js";
import { ProviderError, type Message, type ModelRequest, type ToolDefinition } from "../participants/agent/providers/types.js";
import { anthropicReply, closedPort, ModelServer, openaiReply } from "./fixtures/agent/model-server.js";

const KEY = "sk-test-0123456789-secret";
const FAST = { attempts: 4, baseDelayMs: 1, maxDelayMs: 5, totalTimeMs: 5000, requestTimeoutMs: 2000 };

const tools: ToolDefinition[] = [
  {
    name: encodeToolName("fs/read_file"),
    description: "[fs/read_file] Read a file",
    parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  },
  {
    name: encodeToolName("web-search/search.query"),
    description: "[web-search/search.query] Search",
    parameters: { type: "object", properties: {} },
  },
];

function request(messages: Message[], extra: Partial<ModelRequest["options"]> = {}): ModelRequest {
  return { system: "You are helper.", messages, tools, options: { model: "test-model", temperature: 0.2, maxTokens: 500, ...extra } };
}

async function rejection(p: Promise<unknown>): Promise<ProviderError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderError);
  return err as ProviderError;
}

let server: ModelServer;
beforeEach(async () => {
  server = await new ModelServer().start();
});
afterEach(async () => {
  await server.stop();
});

describe("OpenAI-compatible provider", () => {
  const provider = () => new OpenAIProvider({ baseUrl: `${server.url}/v1/`, apiKey: KEY, retry: FAST });

  it("parses a reply with three tool calls and sends tools, messages, model and the key", async () => {
    server.reply(
      openaiReply({
        content: "Looking.",
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "fs__read_file", arguments: '{"path":"README.md"}' } },
          { id: "call_b", type: "function", function: { name: "fs__read_file", arguments: '{"path":"package.json"}' } },
          { id: "call_c", type: "function", function: { name: "web-search__search_X2equery", arguments: '{"q":"mew protocol"}' } },
        ],
      }),
    );
    const res = await provider().complete(request([{ role: "user", text: "alice: read the docs" }]));
    expect(res.text).toBe("Looking.");
    expect(res.stopReason).toBe("tool_use");
    expect(res.usage).toEqual({ input: 120, output: 30 });
    expect(res.toolCalls).toEqual([
      { id: "call_a", name: "fs__read_file", arguments: { path: "README.md" }, rawArguments: '{"path":"README.md"}' },
      { id: "call_b", name: "fs__read_file", arguments: { path: "package.json" }, rawArguments: '{"path":"package.json"}' },
      { id: "call_c", name: "web-search__search_X2equery", arguments: { q: "mew protocol" }, rawArguments: '{"q":"mew protocol"}' },
    ]);

    const [req] = server.requests;
    expect(req!.method).toBe("POST");
    expect(req!.url).toBe("/v1/chat/completions");
    expect(req!.headers["authorization"]).toBe(`Bearer ${KEY}`);
    expect(req!.headers["content-type"]).toBe("application/json");
    expect(req!.body).toEqual({
      model: "test-model",
      temperature: 0.2,
      max_tokens: 500,
      messages: [
        { role: "system", content: "You are helper." },
        { role: "user", content: "alice: read the docs" },
      ],
      tools: [
        {
          type: "function",
          function: {
            name: "fs__read_file",
            description: "[fs/read_file] Read a file",
            parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
          },
        },
        {
          type: "function",
          function: {
            name: "web-search__search_X2equery",
            description: "[web-search/search.query] Search",
            parameters: { type: "object", properties: {} },
          },
        },
      ],
    });
  });

  it("serializes a multi-turn conversation with tool results", async () => {
    server.reply(openaiReply({ content: "Both done." }));
    const messages: Message[] = [
      { role: "user", text: "alice: read two files" },
      {
        role: "assistant",
        text: "",
        toolCalls: [
          { id: "call_1", name: "fs__read_file", arguments: { path: "a" } },
          { id: "call_2", name: "fs__read_file", arguments: {}, rawArguments: "{oops", invalidArguments: "arguments are not valid JSON" },
        ],
      },
      { role: "tool", callId: "call_1", name: "fs__read_file", content: "contents of a", isError: false },
      { role: "tool", callId: "call_2", name: "fs__read_file", content: "invalid_arguments: not JSON", isError: true },
    ];
    const res = await provider().complete(request(messages));
    expect(res).toMatchObject({ text: "Both done.", toolCalls: [], stopReason: "end_turn" });
    expect(server.requests[0]!.body.messages).toEqual([
      { role: "system", content: "You are helper." },
      { role: "user", content: "alice: read two files" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "fs__read_file", arguments: '{"path":"a"}' } },
          // What the model sent is echoed as it was, so it can see its own mistake.
          { id: "call_2", type: "function", function: { name: "fs__read_file", arguments: "{oops" } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "contents of a" },
      { role: "tool", tool_call_id: "call_2", content: "Error: invalid_arguments: not JSON" },
    ]);
  });

  it("turns bad argument JSON into a marked call instead of failing, and accepts compatible-server variants", async () => {
    server.reply(
      openaiReply({
        content: [
          { type: "text", text: "part one " },
          { type: "text", text: "and two" },
        ],
        tool_calls: [
          { id: "call_bad", type: "function", function: { name: "fs__read_file", arguments: '{"path": "a"' } },
          { id: "call_arr", type: "function", function: { name: "fs__read_file", arguments: "[1,2]" } },
          // Ollama-style: arguments as an object and no id.
          { function: { name: "fs__read_file", arguments: { path: "b" } } },
          { id: "call_empty", type: "function", function: { name: "fs__read_file", arguments: "" } },
        ],
      }),
    );
    const res = await provider().complete(request([{ role: "user", text: "go" }]));
    expect(res.text).toBe("part one and two");
    const [bad, arr, obj, empty] = res.toolCalls;
    expect(bad).toMatchObject({ id: "call_bad", arguments: {}, rawArguments: '{"path": "a"' });
    expect(bad!.invalidArguments).toMatch(/not valid JSON/);
    expect(arr!.invalidArguments).toMatch(/must be a JSON object, got an array/);
    expect(obj).toEqual({ id: "call_2", name: "fs__read_file", arguments: { path: "b" } });
    expect(empty).toMatchObject({ id: "call_empty", arguments: {} });
    expect(empty!.invalidArguments).toBeUndefined();
  });

  it("retries a 429 that says retry-after: 0, then succeeds", async () => {
    server.reply(
      { status: 429, headers: { "retry-after": "0" }, body: { error: { message: "Rate limit reached" } } },
      openaiReply({ content: "ok" }),
    );
    const res = await provider().complete(request([{ role: "user", text: "hi" }]));
    expect(res.text).toBe("ok");
    expect(server.requests).toHaveLength(2);
  });

  it("retries 500 twice, then succeeds", async () => {
    server.reply(
      { status: 500, body: { error: { message: "boom" } } },
      { status: 503, raw: "<html>unavailable</html>" },
      openaiReply({ content: "third time" }),
    );
    const res = await provider().complete(request([{ role: "user", text: "hi" }]));
    expect(res.text).toBe("third time");
    expect(server.requests).toHaveLength(3);
  });

  it("gives up on persistent 5xx after the bounded attempts with the server's message", async () => {
    server.reply(...Array.from({ length: 4 }, () => ({ status: 502, body: { error: { message: "bad gateway upstream" } } })));
    const err = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(err).toMatchObject({ code: "http_error", status: 502, attempts: 4, provider: "openai" });
    expect(err.message).toContain("bad gateway upstream");
    expect(server.requests).toHaveLength(4);
  });

  it("fails a 401 at once with a clear message that does not contain the key", async () => {
    server.reply({ status: 401, body: { error: { message: `Incorrect API key provided: ${KEY}`, type: "invalid_request_error" } } });
    const err = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(err).toMatchObject({ code: "http_error", status: 401, attempts: 1 });
    expect(err.message).toContain("401");
    expect(err.message).toContain("Incorrect API key provided");
    expect(err.message).toContain("check the API key");
    expect(err.message).not.toContain(KEY);
    expect(server.requests).toHaveLength(1);
  });

  it("fails other 4xx at once", async () => {
    server.reply({ status: 400, body: { error: { message: "model 'nope' not found" } } });
    const err = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(err).toMatchObject({ code: "http_error", status: 400, attempts: 1 });
    expect(err.message).toContain("model 'nope' not found");
  });

  it("reports an unreachable endpoint quickly after bounded retries", async () => {
    const port = await closedPort();
    const p = new OpenAIProvider({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: KEY, retry: { ...FAST, attempts: 3 } });
    const started = Date.now();
    const err = await rejection(p.complete(request([{ role: "user", text: "hi" }])));
    expect(Date.now() - started).toBeLessThan(2000);
    expect(err).toMatchObject({ code: "unreachable", attempts: 3 });
    expect(err.message).toContain(`127.0.0.1:${port}`);
    expect(err.message).toMatch(/ECONNREFUSED/);
    expect(err.message).toContain("after 3 attempts");
  });

  it("times out an attempt that gets no answer, and counts it as unreachable", async () => {
    const { createServer } = await import("node:http");
    const silent = createServer(() => {
      /* never answers */
    });
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as { port: number }).port;
    try {
      const p = new OpenAIProvider({
        baseUrl: `http://127.0.0.1:${port}`,
        apiKey: KEY,
        retry: { ...FAST, attempts: 2, requestTimeoutMs: 100 },
      });
      const err = await rejection(p.complete(request([{ role: "user", text: "hi" }])));
      expect(err).toMatchObject({ code: "unreachable", attempts: 2 });
      expect(err.message).toContain("no response within 100 ms");
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });

  it("refuses a retry-after beyond the time budget without waiting", async () => {
    server.reply({ status: 429, headers: { "retry-after": "3600" }, body: { error: { message: "quota" } } });
    const started = Date.now();
    const err = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(Date.now() - started).toBeLessThan(1000);
    expect(err).toMatchObject({ code: "rate_limited", status: 429, attempts: 1 });
    expect(err.message).toContain("retry after 3600 s");
  });

  it("ends with rate_limited when 429 persists", async () => {
    server.reply(...Array.from({ length: 4 }, () => ({ status: 429, body: { error: { message: "slow down" } } })));
    const err = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(err).toMatchObject({ code: "rate_limited", attempts: 4 });
  });

  it("needs a key for a remote endpoint, not for a local one", async () => {
    const remote = new OpenAIProvider({ baseUrl: "https://api.example.com/v1", apiKeyEnv: "EXAMPLE_KEY" });
    const err = await rejection(remote.complete(request([{ role: "user", text: "hi" }])));
    expect(err.code).toBe("missing_api_key");
    expect(err.message).toContain("EXAMPLE_KEY");
    expect(err.attempts).toBe(0);

    server.reply(openaiReply({ content: "local ok" }));
    const local = new OpenAIProvider({ baseUrl: server.url, retry: FAST });
    expect((await local.complete(request([{ role: "user", text: "hi" }]))).text).toBe("local ok");
    expect(server.requests[0]!.headers["authorization"]).toBeUndefined();
  });

  it("reports a 200 that is not JSON, or not a completion, as bad_response", async () => {
    server.reply({ raw: "<html>captive portal</html>" }, { body: { choices: [] } });
    const notJson = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(notJson.code).toBe("bad_response");
    expect(notJson.message).toContain("captive portal");
    const noChoice = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(noChoice.code).toBe("bad_response");
    expect(noChoice.message).toContain("choices");
  });

  it("stops at once when aborted, also while waiting to retry", async () => {
    server.reply({ status: 503, headers: { "retry-after": "2" }, body: {} });
    const controller = new AbortController();
    const started = Date.now();
    const pending = new OpenAIProvider({ baseUrl: server.url, apiKey: KEY, retry: { ...FAST, totalTimeMs: 10_000 } }).complete(
      request([{ role: "user", text: "hi" }], { signal: controller.signal }),
    );
    setTimeout(() => controller.abort(), 100);
    const err = await rejection(pending);
    expect(err.code).toBe("aborted");
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it("can send max_completion_tokens for models that want it", async () => {
    server.reply(openaiReply({ content: "x" }));
    await new OpenAIProvider({ baseUrl: server.url, apiKey: KEY, maxTokensField: "max_completion_tokens" }).complete(
      request([{ role: "user", text: "hi" }]),
    );
    expect(server.requests[0]!.body).toMatchObject({ max_completion_tokens: 500 });
    expect(server.requests[0]!.body.max_tokens).toBeUndefined();
  });
});

describe("Anthropic provider", () => {
  const provider = () => new AnthropicProvider({ baseUrl: server.url, apiKey: KEY, retry: FAST });

  it("parses tool_use blocks and sends the headers, system, tools and max_tokens", async () => {
    server.reply(
      anthropicReply(
        [
          { type: "text", text: "I'll read both." },
          { type: "tool_use", id: "toolu_1", name: "fs__read_file", input: { path: "a" } },
          { type: "tool_use", id: "toolu_2", name: "fs__read_file", input: { path: "b" } },
          { type: "tool_use", id: "toolu_3", name: "web-search__search_X2equery", input: {} },
        ],
        "tool_use",
      ),
    );
    const res = await provider().complete({ ...request([{ role: "user", text: "alice: read" }]), options: { model: "claude-test" } });
    expect(res.text).toBe("I'll read both.");
    expect(res.stopReason).toBe("tool_use");
    expect(res.usage).toEqual({ input: 200, output: 40 });
    expect(res.toolCalls).toEqual([
      { id: "toolu_1", name: "fs__read_file", arguments: { path: "a" } },
      { id: "toolu_2", name: "fs__read_file", arguments: { path: "b" } },
      { id: "toolu_3", name: "web-search__search_X2equery", arguments: {} },
    ]);
    const [req] = server.requests;
    expect(req!.url).toBe("/v1/messages");
    expect(req!.headers["x-api-key"]).toBe(KEY);
    expect(req!.headers["anthropic-version"]).toBe("2023-06-01");
    expect(req!.headers["authorization"]).toBeUndefined();
    expect(req!.body).toEqual({
      model: "claude-test",
      max_tokens: 4096,
      system: "You are helper.",
      messages: [{ role: "user", content: [{ type: "text", text: "alice: read" }] }],
      tools: [
        {
          name: "fs__read_file",
          description: "[fs/read_file] Read a file",
          input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
        },
        {
          name: "web-search__search_X2equery",
          description: "[web-search/search.query] Search",
          input_schema: { type: "object", properties: {} },
        },
      ],
    });
  });

  it("puts tool results in one user turn, first, and merges consecutive same-role messages", async () => {
    server.reply(anthropicReply([{ type: "text", text: "Done." }]));
    const messages: Message[] = [
      { role: "user", text: "alice: read" },
      { role: "user", text: "bob: and quickly" },
      {
        role: "assistant",
        text: "",
        toolCalls: [
          { id: "toolu_1", name: "fs__read_file", arguments: { path: "a" } },
          { id: "toolu_2", name: "fs__read_file", arguments: { path: "b" } },
        ],
      },
      { role: "tool", callId: "toolu_1", name: "fs__read_file", content: "A", isError: false },
      { role: "tool", callId: "toolu_2", name: "fs__read_file", content: "Rejected by alice (reason: unsafe)", isError: true },
      { role: "user", text: "carol: any news?" },
    ];
    const res = await provider().complete({ ...request(messages), options: { model: "claude-test", maxTokens: 100, temperature: 0 } });
    expect(res).toMatchObject({ text: "Done.", stopReason: "end_turn", toolCalls: [] });
    const body = server.requests[0]!.body;
    expect(body.max_tokens).toBe(100);
    expect(body.temperature).toBe(0);
    expect(body.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "alice: read" },
          { type: "text", text: "bob: and quickly" },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "toolu_1", name: "fs__read_file", input: { path: "a" } },
          { type: "tool_use", id: "toolu_2", name: "fs__read_file", input: { path: "b" } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_1", content: "A" },
          { type: "tool_result", tool_use_id: "toolu_2", content: "Rejected by alice (reason: unsafe)", is_error: true },
          { type: "text", text: "carol: any news?" },
        ],
      },
    ]);
  });

  it("opens with a user turn even when old turns were dropped", () => {
    const out = toAnthropicMessages([
      { role: "assistant", text: "earlier reply", toolCalls: [] },
      { role: "user", text: "" },
    ]);
    expect(out).toEqual([
      { role: "user", content: [{ type: "text", text: "(earlier conversation omitted)" }] },
      { role: "assistant", content: [{ type: "text", text: "earlier reply" }] },
    ]);
  });

  it("retries 429 and 529 (overloaded), then succeeds", async () => {
    server.reply(
      { status: 429, headers: { "retry-after": "0" }, body: { type: "error", error: { type: "rate_limit_error", message: "slow" } } },
      { status: 529, body: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } },
      anthropicReply([{ type: "text", text: "fine" }]),
    );
    expect((await provider().complete(request([{ role: "user", text: "hi" }]))).text).toBe("fine");
    expect(server.requests).toHaveLength(3);
  });

  it("fails a 401 at once with the provider's message and without the key", async () => {
    server.reply({ status: 401, body: { type: "error", error: { type: "authentication_error", message: `invalid x-api-key ${KEY}` } } });
    const err = await rejection(provider().complete(request([{ role: "user", text: "hi" }])));
    expect(err).toMatchObject({ code: "http_error", status: 401, provider: "anthropic", attempts: 1 });
    expect(err.message).toContain("invalid x-api-key");
    expect(err.message).not.toContain(KEY);
  });

  it("needs a key", async () => {
    const err = await rejection(new AnthropicProvider({ baseUrl: server.url }).complete(request([{ role: "user", text: "hi" }])));
    expect(err.code).toBe("missing_api_key");
    expect(err.message).toContain("ANTHROPIC_API_KEY");
    expect(server.requests).toHaveLength(0);
  });

  it("reports an unreachable endpoint", async () => {
    const port = await closedPort();
    const err = await rejection(
      new AnthropicProvider({ baseUrl: `http://127.0.0.1:${port}`, apiKey: KEY, retry: { ...FAST, attempts: 2 } }).complete(
        request([{ role: "user", text: "hi" }]),
      ),
    );
    expect(err).toMatchObject({ code: "unreachable", attempts: 2 });
  });
});

describe("retry helpers", () => {
  it("backs off exponentially within the upper half of each step, capped", () => {
    const retry = { baseDelayMs: 100, maxDelayMs: 1000 };
    expect(backoffDelay(1, retry, () => 0)).toBe(50);
    expect(backoffDelay(1, retry, () => 1)).toBe(100);
    expect(backoffDelay(3, retry, () => 1)).toBe(400);
    expect(backoffDelay(10, retry, () => 1)).toBe(1000);
    expect(backoffDelay(10, retry, () => 0)).toBe(500);
  });

  it("reads retry-after in seconds, as a date, and retry-after-ms", () => {
    const now = Date.parse("2025-01-01T00:00:00Z");
    expect(retryAfterMs(new Headers({ "retry-after": "2" }), now)).toBe(2000);
    expect(retryAfterMs(new Headers({ "retry-after": "Wed, 01 Jan 2025 00:00:05 GMT" }), now)).toBe(5000);
    expect(retryAfterMs(new Headers({ "retry-after-ms": "250", "retry-after": "9" }), now)).toBe(250);
    expect(retryAfterMs(new Headers({ "retry-after": "soon" }), now)).toBeUndefined();
    expect(retryAfterMs(new Headers(), now)).toBeUndefined();
  });
});

describe("scripted provider", () => {
  const offered: ToolDefinition[] = [
    { name: encodeToolName("fs/read_file"), description: "", parameters: { type: "object" } },
    { name: encodeToolName("my_srv.v2/get weather"), description: "", parameters: { type: "object" } },
  ];
  const req = (messages: Message[]): ModelRequest => ({ system: "s", messages, tools: offered, options: { model: "scripted" } });

  it("replays steps in order, maps real names through the encoder, then falls back", async () => {
    const p = new ScriptedProvider({
      steps: [
        { text: "Reading.", tool_calls: [{ name: "fs/read_file", arguments: { path: "a" } }, { name: "my_srv.v2/get weather" }] },
        { text: "Done: {{tool_results}}" },
      ],
      fallback: "Out of script.",
    });
    const first = await p.complete(req([{ role: "user", text: "alice: go" }]));
    expect(first.text).toBe("Reading.");
    expect(first.stopReason).toBe("tool_use");
    expect(first.toolCalls).toEqual([
      { id: "call_1", name: "fs__read_file", arguments: { path: "a" } },
      { id: "call_2", name: "my_srv_X2ev2__get_X20weather", arguments: {} },
    ]);
    expect(first.toolCalls.map((c) => c.name)).toEqual(offered.map((t) => t.name));
    expect(first.usage!.input).toBeGreaterThan(0);

    const second = await p.complete(
      req([
        { role: "user", text: "alice: go" },
        { role: "assistant", text: "Reading.", toolCalls: first.toolCalls },
        { role: "tool", callId: "call_1", name: "fs__read_file", content: "AAA", isError: false },
        { role: "tool", callId: "call_2", name: "x", content: "sunny", isError: false },
      ]),
    );
    expect(second).toMatchObject({ text: "Done: AAA\nsunny", toolCalls: [], stopReason: "end_turn" });
    expect((await p.complete(req([{ role: "user", text: "more?" }]))).text).toBe("Out of script.");
    expect(p.requests).toHaveLength(3);
    expect(p.remaining).toBe(0);
  });

  it("picks the first unused step whose `when` holds", async () => {
    const p = new ScriptedProvider([
      { when: { user_contains: "HELLO" }, text: "Hi {{user}}" },
      { when: { after_tool_result: true, tool_error: true }, text: "That failed.", repeat: true },
      { when: { after_tool_result: true, tool_result_contains: "approved" }, text: "It went through." },
      { when: { user_matches: "^bob: (list|show)" }, text: "Listing.", tool_calls: [{ name: "fs/read_file", arguments: { path: "." } }] },
    ]);
    expect((await p.complete(req([{ role: "user", text: "bob: show me" }]))).text).toBe("Listing.");
    expect((await p.complete(req([{ role: "user", text: "alice: hello there" }]))).text).toBe("Hi alice: hello there");
    // Only what arrived since the last assistant message counts.
    const afterReply: Message[] = [
      { role: "user", text: "alice: hello again" },
      { role: "assistant", text: "", toolCalls: [{ id: "c", name: "fs__read_file", arguments: {} }] },
    ];
    const rejected = await p.complete(
      req([...afterReply, { role: "tool", callId: "c", name: "fs__read_file", content: "Rejected by alice", isError: true }]),
    );
    expect(rejected.text).toBe("That failed.");
    const again = await p.complete(
      req([...afterReply, { role: "tool", callId: "c", name: "fs__read_file", content: "nope", isError: true }]),
    );
    expect(again.text).toBe("That failed."); // repeat: true
    const ok = await p.complete(
      req([
        ...afterReply,
        { role: "tool", callId: "c", name: "fs__read_file", content: "(Proposal approved by alice.) ok", isError: false },
      ]),
    );
    expect(ok.text).toBe("It went through.");
    expect((await p.complete(req([{ role: "user", text: "alice: hello" }]))).text).toBe("I have nothing further to add.");
  });

  it("loads a YAML script from a file and reports a bad one with its path", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-script-"));
    try {
      const good = join(dir, "demo.yaml");
      writeFileSync(
        good,
        [
          "steps:",
          "  - when: {user_contains: files}",
          "    text: Looking",
          "    tool_calls:",
          "      - name: fs/read_file",
          "        arguments: {path: README.md}",
          "fallback: bye",
          "",
        ].join("\n"),
      );
      const p = await ScriptedProvider.fromFile(good);
      const res = await p.complete(req([{ role: "user", text: "alice: list files" }]));
      expect(res.toolCalls).toEqual([{ id: "call_1", name: "fs__read_file", arguments: { path: "README.md" } }]);

      const bad = join(dir, "bad.json");
      writeFileSync(bad, JSON.stringify({ steps: [{ text: "x", tool_calls: [{ nme: "fs/read_file" }] }] }));
      const err = await ScriptedProvider.fromFile(bad).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ScriptError);
      expect((err as Error).message).toContain("bad.json: steps.0.tool_calls.0");
      await expect(ScriptedProvider.fromFile(join(dir, "missing.yaml"))).rejects.toThrow(/cannot read the script/);
      expect(() => new ScriptedProvider([{ when: { user_matches: "(" }, text: "x" }])).toThrow(/user_matches/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("is built by createProvider from settings, like the HTTP ones", async () => {
    const scripted = await createProvider({ provider: "scripted", script: [{ text: "hi" }] });
    expect(scripted.provider.name).toBe("scripted");
    expect((await scripted.provider.complete(req([{ role: "user", text: "x" }]))).text).toBe("hi");

    server.reply(openaiReply({ content: "via settings" }));
    const openai = await createProvider(
      { provider: "openai", model: "m", base_url: server.url, api_key_env: "MY_KEY", temperature: 0.5, max_tokens: 42 },
      { env: { MY_KEY: KEY }, retry: FAST },
    );
    expect(openai.options).toEqual({ model: "m", temperature: 0.5, maxTokens: 42 });
    expect((await openai.provider.complete({ ...req([{ role: "user", text: "x" }]), options: openai.options })).text).toBe("via settings");
    expect(server.requests[0]!.headers["authorization"]).toBe(`Bearer ${KEY}`);

    const anthropic = await createProvider({ provider: "anthropic", model: "claude" }, { env: {} });
    const err = await rejection(anthropic.provider.complete(req([{ role: "user", text: "x" }])));
    expect(err.code).toBe("missing_api_key");
  });
});
