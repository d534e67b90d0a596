/**
 * A bridged server's own tasks through the space's MCP face: a tool whose server runs it
 * only as a task (server-everything's `simulate-research-query`, `execution.taskSupport:
 * "required"`) called with `task` on `/mcp/<participant>` or `/mcp`, is called as a task
 * at its server (after any approval), and the client's `tasks/get`, `tasks/result`,
 * `tasks/cancel` and `tasks/list` reach that task through the gateway, under an id
 * namespaced per participant. Hostile first: another seat's server task, by the face or
 * straight at the bridge; a forged id naming another participant.
 */
import { createRequire } from "node:module";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  TaskStatusNotificationSchema,
  type CallToolResult,
  type Task,
} from "@modelcontextprotocol/sdk/types.js";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { Envelope } from "../gateway/wire/envelope.js";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { CLI_MAIN, startGateway, waitFor, waitForTool, type TestGateway } from "./helpers.js";

const require = createRequire(import.meta.url);
const EVERYTHING = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");
const NOTES = join(import.meta.dirname, "fixtures", "bridge", "notes.mjs");
const T = {
  alice: "alice-token-0001",
  claude: "claude-token-002",
  other: "other-token-0003",
  ev: "ev-token-000004",
  notes: "notes-token-0005",
  bare: "bare-token-00006",
};
const RESEARCH = "simulate-research-query";

const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
participants:
  alice: {kind: human, token: ${T.alice}}
  claude:
    kind: agent
    token: ${T.claude}
    tools: {allow: ["ev/*", "notes/*"], ask: ["ev/${RESEARCH}"]}
    capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: mcp/response}, {kind: mcp/request}]
  other:
    kind: agent
    token: ${T.other}
    tools: {allow: ["ev/*", "notes/*"]}
    capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: mcp/response}, {kind: mcp/request}]
  bare: {kind: agent, token: ${T.bare}, tools: {allow: ["ev/*"]}}
  ev: {kind: mcp, token: ${T.ev}}
  notes: {kind: mcp, token: ${T.notes}}
`;

let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const b of bridges.splice(0)) await b.stop();
  await gw?.stop();
  gw = undefined;
});

async function setup(): Promise<{ alice: ParticipantClient; proposals: Envelope[] }> {
  gw = await startGateway(SPACE);
  mountHttp(gw.gateway);
  const space = gw.gateway.spaces.get("lab")!;
  const servers = { ev: { command: process.execPath, args: [EVERYTHING, "stdio"] }, notes: { command: process.execPath, args: [NOTES] } };
  for (const id of ["ev", "notes"] as const) {
    bridges.push(
      await startBridge({ id, server: servers[id] as never, client: { transport: () => connectInProcess(space, id), reconnect: false } }),
    );
  }
  const alice = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.alice });
  closers.push(() => alice.close());
  const proposals: Envelope[] = [];
  alice.on("proposal", (p) => void proposals.push(p));
  await waitForTool(alice, `ev/${RESEARCH}`, 15_000);
  await waitForTool(alice, "notes/peek", 15_000);
  return { alice, proposals };
}

async function viaGateway(path: string, token: string): Promise<Client> {
  const client = new Client({ name: "server-tasks-test", version: "1.0.0" }, { capabilities: { tasks: {} } });
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

const research = (client: Client, topic: string, name = RESEARCH) =>
  client
    .request({ method: "tools/call", params: { name, arguments: { topic }, task: { ttl: 60_000 } } }, CreateTaskResultSchema)
    .then((r) => r.task);

const fails = async (p: Promise<unknown>): Promise<string> => {
  try {
    return `resolved: ${JSON.stringify(await p)}`;
  } catch (err) {
    return (err as Error).message;
  }
};

const text = (r: unknown) => ((r as CallToolResult).content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");

/** The same research asked of server-everything directly, as a task, to its result. */
async function directly(topic: string): Promise<{ created: Task; result: CallToolResult }> {
  const client = new Client({ name: "direct", version: "1.0.0" }, { capabilities: { tasks: {} } });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: [EVERYTHING, "stdio"], stderr: "ignore" }));
  closers.push(() => client.close());
  const created = await research(client, topic);
  const result = await client.experimental.tasks.getTaskResult(created.taskId, CallToolResultSchema);
  return { created, result };
}

describe("a bridged server's own tasks: hostile first", () => {
  it("never lets one seat reach another seat's server task, by the face or at the bridge, nor one participant's task be addressed as another's", {
    timeout: 90_000,
  }, async () => {
    await setup();
    const otherEv = await viaGateway("/mcp/ev", T.other);
    const theirs = await research(otherEv, "owls");
    expect(theirs.taskId).toMatch(/^ev:[^:]+/);
    const serverId = theirs.taskId.slice("ev:".length);
    expect(["working", "completed"]).toContain(theirs.status);

    // claude, through both faces and straight at the bridge, by the face's id and the server's own.
    const claudeEv = await viaGateway("/mcp/ev", T.claude);
    const claudeAll = await viaGateway("/mcp", T.claude);
    for (const client of [claudeEv, claudeAll]) {
      for (const id of [theirs.taskId, serverId]) {
        expect(await fails(client.experimental.tasks.getTask(id))).toMatch(/not found/i);
        expect(await fails(client.experimental.tasks.getTaskResult(id, CallToolResultSchema))).toMatch(/not found/i);
        expect(await fails(client.experimental.tasks.cancelTask(id))).toMatch(/not found/i);
      }
      expect((await client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId)).not.toContain(theirs.taskId);
    }
    // Straight at the bridge (a connection of claude's own, which takes claude's seat over from the faces above).
    const claude = await ParticipantClient.connect({ url: gw!.url, space: "lab", token: T.claude });
    closers.push(() => claude.close());
    for (const method of ["tasks/get", "tasks/result", "tasks/cancel"]) {
      expect(await fails(claude.request("ev", method, { taskId: serverId }, { timeoutMs: 10_000 }))).toMatch(/Task not found/);
    }
    const listed = (await claude.request("ev", "tasks/list", {}, { timeoutMs: 10_000 })) as { tasks: Task[] };
    expect(listed.tasks.map((t) => t.taskId)).not.toContain(serverId);
    // A forged id naming another participant: on /mcp/notes even the owner's own ev task is not there;
    // on /mcp, an id that puts ev's task under notes goes to notes, which never made it.
    const otherNotes = await viaGateway("/mcp/notes", T.other);
    expect(await fails(otherNotes.experimental.tasks.getTask(theirs.taskId))).toMatch(/not found/i);
    expect((await otherNotes.experimental.tasks.listTasks()).tasks).toEqual([]);
    const otherAll = await viaGateway("/mcp", T.other);
    expect(await fails(otherAll.experimental.tasks.getTask(`notes:${serverId}`))).toMatch(/not found/i);
    expect(await fails(otherAll.experimental.tasks.cancelTask(`notes:${serverId}`))).toMatch(/not found/i);

    // Untouched by all that: the owner's task runs to its result, seen from its other face too.
    const result = await otherEv.experimental.tasks.getTaskResult(theirs.taskId, CallToolResultSchema);
    expect(text(result)).toContain("# Research Report: owls");
    expect((await otherAll.experimental.tasks.getTask(theirs.taskId)).status).toBe("completed");
  });
});

describe("a bridged server's own tasks: a seat that may not follow them", () => {
  it("ends the task failed, saying why, when the seat's capabilities do not reach tasks/* at the server", { timeout: 60_000 }, async () => {
    await setup();
    const bare = await viaGateway("/mcp/ev", T.bare);
    const task = await research(bare, "moss");
    expect(task.taskId).toMatch(/^ev:/);
    await waitFor(async () => (await bare.experimental.tasks.getTask(task.taskId)).status === "failed", 10_000, "failed");
    const result = await bare.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/cannot be followed: .*capabilities do not allow tasks\/get/);
  });
});

describe("a bridged server's own tasks: the happy paths", () => {
  it("waits for approval, then runs as the server's task to the same result as the server gives directly", {
    timeout: 90_000,
  }, async () => {
    const { alice, proposals } = await setup();
    const ev = await viaGateway("/mcp/ev", T.claude);
    const statuses: string[] = [];
    ev.setNotificationHandler(TaskStatusNotificationSchema, (n) => void statuses.push(n.params.status));
    expect((await ev.listTools()).tools.find((t) => t.name === RESEARCH)?.execution?.taskSupport).toBe("required");
    const direct = directly("tides");
    const task = await research(ev, "tides");
    expect(task.status).toBe("input_required");
    expect(task.statusMessage).toContain(`ev/${RESEARCH}`);
    await waitFor(() => proposals.some((p) => p.id === task.taskId), 10_000, "the proposal");
    // Nothing runs at the server before the approval.
    await new Promise((r) => setTimeout(r, 300));
    const before = await ev.experimental.tasks.getTask(task.taskId);
    expect(before.status).toBe("input_required");
    alice.approve(task.taskId);
    const result = await ev.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    const own = await direct;
    expect(result.content).toEqual(own.result.content);
    expect(result.isError ?? false).toBe(false);
    expect((await ev.experimental.tasks.getTask(task.taskId)).status).toBe("completed");
    expect(statuses).toContain("working");
    expect(statuses.at(-1)).toBe("completed");
  });

  it("passes tasks/cancel on to the server's task, and finds a task again from a new session by its namespaced id", {
    timeout: 90_000,
  }, async () => {
    await setup();
    const first = await viaGateway("/mcp", T.other);
    const task = await research(first, "rivers", `ev__${RESEARCH}`);
    expect(task.taskId).toMatch(/^ev:/);
    const second = await viaGateway("/mcp/ev", T.other);
    expect((await second.experimental.tasks.getTask(task.taskId)).taskId).toBe(task.taskId);
    expect((await second.experimental.tasks.listTasks()).tasks.map((t) => t.taskId)).toContain(task.taskId);
    const cancelled = await second.experimental.tasks.cancelTask(task.taskId);
    expect(cancelled.status).toBe("cancelled");
    expect((await first.experimental.tasks.getTask(task.taskId)).status).toBe("cancelled");
    // The server's own task says so, asked at the bridge as the seat (a connection of its own, which takes the seat over: last).
    const other = await ParticipantClient.connect({ url: gw!.url, space: "lab", token: T.other });
    closers.push(() => other.close());
    const atServer = (await other.request("ev", "tasks/get", { taskId: task.taskId.slice(3) }, { timeoutMs: 10_000 })) as Task;
    expect(atServer.status).toBe("cancelled");
  });
});

describe("a bridged server's own tasks over stdio (mewgate mcp --only)", () => {
  it("runs the server's task and answers its result, and finds nothing of another participant", { timeout: 90_000 }, async () => {
    await setup();
    const client = new Client({ name: "server-tasks-stdio", version: "1.0.0" }, { capabilities: { tasks: {} } });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI_MAIN, "mcp", "--gateway", gw!.url, "--space", "lab", "--only", "ev"],
        env: { PATH: process.env["PATH"] ?? "", MEWGATE_TOKEN: T.other },
        stderr: "pipe",
      }),
    );
    closers.push(() => client.close());
    const task = await research(client, "clouds");
    expect(task.taskId).toMatch(/^ev:/);
    expect(await fails(client.experimental.tasks.getTask(`notes:${task.taskId.slice(3)}`))).toMatch(/not found/i);
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(text(result)).toContain("# Research Report: clouds");
    expect((await client.experimental.tasks.listTasks()).tasks.map((t) => [t.taskId, t.status])).toEqual([[task.taskId, "completed"]]);
  });
});
