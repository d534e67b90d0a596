/**
 * A held call as a task at MCP 2026-07-28: the `io.modelcontextprotocol/tasks` extension on
 * /mcp (participants/mcp-server/tasks/task-ext.ts). Hostile first: tasks/* without the extension,
 * another seat's or a forged task id, a task id in the wrong header, a legacy `task` param,
 * the removed tasks/result and tasks/list, a cancel racing nothing but itself; then a held
 * call made a task, approved by a person over the real WebSocket, its result inlined. A real
 * gateway on port 0, real HTTP requests, a real MCP server behind a participant.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = { human: "human-token-1234", notes: "notes-token-5678", claude: "claude-token-9012", other: "other-token-3456" } as const;
const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}, tools: {allow: ["notes/read_note"]}}
  other: {kind: agent, token: ${T.other}}
`;
const EXT = "io.modelcontextprotocol/tasks";

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const clients: ParticipantClient[] = [];
afterEach(async () => {
  await mount?.close();
  mount = undefined;
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await gw?.stop();
  gw = undefined;
});

const envelope = (caps: Record<string, unknown>) => ({
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": caps,
});
const WITH_TASKS = { extensions: { [EXT]: {} }, elicitation: { url: {} } };
type Answer = { status: number; result?: Record<string, any>; error?: { code: number; message: string; data?: any } };

async function setup() {
  gw = await startGateway(SPACE);
  let runs = 0;
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    runs++;
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  notes.registerTool("read_note", { description: "Reads a note", inputSchema: { n: z.number() } }, async ({ n }) => ({
    content: [{ type: "text", text: `note ${n}` }],
  }));
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  clients.push(owner);
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  clients.push(human);
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => proposals.push(p));
  await waitForTool(human, "notes/write_note");
  mount = mountHttp(gw.gateway);
  let id = 0;
  const rpc = async (
    method: string,
    params: Record<string, unknown>,
    opts: { token?: string; caps?: Record<string, unknown>; name?: string; meta?: unknown } = {},
  ): Promise<Answer> => {
    const { token = T.claude, caps = WITH_TASKS } = opts;
    const name = opts.name ?? (typeof params["taskId"] === "string" ? params["taskId"] : (params["name"] as string | undefined));
    const res = await fetch(`http://127.0.0.1:${gw!.port}/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": method,
        ...(name !== undefined ? { "mcp-name": name } : {}),
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: ++id, method, params: { ...params, _meta: opts.meta ?? envelope(caps) } }),
    });
    const text = await res.text();
    return { status: res.status, ...(JSON.parse(text.startsWith("{") ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? "{}")) as object) };
  };
  const write = (text: string, opts = {}) => rpc("tools/call", { name: "notes__write_note", arguments: { text } }, opts);
  return { human, proposals, rpc, write, runs: () => runs };
}

describe("held calls as tasks at 2026-07-28: hostile first", () => {
  it("tasks/* needs the extension, the seat's own task, the task in Mcp-Name; tasks/result and tasks/list are gone", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const created = await s.write("secret");
    expect(created.result?.["resultType"]).toBe("task");
    const taskId = created.result!["taskId"] as string;
    await waitFor(() => s.proposals.length === 1);
    expect(taskId).toBe(s.proposals[0]!.id);

    // Without the extension in the request's client capabilities: -32021, naming it.
    const bare = await s.rpc("tasks/get", { taskId }, { caps: {} });
    expect([bare.status, bare.error?.code]).toEqual([400, -32021]);
    expect(bare.error?.data?.requiredCapabilities).toEqual({ extensions: { [EXT]: {} } });
    // Another seat, a forged id, an id of 10 KB or with control characters: not found / refused, nothing told.
    const other = await s.rpc("tasks/get", { taskId }, { token: T.other });
    expect(other.error?.code).toBe(-32602);
    expect(JSON.stringify(other)).not.toContain("secret");
    expect((await s.rpc("tasks/get", { taskId: "no-such-task" })).error?.code).toBe(-32602);
    expect((await s.rpc("tasks/get", { taskId: "x".repeat(10_000) }, { name: "x" })).error?.code).toBe(-32602);
    expect((await s.rpc("tasks/get", { taskId: "a\u0000b" }, { name: "ab" })).error?.code).toBe(-32020);
    // The task id in the wrong header.
    const wrong = await s.rpc("tasks/get", { taskId }, { name: "another" });
    expect([wrong.status, wrong.error?.code]).toEqual([400, -32020]);
    // Not part of the extension.
    for (const method of ["tasks/result", "tasks/list"]) {
      const gone = await s.rpc(method, { taskId });
      expect([gone.status, gone.error?.code]).toEqual([404, -32601]);
    }
    // The other seat cannot cancel it either: still waiting, not run.
    expect((await s.rpc("tasks/cancel", { taskId }, { token: T.other })).error?.code).toBe(-32602);
    expect((await s.rpc("tasks/get", { taskId })).result?.["status"]).toBe("input_required");
    expect(s.runs()).toBe(0);
  });

  it("a legacy task param makes no task without the extension, and a call that never waits answers at once, keeping no task", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const legacy = await s.rpc("tools/call", { name: "notes__read_note", arguments: { n: 1 }, task: { ttl: 1000 } }, { caps: {} });
    expect(legacy.result?.["resultType"]).toBe("complete");
    expect(legacy.result?.["taskId"]).toBeUndefined();
    expect(JSON.stringify(legacy.result?.["content"])).toContain("note 1");
    const sync = await s.rpc("tools/call", { name: "notes__read_note", arguments: { n: 2 } });
    expect(sync.result?.["resultType"]).toBe("complete");
    expect(sync.result?.["taskId"]).toBeUndefined();
    // Without the extension a held call answers input_required, as before.
    const held = await s.write("plain", { caps: { elicitation: { url: {} } } });
    expect(held.result?.["resultType"]).toBe("input_required");
  });

  it("cancel withdraws the proposal: the task is cancelled, a later approval cannot run it, and cancel again is acknowledged", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const taskId = (await s.write("never")).result!["taskId"] as string;
    await waitFor(() => s.proposals.length === 1);
    const cancel = await s.rpc("tasks/cancel", { taskId });
    expect(cancel.result).toEqual(expect.objectContaining({ resultType: "complete" }));
    await waitFor(async () => (await s.rpc("tasks/get", { taskId })).result?.["status"] === "cancelled", 10_000, "cancelled");
    s.human.approve(taskId);
    await new Promise((r) => setTimeout(r, 500));
    expect(s.runs()).toBe(0);
    expect((await s.rpc("tasks/cancel", { taskId })).result?.["resultType"]).toBe("complete");
    expect((await s.rpc("tasks/get", { taskId })).result?.["status"]).toBe("cancelled");
  });
});

describe("held calls as tasks at 2026-07-28", () => {
  it("discover names the extension; a held call is a task showing the card; approved, it completes with the result inlined, once", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const discover = await s.rpc("server/discover", {});
    expect(discover.result?.["capabilities"]?.extensions?.[EXT]).toEqual({});
    expect(discover.result?.["capabilities"]?.tasks).toBeUndefined();

    const created = await s.write("hello");
    expect(created.result).toMatchObject({ resultType: "task", status: "input_required" });
    expect(created.result?.["task"]).toBeUndefined();
    expect(typeof created.result?.["createdAt"]).toBe("string");
    const taskId = created.result!["taskId"] as string;
    const waiting = await s.rpc("tasks/get", { taskId });
    expect(waiting.result).toMatchObject({ resultType: "complete", taskId, status: "input_required" });
    const ask = waiting.result?.["inputRequests"]?.approval;
    expect(ask?.params?.mode).toBe("url");
    expect(new URL(ask.params.url).pathname).toBe("/ui/link.html");
    expect(waiting.result?.["result"]).toBeUndefined();
    // An answer to the card changes nothing: the person decides in the space.
    expect((await s.rpc("tasks/update", { taskId, inputResponses: { approval: { action: "accept" } } })).result).toEqual(
      expect.objectContaining({ resultType: "complete" }),
    );
    expect(s.runs()).toBe(0);

    s.human.approve(taskId);
    let done: Answer | undefined;
    await waitFor(
      async () => {
        done = await s.rpc("tasks/get", { taskId });
        return done.result?.["status"] === "completed";
      },
      10_000,
      "completed",
    );
    expect(JSON.stringify(done?.result?.["result"]?.content)).toContain("wrote: hello");
    expect(done?.result?.["error"]).toBeUndefined();
    // Read again: the same result, and the tool ran once.
    expect((await s.rpc("tasks/get", { taskId })).result?.["result"]).toEqual(done?.result?.["result"]);
    expect(s.runs()).toBe(1);
  });
});
