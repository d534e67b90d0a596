/**
 * Approvals as MCP tasks (2025-11-25) on the space's MCP face, driven by the SDK's own
 * client: a call that needs approval answered at once with a task in `input_required`,
 * then `working`, `completed`; `cancelled` on a rejection or `tasks/cancel`; tasks seen
 * from any session of the same seat and never from another; bounded per seat; durable
 * with the proposal across a gateway restart. Hostile first.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  TaskStatusNotificationSchema,
  type CallToolResult,
  type Task,
} from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { createSpaceMcpServer, mountHttp } from "../participants/mcp-server.js";
import { CLI_MAIN, startGateway, waitFor, waitForTool, type TestGateway } from "./helpers.js";

const T = { human: "human-token-0001", notes: "notes-token-0002", claude: "claude-token-003", other: "other-token-0004" };
const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 600000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}}
  other: {kind: agent, token: ${T.other}}
`;

let gw: TestGateway | undefined;
const closers: (() => Promise<unknown>)[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  await gw?.stop();
  gw = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface World {
  human: ParticipantClient;
  proposals: Envelope[];
  writes: string[];
}

/** `notes` serves write_note (needs approval: not read-only) and read_note; `human` decides. */
async function world(opts: { dir?: string; port?: number; yaml?: string } = {}): Promise<World> {
  gw = await startGateway(opts.yaml ?? SPACE, opts);
  mountHttp(gw.gateway);
  const writes: string[] = [];
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    writes.push(text);
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  notes.registerTool("read_note", { description: "Reads", annotations: { readOnlyHint: true } }, async () => ({
    content: [{ type: "text", text: "a note" }],
  }));
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  await owner.serveMcp(notes);
  await owner.connect();
  closers.push(() => owner.close());
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  closers.push(() => human.close());
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => void proposals.push(p));
  await waitForTool(human, "notes/write_note");
  return { human, proposals, writes };
}

async function session(token = T.claude, capabilities: Record<string, unknown> = { tasks: {} }): Promise<Client> {
  const client = new Client({ name: "tasks-test", version: "1.0.0" }, { capabilities });
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw!.port}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  closers.push(async () => {
    await transport.terminateSession().catch(() => {});
    await client.close();
  });
  return client;
}

const asTask = (client: Client, text: string, name = "notes__write_note") =>
  client
    .request({ method: "tools/call", params: { name, arguments: { text }, task: { ttl: 600_000 } } }, CreateTaskResultSchema)
    .then((r) => r.task);

const fails = async (p: Promise<unknown>): Promise<string> => {
  try {
    return `resolved: ${JSON.stringify(await p)}`;
  } catch (err) {
    return (err as Error).message;
  }
};

const text = (r: unknown) => ((r as CallToolResult).content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");

describe("tasks: hostile first", () => {
  it("never shows, answers or cancels a seat's task for another seat, nor a forged id", { timeout: 30_000 }, async () => {
    const w = await world();
    const claude = await session();
    const task = await asTask(claude, "mine");
    expect(task.status).toBe("input_required");
    const other = await session(T.other);
    // The other seat may see the proposal in the space (visibility all), never as its task.
    for (const id of [task.taskId, "forged-0000", `../${task.taskId}`, "x".repeat(5000)]) {
      expect(await fails(other.experimental.tasks.getTask(id))).toMatch(/not found/i);
      expect(await fails(other.experimental.tasks.getTaskResult(id, CallToolResultSchema))).toMatch(/not found/i);
      expect(await fails(other.experimental.tasks.cancelTask(id))).toMatch(/not found/i);
    }
    expect((await other.experimental.tasks.listTasks()).tasks).toEqual([]);
    // A proposal the other seat made itself is not claude's task either.
    const othersOwn = await asTask(other, "theirs");
    expect(await fails(claude.experimental.tasks.getTask(othersOwn.taskId))).toMatch(/not found/i);
    expect(await fails(claude.experimental.tasks.getTask("forged-0000"))).toMatch(/not found/i);
    // Nothing was withdrawn or run by any of it.
    expect(w.writes).toEqual([]);
    expect((await claude.experimental.tasks.getTask(task.taskId)).status).toBe("input_required");
  });

  it("bounds the tasks of one seat: 10,000 asked at once, the quota held, the rest refused cleanly, the space still serving", {
    timeout: 120_000,
  }, async () => {
    await world();
    const seat = await ParticipantClient.connect({ url: gw!.url, space: "lab", token: T.claude });
    closers.push(() => seat.close());
    const server = createSpaceMcpServer({ client: seat, maxTasks: 50 });
    const [a, b] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: "quota", version: "1.0.0" }, { capabilities: { tasks: {} } });
    await Promise.all([server.connect(b), client.connect(a)]);
    closers.push(() => client.close());
    const started = Date.now();
    const outcomes = await Promise.all(
      Array.from({ length: 10_000 }, (_, i) =>
        asTask(client, `n${i}`).then(
          (t) => t.status,
          (err: Error) => err.message,
        ),
      ),
    );
    const created = outcomes.filter((o) => o === "input_required").length;
    const refused = outcomes.filter((o) => /^MCP error -32600: task quota: this participant holds 50 tasks/.test(o)).length;
    expect(created).toBeLessThanOrEqual(50);
    expect(created).toBeGreaterThan(0);
    expect(created + refused).toBe(10_000);
    expect((await client.experimental.tasks.listTasks()).tasks.length + 0).toBeLessThanOrEqual(50);
    // Forged ids by the thousand: each is not found, and the seat's connection is not closed as a flood.
    const forged = await Promise.all(Array.from({ length: 2000 }, (_, i) => fails(client.experimental.tasks.getTask(`forged-${i}`))));
    expect(forged.every((f) => /not found/i.test(f))).toBe(true);
    // Still serving: a direct call goes through.
    expect(text(await client.callTool({ name: "notes__read_note", arguments: {} }))).toBe("a note");
    console.log(`10,000 task requests: ${created} tasks, ${refused} refused, ${Date.now() - started} ms`);
  });

  it("a task cancelled while its approval is being written ends one way only: cancelled and not run, or run and the cancel refused", {
    timeout: 60_000,
  }, async () => {
    const w = await world();
    const claude = await session();
    const outcomes: string[] = [];
    // The approval goes out from 0 to 40 ms after the cancel starts (and once before it): each lands somewhere in the other's path.
    for (const [round, delay] of [-1, 0, 2, 5, 10, 20, 40].entries()) {
      const task = await asTask(claude, `race-${round}`);
      await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 5000, "the proposal");
      if (delay < 0) w.human.approve(task.taskId);
      else setTimeout(() => w.human.approve(task.taskId), delay);
      const cancel = await claude.experimental.tasks.cancelTask(task.taskId).then(
        (t) => t.status,
        (err: Error) => err.message,
      );
      let final: Task | undefined;
      await waitFor(
        async () => {
          final = await claude.experimental.tasks.getTask(task.taskId);
          return ["completed", "cancelled", "failed"].includes(final.status);
        },
        10_000,
        "the task to end",
      );
      const ran = w.writes.includes(`race-${round}`);
      outcomes.push(cancel === "cancelled" ? "cancelled" : "ran");
      if (cancel === "cancelled") {
        expect(final!.status, `round ${round}`).toBe("cancelled");
        expect(ran, `round ${round}: cancelled yet run`).toBe(false);
      } else {
        expect(cancel, `round ${round}`).toMatch(/approved/);
        expect(final!.status, `round ${round}`).toBe("completed");
        expect(ran, `round ${round}`).toBe(true);
      }
    }
    // Nothing ran twice; a write and its task agree (checked above), whichever won.
    expect(new Set(w.writes).size).toBe(w.writes.length);
    expect(outcomes.length).toBe(7);
  });
});

describe("tasks: outliving the client's own deadline", () => {
  it("keeps a task waiting past the participant client's proposal deadline, as long as the space keeps the proposal", {
    timeout: 30_000,
  }, async () => {
    const w = await world();
    const seat = await ParticipantClient.connect({ url: gw!.url, space: "lab", token: T.claude, proposalTimeoutMs: 300 });
    closers.push(() => seat.close());
    const server = createSpaceMcpServer({ client: seat });
    const [a, b] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: "deadline", version: "1.0.0" }, { capabilities: { tasks: {} } });
    await Promise.all([server.connect(b), client.connect(a)]);
    closers.push(() => client.close());
    const task = await asTask(client, "later");
    await new Promise((r) => setTimeout(r, 1000));
    expect((await client.experimental.tasks.getTask(task.taskId)).status).toBe("input_required");
    expect(await fails(w.human.request("system:gateway", "proposals/get", { id: task.taskId }))).toMatch(/^resolved/);
    w.human.approve(task.taskId);
    expect(text(await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toBe("wrote: later");
  });
});

describe("tasks: the happy paths", () => {
  it("answers at once with input_required, then working and completed with the result, with status notifications; seen from a new session of the seat", {
    timeout: 30_000,
  }, async () => {
    const w = await world();
    const claude = await session();
    const statuses: string[] = [];
    claude.setNotificationHandler(TaskStatusNotificationSchema, (n) => void statuses.push(n.params.status));
    const listed = (await claude.listTools()).tools;
    expect(listed.find((t) => t.name === "notes__write_note")!.execution?.taskSupport).toBe("optional");
    expect(listed.find((t) => t.name === "notes__read_note")!.execution?.taskSupport).not.toBe("optional"); // the server's own "forbidden"
    const plain = await session(T.claude, {});
    expect((await plain.listTools()).tools.find((t) => t.name === "notes__write_note")!.execution?.taskSupport).not.toBe("optional");

    const task = await asTask(claude, "hello");
    expect(task.status).toBe("input_required");
    expect(task.statusMessage).toContain(task.taskId.slice(0, 8));
    expect(task.statusMessage).toContain("notes/write_note");
    await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 5000, "the proposal at the human's");
    // Another session of the same seat sees it.
    const again = await session();
    expect((await again.experimental.tasks.getTask(task.taskId)).status).toBe("input_required");
    expect((await again.experimental.tasks.listTasks()).tasks.map((t) => t.taskId)).toContain(task.taskId);
    w.human.approve(task.taskId);
    await waitFor(async () => (await claude.experimental.tasks.getTask(task.taskId)).status === "completed", 10_000, "completed");
    expect(text(await again.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toBe("wrote: hello");
    await waitFor(() => statuses.includes("completed"), 5000, "the completed notification");
    expect(statuses).toEqual(["working", "completed"]);
    expect(w.writes).toEqual(["hello"]);
  });

  it("cancels the task when the proposal is rejected, and withdraws the proposal on tasks/cancel", { timeout: 30_000 }, async () => {
    const w = await world();
    const claude = await session();
    const rejected = await asTask(claude, "no");
    await waitFor(() => w.proposals.some((p) => p.id === rejected.taskId), 5000, "the proposal");
    w.human.reject(rejected.taskId, "policy", "not today");
    await waitFor(async () => (await claude.experimental.tasks.getTask(rejected.taskId)).status === "cancelled", 10_000, "cancelled");
    const result = await claude.experimental.tasks.getTaskResult(rejected.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/rejected by human: policy — not today/);

    const withdrawn: string[] = [];
    w.human.on("envelope", (e) => {
      if (e.kind === "mcp/withdraw") withdrawn.push(...(e.correlation_id ?? []));
    });
    const cancelled = await asTask(claude, "never");
    expect((await claude.experimental.tasks.cancelTask(cancelled.taskId)).status).toBe("cancelled");
    await waitFor(() => withdrawn.includes(cancelled.taskId), 5000, "the withdrawal");
    expect(await fails(w.human.request("system:gateway", "proposals/get", { id: cancelled.taskId }))).toMatch(/no pending proposal/);
    expect(w.writes).toEqual([]);
  });

  it("cancels the task when nobody decides and the proposal expires", { timeout: 30_000 }, async () => {
    await world({ yaml: SPACE.replace("proposal_ttl_ms: 600000", "proposal_ttl_ms: 500") });
    const claude = await session();
    const task = await asTask(claude, "too late");
    await waitFor(async () => (await claude.experimental.tasks.getTask(task.taskId)).status === "cancelled", 15_000, "cancelled on expiry");
    expect(text(await claude.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toMatch(/expired/);
  });

  it("waits for an approval across a gateway restart, then completes with the result", { timeout: 60_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-tasks-"));
    dirs.push(dir);
    await world({ dir });
    const port = gw!.port;
    const claude = await session();
    const task = await asTask(claude, "durable");
    expect(task.status).toBe("input_required");
    for (const c of closers.splice(0).reverse()) await c().catch(() => {});
    await gw!.gateway.close();
    gw = undefined;

    const w = await world({ dir, port });
    const later = await session();
    const seen = await later.experimental.tasks.getTask(task.taskId);
    expect(seen.status).toBe("input_required");
    expect(
      w.proposals
        .map((p) => p.id)
        .concat(
          ((await w.human.request("system:gateway", "proposals/list", {})) as { proposals: { id: string }[] }).proposals.map((p) => p.id),
        ),
    ).toContain(task.taskId);
    w.human.approve(task.taskId);
    await waitFor(
      async () => (await later.experimental.tasks.getTask(task.taskId)).status === "completed",
      15_000,
      "completed after the restart",
    );
    expect(text(await later.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toBe("wrote: durable");
    expect(w.writes).toEqual(["durable"]);
  });
});

describe("tasks over stdio (mewgate mcp --only)", () => {
  it("answers a call that needs approval with a task, which completes once approved", { timeout: 30_000 }, async () => {
    const w = await world();
    const client = new Client({ name: "tasks-stdio", version: "1.0.0" }, { capabilities: { tasks: {} } });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI_MAIN, "mcp", "--gateway", gw!.url, "--space", "lab", "--only", "notes"],
        env: { PATH: process.env["PATH"] ?? "", MEWGATE_TOKEN: T.claude },
        stderr: "pipe",
      }),
    );
    closers.push(() => client.close());
    expect((await client.listTools()).tools.find((t) => t.name === "write_note")?.execution?.taskSupport).toBe("optional");
    const task = await asTask(client, "over stdio", "write_note");
    expect(task.status).toBe("input_required");
    await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 5000, "the proposal");
    w.human.approve(task.taskId);
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(text(result)).toBe("wrote: over stdio");
    expect((await client.experimental.tasks.getTask(task.taskId)).status).toBe("completed");
  });
});
