/**
 * One participant served as itself: `/mcp/<participant>` (streamable HTTP) and
 * `mewgate mcp --only` (stdio), against real servers bridged into a space —
 * server-everything (`ev`), server-filesystem (`fs`) and a fixture (`notes`) holding
 * things nobody on another participant's endpoint may reach. And resource templates on
 * both faces. Hostile first; then each answer is compared with the same request sent to
 * the server directly.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateTaskResultSchema,
  ElicitRequestSchema,
  ResourceUpdatedNotificationSchema,
  type CallToolResult,
  type Progress,
} from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { MCP_CLIENTS, runMcpConfig, type McpConfigOptions } from "../cli/mcp-config.js";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { CLI_MAIN, startGateway, waitFor, waitForTool, type TestGateway } from "./helpers.js";

const require = createRequire(import.meta.url);
const EVERYTHING = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");
const FILESYSTEM = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const NOTES = join(import.meta.dirname, "fixtures", "bridge", "notes.mjs");
const T = {
  alice: "alice-token-0001",
  claude: "claude-token-002",
  ev: "ev-token-000003",
  fs: "fs-token-000004",
  notes: "notes-token-0005",
  bare: "bare-token-00006",
};

const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
participants:
  alice: {kind: human, token: ${T.alice}}
  claude:
    kind: agent
    token: ${T.claude}
    tools: {allow: ["ev/*", "notes/*", "fs/list_allowed_directories", "fs/read_text_file"], ask: ["fs/write_file"], deny: ["ev/get-env"]}
    # Beside the agent's defaults, every MCP method to the servers (tools/call still goes by the tool policy).
    capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: mcp/response}, {kind: mcp/request}]
  bare: {kind: agent, token: ${T.bare}, tools: {allow: ["notes/*"]}}
  ev: {kind: mcp, token: ${T.ev}}
  fs: {kind: mcp, token: ${T.fs}}
  notes: {kind: mcp, token: ${T.notes}}
`;

let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const closers: (() => Promise<unknown>)[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const b of bridges.splice(0)) await b.stop();
  await gw?.stop();
  gw = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "mewgate-only-"));
  dirs.push(d);
  return d;
}

const servers = {
  ev: () => ({ command: process.execPath, args: [EVERYTHING, "stdio"] }),
  fs: (dir: string) => ({ command: process.execPath, args: [FILESYSTEM, dir] }),
  notes: () => ({ command: process.execPath, args: [NOTES] }),
};

/** The space, with the servers bridged in and an approver; `dir` is what fs may touch. */
async function setup(which: ("ev" | "fs" | "notes")[] = ["ev", "notes"]): Promise<{ dir: string; alice: ParticipantClient }> {
  gw = await startGateway(SPACE);
  mountHttp(gw.gateway);
  const dir = tempDir();
  writeFileSync(join(dir, "a.txt"), "hello from a");
  const space = gw.gateway.spaces.get("lab")!;
  for (const id of which) {
    const server = (id === "fs" ? servers.fs(dir) : servers[id]()) as never;
    bridges.push(await startBridge({ id, server, client: { transport: () => connectInProcess(space, id), reconnect: false } }));
  }
  const alice = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.alice });
  closers.push(() => alice.close());
  for (const id of which) await waitForTool(alice, id === "ev" ? "ev/echo" : id === "fs" ? "fs/read_text_file" : "notes/peek", 15_000);
  return { dir, alice };
}

async function viaGateway(path: string, capabilities: Record<string, unknown> = {}, token: string = T.claude): Promise<Client> {
  const client = new Client({ name: "only-test", version: "1.0.0" }, { capabilities });
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw!.port}${path}`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  closers.push(async () => {
    await transport.terminateSession().catch(() => {});
    await client.close();
  });
  return client;
}

/** What the bridge tells the servers it holds (bridge/callbacks.ts), so a server offers the same to both. */
const BRIDGE_CAPS = { sampling: {}, elicitation: { form: {}, url: {} } };

async function direct(server: { command: string; args: string[] }): Promise<Client> {
  const client = new Client({ name: "only-test", version: "1.0.0" }, { capabilities: BRIDGE_CAPS });
  await client.connect(new StdioClientTransport({ ...server, stderr: "ignore" }));
  closers.push(() => client.close());
  return client;
}

const fails = async (p: Promise<unknown>): Promise<string> => {
  try {
    const r = await p;
    return `resolved: ${JSON.stringify(r)}`;
  } catch (err) {
    return (err as Error).message;
  }
};

/** server-everything stamps its dynamic resources with the time of day: compared without it. */
function timeless(r: unknown): unknown {
  const contents = (r as { contents: Record<string, unknown>[] }).contents.map((c) => {
    const body = typeof c["blob"] === "string" ? Buffer.from(c["blob"], "base64").toString("utf8") : c["text"];
    return { ...c, blob: undefined, text: typeof body === "string" ? body.replace(/\d{1,2}:\d{2}:\d{2}\s?[AP]M/g, "<time>") : body };
  });
  return { contents };
}

const text = (r: unknown) => ((r as CallToolResult).content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");

describe("/mcp/<participant>: hostile first", () => {
  it("reaches nothing of another participant: not its tools, resources, templates or prompts, by name, URI or template", {
    timeout: 60_000,
  }, async () => {
    await setup(["ev", "notes"]);
    const ev = await viaGateway("/mcp/ev");
    const tools = (await ev.listTools()).tools.map((t) => t.name);
    expect(tools).toContain("echo");
    expect(tools).not.toContain("get-env"); // denied to claude
    expect(tools.some((n) => n.includes("peek") || n.includes("__") || n.includes("/"))).toBe(false);
    // Another participant's names reach ev only, which answers them as it would any tool it does not have.
    for (const name of ["peek", "notes__peek", "notes/peek", "ev/echo"]) {
      const said = await fails(ev.callTool({ name, arguments: {} }));
      expect(said).toContain(`Tool ${name} not found`);
      expect(said).not.toContain("notes-secret");
    }
    // A tool the policy denies the seat is not asked of the server.
    expect(await fails(ev.callTool({ name: "get-env", arguments: {} }))).toMatch(/unknown tool/);
    // Resources, templates and prompts of notes, by its URI, its template and its names.
    for (const uri of ["notes://secret", "notes://item/7"]) {
      const said = await fails(ev.readResource({ uri }));
      expect(said).not.toMatch(/^resolved/);
      expect(said).not.toContain("notes-secret");
      expect(await fails(ev.subscribeResource({ uri }))).not.toContain("notes-secret");
    }
    const templates = (await ev.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
    expect(templates).not.toContain("notes://item/{id}");
    const prompts = (await ev.listPrompts()).prompts.map((p) => p.name);
    expect(prompts).not.toContain("secret-prompt");
    for (const name of ["secret-prompt", "notes__secret-prompt"]) {
      const said = await fails(ev.getPrompt({ name, arguments: { topic: "x" } }));
      expect(said).not.toMatch(/^resolved/);
      expect(said).not.toContain("notes-secret");
      expect(await fails(ev.complete({ ref: { type: "ref/prompt", name }, argument: { name: "topic", value: "" } }))).not.toMatch(
        /^resolved/,
      );
    }
    // The template both serve is read from ev here, never from notes.
    const dynamic = await ev.readResource({ uri: "demo://resource/dynamic/text/5" });
    expect(JSON.stringify(dynamic)).not.toContain("notes-secret");

    // A session opened at /mcp/ev is refused at /mcp/notes and at /mcp; unknown participants and odd paths are 404.
    const init = {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
    };
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`http://127.0.0.1:${gw!.port}${path}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          authorization: `Bearer ${T.claude}`,
          ...headers,
        },
        body: JSON.stringify(body),
      });
    const opened = await post("/mcp/ev", init);
    expect(opened.status).toBe(200);
    const sid = opened.headers.get("mcp-session-id")!;
    await opened.text();
    const list = { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} };
    for (const path of ["/mcp/notes", "/mcp"]) {
      const r = await post(path, list, { "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18" });
      expect(r.status).toBe(403);
      expect(JSON.stringify(await r.json())).not.toContain("peek");
    }
    const nobody = await post("/mcp/nobody", init);
    expect(nobody.status).toBe(404);
    expect(((await nobody.json()) as { error: { data: { reason: string } } }).error.data.reason).toBe("unknown_participant");
    // Names every object inherits are no participant of the file either.
    for (const inherited of ["__proto__", "constructor", "toString"]) {
      const r = await post(`/mcp/${inherited}`, init);
      expect(r.status).toBe(404);
      expect(((await r.json()) as { error: { data: { reason: string } } }).error.data.reason).toBe("unknown_participant");
    }
    expect((await post("/mcp/ev/x", init)).status).toBe(404);
    const refused = await post("/mcp/ev", init, { authorization: "Bearer nope" });
    expect(refused.status).toBe(401);
    // RFC 9728: the 401 points at the metadata of this path, which names it as the resource.
    const pointer = /resource_metadata="([^"]+)"/.exec(refused.headers.get("www-authenticate") ?? "")?.[1];
    expect(pointer).toBe(`http://127.0.0.1:${gw!.port}/.well-known/oauth-protected-resource/mcp/ev`);
    expect(((await (await fetch(pointer!)).json()) as { resource: string }).resource).toBe(`http://127.0.0.1:${gw!.port}/mcp/ev`);
  });

  it("refuses a URI that two participants' templates match on the space's face, and routes one only one matches", {
    timeout: 60_000,
  }, async () => {
    await setup(["ev", "notes"]);
    const space = await viaGateway("/mcp");
    const templates = (await space.listResourceTemplates()).resourceTemplates;
    expect(templates.map((t) => t.uriTemplate)).toEqual(
      expect.arrayContaining([
        "notes://item/{id}",
        "demo://resource/dynamic/text/{resourceId}",
        "demo://resource/dynamic/blob/{resourceId}",
      ]),
    );
    expect(templates.find((t) => t.uriTemplate === "notes://item/{id}")!.name).toBe("notes/item");
    const said = await fails(space.readResource({ uri: "demo://resource/dynamic/text/5" }));
    expect(said).toMatch(/ambiguous/);
    expect(said).toContain("ev");
    expect(said).toContain("notes");
    // Only notes has notes://item/{id}; only ev has the blob template.
    expect(JSON.stringify(await space.readResource({ uri: "notes://item/9" }))).toContain("notes-secret item 9");
    const blob = await space.readResource({ uri: "demo://resource/dynamic/blob/3" });
    const evDirect = await direct(servers.ev());
    expect(timeless(blob)).toEqual(timeless(await evDirect.readResource({ uri: "demo://resource/dynamic/blob/3" })));
    expect(await fails(space.readResource({ uri: "nowhere://x/1" }))).toMatch(/no participant of the space offers/);
  });

  it("gives a seat whose capabilities reach only tools the tools under their own names, and no read its capabilities refuse", {
    timeout: 60_000,
  }, async () => {
    await setup(["notes"]);
    const notes = await viaGateway("/mcp/notes", {}, T.bare);
    expect(notes.getServerVersion()?.name).toBe("notes"); // its id: the seat may not ask the server's own description
    expect((await notes.listTools()).tools.map((t) => t.name)).toEqual(["peek"]);
    expect(text(await notes.callTool({ name: "peek", arguments: {} }))).toBe("notes-secret peeked");
    const said = await fails(notes.readResource({ uri: "notes://secret" }));
    expect(said).toMatch(/capabilities do not allow/);
    expect(said).not.toContain("the secret note");
  });
});

describe("/mcp/<participant>: the server as itself", () => {
  it("answers as server-everything does directly: names, info, lists, content of every type, structured content, prompts, completions, progress", {
    timeout: 90_000,
  }, async () => {
    await setup(["ev", "notes"]);
    const ev = await viaGateway("/mcp/ev", BRIDGE_CAPS);
    const own = await direct(servers.ev());
    expect(ev.getServerVersion()).toEqual(own.getServerVersion());
    expect(ev.getInstructions()).toContain(own.getInstructions()!.slice(0, 200));
    const strip = (tools: { name: string; _meta?: unknown; execution?: unknown }[]) =>
      tools.map(({ _meta, execution, ...t }) => t).sort((a, b) => a.name.localeCompare(b.name));
    const mine = strip((await own.listTools()).tools).filter((t) => t.name !== "get-env");
    expect(strip((await ev.listTools()).tools)).toEqual(mine);
    expect(await ev.listResourceTemplates()).toEqual(await own.listResourceTemplates());
    expect(await ev.listResources()).toEqual(await own.listResources());
    expect(await ev.listPrompts()).toEqual(await own.listPrompts());
    for (const uri of [
      "demo://resource/static/document/architecture.md",
      "demo://resource/dynamic/text/12",
      "demo://resource/dynamic/blob/2",
    ]) {
      expect(timeless(await ev.readResource({ uri }))).toEqual(timeless(await own.readResource({ uri })));
    }
    const prompt = { name: "args-prompt", arguments: { city: "Paris", state: "TX" } };
    expect(await ev.getPrompt(prompt)).toEqual(await own.getPrompt(prompt));
    const completion = { ref: { type: "ref/prompt" as const, name: "completable-prompt" }, argument: { name: "department", value: "E" } };
    expect(await ev.complete(completion)).toEqual(await own.complete(completion));
    const calls: [string, Record<string, unknown>][] = [
      ["echo", { message: "hi" }],
      ["get-sum", { a: 2, b: 3 }],
      ["get-tiny-image", {}],
      ["get-annotated-message", { messageType: "error", includeImage: true }],
      ["get-resource-links", { count: 2 }],
      ["get-resource-reference", { resourceType: "Text", resourceId: 2 }],
      ["get-structured-content", { location: "New York" }],
    ];
    for (const [name, args] of calls) {
      const through = await ev.callTool({ name, arguments: args });
      expect(through.isError ?? false, name).toBe(false);
      expect(through.content, name).toEqual((await own.callTool({ name, arguments: args })).content);
      if (name === "get-structured-content")
        expect(through.structuredContent).toEqual((await own.callTool({ name, arguments: args })).structuredContent);
    }
    const progress: Progress[] = [];
    const long = await ev.callTool({ name: "trigger-long-running-operation", arguments: { duration: 1, steps: 3 } }, undefined, {
      onprogress: (p) => progress.push(p),
    });
    expect(text(long)).toMatch(/completed/i);
    expect(progress.map((p) => p.progress)).toEqual([1, 2, 3]);
    // The server's form reaches this client in the server's own words, and the answer goes back.
    const asked: string[] = [];
    ev.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push((request.params as { message: string }).message);
      return { action: "accept", content: { name: "Ada Lovelace", check: true, integer: 7 } };
    });
    const elicited = await ev.callTool({ name: "trigger-elicitation-request", arguments: {} });
    expect(text(elicited)).toMatch(/Ada Lovelace/);
    expect(asked).toEqual(["Please provide inputs for the following fields:"]);
    // A tool its server runs only as a task keeps saying so, and runs as the server's own task (mcp-server-tasks.test.ts).
    expect((await ev.listTools()).tools.find((t) => t.name === "simulate-research-query")?.execution?.taskSupport).toBe("required");
    const required = await ev.request(
      { method: "tools/call", params: { name: "simulate-research-query", arguments: { topic: "x" }, task: { ttl: 60_000 } } },
      CreateTaskResultSchema,
    );
    expect(required.task.taskId).toMatch(/^ev:/);
    expect(["working", "completed"]).toContain(required.task.status);
  });

  it("passes resource subscriptions and updates from the server, and nothing from another participant", { timeout: 60_000 }, async () => {
    await setup(["ev", "notes"]);
    const ev = await viaGateway("/mcp/ev");
    const updated: string[] = [];
    ev.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updated.push(n.params.uri));
    const uri = "demo://resource/static/document/architecture.md";
    await ev.subscribeResource({ uri });
    await ev.callTool({ name: "toggle-subscriber-updates", arguments: {} });
    await waitFor(() => updated.includes(uri), 20_000, "a resource update");
    await ev.callTool({ name: "toggle-subscriber-updates", arguments: {} });
    expect(updated.every((u) => u === uri)).toBe(true);
  });

  it("serves server-filesystem at /mcp/fs: a direct read as the server answers it, a write that waits for approval", {
    timeout: 60_000,
  }, async () => {
    const { dir, alice } = await setup(["fs"]);
    const fs = await viaGateway("/mcp/fs");
    const own = await direct(servers.fs(dir));
    const strip = (tools: { name: string; _meta?: unknown; execution?: unknown }[]) =>
      tools.map(({ _meta, execution, ...t }) => t).sort((a, b) => a.name.localeCompare(b.name));
    expect(strip((await fs.listTools()).tools)).toEqual(strip((await own.listTools()).tools));
    const read = { name: "read_text_file", arguments: { path: join(dir, "a.txt") } };
    expect(await fs.callTool(read)).toEqual(await own.callTool(read));
    alice.on("proposal", (p) => void alice.approve(p.id));
    const wrote = await fs.callTool({ name: "write_file", arguments: { path: join(dir, "b.txt"), content: "approved" } });
    expect(wrote.isError ?? false).toBe(false);
    expect(readFileSync(join(dir, "b.txt"), "utf8")).toBe("approved");
  });
});

describe("mewgate mcp --only (stdio)", () => {
  it("serves one participant as itself over stdio, as the seat, under its policy", { timeout: 60_000 }, async () => {
    const { dir } = await setup(["fs", "notes"]);
    const client = new Client({ name: "only-stdio", version: "1.0.0" });
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI_MAIN, "mcp", "--gateway", gw!.url, "--space", "lab", "--only", "notes"],
      env: { ...(process.env as Record<string, string>), MEWGATE_TOKEN: T.claude },
      stderr: "pipe",
    });
    await client.connect(transport);
    closers.push(() => client.close());
    expect(client.getServerVersion()).toMatchObject({ name: "notes", version: "3.1.4" });
    expect(client.getInstructions()).toContain("Notes server instructions.");
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["peek"]);
    expect(text(await client.callTool({ name: "peek", arguments: {} }))).toBe("notes-secret peeked");
    // fs's tool is asked of notes only, which does not have it.
    const other = await fails(client.callTool({ name: "read_text_file", arguments: { path: join(dir, "a.txt") } }));
    expect(other).toContain("Tool read_text_file not found");
    expect(other).not.toContain("hello from a");
    expect((await client.getPrompt({ name: "secret-prompt", arguments: { topic: "t" } })).messages[0]!.content).toMatchObject({
      text: "notes-secret prompt about t",
    });
    expect(JSON.stringify(await client.readResource({ uri: "notes://item/4" }))).toContain("item 4");
  });

  it("exits non-zero with a readable message when the participant is not in the space", { timeout: 30_000 }, async () => {
    await setup(["notes"]);
    const child = spawn(process.execPath, [CLI_MAIN, "mcp", "--gateway", gw!.url, "--space", "lab", "--only", "ghost"], {
      env: { ...process.env, MEWGATE_TOKEN: T.claude },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(out).toBe("");
    expect(err).toMatch(/ghost/);
    expect(err).not.toContain(T.claude);
  });
});

describe("mewgate mcp-config", () => {
  /** Runs the command in-process; returns what it printed and its exit code. */
  async function mcpConfig(participant: string, opts: McpConfigOptions): Promise<{ code: number; out: string; err: string }> {
    let out = "";
    let err = "";
    const io = {
      stdout: {
        write: (s: string) => {
          out += s;
          return true;
        },
      },
      stderr: {
        write: (s: string) => {
          err += s;
          return true;
        },
      },
      env: {},
    } as never;
    const code = await runMcpConfig(participant, opts, io);
    return { code, out, err };
  }
  const json = (out: string) => JSON.parse(out) as Record<string, Record<string, Record<string, unknown>>>;

  it("prints snippets that never carry a token, refuses a human or undeclared seat, and the printed command and URL work", {
    timeout: 60_000,
  }, async () => {
    await setup(["notes"]);
    const file = join(gw!.dir, "space.yaml");
    // What the CLI reads: the same space, with the port the test gateway got.
    writeFileSync(file, SPACE.replace("space: {id: lab}", `space: {id: lab}\ngateway: {host: 127.0.0.1, port: ${gw!.port}}`));
    const outputs: string[] = [];
    for (const client of MCP_CLIENTS) {
      for (const http of client === "claude-desktop" ? [false] : [false, true]) {
        const r = await mcpConfig("notes", { config: file, as: "claude", client, http });
        expect(r.code, `${client} ${http}`).toBe(0);
        // stdout is the JSON alone (redirectable into the client's file); where it goes is on stderr.
        expect(() => JSON.parse(r.out), `${client} ${http}: ${r.out}`).not.toThrow();
        expect(r.err).toMatch(/^# /);
        outputs.push(r.out, r.err);
      }
    }
    for (const out of outputs) for (const token of Object.values(T)) expect(out).not.toContain(token);
    expect((await mcpConfig("notes", { config: file, as: "alice" })).err).toMatch(/human of the space/);
    expect((await mcpConfig("notes", { config: file })).err).toMatch(/declare a seat for your MCP client/);
    expect((await mcpConfig("notes", { config: file, as: "nobody" })).err).toMatch(/declares no participant "nobody"/);
    expect((await mcpConfig("ghost", { config: file, as: "claude" })).err).toMatch(/declares no participant "ghost"/);
    expect((await mcpConfig("notes", { config: file, as: "claude", client: "emacs" })).code).toBe(1);
    expect((await mcpConfig("notes", { config: file, as: "claude", client: "claude-desktop", http: true })).err).toMatch(/commands only/);

    // The stdio snippet, run as the MCP client would run it (node and the built CLI for `mewgate`).
    const stdio = json((await mcpConfig("notes", { config: file, as: "claude", client: "claude-code" })).out)["mcpServers"]!["notes"]!;
    const client = new Client({ name: "config-test", version: "1.0.0" });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI_MAIN, ...(stdio["args"] as string[])],
        env: { PATH: process.env["PATH"] ?? "" },
        stderr: "pipe",
      }),
    );
    closers.push(() => client.close());
    expect(client.getServerVersion()?.name).toBe("notes");
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["peek"]);
    // The HTTP snippet: the URL with the token in the header it names.
    const http = json((await mcpConfig("notes", { config: file, as: "claude", client: "cursor", http: true })).out)["mcpServers"]![
      "notes"
    ]!;
    expect(http["headers"]).toEqual({ Authorization: "Bearer ${env:MEWGATE_TOKEN}" });
    const viaUrl = new Client({ name: "config-test", version: "1.0.0" });
    await viaUrl.connect(
      new StreamableHTTPClientTransport(new URL(http["url"] as string), {
        requestInit: { headers: { Authorization: `Bearer ${T.claude}` } },
      }),
    );
    closers.push(() => viaUrl.close());
    expect(text(await viaUrl.callTool({ name: "peek", arguments: {} }))).toBe("notes-secret peeked");
  });
});
