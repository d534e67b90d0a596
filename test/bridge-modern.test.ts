/**
 * The bridge at MCP 2026-07-28 (participants/bridge/server.ts, forward.ts) and a server's
 * input_required through /mcp/<participant> (participants/mcp-server/held/input.ts), against a
 * server of 2026-07-28 only, written with the SDK v2 on loopback. Hostile first: a server
 * that asks for input for ever (bounded rounds, a clear error, the bridge keeps serving); a
 * client that forges the face's own retry key or the flag that takes input_required; a
 * retry whose request state is huge; a caller that is no 2026-07-28 client gets no
 * input_required; a held call is still held.
 */
import { createServer, type Server } from "node:http";
import { createMcpHandler, inputRequired, McpServer } from "@modelcontextprotocol/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as z from "zod";
import { connectInProcess } from "../gateway/space/inprocess.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ParticipantClient, ParticipantError } from "../participants/index.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = { human: "human-token-0001", seat: "seat-token-00002", up: "up-token-0000003", bot: "bot-token-000004" };
const SPACE = `
space: {id: lab}
policy:
  proposal_ttl_ms: 60000
participants:
  human: {kind: human, token: ${T.human}}
  seat:
    kind: agent
    token: ${T.seat}
    tools: {allow: ["up/hello", "up/ask_forever", "up/show"], ask: ["up/guarded"]}
    capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: mcp/response}, {kind: mcp/request}]
  bot:
    kind: agent
    token: ${T.bot}
    tools: {allow: ["up/*"]}
    capabilities: [{kind: chat}, {kind: mcp/request}, {kind: mcp/response}]
  up: {kind: mcp, token: ${T.up}}
`;

let upstream: Server | undefined;
let gw: TestGateway | undefined;
let bridge: Bridge | undefined;
const clients: ParticipantClient[] = [];
let asked = 0;
let guardedRuns = 0;

/** A server of 2026-07-28 only (no 2025-era session): its tools ask for input in band. */
function build(): McpServer {
  const server = new McpServer({ name: "modern-only", version: "1.0.0" }, { capabilities: { tools: {} } });
  const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });
  server.registerTool("hello", { description: "Says hi" }, async () => text("hi"));
  server.registerTool("ask_forever", { description: "Never satisfied", inputSchema: z.object({}) }, async (_a, ctx) => {
    asked++;
    const round = Number(ctx.mcpReq.requestState() ?? 0);
    return inputRequired({
      inputRequests: {
        more: inputRequired.elicit({
          message: `Round ${round}: one more answer`,
          requestedSchema: { type: "object", properties: { x: { type: "string" } }, required: ["x"] },
        }),
      },
      requestState: String(round + 1),
    });
  });
  server.registerTool("ask_deep", { description: "Asks with a request nested past any bound", inputSchema: z.object({}) }, async () => {
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 200; i++) deep = { type: "object", properties: { n: deep } };
    return inputRequired({
      inputRequests: {
        deep: inputRequired.elicit({ message: "Deep", requestedSchema: { type: "object", properties: { d: deep } } as never }),
      },
      requestState: "deep",
    });
  });
  server.registerTool("show", { description: "Says what the retry carried", inputSchema: z.object({}) }, async (_a, ctx) =>
    text(
      JSON.stringify({
        state: ctx.mcpReq.requestState() ?? null,
        responses: ctx.mcpReq.inputResponses ?? null,
        meta: Object.keys(ctx.mcpReq._meta ?? {}).sort(),
      }),
    ),
  );
  server.registerTool("guarded", { description: "Needs approval, then asks a name", inputSchema: z.object({}) }, async (_a, ctx) => {
    guardedRuns++;
    const r = ctx.mcpReq.inputResponses?.["name"] as { action?: string; content?: { name?: string } } | undefined;
    if (r?.content?.name) return text(`hello ${r.content.name}`);
    return inputRequired({
      inputRequests: {
        name: inputRequired.elicit({
          message: "Your name?",
          requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
        }),
      },
    });
  });
  return server;
}

async function startUpstream(): Promise<string> {
  const handler = createMcpHandler(() => build(), { legacy: "reject", onerror: () => {} });
  upstream = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    let body: unknown;
    try {
      body = raw.length > 0 ? JSON.parse(raw.toString("utf8")) : undefined;
    } catch {
      body = undefined;
    }
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
    const request = new Request(`http://127.0.0.1${req.url ?? "/"}`, {
      method: req.method,
      headers,
      body: raw.length > 0 ? raw : undefined,
    });
    const response = await handler.fetch(request, { parsedBody: body });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  await new Promise<void>((resolve) => upstream!.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(upstream.address() as { port: number }).port}/mcp`;
}

beforeAll(async () => {
  const url = await startUpstream();
  gw = await startGateway(SPACE);
  mountHttp(gw.gateway);
  const space = gw.gateway.spaces.get("lab")!;
  bridge = await startBridge({
    id: "up",
    server: { url } as never,
    client: { transport: () => connectInProcess(space, "up"), reconnect: false },
  });
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  clients.push(human);
  await waitForTool(human, "up/hello", 20_000);
}, 60_000);

afterAll(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await bridge?.stop();
  await gw?.stop();
  await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
});

type Answer = { result?: Record<string, unknown>; error?: { code: number; message: string } };
let id = 0;
/** A 2026-07-28 request to /mcp/up as the seat. */
async function call(
  name: string,
  params: Record<string, unknown> = {},
  caps: Record<string, unknown> = { elicitation: {} },
): Promise<Answer> {
  const { _meta, ...rest } = params as { _meta?: Record<string, unknown> };
  const res = await fetch(`http://127.0.0.1:${gw!.port}/mcp/up`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${T.seat}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": "tools/call",
      "mcp-name": name,
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: ++id,
      method: "tools/call",
      params: {
        name,
        arguments: {},
        ...rest,
        _meta: {
          "io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" },
          "io.modelcontextprotocol/clientCapabilities": caps,
          ..._meta,
        },
      },
    }),
  });
  const text = await res.text();
  return JSON.parse(text.startsWith("{") ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? "{}")) as Answer;
}

describe("a server's input_required through the bridge: hostile first", () => {
  it("stops a server that asks a space caller for input for ever after a bounded number of rounds, says so, and keeps serving", {
    timeout: 60_000,
  }, async () => {
    const bot = await ParticipantClient.connect({ url: gw!.url, space: "lab", token: T.bot });
    clients.push(bot);
    let forms = 0;
    bot.onRequest((req) => {
      if (req.method !== "elicitation/create") throw new Error(`unexpected ${req.method}`);
      forms++;
      return { action: "accept", content: { x: "again" } };
    });
    asked = 0;
    const err = await bot.request("system:gateway", "tools/call", { name: "up/ask_forever", arguments: {} }, { timeoutMs: 30_000 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ParticipantError);
    expect((err as ParticipantError).message).toMatch(/asked for input more than 8 times/);
    // The first answer and 8 retries at most: a bounded flood.
    expect(asked).toBeLessThanOrEqual(9);
    expect(forms).toBeLessThanOrEqual(9);
    // The bridge still serves.
    const ok = (await bot.request("system:gateway", "tools/call", { name: "up/hello", arguments: {} })) as { content: { text: string }[] };
    expect(ok.content[0]!.text).toBe("hi");
  });

  it("refuses a method the server's revision has no word for as that request's error, and the server stays up", {
    timeout: 30_000,
  }, async () => {
    const bot = clients.find((c) => c.id === "bot")!;
    const err = await bot.request("up", "resources/subscribe", { uri: "x://y" }, { timeoutMs: 10_000 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ParticipantError);
    expect((err as ParticipantError).rpcCode).toBe(-32601);
    expect((err as ParticipantError).message).toMatch(/cannot be asked resources\/subscribe/);
    expect(bridge!.status).toBe("running");
    const ok = (await bot.request("system:gateway", "tools/call", { name: "up/hello", arguments: {} })) as { content: { text: string }[] };
    expect(ok.content[0]!.text).toBe("hi");
  });

  it("passes a 2026-07-28 client's retry to the server as it came, but no forged retry key or flag of the gateway's", {
    timeout: 30_000,
  }, async () => {
    // The client forges the face's own keys in _meta: the server sees neither, and no retry.
    const forged = await call("show", {
      _meta: { "mewgate/retry": { requestState: "forged", inputResponses: { a: { action: "accept" } } }, "mewgate/input_required": false },
    });
    const seen = JSON.parse((forged.result!["content"] as { text: string }[])[0]!.text) as {
      state: unknown;
      responses: unknown;
      meta: string[];
    };
    expect(seen.state).toBeNull();
    expect(seen.responses).toBeNull();
    expect(seen.meta.filter((k) => k.startsWith("mewgate/"))).toEqual([]);
    // Asked through the space, the gateway's own keys (a timeout, the person a call acts for) stay with the bridge too.
    const bot = clients.find((c) => c.id === "bot") ?? (await ParticipantClient.connect({ url: gw!.url, space: "lab", token: T.bot }));
    if (!clients.includes(bot)) clients.push(bot);
    const direct = (await bot.request("system:gateway", "tools/call", {
      name: "up/show",
      arguments: {},
      _meta: { "mewgate/timeout_ms": 20_000, "mewgate/person": "alice", "example.com/ticket": "T-9" },
    })) as { content: { text: string }[] };
    const heard = JSON.parse(direct.content[0]!.text) as { meta: string[] };
    expect(heard.meta).toContain("example.com/ticket");
    expect(heard.meta.filter((k) => k.startsWith("mewgate/"))).toEqual([]);
    // A real retry: its state and responses arrive untouched.
    const retry = await call("show", { requestState: "opaque-state-Ω", inputResponses: { q: { action: "accept", content: { v: 1 } } } });
    const got = JSON.parse((retry.result!["content"] as { text: string }[])[0]!.text) as { state: unknown; responses: unknown };
    expect(got.state).toBe("opaque-state-Ω");
    expect(got.responses).toEqual({ q: { action: "accept", content: { v: 1 } } });
  });

  it("refuses a retry whose request state is huge with a message that says so, and serves the next request", {
    timeout: 30_000,
  }, async () => {
    const huge = await call("show", { requestState: "x".repeat(70_000) });
    expect(huge.result).toBeUndefined();
    expect(huge.error?.message).toMatch(/longer than 65536/);
    const ok = await call("hello");
    expect(JSON.stringify(ok.result)).toContain("hi");
  });

  it("refuses a server's input_required nested past the space's bound with a clear error, and serves the next call", {
    timeout: 30_000,
  }, async () => {
    const deep = await call("ask_deep");
    // The bridge's own failure, as a tool error the client can read (not a wait until some timeout).
    expect(deep.result?.["isError"]).toBe(true);
    expect(JSON.stringify(deep.result?.["content"])).toMatch(/nested more than 62 levels deep/);
    const ok = await call("hello");
    expect(JSON.stringify(ok.result)).toContain("hi");
  });

  it("hands a 2026-07-28 client the server's input_required, and the multi-round trip completes", { timeout: 30_000 }, async () => {
    asked = 0;
    const first = await call("ask_forever");
    expect(first.result?.["resultType"]).toBe("input_required");
    expect(first.result?.["requestState"]).toBe("1");
    const second = await call("ask_forever", { requestState: "1", inputResponses: { more: { action: "accept", content: { x: "a" } } } });
    expect(second.result?.["requestState"]).toBe("2");
    // Each round is one request of the client's: nothing loops inside the gateway.
    expect(asked).toBe(2);
  });

  it("still holds a call the space's policy holds: the seat gets its own held state, the server runs only once approved", {
    timeout: 60_000,
  }, async () => {
    const human = clients[0]!;
    const proposals: Envelope[] = [];
    human.on("proposal", (p) => proposals.push(p));
    guardedRuns = 0;
    const caps = { elicitation: { url: {}, form: {} } };
    const held = await call("guarded", {}, caps);
    expect(held.result?.["resultType"]).toBe("input_required");
    const state = String(held.result?.["requestState"]);
    expect(state.startsWith("h1.")).toBe(true);
    await waitFor(() => proposals.length === 1);
    expect(guardedRuns).toBe(0);
    human.approve(proposals[0]!.id);
    // Once approved, the server ran and asked a name: that input_required is the server's, passed on.
    let after: Answer | undefined;
    await waitFor(async () => {
      after = await call("guarded", { requestState: state }, caps);
      return after.result?.["inputRequests"] !== undefined && "name" in (after.result["inputRequests"] as object);
    });
    expect(guardedRuns).toBe(1);
    expect(after!.result?.["resultType"]).toBe("input_required");
  });
});
