/**
 * Traces across two cluster nodes over a real nats-server: a caller on one node, the
 * target on the other, the space owned by one of them. The caller's trace context rides in
 * the request's `params._meta` through the node that proxies it; the owner's span hangs
 * under it, and the target receives the owner's span as its parent.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Env, type GatewayProcess, killGateway, spawnGateway, TestClient, toolOwner, waitFor } from "./helpers.js";
import { NatsServer, natsServerPath } from "../cli/nats.js";

const TOKEN = (id: string) => `${id}-trace-cluster-token-0123`;
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const bin = natsServerPath();
if (!bin) throw new Error("the cluster tests need nats-server (apt-get install nats-server); npm test installs it when it can");

let nats: NatsServer;
let receiver: Server;
const spans: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string }> = [];
const dirs: string[] = [];
const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];

beforeAll(async () => {
  nats = new NatsServer(bin);
  await nats.start();
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: typeof spans }> }> };
      for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      res.end("{}");
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
});
afterAll(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(procs.splice(0).map(killGateway));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  await nats.stop();
  receiver.closeAllConnections();
  await new Promise((r) => receiver.close(r));
});

describe("traces in a cluster", () => {
  it("continue a caller's trace from one node through the owner to a target on another", async () => {
    const otlp = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`;
    const yaml = `
space: {id: traced}
gateway: {state_dir: .mewgate, cluster: {url: "nats://127.0.0.1:1", lease_ms: 3000}, telemetry: {otlp_endpoint: "${otlp}"}}
participants:
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  bot: {kind: agent, token: ${TOKEN("bot")}, tools: {allow: ["fs/*"]}}
`;
    const ports: number[] = [];
    for (const node of ["n1", "n2"]) {
      const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-trace-cluster-"));
      dirs.push(dir);
      writeFileSync(pathJoin(dir, "space.yaml"), yaml);
      const proc = await spawnGateway(pathJoin(dir, "space.yaml"), { args: ["--cluster", nats.url, "--node", node] });
      procs.push(proc);
      ports.push(proc.port);
    }
    let atFs: Env | undefined;
    const fs = await toolOwner({ port: ports[0]! }, "traced", TOKEN("fs"), [{ name: "read", inputSchema: { type: "object" } }], {
      onCall: (env, reply) => {
        atFs = env;
        reply({ content: [{ type: "text", text: "ok" }] });
      },
    });
    const bot = await TestClient.join({ port: ports[1]! }, "traced", TOKEN("bot"));
    clients.push(fs, bot);
    bot.send({
      id: "q1",
      kind: "mcp/request",
      to: ["fs"],
      payload: {
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "read", arguments: {}, _meta: { traceparent: `00-${TRACE}-00f067aa0ba902b7-01` } },
      },
    });
    await bot.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("q1") === true, 10_000);
    await waitFor(() => spans.some((s) => s.name === "tools/call read"), 15_000, "the span from the owner node");
    const span = spans.find((s) => s.name === "tools/call read")!;
    expect(span.traceId).toBe(TRACE);
    expect(span.parentSpanId).toBe("00f067aa0ba902b7");
    expect(atFs!.payload.params._meta.traceparent).toBe(`00-${TRACE}-${span.spanId}-01`);
  });
});
