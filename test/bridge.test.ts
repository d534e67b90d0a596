/**
 * The MCP bridge against real servers: the published server-everything and
 * server-filesystem (dev dependencies, run with this node, no network), a fixture server
 * that hangs and crashes on request, and a streamable HTTP server in this process. A real
 * gateway on port 0 and real SDK participants on the other side.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server as HttpServer } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolResultSchema,
  GetPromptResultSchema,
  LATEST_PROTOCOL_VERSION,
  ListPromptsResultSchema,
  ListResourcesResultSchema,
  ListResourceTemplatesResultSchema,
  ReadResourceResultSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { pino, type Logger } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import type { McpServerConfig } from "../gateway/config/config.js";
import { GATEWAY_ID } from "../gateway/wire/envelope.js";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { ParticipantClient, type IncomingNotification } from "../participants/index.js";
import { startBridge, type Bridge, type BridgeOptions } from "../participants/bridge/bridge.js";
import { failure, startGateway, type TestGateway, waitFor } from "./helpers.js";

const require = createRequire(import.meta.url);
const EVERYTHING = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");
const FILESYSTEM = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const FLAKY = fileURLToPath(new URL("./fixtures/bridge/flaky.mjs", import.meta.url));

const TOKENS = {
  alice: "alice-token-123",
  agent: "agent-token-456",
  everything: "everything-token-789",
  fs: "fs-token-000-secret",
  flaky: "flaky-token-111-secret",
  web: "web-token-222",
} as const;
type Who = keyof typeof TOKENS;

const SPACE = `
space: {id: lab}
participants:
  alice: {kind: human, token: ${TOKENS.alice}}
  agent: {kind: agent, token: ${TOKENS.agent}}
  everything: {kind: mcp, token: ${TOKENS.everything}}
  fs: {kind: mcp, token: ${TOKENS.fs}}
  flaky: {kind: mcp, token: ${TOKENS.flaky}}
  web: {kind: service, token: ${TOKENS.web}}
`;

let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const clients: ParticipantClient[] = [];
const cleanups: (() => unknown)[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await gw?.stop();
  gw = undefined;
  for (const c of cleanups.splice(0)) await c();
});

const flaky: McpServerConfig = { command: process.execPath, args: [FLAKY] };

/** A pino logger whose lines land in an array. */
function captureLog(): { logger: Logger; lines: Record<string, unknown>[]; text: () => string } {
  const raw: string[] = [];
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: "debug" },
    {
      write: (s: string) => {
        raw.push(s);
        lines.push(JSON.parse(s) as Record<string, unknown>);
      },
    },
  );
  return { logger, lines, text: () => raw.join("") };
}

async function bridge(id: Who, server: McpServerConfig, extra: Partial<BridgeOptions> = {}): Promise<Bridge> {
  const b = await startBridge({
    id,
    server,
    client: { url: gw!.url, space: "lab", token: TOKENS[id] },
    restart: { initialDelayMs: 50, maxDelayMs: 200 },
    ...extra,
  });
  bridges.push(b);
  return b;
}

async function connect(who: Who): Promise<ParticipantClient> {
  const c = await ParticipantClient.connect({ url: gw!.url, space: "lab", token: TOKENS[who] });
  clients.push(c);
  return c;
}

const toolNames = async (c: ParticipantClient) => (await c.listTools()).map((t) => t.name);
const hasTool = (c: ParticipantClient, name: string) => waitFor(async () => (await toolNames(c)).includes(name), 5000, `tool ${name}`);
const stderrLines = (lines: Record<string, unknown>[]) => lines.filter((l) => l["stream"] === "stderr").map((l) => l["msg"]);
const text = (result: { content: unknown[] }) => (result.content[0] as { text: string }).text;

function notifications(c: ParticipantClient, method: string): IncomingNotification[] {
  const seen: IncomingNotification[] = [];
  c.onNotification((n) => {
    if (n.method === method) seen.push(n);
  });
  return seen;
}

describe("server-everything over stdio", () => {
  it("registers its tools, forwards calls, resources, prompts, completion, ping and progress, and logs its stderr", async () => {
    process.env["MEWGATE_BRIDGE_TEST_SECRET"] = "parent-only";
    cleanups.push(() => delete process.env["MEWGATE_BRIDGE_TEST_SECRET"]);
    const log = captureLog();
    gw = await startGateway(SPACE);
    const b = await bridge(
      "everything",
      { command: process.execPath, args: [EVERYTHING, "stdio"], env: { BRIDGE_VAR: "passed" } },
      { logger: log.logger },
    );
    expect(b.status).toBe("running");
    expect(b.serverInfo?.name).toBe("mcp-servers/everything");
    const alice = await connect("alice");
    await hasTool(alice, "everything/echo");
    expect(await toolNames(alice)).toEqual(
      expect.arrayContaining(["everything/echo", "everything/get-sum", "everything/trigger-long-running-operation"]),
    );

    // A call through the registry, with the namespaced name.
    const echo = await alice.request(
      GATEWAY_ID,
      "tools/call",
      { name: "everything/echo", arguments: { message: "hello" } },
      { schema: CallToolResultSchema },
    );
    expect(echo.content).toEqual([{ type: "text", text: "Echo: hello" }]);

    // Resources, templates, prompts, completion, ping, logging: addressed to the bridge.
    const resources = await alice.request("everything", "resources/list", {}, { schema: ListResourcesResultSchema });
    expect(resources.resources.length).toBeGreaterThan(0);
    const uri = resources.resources[0]!.uri;
    const read = await alice.request("everything", "resources/read", { uri }, { schema: ReadResourceResultSchema });
    expect(read.contents[0]!.uri).toBe(uri);
    const templates = await alice.request("everything", "resources/templates/list", {}, { schema: ListResourceTemplatesResultSchema });
    expect(templates.resourceTemplates.length).toBeGreaterThan(0);
    const prompts = await alice.request("everything", "prompts/list", {}, { schema: ListPromptsResultSchema });
    expect(prompts.prompts.map((p) => p.name)).toContain("args-prompt");
    const prompt = await alice.request(
      "everything",
      "prompts/get",
      { name: "args-prompt", arguments: { city: "Lisbon" } },
      { schema: GetPromptResultSchema },
    );
    expect(JSON.stringify(prompt.messages)).toContain("Lisbon");
    const completion = (await alice.request("everything", "completion/complete", {
      ref: { type: "ref/prompt", name: "completable-prompt" },
      argument: { name: "department", value: "Eng" },
    })) as { completion: { values: string[] } };
    expect(completion.completion.values).toContain("Engineering");
    expect(await alice.request("everything", "ping")).toEqual({});
    expect(await alice.request("everything", "logging/setLevel", { level: "info" })).toEqual({});

    // The server's JSON-RPC errors come back as they were sent.
    const unknown = await failure(alice.request("everything", "prompts/get", { name: "no-such-prompt" }));
    expect(unknown.code).toBe("rpc_error");
    expect(unknown.rpcCode).toBe(-32602);
    // The SDK on the server side writes "MCP error -32602: …" itself; the bridge adds nothing.
    expect(unknown.message).toMatch(/^MCP error -32602: Prompt no-such-prompt not found$/);

    // `initialize` is answered from the bridge's own session.
    const init = (await alice.request("everything", "initialize", {})) as { protocolVersion: string; serverInfo: { name: string } };
    expect(init.protocolVersion).toBe(LATEST_PROTOCOL_VERSION);
    expect(init.serverInfo.name).toBe("mcp-servers/everything");

    // Progress reaches the caller, correlated to its call, through the registry as well.
    const progress: { progress?: number; total?: number }[] = [];
    const long = await alice.request(
      GATEWAY_ID,
      "tools/call",
      { name: "everything/trigger-long-running-operation", arguments: { duration: 0.3, steps: 3 } },
      { schema: CallToolResultSchema, onProgress: (p) => progress.push(p) },
    );
    expect(text(long)).toMatch(/completed/);
    expect(progress.map((p) => p.progress)).toEqual([1, 2, 3]);
    expect(progress[0]!.total).toBe(3);

    // env: the safe defaults plus the configured variables, not the whole parent environment.
    const env = JSON.parse(
      text(await alice.request("everything", "tools/call", { name: "get-env", arguments: {} }, { schema: CallToolResultSchema })),
    ) as Record<string, string>;
    expect(env["BRIDGE_VAR"]).toBe("passed");
    expect(env["PATH"]).toBe(process.env["PATH"]);
    expect(env["MEWGATE_BRIDGE_TEST_SECRET"]).toBeUndefined();

    // Its stderr is in the log, at info, tagged; the token is not.
    const startLine = log.lines.find((l) => l["stream"] === "stderr" && String(l["msg"]).includes("Starting default (STDIO) server"));
    expect(startLine).toMatchObject({ level: 30, participant: "everything", component: "mcp-bridge" });
    expect(log.text()).not.toContain(TOKENS.everything);
  });
});

describe("server-filesystem over stdio, sandboxed to a temp dir", () => {
  it("reads directly, writes through an approved proposal, and the server denies a path outside", async () => {
    const dir = realpathSync(mkdtempSync(join(tmpdir(), "mewgate-fs-")));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "hello.txt"), "hello from disk");
    gw = await startGateway(SPACE);
    await bridge("fs", { command: process.execPath, args: [FILESYSTEM, dir] });
    const agent = await connect("agent");
    const alice = await connect("alice");
    await hasTool(agent, "fs/write_file");
    const tools = await agent.listTools();
    // Read tools are read-only, so an agent calls them directly; writes need a proposal.
    expect(tools.find((t) => t.name === "fs/read_text_file")?.policy).toBe("direct");
    expect(tools.find((t) => t.name === "fs/write_file")?.policy).toBe("proposal");

    const read = await agent.request(
      GATEWAY_ID,
      "tools/call",
      { name: "fs/read_text_file", arguments: { path: join(dir, "hello.txt") } },
      { schema: CallToolResultSchema },
    );
    expect(text(read)).toBe("hello from disk");

    const seen = new Promise<string>((resolve) => alice.on("proposal", (p) => resolve(p.id)));
    const write = agent.propose(
      "fs",
      "tools/call",
      { name: "write_file", arguments: { path: join(dir, "new.txt"), content: "written by the agent" } },
      { schema: CallToolResultSchema },
    );
    expect(await seen).toBe(write.id);
    alice.approve(write.id);
    const written = await write;
    expect(written.isError).toBeFalsy();
    expect(readFileSync(join(dir, "new.txt"), "utf8")).toBe("written by the agent");

    const outside = await agent.request(
      GATEWAY_ID,
      "tools/call",
      { name: "fs/read_text_file", arguments: { path: "/etc/hostname" } },
      { schema: CallToolResultSchema },
    );
    expect(outside.isError).toBe(true);
    expect(text(outside)).toMatch(/access denied.*outside allowed directories/i);
  });
});

describe("a fixture server over stdio", () => {
  it("forwards tools/list_changed so the registry picks up a new tool, and resource updates to subscribers", async () => {
    gw = await startGateway(SPACE);
    await bridge("flaky", flaky);
    const alice = await connect("alice");
    await hasTool(alice, "flaky/echo");
    const changed = notifications(alice, "notifications/tools/list_changed");
    const added = await alice.request(
      GATEWAY_ID,
      "tools/call",
      { name: "flaky/add_tool", arguments: {} },
      { schema: CallToolResultSchema },
    );
    expect(text(added)).toBe("added_1");
    await hasTool(alice, "flaky/added_1");
    expect(changed.some((n) => n.from === GATEWAY_ID)).toBe(true);
    const call = await alice.request(GATEWAY_ID, "tools/call", { name: "flaky/added_1", arguments: {} }, { schema: CallToolResultSchema });
    expect(text(call)).toBe("added_1");

    const updates = notifications(alice, "notifications/resources/updated");
    expect(await alice.request("flaky", "resources/subscribe", { uri: "note://1" })).toEqual({});
    await alice.request("flaky", "tools/call", { name: "touch", arguments: { uri: "note://1" } });
    await waitFor(() => updates.length === 1, 2000, "a resource update");
    expect(updates[0]).toMatchObject({ from: "flaky", params: { uri: "note://1" } });
  });

  it("fails a pending call at once when the server is killed, answers fast while it is down, restarts it, and its tools work again", async () => {
    const log = captureLog();
    gw = await startGateway(SPACE);
    const b = await bridge("flaky", flaky, { logger: log.logger, restart: { initialDelayMs: 400, maxDelayMs: 400 } });
    const alice = await connect("alice");
    await hasTool(alice, "flaky/hang");
    const leaves: string[] = [];
    alice.on("presence", (e) => e.event === "leave" && leaves.push(e.participant.id));
    const firstPid = b.pid!;
    expect(firstPid).toBeGreaterThan(0);

    const hang = alice.request("flaky", "tools/call", { name: "hang", arguments: {} });
    await waitFor(() => stderrLines(log.lines).includes("hang started"), 2000, "the hang to start");
    const killedAt = Date.now();
    process.kill(firstPid, "SIGKILL");
    const crashed = await failure(hang);
    expect(Date.now() - killedAt).toBeLessThan(1000);
    expect(crashed.code).toBe("server_crashed");
    expect(crashed.rpcCode).toBe(-32003);
    expect(crashed.message).toMatch(/"flaky" \(node flaky\.mjs\) was killed by SIGKILL/);
    expect(crashed.data).toMatchObject({ reason: "server_crashed", signal: "SIGKILL" });

    // Down: a new call fails at once instead of waiting for the restart.
    expect(b.status).toBe("restarting");
    const askedAt = Date.now();
    const unavailable = await failure(alice.request("flaky", "tools/call", { name: "echo", arguments: { text: "x" } }));
    expect(unavailable.code).toBe("server_unavailable");
    expect(Date.now() - askedAt).toBeLessThan(300);

    await waitFor(() => b.status === "running", 5000, "the restart");
    expect(b.restarts).toBe(1);
    expect(b.pid).not.toBe(firstPid);
    expect(await toolNames(alice)).toContain("flaky/echo");
    const echo = await alice.request(
      GATEWAY_ID,
      "tools/call",
      { name: "flaky/echo", arguments: { text: "back" } },
      { schema: CallToolResultSchema },
    );
    expect(text(echo)).toBe("back");

    // A crash from inside (exit code 3): the pending call and the crashing call both fail.
    const hang2 = alice.request("flaky", "tools/call", { name: "hang", arguments: {} });
    await waitFor(() => stderrLines(log.lines).filter((l) => l === "hang started").length === 2, 2000, "the second hang");
    const [pending, crashing] = await Promise.all([
      failure(hang2),
      failure(alice.request("flaky", "tools/call", { name: "crash", arguments: { code: 3 } })),
    ]);
    for (const e of [pending, crashing]) {
      expect(e.code).toBe("server_crashed");
      expect(e.message).toMatch(/exited with code 3/);
      expect(e.data).toMatchObject({ exit_code: 3 });
    }
    await waitFor(() => b.status === "running" && b.restarts === 2, 5000, "the second restart");
    expect(
      text(await alice.request("flaky", "tools/call", { name: "echo", arguments: { text: "again" } }, { schema: CallToolResultSchema })),
    ).toBe("again");

    // The participant never left the space; restarts are logged.
    expect(leaves).toEqual([]);
    expect(alice.participants.has("flaky")).toBe(true);
    expect(log.lines.filter((l) => l["msg"] === "MCP server restarted")).toHaveLength(2);
  });

  it("times out a call the server never answers, cancels it at the server, and passes a caller's cancellation on", async () => {
    const log = captureLog();
    gw = await startGateway(SPACE);
    const b = await bridge("flaky", flaky, { logger: log.logger, callTimeoutMs: 300 });
    const alice = await connect("alice");
    const startedAt = Date.now();
    const timedOut = await failure(alice.request("flaky", "tools/call", { name: "hang", arguments: {} }));
    expect(timedOut.code).toBe("server_timeout");
    expect(timedOut.rpcCode).toBe(-32001);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(290);
    expect(Date.now() - startedAt).toBeLessThan(2000);
    await waitFor(() => stderrLines(log.lines).includes("hang cancelled: timeout"), 2000, "the server to hear of the timeout");
    expect(b.status).toBe("running");

    const abort = new AbortController();
    const cancelled = alice.request("flaky", "tools/call", { name: "hang", arguments: {} }, { signal: abort.signal, timeoutMs: 10_000 });
    await waitFor(() => stderrLines(log.lines).filter((l) => l === "hang started").length === 2, 2000, "the second hang");
    abort.abort();
    expect((await failure(cancelled)).code).toBe("cancelled");
    await waitFor(() => stderrLines(log.lines).includes("hang cancelled: cancelled"), 2000, "the server to hear of the cancellation");
  });

  it("gives up after maxRestarts: stays in the space with no tools and answers server_unavailable", async () => {
    gw = await startGateway(SPACE);
    const b = await bridge("flaky", flaky, { restart: { maxRestarts: 0 } });
    const alice = await connect("alice");
    await hasTool(alice, "flaky/echo");
    await failure(alice.request("flaky", "tools/call", { name: "crash", arguments: { code: 1 } }));
    await waitFor(() => b.status === "failed", 2000, "giving up");
    await waitFor(async () => !(await toolNames(alice)).some((n) => n.startsWith("flaky/")), 2000, "the tools to go");
    const err = await failure(alice.request("flaky", "tools/call", { name: "echo", arguments: { text: "x" } }));
    expect(err.code).toBe("server_unavailable");
    expect(err.message).toMatch(/gave up restarting.*exited with code 1/);
    expect(alice.participants.has("flaky")).toBe(true);
  });

  it("refuses to start a server that cannot be spawned or dies while initializing", async () => {
    gw = await startGateway(SPACE);
    await expect(bridge("flaky", { command: "/nonexistent/mcp-server" })).rejects.toThrow(/"flaky" \(mcp-server\) did not start: .*ENOENT/);
    await expect(bridge("flaky", { command: process.execPath, args: ["-e", "process.exit(7)"] })).rejects.toThrow(
      /exited with code 7 while initializing/,
    );
  });

  it("stop() leaves the space and ends the server process", async () => {
    gw = await startGateway(SPACE);
    const alice = await connect("alice");
    const b = await bridge("flaky", flaky);
    await waitFor(() => alice.participants.has("flaky"), 2000, "the join");
    const pid = b.pid!;
    await b.stop();
    expect(b.status).toBe("stopped");
    expect(() => process.kill(pid, 0)).toThrow();
    await waitFor(() => !alice.participants.has("flaky"), 2000, "the leave");
  });

  it("rejoins when the gateway restarts, and the registry has its tools again", async () => {
    gw = await startGateway(SPACE);
    const b = await bridge("flaky", flaky);
    const { port, dir } = gw;
    await gw.gateway.close();
    gw = await startGateway(SPACE, { port, dir });
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const alice = await connect("alice");
    await hasTool(alice, "flaky/echo");
    expect(b.status).toBe("running");
    expect(b.restarts).toBe(0);
    expect(
      text(await alice.request("flaky", "tools/call", { name: "echo", arguments: { text: "hi" } }, { schema: CallToolResultSchema })),
    ).toBe("hi");
  });
});

describe("streamable HTTP", () => {
  /** An MCP server over streamable HTTP in this process, one session per client. */
  async function startHttpServer(port = 0): Promise<{ http: HttpServer; url: string; port: number; close(): Promise<void> }> {
    const sessions = new Map<string, StreamableHTTPServerTransport>();
    const http = createServer((req, res) => {
      void (async () => {
        const sid = req.headers["mcp-session-id"];
        let transport = typeof sid === "string" ? sessions.get(sid) : undefined;
        if (!transport) {
          if (sid !== undefined) return void res.writeHead(404).end();
          const t = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (id) => void sessions.set(id, t),
          });
          const server = new McpServer({ name: "web", version: "1.0.0" });
          server.registerTool(
            "whoami",
            { description: "Echoes the x-api-key header", annotations: { readOnlyHint: true } },
            async (extra) => ({
              content: [{ type: "text", text: String(extra.requestInfo?.headers["x-api-key"]) }],
            }),
          );
          await server.connect(t);
          transport = t;
        }
        await transport.handleRequest(req, res);
      })();
    });
    await new Promise<void>((resolve) => http.listen(port, "127.0.0.1", resolve));
    const actual = (http.address() as AddressInfo).port;
    return {
      http,
      port: actual,
      url: `http://127.0.0.1:${actual}/mcp`,
      close: async () => {
        for (const t of sessions.values()) await t.close();
        http.closeAllConnections();
        await new Promise<void>((resolve) => http.close(() => resolve()));
      },
    };
  }

  it("bridges a server by URL with headers (in-process, as a service participant that announces its tools), and reconnects after the server comes back", async () => {
    let web = await startHttpServer();
    cleanups.push(() => web.close());
    gw = await startGateway(SPACE);
    const space = gw.gateway.spaces.get("lab")!;
    const b = await bridge(
      "web",
      { url: web.url, headers: { "x-api-key": "key-123" } },
      { client: { transport: () => connectInProcess(space, "web"), reconnect: false } },
    );
    const alice = await connect("alice");
    await hasTool(alice, "web/whoami");
    const who = await alice.request(GATEWAY_ID, "tools/call", { name: "web/whoami", arguments: {} }, { schema: CallToolResultSchema });
    expect(text(who)).toBe("key-123");

    // The server goes away: calls fail (at once, not after a timeout) and the bridge keeps trying.
    await web.close();
    const err = await failure(alice.request("web", "tools/call", { name: "whoami", arguments: {} }));
    expect(["server_crashed", "server_unavailable"]).toContain(err.code);
    await waitFor(() => b.status === "restarting", 2000, "the bridge to notice");
    web = await startHttpServer(web.port);
    await waitFor(() => b.status === "running", 5000, "the reconnect");
    expect(b.restarts).toBeGreaterThanOrEqual(1);
    expect(text(await alice.request("web", "tools/call", { name: "whoami", arguments: {} }, { schema: CallToolResultSchema }))).toBe(
      "key-123",
    );
  });
});
