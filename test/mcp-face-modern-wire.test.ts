/**
 * What passes through the HTTP faces at MCP 2026-07-28 besides results (issue 47): a
 * client's cancellation reaches the server; the log lines a server sends during a call
 * reach the client at the level it asked (and `logging` is advertised); the bridge's CLIENT
 * span says the revision it spoke and the server's address and port; a `traceparent` sent
 * only as an HTTP header continues the client's trace. A plain SDK v2 client pinned to
 * 2026-07-28, through the real gateway, to a real server of 2026-07-28 (SDK v2) on loopback,
 * each compared with the same client talking to the server directly.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Client as V2Client, StreamableHTTPClientTransport as V2Http } from "@modelcontextprotocol/client";
import { createMcpHandler, McpServer } from "@modelcontextprotocol/server";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { startGateway, type TestGateway, waitFor } from "./helpers.js";

const T = { claude: "claude-token-0001", up: "up-token-00000002" };
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const ROOT_SPAN = "00f067aa0ba902b7";
const LOG_LEVEL = "io.modelcontextprotocol/logLevel";

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
}

const servers: Server[] = [];
let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const b of bridges.splice(0)) await b.stop();
  await gw?.stop();
  gw = undefined;
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

const attr = (s: Span, key: string) => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v === undefined ? undefined : (v["stringValue"] ?? v["intValue"] ?? v["boolValue"]);
};

async function listen(server: Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as AddressInfo).port;
}

/** A server of 2026-07-28 on loopback: `talk` logs three lines during the call; `wait` runs until cancelled. */
async function upstream(): Promise<{ url: string; port: number; cancelled: () => number; started: () => number }> {
  let cancelled = 0;
  let started = 0;
  const build = () => {
    const server = new McpServer({ name: "wire", version: "1.0.0" }, { capabilities: { tools: {}, logging: {} } });
    server.registerTool("talk", { description: "Logs three lines", inputSchema: z.object({}) }, async (_a, ctx) => {
      for (let i = 1; i <= 3; i++) await ctx.mcpReq.log("info", `line ${i}`, "wire");
      await ctx.mcpReq.log("debug", "a debug line", "wire");
      return { content: [{ type: "text" as const, text: "talked" }] };
    });
    server.registerTool("wait", { description: "Waits until cancelled (at most 15 s)", inputSchema: z.object({}) }, async (_a, ctx) => {
      started++;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 15_000);
        ctx.mcpReq.signal.addEventListener("abort", () => {
          cancelled++;
          clearTimeout(timer);
          resolve();
        });
      });
      return { content: [{ type: "text" as const, text: "done waiting" }] };
    });
    return server;
  };
  const handler = createMcpHandler(build, { legacy: "reject", onerror: () => {} });
  const port = await listen(
    createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const raw = Buffer.concat(chunks);
      const abort = new AbortController();
      res.once("close", () => abort.abort());
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
      const request = new Request(`http://127.0.0.1${req.url ?? "/"}`, {
        method: req.method,
        headers,
        body: raw.length > 0 ? raw : undefined,
        signal: abort.signal,
      });
      let body: unknown;
      try {
        body = raw.length > 0 ? JSON.parse(raw.toString("utf8")) : undefined;
      } catch {
        body = undefined;
      }
      const response = await handler.fetch(request, { parsedBody: body });
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body) for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
      res.end();
    }),
  );
  return { url: `http://127.0.0.1:${port}/mcp`, port, cancelled: () => cancelled, started: () => started };
}

async function otlp(): Promise<{ url: string; spans: Span[] }> {
  const got = { url: "", spans: [] as Span[] };
  const port = await listen(
    createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Span[] }> }> };
        for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) got.spans.push(...ss.spans);
        res.setHeader("content-type", "application/json");
        res.end("{}");
      });
    }),
  );
  got.url = `http://127.0.0.1:${port}/v1/traces`;
  return got;
}

async function setup(opts: { otlp?: string } = {}) {
  const up = await upstream();
  gw = await startGateway(`
space: {id: lab}
${opts.otlp ? `gateway: {telemetry: {otlp_endpoint: "${opts.otlp}", service_name: mewgate-test}}` : ""}
participants:
  claude: {kind: agent, token: ${T.claude}, tools: {allow: ["up/*"]}}
  up: {kind: mcp, token: ${T.up}}
`);
  const mount = mountHttp(gw.gateway);
  closers.push(() => mount.close());
  const space = gw.gateway.spaces.get("lab")!;
  bridges.push(
    await startBridge({
      id: "up",
      server: { url: up.url } as never,
      client: { transport: () => connectInProcess(space, "up"), reconnect: false },
      tracing: space.tracing,
    }),
  );
  await waitFor(() => space.registry.list().some((t) => t.participant === "up" && t.tool === "talk"), 15_000, "the server's tools");
  /** A plain SDK v2 client at 2026-07-28, directly or through the face; `headers` on every request. */
  const client = async (url: string, headers: Record<string, string> = {}) => {
    const c = new V2Client({ name: "plain", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
    const logs: string[] = [];
    c.setNotificationHandler("notifications/message", (n) => {
      logs.push(String((n.params as { data: unknown }).data));
    });
    await c.connect(new V2Http(new URL(url), { requestInit: { headers: { authorization: `Bearer ${T.claude}`, ...headers } } }));
    closers.push(() => c.close());
    return { c, logs };
  };
  return { up, client, face: `http://127.0.0.1:${gw.port}/mcp/up`, whole: `http://127.0.0.1:${gw.port}/mcp` };
}

describe("cancellation from a 2026-07-28 client through the faces", () => {
  it("reaches the server, as it does directly, at /mcp/<participant> and at /mcp", { timeout: 40_000 }, async () => {
    const s = await setup();
    for (const [url, name] of [
      [s.up.url, "wait"],
      [s.face, "wait"],
      [s.whole, "up__wait"],
    ] as const) {
      const { c } = await s.client(url);
      const before = s.up.cancelled();
      const started = s.up.started();
      const stop = new AbortController();
      const call = c.callTool({ name, arguments: {} }, { signal: stop.signal }).catch((e: Error) => e);
      await waitFor(() => s.up.started() === started + 1, 10_000, `the call at ${url} to start`);
      const at = Date.now();
      stop.abort();
      await call;
      await waitFor(() => s.up.cancelled() === before + 1, 5000, `the server to see the cancellation from ${url}`);
      expect(Date.now() - at).toBeLessThan(3000);
    }
  });
});

describe("a server's log lines to a 2026-07-28 client through the faces", () => {
  it("arrive as directly, at the level the client asked, and the face advertises logging", { timeout: 30_000 }, async () => {
    const s = await setup();
    const direct = await s.client(s.up.url);
    await direct.c.callTool({ name: "talk", arguments: {}, _meta: { [LOG_LEVEL]: "info" } });
    expect(direct.logs).toEqual(["line 1", "line 2", "line 3"]);
    for (const [url, name] of [
      [s.face, "talk"],
      [s.whole, "up__talk"],
    ] as const) {
      const through = await s.client(url);
      expect(through.c.getServerCapabilities()?.logging).toEqual({});
      await through.c.callTool({ name, arguments: {}, _meta: { [LOG_LEVEL]: "info" } });
      expect(through.logs).toEqual(["line 1", "line 2", "line 3"]);
      // A request that asked for no log gets none.
      const quiet = await s.client(url);
      await quiet.c.callTool({ name, arguments: {} });
      expect(quiet.logs).toEqual([]);
    }
  });

  it("keeps each request's lines to that request when calls run side by side", { timeout: 30_000 }, async () => {
    const s = await setup();
    const a = await s.client(s.face);
    const b = await s.client(s.face);
    await Promise.all([
      a.c.callTool({ name: "talk", arguments: {}, _meta: { [LOG_LEVEL]: "info" } }),
      b.c.callTool({ name: "talk", arguments: {}, _meta: { [LOG_LEVEL]: "error" } }),
    ]);
    expect(a.logs).toEqual(["line 1", "line 2", "line 3"]);
    expect(b.logs).toEqual([]);
  });
});

describe("traces of a 2026-07-28 call through the face", () => {
  it("the bridge's CLIENT span says 2026-07-28 and the server's address and port; a traceparent header alone continues the trace", {
    timeout: 40_000,
  }, async () => {
    const receiver = await otlp();
    const s = await setup({ otlp: receiver.url });
    const { c } = await s.client(s.face, { traceparent: `00-${TRACE}-${ROOT_SPAN}-01` });
    await c.callTool({ name: "talk", arguments: {} });
    await waitFor(
      () => receiver.spans.some((x) => x.traceId === TRACE && x.kind === 3),
      10_000,
      "the bridge's CLIENT span in the client's trace",
    );
    const ofTrace = receiver.spans.filter((x) => x.traceId === TRACE);
    const face = ofTrace.find((x) => x.kind === 2 && x.parentSpanId === ROOT_SPAN);
    expect(face?.name).toBe("tools/call talk");
    expect(attr(face!, "mcp.protocol.version")).toBe("2026-07-28");
    const out = ofTrace.find((x) => x.kind === 3)!;
    expect(out.name).toBe("tools/call talk");
    expect(attr(out, "mcp.protocol.version")).toBe("2026-07-28");
    expect(attr(out, "server.address")).toBe("127.0.0.1");
    expect(Number(attr(out, "server.port"))).toBe(s.up.port);
    expect(attr(out, "network.transport")).toBe("tcp");
    expect(attr(out, "mcp.session.id")).toBeUndefined();
  });
});
