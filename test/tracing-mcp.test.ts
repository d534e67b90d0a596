/**
 * Traces through an MCP face: an MCP client calls a tool at `/mcp/<participant>` with its
 * own `traceparent`; the face's SERVER span (session, revision, transport), the routed
 * call's span and the bridge's CLIENT span to the server are one trace under the client's,
 * exported to a real OTLP/HTTP receiver on loopback, and the server gets the CLIENT span's
 * context. Hostile first: a forged traceparent, huge or with control characters, starts a
 * trace of its own and is carried nowhere.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { CLI_MAIN, startGateway, waitFor, type TestGateway } from "./helpers.js";

const PAGES = join(import.meta.dirname, "fixtures", "bridge", "pages.mjs");
const T = { claude: "claude-token-002", pg: "pg-token-0000004" };
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const ROOT_SPAN = "00f067aa0ba902b7";
const ROOT = `00-${TRACE}-${ROOT_SPAN}-01`;

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
}

let gw: TestGateway | undefined;
let receiver: Server | undefined;
const bridges: Bridge[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const b of bridges.splice(0)) await b.stop();
  await gw?.stop();
  gw = undefined;
  receiver?.closeAllConnections();
  await new Promise((r) => (receiver ? receiver.close(r) : r(undefined)));
  receiver = undefined;
});

async function otlpReceiver(): Promise<{ url: string; spans: Span[] }> {
  const got = { url: "", spans: [] as Span[] };
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Span[] }> }> };
      for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) got.spans.push(...ss.spans);
      res.setHeader("content-type", "application/json");
      res.end("{}");
    });
  });
  await new Promise<void>((r) => receiver!.listen(0, "127.0.0.1", r));
  got.url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`;
  return got;
}

const attr = (s: Span, key: string) => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v === undefined ? undefined : (v["stringValue"] ?? v["intValue"] ?? v["boolValue"]);
};

/**
 * A space exporting to `otlp`, the pages server bridged in beside the gateway (with its
 * traces) or by `mewgate bridge` in a process of its own (`process: true`, exporting by
 * OTEL_*), and an MCP client at /mcp/pg.
 */
async function setup(
  otlp: string,
  opts: { process?: boolean; headers?: Record<string, string> } = {},
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  gw = await startGateway(`
space: {id: lab}
gateway: {telemetry: {otlp_endpoint: "${otlp}", service_name: mewgate-test}}
participants:
  claude: {kind: agent, token: ${T.claude}, tools: {allow: ["pg/*"]}, capabilities: [{kind: mcp/request}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: mcp/response}]}
  pg: {kind: mcp, token: ${T.pg}}
`);
  mountHttp(gw.gateway);
  const space = gw.gateway.spaces.get("lab")!;
  if (opts.process) {
    const child: ChildProcess = spawn(
      process.execPath,
      [CLI_MAIN, "bridge", "--gateway", gw.url, "--space", "lab", "--as", "pg", "--", process.execPath, PAGES],
      { env: { ...process.env, MEWGATE_TOKEN: T.pg, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: otlp }, stdio: ["ignore", "ignore", "pipe"] },
    );
    // SIGTERM: the bridge stops and flushes its spans.
    closers.push(async () => {
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
    });
  } else {
    bridges.push(
      await startBridge({
        id: "pg",
        server: { command: process.execPath, args: [PAGES] } as never,
        client: { transport: () => connectInProcess(space, "pg"), reconnect: false },
        tracing: space.tracing,
      }),
    );
  }
  await waitFor(
    async () =>
      (
        await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/lab/tools`, { headers: { authorization: `Bearer ${T.claude}` } }).then((r) =>
          r.text(),
        )
      ).includes('"caps"'),
    15_000,
    "the pages tools",
  );
  const client = new Client({ name: "trace-test", version: "1.0.0" }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw.port}/mcp/pg`), {
    requestInit: { headers: { Authorization: `Bearer ${T.claude}`, ...opts.headers } },
  });
  await client.connect(transport);
  closers.push(async () => {
    await transport.terminateSession().catch(() => {});
    await client.close();
  });
  return { client, transport };
}

const metaAtServer = (r: unknown) =>
  (JSON.parse(((r as CallToolResult).content[0] as { text: string }).text) as { meta: Record<string, unknown> }).meta;

describe("traces through an MCP face", () => {
  it("a forged traceparent, huge or with control characters, starts a trace of its own and reaches nobody", {
    timeout: 60_000,
  }, async () => {
    const otlp = await otlpReceiver();
    const { client } = await setup(otlp.url);
    const forged = [
      `00-${"f".repeat(20_000)}-${ROOT_SPAN}-01`,
      `00-${TRACE.slice(0, 30)}\u0000\u001b-${ROOT_SPAN}-01`,
      `00-${TRACE}-${ROOT_SPAN}-01\n`,
    ];
    for (const traceparent of forged) {
      const r = await client.callTool({ name: "caps", arguments: {}, _meta: { traceparent } });
      const at = String(metaAtServer(r)["traceparent"]);
      expect(at).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      expect(at).not.toContain(TRACE);
    }
    await waitFor(
      () => otlp.spans.filter((s) => s.name === "tools/call caps" && s.kind === 2 && attr(s, "mcp.session.id") !== undefined).length >= 3,
      10_000,
      "the face spans",
    );
    const faces = otlp.spans.filter((s) => attr(s, "mcp.session.id") !== undefined);
    for (const f of faces) {
      expect(f.parentSpanId ?? "").toBe("");
      expect(f.traceId).not.toBe(TRACE);
    }
    expect(JSON.stringify(otlp.spans)).not.toContain("ffffffffff");
  });

  it("continues the client's trace: the face's SERVER span, the routed call, the bridge's CLIENT span, and the server gets its context", {
    timeout: 60_000,
  }, async () => {
    const otlp = await otlpReceiver();
    const { client, transport } = await setup(otlp.url);
    const r = await client.callTool({ name: "caps", arguments: {}, _meta: { traceparent: ROOT } });
    await waitFor(() => otlp.spans.filter((s) => s.traceId === TRACE).length >= 3, 10_000, "three spans of the client's trace");
    const ofTrace = otlp.spans.filter((s) => s.traceId === TRACE);
    const face = ofTrace.find((s) => s.kind === 2 && s.parentSpanId === ROOT_SPAN)!;
    expect(face.name).toBe("tools/call caps");
    expect(attr(face, "mcp.session.id")).toBe(transport.sessionId);
    expect(attr(face, "mcp.protocol.version")).toBe(transport.protocolVersion);
    expect(attr(face, "network.transport")).toBe("tcp");
    expect(attr(face, "mcp.method.name")).toBe("tools/call");
    expect(attr(face, "gen_ai.tool.name")).toBe("caps");
    const routed = ofTrace.find((s) => s.parentSpanId === face.spanId)!;
    expect(routed.name).toBe("tools/call caps");
    expect(attr(routed, "mewgate.target")).toBe("pg");
    const out = ofTrace.find((s) => s.parentSpanId === routed.spanId)!;
    expect(out.kind).toBe(3); // CLIENT
    expect(attr(out, "network.transport")).toBe("pipe");
    expect(attr(out, "mewgate.target")).toBe("pg");
    expect(attr(out, "gen_ai.tool.name")).toBe("caps");
    // The server continues the trace under the bridge's CLIENT span.
    expect(metaAtServer(r)["traceparent"]).toBe(`00-${TRACE}-${out.spanId}-01`);
    // The gateway's own key is not the server's to read.
    expect(metaAtServer(r)["mewgate/client_capabilities"]).toBeUndefined();
  });

  it("continues a trace whose traceparent came as an HTTP header only, and a _meta one wins over it", { timeout: 60_000 }, async () => {
    const otlp = await otlpReceiver();
    const { client } = await setup(otlp.url, { headers: { traceparent: ROOT } });
    const r = await client.callTool({ name: "caps", arguments: {} });
    await waitFor(() => otlp.spans.filter((s) => s.traceId === TRACE).length >= 3, 10_000, "the client's trace from its header");
    const face = otlp.spans.find((s) => s.traceId === TRACE && s.kind === 2 && s.parentSpanId === ROOT_SPAN);
    expect(face?.name).toBe("tools/call caps");
    expect(String(metaAtServer(r)["traceparent"])).toMatch(new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`));
    const other = "0af7651916cd43dd8448eb211c80319c";
    const r2 = await client.callTool({ name: "caps", arguments: {}, _meta: { traceparent: `00-${other}-${ROOT_SPAN}-01` } });
    expect(String(metaAtServer(r2)["traceparent"])).toMatch(new RegExp(`^00-${other}-`));
  });

  it("a bridge in a process of its own exports its CLIENT span under the routed call, by the standard OTEL_* environment", {
    timeout: 60_000,
  }, async () => {
    const otlp = await otlpReceiver();
    const { client } = await setup(otlp.url, { process: true });
    const r = await client.callTool({ name: "caps", arguments: {}, _meta: { traceparent: ROOT } });
    await waitFor(() => otlp.spans.some((s) => s.traceId === TRACE && s.kind === 3), 15_000, "the bridge's CLIENT span");
    await waitFor(() => otlp.spans.filter((s) => s.traceId === TRACE).length >= 3, 10_000, "the gateway's spans");
    const ofTrace = otlp.spans.filter((s) => s.traceId === TRACE);
    const out = ofTrace.find((s) => s.kind === 3)!;
    const routed = ofTrace.find((s) => s.spanId === out.parentSpanId)!;
    expect(attr(routed, "mewgate.target")).toBe("pg");
    expect(ofTrace.find((s) => s.spanId === routed.parentSpanId)?.parentSpanId).toBe(ROOT_SPAN);
    expect(metaAtServer(r)["traceparent"]).toBe(`00-${TRACE}-${out.spanId}-01`);
  });

  it("gives a resource read and a prompt their face spans too, with the URI and the prompt's name", { timeout: 60_000 }, async () => {
    const otlp = await otlpReceiver();
    const { client, transport } = await setup(otlp.url);
    const read = await client.readResource({ uri: "pages://r-a", _meta: { traceparent: ROOT } });
    const atServer = JSON.parse((read.contents[0] as { text: string }).text) as Record<string, unknown>;
    await client.getPrompt({ name: "p-a", _meta: { traceparent: ROOT } });
    await waitFor(
      () => otlp.spans.filter((s) => s.traceId === TRACE && s.parentSpanId === ROOT_SPAN).length >= 2,
      10_000,
      "the face spans of the read and the prompt",
    );
    const faces = otlp.spans.filter((s) => s.traceId === TRACE && s.parentSpanId === ROOT_SPAN);
    const readSpan = faces.find((s) => s.name === "resources/read")!;
    expect(attr(readSpan, "mcp.resource.uri")).toBe("pages://r-a");
    expect(attr(readSpan, "mcp.session.id")).toBe(transport.sessionId);
    expect(attr(readSpan, "network.transport")).toBe("tcp");
    const promptSpan = faces.find((s) => s.name === "prompts/get")!;
    expect(attr(promptSpan, "gen_ai.prompt.name")).toBe("p-a");
    // The read went on under the face's span: the server's context is of the same trace, not the client's span itself.
    expect(String(atServer["traceparent"])).toMatch(new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`));
    expect(atServer["traceparent"]).not.toBe(ROOT);
  });
});
