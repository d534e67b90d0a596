/**
 * The space as an MCP server, driven by the MCP SDK's own `Client` over streamable HTTP
 * (mounted on a real gateway) and over stdio (`mewgate mcp` as a child process).
 *
 * The space: `notes` serves an McpServer (a read-only tool, a write tool, a tool denied to
 * the MCP client's participant), `human` approves or rejects with the SDK, and `claude`
 * (kind agent) is the participant the MCP client acts as.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { ToolListChangedNotificationSchema, type CallToolResult, type Progress } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { resolveMcpTarget } from "../cli/mcp.js";
import { resolveTarget } from "../cli/remote.js";
import { ParticipantClient, RpcError } from "../participants/index.js";
import { buildCatalogue, mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { sleep, startGateway, type TestGateway, waitForTool } from "./helpers.js";

const ROOT = join(import.meta.dirname, "..");
const MAIN = join(ROOT, "dist", "cli", "main.js");

const TOKENS = { human: "human-token-1234", notes: "notes-token-5678", claude: "claude-token-9012", raw: "raw-token-3456" } as const;

const SPACE = `
space: {id: lab, name: Lab}
policy:
  proposal_ttl_ms: 60000
participants:
  human: {kind: human, token: ${TOKENS.human}}
  notes: {kind: mcp, token: ${TOKENS.notes}}
  raw: {kind: mcp, token: ${TOKENS.raw}}
  claude:
    kind: agent
    token: ${TOKENS.claude}
    tools: {deny: ["notes/secret"]}
`;

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const clients: ParticipantClient[] = [];
const mcpClients: Client[] = [];
const httpTransports: StreamableHTTPClientTransport[] = [];
const dirs: string[] = [];

afterEach(async () => {
  // Ending HTTP sessions first lets the gateway's HTTP server close without waiting on the client's sockets.
  await Promise.all(httpTransports.splice(0).map((t) => t.terminateSession().catch(() => {})));
  await Promise.all(mcpClients.splice(0).map((c) => c.close().catch(() => {})));
  await mount?.close();
  mount = undefined;
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await gw?.stop();
  gw = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface Space {
  gw: TestGateway;
  notes: McpServer;
  human: ParticipantClient;
  /** How the human answers the next proposals. */
  decide: (proposal: Envelope) => void;
  proposals: Envelope[];
}

/** A gateway with `notes` serving its tools and `human` watching for proposals. */
async function setup(yaml = SPACE): Promise<Space> {
  gw = await startGateway(yaml);
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool(
    "read_note",
    { title: "Read a note", description: "Reads a note", inputSchema: { id: z.string() }, annotations: { readOnlyHint: true } },
    async ({ id }, extra) => {
      const token = extra._meta?.progressToken;
      if (token !== undefined)
        await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: 1, total: 1 } });
      return { content: [{ type: "text", text: `note ${id}: buy milk` }] };
    },
  );
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => ({
    content: [{ type: "text", text: `wrote: ${text}` }],
  }));
  notes.registerTool("secret", { description: "Not for agents", annotations: { readOnlyHint: true } }, async () => ({
    content: [{ type: "text", text: "s3cr3t" }],
  }));
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: TOKENS.notes });
  clients.push(owner);
  await owner.serveMcp(notes);
  await owner.connect();

  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: TOKENS.human });
  clients.push(human);
  const space: Space = { gw, notes, human, decide: () => {}, proposals: [] };
  human.on("proposal", (p) => {
    space.proposals.push(p);
    space.decide(p);
  });
  await waitForTool(human, "notes/write_note");
  return space;
}

async function httpClient(space: Space, token: string = TOKENS.claude): Promise<{ mcp: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${space.gw.port}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const mcp = new Client({ name: "test-client", version: "1.0.0" });
  mcpClients.push(mcp);
  httpTransports.push(transport);
  await mcp.connect(transport);
  return { mcp, transport };
}

/** A bare `initialize` POST, as an MCP client's first request. */
function postInitialize(port: number, headers: Record<string, string>, query = ""): Promise<Response> {
  const init = {
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
  };
  return fetch(`http://127.0.0.1:${port}/mcp${query}`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: JSON.stringify(init),
  });
}

function text(result: unknown): string {
  return (result as CallToolResult).content.map((c) => (c.type === "text" ? c.text : "")).join("");
}

function until<T>(register: (done: (v: T) => void) => void, timeoutMs = 5000): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timed out waiting")), timeoutMs);
    register((v) => {
      clearTimeout(timer);
      resolve(v);
    });
  });
}

describe("over streamable HTTP on the gateway", () => {
  it("lists the space's tools under MCP-safe names and calls a read-only one directly", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway);
    const { mcp } = await httpClient(space);
    expect(mcp.getServerVersion()?.name).toBe("mewgate-lab");
    expect(mcp.getServerCapabilities()?.tools?.listChanged).toBe(true);

    const { tools } = await mcp.listTools();
    // notes/secret is denied to claude, so it is not offered at all.
    expect(tools.map((t) => t.name)).toEqual(["notes__read_note", "notes__write_note"]);
    const [read, write] = tools;
    expect(read!.title).toBe("Read a note (notes/read_note)");
    expect(read!.description).toBe("notes/read_note: Reads a note");
    expect(read!.annotations?.readOnlyHint).toBe(true);
    expect(read!.inputSchema.properties).toHaveProperty("id");
    expect(read!._meta).toMatchObject({ "mewgate/name": "notes/read_note", "mewgate/policy": "direct" });
    expect(write!.title).toBe("notes/write_note — needs approval");
    expect(write!.description).toMatch(/^notes\/write_note: Writes a note\n\nNeeds approval/);

    const progress: Progress[] = [];
    const result = await mcp.callTool({ name: "notes__read_note", arguments: { id: "7" } }, undefined, {
      onprogress: (p) => progress.push(p),
    });
    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe("note 7: buy milk");
    // The owner's own progress is forwarded.
    expect(progress).toEqual([expect.objectContaining({ progress: 1, total: 1 })]);
    expect(space.proposals).toEqual([]);

    // A name that is not in the list is a protocol error, not a call.
    await expect(mcp.callTool({ name: "notes__nope", arguments: {} })).rejects.toThrow(/unknown tool/);
  });

  it("holds a call that needs approval, sends progress while waiting, and returns the result once approved", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway, { approvalProgressMs: 40 });
    const { mcp } = await httpClient(space);
    space.decide = (p) => setTimeout(() => space.human.approve(p.id), 300);

    const progress: Progress[] = [];
    const result = await mcp.callTool({ name: "notes__write_note", arguments: { text: "hello" } }, undefined, {
      onprogress: (p) => progress.push(p),
    });
    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe("wrote: hello");

    const [proposal] = space.proposals;
    expect(proposal!.from).toBe("claude");
    expect(proposal!.payload).toMatchObject({ method: "tools/call", params: { name: "write_note", arguments: { text: "hello" } } });
    const waiting = progress.filter((p) => p.message === `waiting for approval of notes/write_note (proposal ${proposal!.id})`);
    expect(waiting.length).toBeGreaterThanOrEqual(3);
    expect(progress.some((p) => p.message === "approved by human; running notes/write_note")).toBe(true);
    // MCP requires progress to increase.
    for (let i = 1; i < progress.length; i++) expect(progress[i]!.progress).toBeGreaterThan(progress[i - 1]!.progress);
  });

  it("returns a rejection as a tool error carrying the approver's reason and text", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway);
    const { mcp } = await httpClient(space);
    space.decide = (p) => space.human.reject(p.id, "unsafe", "not in prod");
    const result = await mcp.callTool({ name: "notes__write_note", arguments: { text: "rm -rf" } });
    expect(result.isError).toBe(true);
    expect(text(result)).toBe("notes/write_note was not run: rejected by human: unsafe — not in prod");
  });

  it("withdraws the proposal when the MCP client cancels the call", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway);
    const { mcp } = await httpClient(space);
    const abort = new AbortController();
    space.decide = () => abort.abort("changed my mind");
    const withdrawn = until<Envelope>((done) => space.human.on("envelope", (e) => e.kind === "mcp/withdraw" && done(e)));
    await expect(
      mcp.callTool({ name: "notes__write_note", arguments: { text: "x" } }, undefined, { signal: abort.signal }),
    ).rejects.toThrow();
    const w = await withdrawn;
    expect(w.from).toBe("claude");
    expect(w.correlation_id).toEqual([space.proposals[0]!.id]);
  });

  it("forwards tools/list_changed when the space's catalogue changes", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway);
    const { mcp } = await httpClient(space);
    expect((await mcp.listTools()).tools).toHaveLength(2);
    const changed = until<void>((done) => mcp.setNotificationHandler(ToolListChangedNotificationSchema, async () => done()));
    // Give the client's standalone SSE stream (where unsolicited notifications travel) a moment to open.
    await sleep(100);
    space.notes.registerTool("append_note", { description: "Appends", inputSchema: { text: z.string() } }, async () => ({ content: [] }));
    await changed;
    const names = (await mcp.listTools()).tools.map((t) => t.name);
    expect(names).toContain("notes__append_note");
  });

  it("fails a proposal nobody decides on as an expired tool error", async () => {
    const space = await setup(SPACE.replace("proposal_ttl_ms: 60000", "proposal_ttl_ms: 150"));
    mount = mountHttp(space.gw.gateway);
    const { mcp } = await httpClient(space);
    const result = await mcp.callTool({ name: "notes__write_note", arguments: { text: "late" } });
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/^notes\/write_note was not run: nobody approved the proposal in time, so it expired/);
  });

  it("refuses a missing or wrong token with 401, and ends the participant with its last session", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway);
    const post = (headers: Record<string, string>) => postInitialize(space.gw.port, headers);
    for (const headers of [{}, { authorization: "Bearer wrong-token" }] as Record<string, string>[]) {
      const res = await post(headers);
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
      const body = (await res.json()) as { error: { message: string; data: { reason: string } } };
      expect(body.error.data.reason).toBe("unauthorized");
    }
    await expect(httpClient(space, "wrong-token")).rejects.toThrow(/invalid token for space/);
    expect(space.human.participants.has("claude")).toBe(false);

    // A session joins the space as claude; ending it leaves.
    const joined = until<void>((done) => space.human.on("presence", (e) => e.event === "join" && e.participant.id === "claude" && done()));
    const { transport } = await httpClient(space);
    await joined;
    expect(mount.sessions).toBe(1);
    // Another participant's token cannot use claude's session.
    const hijack = await fetch(`http://127.0.0.1:${space.gw.port}/mcp`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${TOKENS.human}`,
        "mcp-session-id": transport.sessionId!,
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
    });
    expect(hijack.status).toBe(403);
    const left = until<void>((done) => space.human.on("presence", (e) => e.event === "leave" && e.participant.id === "claude" && done()));
    await transport.terminateSession();
    await left;
    expect(mount.sessions).toBe(0);
  });

  it("passes the owner's JSON-RPC errors through, and fails a call whose owner leaves as a tool error", async () => {
    const space = await setup();
    // An owner answering with onRequest: one tool that refuses its arguments, one that never answers.
    const raw = new ParticipantClient({ url: space.gw.url, space: "lab", token: TOKENS.raw, reconnect: false });
    clients.push(raw);
    raw.onRequest(({ method, params }) => {
      if (method === "tools/list") {
        const tool = (name: string) => ({ name, inputSchema: { type: "object" }, annotations: { readOnlyHint: true } });
        return { tools: [tool("picky"), tool("hang")] };
      }
      if ((params as { name: string }).name === "picky") throw new RpcError(-32602, "picky wants a color", { field: "color" });
      return new Promise(() => {});
    });
    await raw.connect();
    await waitForTool(space.human, "raw/hang");
    mount = mountHttp(space.gw.gateway);
    const { mcp } = await httpClient(space);
    await expect(mcp.callTool({ name: "raw__picky", arguments: {} })).rejects.toMatchObject({
      code: -32602,
      message: expect.stringContaining("picky wants a color"),
    });

    const hanging = mcp.callTool({ name: "raw__hang", arguments: {} });
    await sleep(50);
    await raw.close();
    const result = await hanging;
    expect(result.isError).toBe(true);
    expect(text(result)).toBe('raw/hang failed: "raw" left the space before answering');
  });

  it("closes a session left idle, and its participant leaves the space", async () => {
    const space = await setup();
    mount = mountHttp(space.gw.gateway, { idleTimeoutMs: 200 });
    const auth = { authorization: `Bearer ${TOKENS.claude}` };
    expect((await postInitialize(space.gw.port, auth, "?space=nope")).status).toBe(404);
    const joined = until<void>((done) => space.human.on("presence", (e) => e.event === "join" && e.participant.id === "claude" && done()));
    const left = until<void>((done) => space.human.on("presence", (e) => e.event === "leave" && e.participant.id === "claude" && done()));
    const res = await postInitialize(space.gw.port, auth, "?space=lab");
    expect(res.status).toBe(200);
    expect(res.headers.get("mcp-session-id")).toMatch(/^[0-9a-f-]{36}$/);
    await res.text();
    await joined;
    expect(mount.sessions).toBe(1);
    await left;
    expect(mount.sessions).toBe(0);
  });
});

describe("over stdio (mewgate mcp)", () => {
  // `npm test` builds dist/ (tsc, then the esbuild bundle) before vitest runs; this suite spawns the built CLI.

  function stdioClient(args: string[]): { mcp: Client; transport: StdioClientTransport; stderr: () => string } {
    const transport = new StdioClientTransport({ command: process.execPath, args: [MAIN, "mcp", ...args], stderr: "pipe" });
    let err = "";
    transport.stderr?.on("data", (d) => (err += d));
    const mcp = new Client({ name: "stdio-test", version: "1.0.0" });
    mcpClients.push(mcp);
    return { mcp, transport, stderr: () => err };
  }

  it("lists the tools, calls one directly and one that a human approves", async () => {
    const space = await setup();
    const { mcp, transport } = stdioClient([
      "--gateway",
      space.gw.url,
      "--space",
      "lab",
      "--token",
      TOKENS.claude,
      "--approval-progress-ms",
      "50",
    ]);
    await mcp.connect(transport);
    expect((await mcp.listTools()).tools.map((t) => t.name)).toEqual(["notes__read_note", "notes__write_note"]);
    expect(text(await mcp.callTool({ name: "notes__read_note", arguments: { id: "1" } }))).toBe("note 1: buy milk");

    space.decide = (p) => setTimeout(() => space.human.approve(p.id), 200);
    const progress: Progress[] = [];
    const result = await mcp.callTool({ name: "notes__write_note", arguments: { text: "via stdio" } }, undefined, {
      onprogress: (p) => progress.push(p),
    });
    expect(text(result)).toBe("wrote: via stdio");
    expect(space.proposals.map((p) => p.from)).toEqual(["claude"]);
    expect(progress.some((p) => p.message?.startsWith("waiting for approval of notes/write_note"))).toBe(true);
  });

  it("exits non-zero with a readable message, and nothing on stdout, when the token is refused", async () => {
    const space = await setup();
    const child = spawn(process.execPath, [MAIN, "mcp", "--gateway", space.gw.url, "--space", "lab", "--token", "not-a-token"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    expect(code).toBe(1);
    expect(stdout).toBe("");
    expect(stderr).toMatch(/mewgate mcp: the gateway refused the token from --token for space "lab"/);
    expect(stderr).not.toContain("not-a-token");
  });
});

describe("mewgate mcp --config --as", () => {
  it("reads the address from space.yaml and the token the way the gateway resolves it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-mcp-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(
      file,
      `space: {id: lab}\ngateway: {host: 0.0.0.0, port: 7777}\nparticipants:\n  a: {kind: agent, token: from-config}\n  b-2: {kind: agent}\n  c: {kind: agent}\n`,
    );
    mkdirSync(join(dir, ".mewgate", "tokens"), { recursive: true });
    writeFileSync(join(dir, ".mewgate", "tokens", "c.token"), "from-file\n");
    const env = { MEWGATE_TOKEN_B_2: "from-env" };

    const tokens = join(dir, ".mewgate", "tokens");

    expect(await resolveMcpTarget({ config: file, as: "a" }, env)).toMatchObject({
      url: "ws://127.0.0.1:7777",
      space: "lab",
      token: "from-config",
      participant: "a",
      tokenSource: `the token of "a" in ${file}`,
    });
    expect(await resolveMcpTarget({ config: file, as: "b-2" }, env)).toMatchObject({ token: "from-env", tokenSource: "MEWGATE_TOKEN_B_2" });
    expect(await resolveMcpTarget({ config: file, as: "c" }, env)).toMatchObject({
      token: "from-file",
      tokenSource: join(tokens, "c.token"),
    });
    // Flags win over the file; a URL is normalised the way every command does it.
    expect(await resolveMcpTarget({ config: file, as: "c", token: "flag", gateway: "http://10.0.0.1:9" }, env)).toMatchObject({
      token: "flag",
      tokenSource: "--token",
      url: "ws://10.0.0.1:9",
    });
    // MEWGATE_TOKEN is the last resort: without a space.yaml, after the participant's own sources, and alone it says who you are.
    expect(await resolveMcpTarget({ gateway: "ws://h:1", space: "s" }, { MEWGATE_TOKEN: "generic" })).toMatchObject({
      url: "ws://h:1",
      space: "s",
      token: "generic",
      tokenSource: "MEWGATE_TOKEN",
    });
    expect(await resolveMcpTarget({ config: file, as: "b-2" }, { MEWGATE_TOKEN: "generic" })).toMatchObject({
      token: "generic",
      tokenSource: "MEWGATE_TOKEN",
      participant: "b-2",
    });
    expect(await resolveMcpTarget({ config: file, as: "c" }, { ...env, MEWGATE_TOKEN: "generic" })).toMatchObject({ token: "from-file" });
    expect(await resolveMcpTarget({ config: file }, { MEWGATE_TOKEN: "generic" })).toMatchObject({
      space: "lab",
      token: "generic",
      participant: undefined,
    });

    await expect(resolveMcpTarget({ config: file }, env)).rejects.toThrow(/--config needs --as <participant>: one of a, b-2, c/);
    await expect(resolveMcpTarget({ config: file, as: "zed" }, env)).rejects.toThrow(/no participant "zed"/);
    await expect(resolveMcpTarget({ config: file, as: "b-2" }, {})).rejects.toThrow(/no token for "b-2": set MEWGATE_TOKEN_B_2/);
    await expect(resolveMcpTarget({ config: file, as: "a", space: "other" }, env)).rejects.toThrow(
      `--space other does not match ${file}, which defines space "lab"`,
    );
    await expect(resolveMcpTarget({ gateway: "ws://h:1", space: "s" }, {})).rejects.toThrow(
      /^missing --token: give --gateway, --space and --token \(or MEWGATE_TOKEN\), or --config space.yaml --as <participant>$/,
    );
    await expect(resolveMcpTarget({ gateway: "ftp://h:1", space: "s", token: "t" }, {})).rejects.toThrow(
      /not a gateway URL: "ftp:\/\/h:1"/,
    );
  });

  it("never acts as the space's human by default, where the terminal commands do", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-mcp-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(
      file,
      `space: {id: lab}\nparticipants:\n  you: {kind: human, token: human-token}\n  claude: {kind: agent, token: agent-token}\n`,
    );

    // The human may call every tool without approval: an MCP client (usually a model) must name who it is.
    await expect(resolveMcpTarget({ config: file }, {})).rejects.toThrow(/--config needs --as <participant>: one of you, claude/);
    expect(await resolveTarget({ config: file }, {})).toMatchObject({ participant: "you", token: "human-token" });
    expect(await resolveMcpTarget({ config: file, as: "claude" }, {})).toMatchObject({ participant: "claude", token: "agent-token" });
    // A token given with the space.yaml says who you are by itself.
    expect(await resolveMcpTarget({ config: file, token: "some-token" }, {})).toMatchObject({
      space: "lab",
      token: "some-token",
      participant: undefined,
    });
  });
});

describe("the catalogue", () => {
  it("keeps names reversible and safe, and leaves out the denied and the participant's own tools", () => {
    const long = `p/${"x".repeat(80)}`;
    const cat = buildCatalogue(
      [
        { name: "fs-1.a/read_file", participant: "fs-1.a", tool: "read_file", policy: "direct", inputSchema: { properties: {} } },
        { name: "fs-1.a/rm", participant: "fs-1.a", tool: "rm", policy: "denied" },
        { name: "me/mine", participant: "me", tool: "mine", policy: "direct" },
        { name: long, participant: "p", tool: "x".repeat(80), policy: "proposal", annotations: { readOnlyHint: "not a boolean" } },
      ],
      "me",
    );
    const names = cat.tools.map((t) => t.name);
    expect(names).toHaveLength(2);
    for (const n of names) expect(n).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    expect(cat.byName.get(names[0]!)?.real).toBe("fs-1.a/read_file");
    expect(cat.byName.get(names[1]!)).toEqual({ real: long, participant: "p", policy: "proposal" });
    // A schema without a type gets `type: object`; annotations MCP would refuse are dropped, not the tool.
    expect(cat.tools[0]!.inputSchema).toEqual({ type: "object", properties: {} });
    expect(cat.tools[1]!.annotations).toBeUndefined();
  });
});
