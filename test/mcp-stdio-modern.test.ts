/**
 * `mewgate mcp --only` at MCP 2026-07-28 over stdio (participants/mcp-server/stdio/stdio-modern.ts),
 * with a real client process: the SDK v2 client pinned to 2026-07-28 spawns the command.
 * Hostile first: a connection that opens at 2026-07-28 and then sends `initialize` is
 * refused, and a call the seat's policy holds is still held; then the happy path, and a
 * 2025-era client on the same command as before.
 */
import { spawn } from "node:child_process";
import { Client as V2Client } from "@modelcontextprotocol/client";
import { StdioClientTransport as V2Stdio } from "@modelcontextprotocol/client/stdio";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { CLI_MAIN, startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = { human: "human-token-1234", notes: "notes-token-5678", seat: "seat-token-90123" } as const;
const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  seat:
    kind: agent
    token: ${T.seat}
    tools: {allow: ["notes/peek"], ask: ["notes/write_note"]}
`;

let gw: TestGateway | undefined;
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  await gw?.stop();
  gw = undefined;
});

async function setup() {
  gw = await startGateway(SPACE);
  let writes = 0;
  const notes = new McpServer({ name: "notes", version: "3.1.4" });
  notes.registerTool("peek", { description: "Peeks" }, async () => ({ content: [{ type: "text", text: "peeked" }] }));
  notes.registerTool("write_note", { description: "Writes", inputSchema: { text: z.string() } }, async ({ text }) => {
    writes++;
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  closers.push(() => owner.close());
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  closers.push(() => human.close());
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => proposals.push(p));
  await waitForTool(human, "notes/write_note");
  return { human, proposals, writes: () => writes };
}

const args = () => [CLI_MAIN, "mcp", "--gateway", gw!.url, "--space", "lab", "--only", "notes"];
const env = () => ({ ...(process.env as Record<string, string>), MEWGATE_TOKEN: T.seat });
const text = (r: unknown) => ((r as { content: { text: string }[] }).content[0] ?? { text: "" }).text;

/** Raw lines to the command and back: what a client that lies about its revision sends. */
async function raw(lines: unknown[], want: number): Promise<Record<string, unknown>[]> {
  const child = spawn(process.execPath, args(), { env: env(), stdio: ["pipe", "pipe", "pipe"] });
  closers.push(async () => child.kill("SIGTERM"));
  const out: Record<string, unknown>[] = [];
  let buf = "";
  child.stdout.on("data", (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) out.push(JSON.parse(line) as Record<string, unknown>);
    }
  });
  for (const l of lines) child.stdin.write(`${JSON.stringify(l)}\n`);
  await waitFor(() => out.length >= want, 20_000);
  child.stdin.end();
  return out;
}

const envelope = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {},
};

describe("mewgate mcp --only at 2026-07-28 over stdio: hostile first", () => {
  it("refuses an initialize on a connection that opened at 2026-07-28, and keeps answering it", { timeout: 60_000 }, async () => {
    await setup();
    const out = await raw(
      [
        { jsonrpc: "2.0", id: 1, method: "server/discover", params: { _meta: envelope } },
        {
          jsonrpc: "2.0",
          id: 2,
          method: "initialize",
          params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "liar", version: "1" } },
        },
        { jsonrpc: "2.0", id: 3, method: "tools/list", params: { _meta: envelope } },
      ],
      3,
    );
    const byId = new Map(out.map((m) => [m["id"], m]));
    expect((byId.get(1)?.["result"] as { supportedVersions?: string[] } | undefined)?.supportedVersions).toContain("2026-07-28");
    expect(byId.get(2)?.["error"]).toBeDefined();
    expect(byId.get(2)?.["result"]).toBeUndefined();
    const listed = byId.get(3)?.["result"] as { tools: { name: string }[] } | undefined;
    const tools = (listed?.tools ?? []).map((t) => t.name);
    expect(tools.sort()).toEqual(["peek", "write_note"]);
  });

  it("serves a 2026-07-28 client (SDK v2, pinned), holds what policy holds until a person approves, and a 2025 client as before", {
    timeout: 90_000,
  }, async () => {
    const s = await setup();
    const modern = new V2Client({ name: "modern", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
    await modern.connect(new V2Stdio({ command: process.execPath, args: args(), env: env(), stderr: "pipe" }));
    closers.push(() => modern.close());
    expect(modern.getProtocolEra()).toBe("modern");
    expect(modern.getServerVersion()).toMatchObject({ name: "notes" });
    expect(text(await modern.callTool({ name: "peek", arguments: {} }))).toBe("peeked");
    // Held: the request waits (stdio stays open) until the human approves; the tool runs once.
    const pending = modern.callTool({ name: "write_note", arguments: { text: "hi" } }, { timeout: 60_000 });
    await waitFor(() => s.proposals.length === 1, 20_000);
    expect(s.writes()).toBe(0);
    s.human.approve(s.proposals[0]!.id);
    expect(text(await pending)).toBe("wrote: hi");
    expect(s.writes()).toBe(1);

    const old = new Client({ name: "old", version: "1.0.0" });
    await old.connect(new StdioClientTransport({ command: process.execPath, args: args(), env: env(), stderr: "pipe" }));
    closers.push(() => old.close());
    expect(text(await old.callTool({ name: "peek", arguments: {} }))).toBe("peeked");
  });
});

describe("mewgate mcp --only at 2026-07-28 with the tasks extension", () => {
  it("a held call is a task; tasks/* without the extension is refused; approved, tasks/get inlines the result, and the tool ran once", {
    timeout: 60_000,
  }, async () => {
    const s = await setup();
    const child = spawn(process.execPath, args(), { env: env(), stdio: ["pipe", "pipe", "pipe"] });
    closers.push(async () => child.kill("SIGTERM"));
    const out: Record<string, any>[] = [];
    let buf = "";
    child.stdout.on("data", (d: Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) out.push(JSON.parse(line) as Record<string, any>);
      }
    });
    const withTasks = {
      ...envelope,
      "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": {} } },
    };
    let id = 0;
    const ask = async (method: string, params: Record<string, unknown>, meta: unknown = withTasks) => {
      const n = ++id;
      child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: n, method, params: { ...params, _meta: meta } })}\n`);
      await waitFor(() => out.some((m) => m["id"] === n), 20_000, `the answer to ${method}`);
      return out.find((m) => m["id"] === n)!;
    };
    const created = await ask("tools/call", { name: "write_note", arguments: { text: "stdio" } });
    expect(created["result"]?.resultType).toBe("task");
    const taskId = created["result"]?.taskId as string;
    await waitFor(() => s.proposals.length === 1);
    expect(taskId).toBe(s.proposals[0]!.id);
    // Hostile: without the extension, another id, a removed method.
    expect((await ask("tasks/get", { taskId }, envelope))["error"]?.code).toBe(-32021);
    expect((await ask("tasks/get", { taskId: "forged" }))["error"]?.code).toBe(-32602);
    expect((await ask("tasks/result", { taskId }))["error"]?.code).toBe(-32601);
    expect((await ask("tasks/get", { taskId }))["result"]?.status).toBe("input_required");
    expect(s.writes()).toBe(0);
    s.human.approve(taskId);
    let done: Record<string, any> | undefined;
    await waitFor(
      async () => {
        done = await ask("tasks/get", { taskId });
        return done["result"]?.status === "completed";
      },
      20_000,
      "completed",
    );
    expect(JSON.stringify(done?.["result"]?.result)).toContain("wrote: stdio");
    expect(s.writes()).toBe(1);
  });
});
