/**
 * Interop: MEW v0.4 wire behaviours written from the spec (a raw WebSocket client that
 * speaks as MEW's SDK does: root URL, join frame, id-less requests, correlation_id[0]),
 * and MCP details: legacy SSE servers, autoApprove, spaces of mcpServers alone, tool
 * metadata kept, RFC 9728 on /mcp.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { askGateway, errorFor, sleep, startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", mew: "mew-token-222", fs: "fs-token-4444" };

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
const bridges: Bridge[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const b of bridges.splice(0)) await b.stop();
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

const SPACE = (extra = "") => `
space: {id: mew}
participants:
  human: {kind: human, token: ${T.human}}
  mewbot: {kind: agent, token: ${T.mew}, tools: {ask: ["fs/write_file"], allow: ["fs/read_file"]}, capabilities: [{kind: "*"}]}
  fs: {kind: mcp, token: ${T.fs}}
${extra}`;

/** A client as MEW's SDK is: connects to the root, joins with a first frame. */
async function mewClient(token: string): Promise<TestClient> {
  const c = new TestClient(new WebSocket(`ws://127.0.0.1:${gw!.port}/`));
  clients.push(c);
  await c.opened;
  c.send({ type: "join", space: "mew", token, participantId: "mewbot" });
  await c.next((e) => e.kind === "system/welcome");
  return c;
}

describe("MEW v0.4 clients", () => {
  it("connect to the root with a join frame, and call a tool without a JSON-RPC id", async () => {
    gw = await startGateway(SPACE());
    clients.push(
      await toolOwner(gw, "mew", T.fs, [
        { name: "read_file", inputSchema: { type: "object" } },
        { name: "write_file", inputSchema: { type: "object" } },
      ]),
    );
    const mew = await mewClient(T.mew);
    await sleep(50);
    mew.send({
      protocol: "mew/v0.4",
      id: "req-1",
      kind: "mcp/request",
      to: ["fs"],
      payload: { jsonrpc: "2.0", method: "tools/call", params: { name: "read_file", arguments: {} } },
    });
    const res = await mew.next((e) => e.kind === "mcp/response");
    expect(res.correlation_id?.[0]).toBe("req-1");
    expect(res.payload.id).toBe("req-1");
  });

  it("learn their proposal's outcome from correlation_id[0]", async () => {
    gw = await startGateway(SPACE());
    clients.push(await toolOwner(gw, "mew", T.fs, [{ name: "write_file", inputSchema: { type: "object" } }]));
    const human = await TestClient.join(gw, "mew", T.human);
    clients.push(human);
    const mew = await mewClient(T.mew);
    mew.send({
      id: "prop-1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } } },
    });
    await human.next((e) => e.id === "prop-1");
    human.send({ kind: "mcp/approve", correlation_id: ["prop-1"], payload: {} });
    const res = await mew.next((e) => e.kind === "mcp/response");
    expect(res.correlation_id?.[0]).toBe("prop-1");
  });

  it("may propose without naming who serves it: the one participant that offers the tool is asked", async () => {
    gw = await startGateway(SPACE());
    clients.push(await toolOwner(gw, "mew", T.fs, [{ name: "write_file", inputSchema: { type: "object" } }]));
    const human = await TestClient.join(gw, "mew", T.human);
    clients.push(human);
    const mew = await mewClient(T.mew);
    await sleep(50);
    mew.send({
      id: "open-prop",
      kind: "mcp/proposal",
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } } },
    });
    const seen = await human.next((e) => e.id === "open-prop");
    expect(seen.to).toEqual(["fs"]);
    human.send({ kind: "mcp/approve", correlation_id: ["open-prop"], payload: {} });
    expect((await mew.next((e) => e.kind === "mcp/response")).correlation_id?.[0]).toBe("open-prop");
    // No one the gateway knows offers it: held open, for a fulfiller to name the target
    // (MEW §3.2); an approval, which names none, is refused with how to fulfil it instead.
    mew.send({ id: "nobody", kind: "mcp/proposal", payload: { method: "tools/call", params: { name: "launch_rockets" } } });
    const open = await human.next((e) => e.id === "nobody");
    expect(open.to).toBeUndefined();
    human.send({ id: "ok-nobody", kind: "mcp/approve", correlation_id: ["nobody"], payload: {} });
    const err = await human.next((e) => e.kind === "system/error" && e.correlation_id?.includes("ok-nobody") === true);
    expect(err.payload.message).toContain("names no participant to serve it: fulfil it");
  });

  it("get their own envelopes back when space.yaml says echo: true", async () => {
    gw = await startGateway(SPACE().replace('capabilities: [{kind: "*"}]}', 'capabilities: [{kind: "*"}], echo: true}'));
    const mew = await mewClient(T.mew);
    mew.send({ id: "hello", kind: "chat", payload: { text: "hi" } });
    const back = await mew.next((e) => e.id === "hello");
    expect(back.from).toBe("mewbot");
  });
});

describe("MEW's HTTP message injection", () => {
  const inject = (who: string, token: string | undefined, body: unknown) =>
    fetch(`http://127.0.0.1:${gw!.port}/participants/${who}/messages?space=mew`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }));

  it("takes an envelope as the token's participant, through every rule of the wire", async () => {
    gw = await startGateway(SPACE());
    const human = await TestClient.join(gw, "mew", T.human);
    clients.push(human);
    const ok = await inject("mewbot", T.mew, { kind: "chat", payload: { text: "from a script" } });
    expect(ok).toMatchObject({ status: 200, body: { status: "accepted" } });
    const chat = await human.next((e) => e.kind === "chat");
    expect(chat).toMatchObject({ from: "mewbot", id: ok.body["id"], payload: { text: "from a script" } });
    // Hostile: no token, another participant's token, a forged from, a reserved kind, no kind.
    expect((await inject("mewbot", undefined, { kind: "chat" })).status).toBe(401);
    expect((await inject("mewbot", T.human, { kind: "chat", payload: { text: "x" } })).status).toBe(403);
    expect((await inject("mewbot", T.mew, { kind: "chat", from: "human", payload: { text: "forged" } })).body["error"]).toBe(
      "from_mismatch",
    );
    expect((await inject("mewbot", T.mew, { kind: "system/welcome", payload: {} })).body["error"]).toBe("reserved_kind");
    expect((await inject("mewbot", T.mew, { payload: {} })).status).toBe(400);
    await sleep(50);
    expect(human.received.filter((e) => e.kind === "chat")).toHaveLength(1);
    const list = (await (
      await fetch(`http://127.0.0.1:${gw!.port}/participants?space=mew`, { headers: { authorization: `Bearer ${T.mew}` } })
    ).json()) as { participants: Array<{ id: string; connected: boolean }> };
    expect(list.participants.find((p) => p.id === "human")?.connected).toBe(true);
  });
});

describe("MCP servers and clients", () => {
  it("bridges a legacy HTTP+SSE server (type: sse), keeping the tool's title, icons, _meta and outputSchema", async () => {
    const transports = new Map<string, SSEServerTransport>();
    const http = createServer((req, res) => {
      void (async () => {
        if (req.method === "GET" && req.url === "/sse") {
          const t = new SSEServerTransport("/messages", res);
          transports.set(t.sessionId, t);
          const server = new McpServer({ name: "legacy", version: "1.0.0" });
          server.registerTool(
            "weather",
            {
              title: "Weather",
              description: "Today's weather",
              outputSchema: { sky: (await import("zod")).z.string() },
              _meta: { "ui/resourceUri": "ui://weather/card" },
            } as never,
            async () => ({ content: [{ type: "text", text: "sunny" }], structuredContent: { sky: "sunny" } }),
          );
          await server.connect(t);
          return;
        }
        const sid = new URL(req.url ?? "/", "http://x").searchParams.get("sessionId") ?? "";
        const t = transports.get(sid);
        if (!t) return void res.writeHead(404).end();
        await t.handlePostMessage(req, res);
      })();
    });
    servers.push(http);
    await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/sse`;
    gw = await startGateway(SPACE());
    const space = gw.gateway.spaces.get("mew")!;
    bridges.push(
      await startBridge({
        id: "fs",
        server: { type: "sse", url },
        client: { transport: () => connectInProcess(space, "fs"), reconnect: false },
      }),
    );
    const human = await TestClient.join(gw, "mew", T.human);
    clients.push(human);
    let tool: any;
    await waitFor(
      async () => {
        tool = (await askGateway(human, "tools/list")).payload.result.tools.find((t: any) => t.name === "fs/weather");
        return tool !== undefined;
      },
      5000,
      "the SSE server's tool",
    );
    expect(tool).toMatchObject({ title: "Weather", _meta: { "ui/resourceUri": "ui://weather/card" }, outputSchema: { type: "object" } });
    human.send({
      id: "w",
      kind: "mcp/request",
      to: ["fs"],
      payload: { jsonrpc: "2.0", id: "w", method: "tools/call", params: { name: "weather", arguments: {} } },
    });
    const res = await human.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("w") === true);
    expect(res.payload.result.structuredContent).toEqual({ sky: "sunny" });
  });

  it("turns Cline's autoApprove into no approval for those tools, though a participant's own ask still wins", async () => {
    gw = await startGateway(`
space: {id: mew}
participants:
  human: {kind: human, token: ${T.human}}
  careful: {kind: agent, token: careful-token-1, tools: {ask: ["fs/*"]}}
  bold: {kind: agent, token: bold-token-22}
mcpServers:
  fs: {command: node, args: ["-e", "0"], autoApprove: [read_file]}
`);
    const config = parseSpaceConfig(`space: {id: x}\nmcpServers:\n  fs: {command: node, autoApprove: [read_file]}\n`, {
      file: "space.yaml",
      env: {},
    });
    // A space of mcpServers alone is a space.
    expect(Object.keys(config.participants)).toEqual(["fs"]);
    const space = gw.gateway.spaces.get("mew")!;
    expect(space.authority.tool("bold", "fs", "read_file")).toBe("direct");
    expect(space.authority.why("bold", "fs", "read_file")).toBe("its server's autoApprove lists it");
    expect(space.authority.tool("bold", "fs", "write_file")).toBe("proposal");
    expect(space.authority.tool("careful", "fs", "read_file")).toBe("proposal");
  });

  it("withdraws the pending proposal of an HTTP MCP client whose session ends", async () => {
    gw = await startGateway(SPACE());
    mountHttp(gw.gateway);
    clients.push(await toolOwner(gw, "mew", T.fs, [{ name: "write_file", inputSchema: { type: "object" } }]));
    const human = await TestClient.join(gw, "mew", T.human);
    clients.push(human);
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
    const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw.port}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${T.mew}` } },
    });
    const client = new Client({ name: "interop", version: "1.0.0" });
    await client.connect(transport);
    await waitFor(async () => (await client.listTools()).tools.some((t) => t.name.includes("write_file")), 5000, "the tool");
    const name = (await client.listTools()).tools.find((t) => t.name.includes("write_file"))!.name;
    const call = client.callTool({ name, arguments: { path: "x" } }).catch((err: Error) => err);
    const proposal = await human.next((e) => e.kind === "mcp/proposal");
    // The session ends (as when a client goes away): nothing cancels the call first.
    await transport.terminateSession();
    const withdrawn = await human.next((e) => e.kind === "mcp/withdraw" && e.correlation_id?.includes(proposal.id) === true);
    expect(withdrawn).toBeDefined();
    await client.close();
    await call;
  });

  it("answers 401 on /mcp with WWW-Authenticate naming its RFC 9728 metadata, which says how to present a token", async () => {
    gw = await startGateway(SPACE());
    mountHttp(gw.gateway);
    const res = await fetch(`http://127.0.0.1:${gw.port}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(401);
    const header = res.headers.get("www-authenticate")!;
    const meta = /resource_metadata="([^"]+)"/.exec(header)?.[1];
    expect(meta).toBe(`http://127.0.0.1:${gw.port}/.well-known/oauth-protected-resource/mcp`);
    const doc = (await (await fetch(meta!)).json()) as Record<string, unknown>;
    expect(doc).toMatchObject({ resource: `http://127.0.0.1:${gw.port}/mcp`, bearer_methods_supported: ["header"] });
  });
});

describe("space/invite and space/kick", () => {
  it("mints a token for an invited participant, shown only to the inviter, that survives a restart until a kick", {
    timeout: 30_000,
  }, async () => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "mewgate-invite-"));
    try {
      gw = await startGateway(SPACE(), { dir });
      const human = await TestClient.join(gw, "mew", T.human);
      const watcher = await TestClient.join(gw, "mew", T.mew);
      clients.push(human, watcher);
      human.send({
        id: "inv",
        kind: "space/invite",
        payload: { participant_id: "helper", initial_capabilities: [{ kind: "chat" }], reason: "extra hands" },
      });
      const minted = await human.next((e) => e.kind === "space/invite-ack" && e.from === "system:gateway");
      expect(minted.payload.status).toBe("created");
      const token = minted.payload.token as string;
      expect(token).toMatch(/^[A-Za-z0-9_-]{20,}$/);
      const seen = await watcher.next((e) => e.kind === "space/invite");
      expect(seen.payload.participant_id).toBe("helper");
      const roster = await watcher.next((e) => e.kind === "system/presence" && e.payload.event === "invited");
      expect(roster.payload.participant).toMatchObject({ id: "helper", capabilities: [{ kind: "chat" }] });
      expect(JSON.stringify(watcher.received)).not.toContain(token);
      human.send({ id: "again", kind: "space/invite", payload: { participant_id: "helper", initial_capabilities: [] } });
      expect((await human.next((e) => e.kind === "system/error" && e.correlation_id?.includes("again") === true)).payload.code).toBe(
        "duplicate_id",
      );

      const helper = await TestClient.join(gw, "mew", token);
      clients.push(helper);
      const welcome = helper.received.find((e) => e.kind === "system/welcome")!;
      expect(welcome.payload.you).toMatchObject({ id: "helper", capabilities: [{ kind: "chat" }] });
      helper.send({ id: "hi", kind: "chat", payload: { text: "hello" } });
      await human.next((e) => e.id === "hi");
      // It has what it was given and no more: it may not propose, nor invite others.
      helper.send({ id: "nope", kind: "mcp/proposal", to: ["fs"], payload: { method: "tools/call", params: { name: "x" } } });
      expect((await helper.next((e) => e.kind === "system/error" && e.correlation_id?.includes("nope") === true)).payload.code).toBe(
        "capability_violation",
      );
      helper.send({ id: "spread", kind: "space/invite", payload: { participant_id: "worm", initial_capabilities: [{ kind: "*" }] } });
      expect((await helper.next((e) => e.kind === "system/error" && e.correlation_id?.includes("spread") === true)).payload.code).toBe(
        "capability_violation",
      );

      // A restart keeps the invited participant and its token.
      const port = gw.port;
      for (const c of clients.splice(0)) c.ws.terminate();
      await gw.stop();
      gw = await startGateway(SPACE(), { dir, port });
      const boss = await TestClient.join(gw, "mew", T.human);
      const back = await TestClient.join(gw, "mew", token);
      clients.push(boss, back);
      // A kick of nobody, or of oneself, is refused once, correlated to the frame it refuses.
      boss.send({ id: "kick-nobody", kind: "space/kick", payload: { participant_id: "nobody" } });
      expect((await errorFor(boss, "kick-nobody")).payload.code).toBe("unknown_recipient");
      boss.send({ id: "kick-self", kind: "space/kick", payload: { participant_id: "human" } });
      expect((await errorFor(boss, "kick-self")).payload.message).toMatch(/cannot remove yourself/);
      boss.send({ id: "kick", kind: "space/kick", payload: { participant_id: "helper", reason: "done" } });
      const { code } = await back.closed;
      expect(boss.received.filter((e) => e.kind === "system/error" && e.correlation_id?.[0]?.startsWith("kick-"))).toHaveLength(2);
      expect(code).toBe(4401);
      const refused = TestClient.connect(gw, "space=mew", { authorization: `Bearer ${token}` });
      clients.push(refused);
      expect((await refused.closed).code).toBe(4401);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the space as an MCP server: resources and prompts", () => {
  it("offers the resources, prompts and completions of the space's MCP servers, through their owner", { timeout: 30_000 }, async () => {
    const { createRequire } = await import("node:module");
    const everything = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js");
    gw = await startGateway(SPACE());
    mountHttp(gw.gateway);
    const space = gw.gateway.spaces.get("mew")!;
    bridges.push(
      await startBridge({
        id: "fs",
        server: { command: process.execPath, args: [everything, "stdio"] },
        client: { transport: () => connectInProcess(space, "fs"), reconnect: false },
      }),
    );
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
    const client = new Client({ name: "interop", version: "1.0.0" });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw.port}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${T.human}` } },
      }),
    );
    try {
      expect(client.getServerCapabilities()).toMatchObject({ resources: {}, prompts: {} });
      const { resources } = await client.listResources();
      expect(resources.length).toBeGreaterThan(0);
      expect(resources[0]!.name.startsWith("fs/")).toBe(true);
      const read = await client.readResource({ uri: resources[0]!.uri });
      expect(read.contents[0]!.uri).toBe(resources[0]!.uri);
      const { prompts } = await client.listPrompts();
      const simple = prompts.find((p) => p.name.startsWith("fs__") && !(p.arguments ?? []).some((a) => a.required));
      expect(simple).toBeDefined();
      const got = await client.getPrompt({ name: simple!.name });
      expect(got.messages.length).toBeGreaterThan(0);
      await expect(client.readResource({ uri: "nowhere://x" })).rejects.toThrow(/no participant of the space offers/);
      // Completion of a prompt's argument, asked of the prompt's owner.
      const completion = await client.complete({
        ref: { type: "ref/prompt", name: "fs__completable-prompt" },
        argument: { name: "department", value: "Eng" },
      });
      expect(completion.completion.values).toContain("Engineering");
    } finally {
      await client.close();
    }
  });
});

describe("cancellation from an MCP client", () => {
  it("reaches the bridged server: client → /mcp → gateway → bridge → stdio server", { timeout: 30_000 }, async () => {
    const { mkdtempSync, readFileSync, existsSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "mewgate-cancel-"));
    const mark = join(dir, "mark");
    try {
      gw = await startGateway(SPACE());
      mountHttp(gw.gateway);
      const space = gw.gateway.spaces.get("mew")!;
      const waiter = join(import.meta.dirname, "fixtures", "bridge", "waiter.mjs");
      bridges.push(
        await startBridge({
          id: "fs",
          server: { command: process.execPath, args: [waiter], env: { WAITER_MARK: mark } },
          client: { transport: () => connectInProcess(space, "fs"), reconnect: false },
        }),
      );
      const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
      const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
      const client = new Client({ name: "interop", version: "1.0.0" });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw.port}/mcp`), {
          requestInit: { headers: { Authorization: `Bearer ${T.human}` } },
        }),
      );
      try {
        await waitFor(async () => (await client.listTools()).tools.some((t) => t.name === "fs__wait"), 5000, "the tool");
        const ctl = new AbortController();
        const call = client.callTool({ name: "fs__wait", arguments: {} }, undefined, { signal: ctl.signal }).catch((err: Error) => err);
        await waitFor(() => existsSync(mark), 5000, "the server to start waiting");
        ctl.abort("changed my mind");
        expect(await call).toBeInstanceOf(Error);
        await waitFor(() => readFileSync(mark, "utf8") === "cancelled", 5000, "the server to hear the cancellation");
      } finally {
        await client.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
