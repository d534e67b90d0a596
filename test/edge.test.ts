/**
 * The gateway's door, against clients that would lock others out: origins and hosts (a
 * web page reaching a gateway on localhost), connection caps with the operator reserve,
 * the authentication deadline, /mcp sessions, and a flood's close code.
 */
import { request } from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server/http/http.js";
import { sleep, startGateway, TestClient, waitFor, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", ops: "ops-token-22", agent: "agent-token-3", bot: "bot-token-44", other: "other-token-5" };

const SPACE = (limits = "", extra = "") => `
space: {id: edge}
gateway:
  limits: {${limits}}
  allowed_origins: ["https://console.example.com"]
${extra}
participants:
  human: {kind: human, token: ${T.human}}
  ops: {kind: human, token: ${T.ops}}
  agent: {kind: agent, token: ${T.agent}}
  bot: {kind: agent, token: ${T.bot}}
  other: {kind: agent, token: ${T.other}}
`;

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const sockets: WebSocket[] = [];
const mcpClients: Client[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.terminate();
  await Promise.all(mcpClients.splice(0).map((c) => c.close().catch(() => {})));
  await mount?.close();
  mount = undefined;
  await gw?.stop();
  gw = undefined;
});

/** A raw HTTP GET with the headers given (Host included, which fetch would not let us set). */
function get(path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: gw!.port, path, method: "GET", headers, setHost: !("host" in headers) }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Opens a WebSocket; resolves with "open" or the HTTP status that refused the upgrade. */
function upgrade(
  query: string,
  headers: Record<string, string> = {},
): Promise<{ outcome: "open"; ws: WebSocket } | { outcome: number; body: string }> {
  const ws = new WebSocket(`ws://127.0.0.1:${gw!.port}/ws?${query}`, { headers });
  sockets.push(ws);
  return new Promise((resolve) => {
    ws.once("open", () => resolve({ outcome: "open", ws }));
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d));
      res.on("end", () => resolve({ outcome: res.statusCode ?? 0, body }));
    });
    ws.on("error", () => {});
  });
}

describe("origin and host", () => {
  it("refuses a web page from another origin with 403 before anything else happens, on /ws, /mcp and /healthz", async () => {
    gw = await startGateway(SPACE());
    mount = mountHttp(gw.gateway);
    const evil = { origin: "https://evil.example" };
    const ws = await upgrade("space=edge", { ...evil, authorization: `Bearer ${T.human}` });
    expect(ws.outcome).toBe(403);
    expect((ws as { body: string }).body).toContain("gateway.allowed_origins");
    expect(gw.gateway.spaces.get("edge")!.online).toBe(0);
    expect((await get("/healthz", evil)).status).toBe(403);
    const mcp = await fetch(`http://127.0.0.1:${gw.port}/mcp`, {
      method: "POST",
      headers: { ...evil, authorization: `Bearer ${T.agent}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(mcp.status).toBe(403);
    expect(mount.sessions).toBe(0);
    // `null` (a sandboxed frame, a file: page) is no origin to trust either.
    expect((await get("/healthz", { origin: "null" })).status).toBe(403);
  });

  it("lets in loopback pages, the gateway's own origin and allowed_origins, and clients that send no Origin", async () => {
    gw = await startGateway(SPACE());
    for (const origin of [
      "http://localhost:5173",
      "http://127.0.0.1:9999",
      "http://[::1]:3000",
      "https://console.example.com",
      `http://127.0.0.1:${gw.port}`,
    ]) {
      expect((await get("/healthz", { origin })).status, origin).toBe(200);
    }
    expect((await get("/healthz", {})).status).toBe(200);
    const ws = await upgrade("space=edge", { origin: "https://console.example.com", authorization: `Bearer ${T.human}` });
    expect(ws.outcome).toBe("open");
  });

  it("refuses a Host it does not answer to (DNS rebinding), even on loopback", async () => {
    gw = await startGateway(SPACE());
    const rebound = await get("/healthz", { host: `rebind.evil.example:${gw.port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.body).toContain("gateway.allowed_hosts");
    expect((await upgrade("space=edge", { host: `rebind.evil.example:${gw.port}`, authorization: `Bearer ${T.human}` })).outcome).toBe(403);
    expect((await get("/healthz", { host: `localhost:${gw.port}` })).status).toBe(200);
    expect((await get("/healthz", { host: `127.0.0.1:${gw.port}` })).status).toBe(200);
    // The host of an allowed origin is answered too.
    expect((await get("/healthz", { host: "console.example.com" })).status).toBe(200);
  });
});

describe("connection limits", () => {
  it("caps connections waiting to authenticate, and a token at the door still gets in", async () => {
    gw = await startGateway(SPACE("max_unauthenticated: 3"));
    for (let i = 0; i < 3; i++) expect((await upgrade("space=edge")).outcome).toBe("open");
    const fourth = await upgrade("space=edge");
    expect(fourth.outcome).toBe(503);
    expect((fourth as { body: string }).body).toContain("max_unauthenticated");
    const agent = await upgrade("space=edge", { authorization: `Bearer ${T.agent}` });
    expect(agent.outcome).toBe("open");
  });

  it("gives a waiting slot back when its socket joins, is refused, or closes, and only once", async () => {
    gw = await startGateway(SPACE("max_unauthenticated: 2"));
    const waiting = async () => {
      const r = await upgrade("space=edge");
      expect(r.outcome).toBe("open");
      return (r as { ws: WebSocket }).ws;
    };
    const joined = (ws: WebSocket, token: string) =>
      new Promise<string>((resolve) => {
        ws.on("message", (d: Buffer) => {
          const kind = (JSON.parse(d.toString()) as { kind?: string }).kind;
          if (kind === "system/welcome") resolve(kind);
        });
        ws.once("close", (code) => resolve(`closed ${code}`));
        ws.send(JSON.stringify({ type: "join", space: "edge", token }));
      });
    // Two sockets join with a frame: both slots come back.
    const [a, b] = [await waiting(), await waiting()];
    expect(await joined(a, T.agent)).toBe("system/welcome");
    expect(await joined(b, T.bot)).toBe("system/welcome");
    // One is refused (a wrong token), one closes before it says anything: both slots come back.
    const [c, d] = [await waiting(), await waiting()];
    expect((await upgrade("space=edge")).outcome).toBe(503);
    expect(await joined(c, "not-a-token-9")).toMatch(/^closed 4\d{3}$/);
    d.close();
    const opens = async () => (await upgrade("space=edge")).outcome === "open";
    await waitFor(opens);
    await waitFor(opens);
    // And not twice: the cap still holds at two.
    expect((await upgrade("space=edge")).outcome).toBe(503);
  });

  it("closes a socket that does not authenticate within the deadline", async () => {
    gw = await startGateway(SPACE("join_timeout_ms: 300"));
    const silent = await upgrade("space=edge");
    expect(silent.outcome).toBe("open");
    const ws = (silent as { ws: WebSocket }).ws;
    const code = await new Promise<number>((resolve) => ws.once("close", (c) => resolve(c)));
    expect(code).toBe(4408);
  });

  it("keeps a reserve that only a human of the space can use once the gateway is full", async () => {
    gw = await startGateway(SPACE("max_connections: 3, operator_reserve: 1"));
    for (const token of [T.agent, T.bot, T.other])
      expect((await upgrade("space=edge", { authorization: `Bearer ${token}` })).outcome).toBe("open");
    // Full: an agent, or a socket without a token, is refused ...
    const late = await upgrade("space=edge", { authorization: `Bearer ${T.agent}x` });
    expect(late.outcome).toBe(503);
    expect((late as { body: string }).body).toContain("max_connections");
    expect((await upgrade("space=edge")).outcome).toBe(503);
    // ... the human gets the reserve, and once it is used, nobody else.
    const human = TestClient.connect(gw, "space=edge", { authorization: `Bearer ${T.human}` });
    sockets.push(human.ws);
    await human.next((e) => e.kind === "system/welcome");
    expect((await upgrade("space=edge", { authorization: `Bearer ${T.ops}` })).outcome).toBe(503);
  });

  it("caps connections from one address", async () => {
    gw = await startGateway(SPACE("max_per_address: 2"));
    expect((await upgrade("space=edge", { authorization: `Bearer ${T.agent}` })).outcome).toBe("open");
    expect((await upgrade("space=edge", { authorization: `Bearer ${T.bot}` })).outcome).toBe("open");
    const third = await upgrade("space=edge", { authorization: `Bearer ${T.human}` });
    expect(third.outcome).toBe(429);
    expect((third as { body: string }).body).toContain("max_per_address");
    // A closed connection frees its place.
    sockets[0]!.close();
    await waitFor(
      async () => (await upgrade("space=edge", { authorization: `Bearer ${T.human}` })).outcome === "open",
      3000,
      "a freed place",
    );
  });

  it("closes a burst flood with 4429, not 1006, and the others keep being served", async () => {
    gw = await startGateway(SPACE("rate_per_second: 20, rate_burst: 20, flood_strikes: 5, flood_window_ms: 5000"));
    const human = await TestClient.join(gw, "edge", T.human);
    sockets.push(human.ws);
    const flooder = await TestClient.join(gw, "edge", T.agent);
    sockets.push(flooder.ws);
    for (let i = 0; i < 300; i++) flooder.send({ kind: "chat", payload: { text: `spam ${i}` } });
    const { code } = await flooder.closed;
    expect(code).toBe(4429);
    human.send({ id: "still-here", kind: "chat", payload: { text: "hello" } });
    const other = await TestClient.join(gw, "edge", T.bot);
    sockets.push(other.ws);
    human.send({ id: "after", kind: "chat", payload: { text: "hello again" } });
    await other.next((e) => e.id === "after");
  });
});

describe("/mcp sessions", () => {
  async function connect(token: string): Promise<Client> {
    const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw!.port}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
    const client = new Client({ name: "edge-test", version: "1.0.0" });
    mcpClients.push(client);
    await client.connect(transport);
    return client;
  }

  it("caps open sessions and closes idle ones", { timeout: 20_000 }, async () => {
    gw = await startGateway(SPACE("mcp_sessions: 1, mcp_idle_ms: 1000"));
    mount = mountHttp(gw.gateway);
    await connect(T.agent);
    expect(mount.sessions).toBe(1);
    const refused = await connect(T.bot).then(
      () => "connected",
      (err: Error) => err.message,
    );
    expect(refused).toContain("mcp_sessions");
    // Idle for over a second: closed, which frees the place.
    await waitFor(() => mount!.sessions === 0, 5000, "the idle session to close");
    await connect(T.bot);
    expect(mount.sessions).toBe(1);
    await sleep(10);
  });
});
