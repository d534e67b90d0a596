/**
 * OpenTelemetry traces of a call chain, exported to a real OTLP/HTTP receiver on loopback
 * (the collector's protocol, JSON encoding, decoded here): an agent calls an agent, which
 * proposes a call a person approves and a third participant serves. The spans, their
 * parents and attributes, and the trace context the target receives, are checked. Hostile
 * first: a forged or oversized traceparent, and a receiver that is down.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const T = { a: "agent-a-token-1", b: "agent-b-token-1", c: "server-c-token1", human: "human-token-001" };
const TRACE = "0af7651916cd43dd8448eb211c80319c";
const ROOT = `00-${TRACE}-b7ad6b7169203331-01`;

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
  status?: { code?: number };
}

let gw: TestGateway | undefined;
let receiver: Server | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  receiver?.closeAllConnections();
  await new Promise((r) => (receiver ? receiver.close(r) : r(undefined)));
  receiver = undefined;
});

/** A collector's OTLP/HTTP traces endpoint: keeps every span it is sent. */
async function otlpReceiver(): Promise<{ url: string; spans: Span[]; requests: number }> {
  const got = { url: "", spans: [] as Span[], requests: 0 };
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.requests++;
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

const SPACE = (telemetry: string) => `
space: {id: tr}
gateway: {${telemetry}}
participants:
  a: {kind: agent, token: ${T.a}, tools: {allow: ["b/*"]}}
  b: {kind: agent, token: ${T.b}, tools: {ask: ["c/*"]}, approvers: [human]}
  c: {kind: mcp, token: ${T.c}}
  human: {kind: human, token: ${T.human}}
`;

/** a → b/delegate; b, serving it, asks for c/write through the gateway; a person approves; c answers; b answers a. */
async function chain(traceparent: string | undefined): Promise<{ atC: Env; answer: Env }> {
  let atC: Env | undefined;
  const c = await toolOwner(gw!, "tr", T.c, [{ name: "write", inputSchema: { type: "object" } }], {
    onCall: (env, reply) => {
      atC = env;
      reply({ content: [{ type: "text", text: "written" }] });
    },
  });
  const b = await toolOwner(gw!, "tr", T.b, [{ name: "delegate", inputSchema: { type: "object" } }], {
    onCall: (env, reply) => {
      const id = `b-asks-${env.id}`;
      b.send({
        id,
        kind: "mcp/request",
        to: ["system:gateway"],
        correlation_id: [env.id],
        payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "c/write", arguments: { path: "x" } } },
      });
      void b
        .next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(id) === true, 10_000)
        .then(() => reply({ content: [{ type: "text", text: "delegated" }] }));
    },
  });
  const human = await TestClient.join(gw!, "tr", T.human);
  const a = await TestClient.join(gw!, "tr", T.a);
  clients.push(c, b, human, a);
  await waitFor(
    async () =>
      (
        await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/tr/tools`, { headers: { authorization: `Bearer ${T.human}` } }).then((r) =>
          r.text(),
        )
      ).includes(`"write"`),
    5000,
    "the tools",
  );
  const meta = traceparent === undefined ? {} : { _meta: { traceparent } };
  a.send({
    id: "a-1",
    kind: "mcp/request",
    to: ["b"],
    payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "delegate", arguments: {}, ...meta } },
  });
  const proposal = await human.next((e) => e.kind === "mcp/proposal", 10_000);
  human.send({ kind: "mcp/approve", correlation_id: [proposal.id], payload: {} });
  const answer = await a.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("a-1") === true, 10_000);
  await waitFor(() => atC !== undefined, 5000, "c's request");
  return { atC: atC!, answer };
}

describe("traces of a call chain", () => {
  it("ignores a forged or oversized traceparent, and keeps serving when the receiver is down", async () => {
    // Nothing listens at the endpoint: export fails quietly, calls go on.
    gw = await startGateway(SPACE(`telemetry: {otlp_endpoint: "http://127.0.0.1:9/v1/traces"}`));
    const { atC, answer } = await chain(`00-${"z".repeat(32)}-${"1".repeat(16)}-01${"x".repeat(100_000)}`);
    expect(answer.payload.result.content[0].text).toBe("delegated");
    // A fresh, valid context was made rather than the forged one carried on.
    const tp = atC.payload.params._meta.traceparent as string;
    expect(tp).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(tp).not.toContain("zzzz");
  });

  it("costs nothing when off: no context is added to requests and nothing is sent", async () => {
    const otlp = await otlpReceiver();
    gw = await startGateway(SPACE(""));
    const { atC } = await chain(ROOT);
    // b sent no context of its own, and the gateway added none.
    expect(atC.payload.params._meta?.traceparent).toBeUndefined();
    expect(otlp.requests).toBe(0);
  });

  it("exports the chain as one trace: call, the wait for a person, the approved call, with MCP attributes", async () => {
    const otlp = await otlpReceiver();
    gw = await startGateway(SPACE(`telemetry: {otlp_endpoint: "${(await Promise.resolve(otlp)).url}", service_name: mewgate-test}`));
    const { atC } = await chain(ROOT);
    await waitFor(() => otlp.spans.length >= 3, 10_000, "three spans exported");
    const byName = (name: string) => otlp.spans.find((s) => s.name === name);
    const delegate = byName("tools/call delegate");
    const wait = byName("await approval c/write");
    const write = byName("tools/call write");
    expect(delegate && wait && write).toBeTruthy();
    // One trace, continued from the caller's own context.
    for (const s of [delegate!, wait!, write!]) expect(s.traceId).toBe(TRACE);
    expect(delegate!.parentSpanId).toBe("b7ad6b7169203331");
    // b was serving a's call when it asked: the wait hangs under that call, the approved call under the wait.
    expect(wait!.parentSpanId).toBe(delegate!.spanId);
    expect(write!.parentSpanId).toBe(wait!.spanId);
    expect(attr(delegate!, "mcp.method.name")).toBe("tools/call");
    expect(attr(delegate!, "gen_ai.tool.name")).toBe("delegate");
    expect(attr(delegate!, "gen_ai.operation.name")).toBe("execute_tool");
    expect(attr(delegate!, "jsonrpc.request.id")).toBe("1");
    expect(attr(wait!, "mewgate.proposal.decision")).toBe("approved");
    expect(attr(wait!, "mewgate.proposal.decided_by")).toBe("human");
    expect(attr(write!, "mewgate.proposal.id")).toBe(attr(wait!, "mewgate.proposal.id"));
    // The target received the approved call's own context, to continue the trace.
    expect(atC.payload.params._meta.traceparent).toBe(`00-${TRACE}-${write!.spanId}-01`);
    // The duration histogram beside the Prometheus metrics.
    const metrics = await fetch(`http://127.0.0.1:${gw.port}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/mcp_server_operation_duration_seconds_count\{space="tr",mcp_method_name="tools\/call"\} [1-9]/);
  });

  it("marks a failed call with its error type", async () => {
    const otlp = await otlpReceiver();
    gw = await startGateway(SPACE(`telemetry: {otlp_endpoint: "${otlp.url}"}`));
    const c = await toolOwner(gw, "tr", T.c, [{ name: "write", inputSchema: { type: "object" } }]);
    const b = await toolOwner(gw, "tr", T.b, [{ name: "delegate", inputSchema: { type: "object" } }], {
      onCall: (env) =>
        b.send({
          kind: "mcp/response",
          correlation_id: [env.id],
          payload: { jsonrpc: "2.0", id: env.payload.id, result: { isError: true, content: [{ type: "text", text: "no" }] } },
        }),
    });
    const a = await TestClient.join(gw, "tr", T.a);
    clients.push(c, b, a);
    a.send({
      id: "a-2",
      kind: "mcp/request",
      to: ["b"],
      payload: { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "delegate", arguments: {} } },
    });
    await a.next((e) => e.kind === "mcp/response");
    await waitFor(() => otlp.spans.some((s) => s.name === "tools/call delegate"), 10_000, "the span");
    const span = otlp.spans.find((s) => s.name === "tools/call delegate")!;
    expect(attr(span, "error.type")).toBe("tool_error");
    expect(span.status?.code).toBe(2);
  });

  it("names the resource a read is of and the prompt a get is of, and a JSON-RPC error's code as the response's status", async () => {
    const otlp = await otlpReceiver();
    gw = await startGateway(SPACE(`telemetry: {otlp_endpoint: "${otlp.url}"}`));
    const c = await TestClient.join(gw, "tr", T.c);
    const human = await TestClient.join(gw, "tr", T.human);
    clients.push(c, human);
    c.ws.on("message", () => {
      for (const env of c.received.splice(0)) {
        if (env.kind !== "mcp/request") continue;
        const p = env.payload;
        const answer =
          p.method === "resources/read" ? { error: { code: -32002, message: "no such resource" } } : { result: { messages: [] } };
        c.send({ kind: "mcp/response", to: [env.from], correlation_id: [env.id], payload: { jsonrpc: "2.0", id: p.id, ...answer } });
      }
    });
    human.send({
      id: "h-1",
      kind: "mcp/request",
      to: ["c"],
      payload: { jsonrpc: "2.0", id: 1, method: "resources/read", params: { uri: "file:///notes/a.txt" } },
    });
    human.send({
      id: "h-2",
      kind: "mcp/request",
      to: ["c"],
      payload: { jsonrpc: "2.0", id: 2, method: "prompts/get", params: { name: "summarise", arguments: {} } },
    });
    await waitFor(
      () => otlp.spans.some((s) => s.name === "resources/read") && otlp.spans.some((s) => s.name === "prompts/get"),
      10_000,
      "both spans",
    );
    const read = otlp.spans.find((s) => s.name === "resources/read")!;
    const get = otlp.spans.find((s) => s.name === "prompts/get")!;
    expect(attr(read, "mcp.resource.uri")).toBe("file:///notes/a.txt");
    expect(attr(read, "rpc.response.status_code")).toBe("-32002");
    expect(attr(read, "error.type")).toBe("-32002");
    expect(attr(get, "gen_ai.prompt.name")).toBe("summarise");
    expect(attr(get, "rpc.response.status_code")).toBeUndefined();
  });
});
