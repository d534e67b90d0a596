/**
 * MCP tasks over a stdio face (`mewgate mcp --only`) that stays up while the gateway
 * behind it is killed (-9) and started again over its state: an approved call whose outcome
 * the gateway never wrote comes back `interrupted`, and its task waits for a person again
 * (`input_required`, saying the call may or may not have run; never `working` for ever, and
 * not `failed` while the proposal is open), then ends as they decide: cancelled (and not
 * run) when rejected, with the re-approval's real result when approved again. A task whose
 * proposal was still pending at the kill is approved after the restart and completes with
 * the result; a new task still completes. An approved task whose call was cut off while
 * the face's connection was cut (a loopback relay) ends failed, saying the call may or may
 * not have run. A task approved and answered while no session of its participant was
 * connected is found by a later session of that participant (a new face process, after a
 * gateway kill -9 too) with its result, and by nobody else. A real gateway process, real
 * face processes, the SDK's own client.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
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
import { readAudit } from "../gateway/space/ledger.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { CLI_MAIN, killGateway, spawnGateway, waitFor, waitForTool, type GatewayProcess } from "./helpers.js";

const T = { human: "human-token-0001", notes: "notes-token-0002", claude: "claude-token-003", other: "other-token-0004" };
const SPACE = `
space: {id: lab}
gateway: {state_dir: .mewgate}
policy: {proposal_ttl_ms: 600000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}}
  other: {kind: agent, token: ${T.other}}
`;

const procs: GatewayProcess[] = [];
const closers: (() => Promise<unknown>)[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const p of procs.splice(0)) await killGateway(p);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface World {
  human: ParticipantClient;
  proposals: Envelope[];
  /** Each call that reached the tool, by its text. */
  calls: string[];
  close(): Promise<void>;
}

/** Calls whose text is `slow` wait for this to be called. */
let releaseSlow = () => {};

/** `notes` serves write_note (needs approval); a call whose text is in `hangs` never answers, `slow` waits for `releaseSlow`. `human` decides. */
async function world(port: number, hangs: readonly string[] = ["hang"]): Promise<World> {
  const url = `ws://127.0.0.1:${port}`;
  const calls: string[] = [];
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    calls.push(text);
    if (hangs.includes(text)) await new Promise(() => {});
    if (text === "slow") await new Promise<void>((resolve) => (releaseSlow = resolve));
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  const owner = new ParticipantClient({ url, space: "lab", token: T.notes, reconnect: false });
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url, space: "lab", token: T.human, reconnect: false });
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => void proposals.push(p));
  await waitForTool(human, "notes/write_note");
  const close = async () => {
    await human.close();
    await owner.close();
  };
  closers.push(close);
  return { human, proposals, calls, close };
}

/** A loopback TCP relay to the gateway that can be cut (every connection closed, new ones refused) and opened again. */
async function relay(port: number): Promise<{ port: number; cut(): void; open(): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let refusing = false;
  const server = createServer((inbound) => {
    if (refusing) return void inbound.destroy();
    const outbound = createConnection({ host: "127.0.0.1", port });
    for (const [a, b] of [
      [inbound, outbound],
      [outbound, inbound],
    ] as const) {
      sockets.add(a);
      a.pipe(b);
      a.on("error", () => b.destroy());
      a.on("close", () => {
        sockets.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as { port: number }).port,
    cut: () => {
      refusing = true;
      for (const s of sockets) s.destroy();
    },
    open: () => {
      refusing = false;
    },
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** A stdio face (`mewgate mcp --only notes`) as the participant whose token it is, through `gateway`'s port, and the SDK's client on it. */
async function face(port: number, token: string, name = "tasks-restart"): Promise<Client> {
  const client = new Client({ name, version: "1.0.0" }, { capabilities: { tasks: {} } });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [CLI_MAIN, "mcp", "--gateway", `ws://127.0.0.1:${port}`, "--space", "lab", "--only", "notes"],
      env: { PATH: process.env["PATH"] ?? "", MEWGATE_TOKEN: token },
      stderr: "ignore",
    }),
  );
  closers.push(() => client.close());
  return client;
}

/** Polls the task until `done` holds of it; fails naming what it last saw. */
async function until(client: Client, taskId: string, done: (t: Task) => boolean, what: string, ms = 30_000): Promise<Task> {
  let seen: Task | string | undefined;
  await waitFor(
    async () => {
      seen = await client.experimental.tasks.getTask(taskId).catch((err: Error) => err.message);
      return typeof seen === "object" && done(seen);
    },
    ms,
    what,
  ).catch((err: Error) => {
    throw new Error(`${err.message}; last seen: ${JSON.stringify(seen)}`);
  });
  return seen as Task;
}

/** The audit trail's events for one proposal, in order. */
const trailOf = (dir: string, id: string) =>
  readAudit(join(dir, ".mewgate"))
    .filter((e) => e.proposal === id)
    .map((e) => e.event);

const asTask = (client: Client, text: string) =>
  client
    .request({ method: "tools/call", params: { name: "write_note", arguments: { text }, task: { ttl: 600_000 } } }, CreateTaskResultSchema)
    .then((r) => r.task);

const text = (r: unknown) => ((r as CallToolResult).content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");

describe("a task over a stdio face that outlives a gateway restart", () => {
  it("puts an interrupted task back to waiting for a person, never failed nor working; rejected, it is cancelled and never runs; the held one completes; the face serves on", {
    timeout: 90_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-task-restart-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    const g1 = await spawnGateway(file);
    procs.push(g1);
    const port = g1.port;
    let w = await world(port);

    const client = await face(port, T.claude);
    const task = await asTask(client, "hang");
    expect(task.status).toBe("input_required");
    await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 10_000, "the proposal");
    w.human.approve(task.taskId);
    await waitFor(() => w.calls.includes("hang"), 10_000, "the approved call reaches the tool");
    await until(client, task.taskId, (t) => t.status === "working", "working", 10_000);
    // A second task still waits for its approval when the gateway dies.
    const held = await asTask(client, "held");
    await waitFor(() => w.proposals.some((p) => p.id === held.taskId), 10_000, "the second proposal");
    const statuses: string[] = [];
    client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
      if (n.params.taskId === task.taskId) statuses.push(n.params.status);
    });

    // The gateway dies (kill -9) with the call at the tool; started again over the same state, on the same port.
    await killGateway(g1);
    await w.close();
    const g2 = await spawnGateway(file, { port });
    procs.push(g2);
    w = await world(port);

    // The face reconnects by itself; the gateway tells it the call was interrupted: the task waits for a person again.
    const again = await until(client, task.taskId, (t) => t.status !== "working", "the task leaves working");
    expect(again.status).toBe("input_required");
    expect(again.statusMessage ?? "").toMatch(/interrupted/);
    expect(again.statusMessage ?? "").toMatch(/may or may not have run/);
    expect(again.statusMessage ?? "").toContain(task.taskId);
    // It has no result while it waits (tasks/result would wait: ask with a short deadline).
    await expect(client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema, { timeout: 1500 })).rejects.toThrow();

    // The person rejects it now: the task is cancelled, and the call is not run again.
    await waitFor(
      async () => (await w.human.listProposals()).some((p) => p.id === task.taskId),
      10_000,
      "the interrupted proposal after the restart",
    );
    w.human.reject(task.taskId, "not again");
    const ended = await until(client, task.taskId, (t) => ["completed", "failed", "cancelled"].includes(t.status), "the task ends");
    expect(ended.status).toBe("cancelled");
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/was not run: rejected by human: not again/);
    expect(w.calls).not.toContain("hang");
    // Never failed on the way, never completed.
    expect(statuses).not.toContain("failed");
    expect(statuses).not.toContain("completed");

    // The task that waited is approved after the restart: it runs and completes with the result.
    await waitFor(
      async () => (await w.human.listProposals()).some((p) => p.id === held.taskId),
      10_000,
      "the held proposal after the restart",
    );
    w.human.approve(held.taskId);
    await waitFor(() => w.calls.includes("held"), 10_000, "the held call runs");
    await until(client, held.taskId, (t) => t.status === "completed", "the held task completes", 15_000);
    expect(text(await client.experimental.tasks.getTaskResult(held.taskId, CallToolResultSchema))).toBe("wrote: held");

    // The face serves on: a new task for the same tool completes once approved.
    const next = await asTask(client, "after the restart");
    await waitFor(() => w.proposals.some((p) => p.id === next.taskId), 10_000, "the new proposal");
    w.human.approve(next.taskId);
    expect(text(await client.experimental.tasks.getTaskResult(next.taskId, CallToolResultSchema))).toBe("wrote: after the restart");
  });

  it("ends an interrupted task with the re-approval's real result when the gateway was killed between approval and result", {
    timeout: 90_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-task-again-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    const g1 = await spawnGateway(file);
    procs.push(g1);
    const port = g1.port;
    // Before the kill the call never answers; after it, the same call does.
    let w = await world(port, ["once more"]);
    const client = await face(port, T.claude);
    const task = await asTask(client, "once more");
    await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 10_000, "the proposal");
    w.human.approve(task.taskId);
    await waitFor(() => w.calls.includes("once more"), 10_000, "the approved call reaches the tool");
    await until(client, task.taskId, (t) => t.status === "working", "working", 10_000);

    await killGateway(g1);
    await w.close();
    const g2 = await spawnGateway(file, { port });
    procs.push(g2);
    w = await world(port, []);
    const waiting = await until(client, task.taskId, (t) => t.status === "input_required", "the task waits for a person again");
    expect(waiting.statusMessage ?? "").toMatch(/interrupted.*may or may not have run/);
    // Not approvable by its own proposer: the face asks nobody; the person approves again.
    await waitFor(
      async () => (await w.human.listProposals()).some((p) => p.id === task.taskId),
      10_000,
      "the interrupted proposal after the restart",
    );
    w.human.approve(task.taskId);
    const done = await until(client, task.taskId, (t) => ["completed", "failed", "cancelled"].includes(t.status), "the task ends");
    expect(done.status).toBe("completed");
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe("wrote: once more");
    expect(w.calls).toEqual(["once more"]);
    expect(trailOf(dir, task.taskId)).toEqual(["proposed", "approved", "routed", "interrupted", "approved", "routed", "answered"]);
  });

  it("finds a task approved and answered while no session of its participant was connected, with its result, from a later session only; after a kill -9 too", {
    timeout: 120_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-task-unheard-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    const g1 = await spawnGateway(file);
    procs.push(g1);
    const port = g1.port;
    let w = await world(port);

    // A task, and a second one to be rejected, made; then the face process ends (the MCP client goes).
    const first = await face(port, T.claude, "first-session");
    const task = await asTask(first, "while away");
    const refused = await asTask(first, "refused while away");
    await waitFor(() => w.proposals.some((p) => p.id === refused.taskId), 10_000, "the proposals");
    await first.close();
    await waitFor(() => !w.human.participants.has("claude"), 10_000, "claude leaves the space");

    // Decided while nobody of claude's is connected: the call runs and answers to nobody.
    w.human.approve(task.taskId);
    w.human.reject(refused.taskId, "no thanks");
    await waitFor(() => w.calls.includes("while away"), 10_000, "the approved call runs");
    await waitFor(() => trailOf(dir, task.taskId).at(-1) === "answered", 10_000, "the answer written");
    await waitFor(() => trailOf(dir, refused.taskId).at(-1) === "rejected", 10_000, "the rejection written");

    // The gateway is killed and started again over its state: what it kept for claude survives.
    await killGateway(g1);
    await w.close();
    const g2 = await spawnGateway(file, { port });
    procs.push(g2);
    w = await world(port);

    // Hostile first: another participant asking for claude's task ids, and a forged id, find nothing.
    const other = await face(port, T.other, "other-session");
    for (const id of [task.taskId, refused.taskId, randomUUID(), "x".repeat(150), `notes:${task.taskId}`]) {
      await expect(other.experimental.tasks.getTask(id)).rejects.toThrow(/not found/i);
      await expect(other.experimental.tasks.getTaskResult(id, CallToolResultSchema)).rejects.toThrow();
    }
    expect((await other.experimental.tasks.listTasks()).tasks).toEqual([]);

    // A later session of claude's: the task is there, completed, with the tool's own result.
    const later = await face(port, T.claude, "later-session");
    await expect(later.experimental.tasks.getTask(randomUUID())).rejects.toThrow(/not found/i);
    const found = await later.experimental.tasks.getTask(task.taskId);
    expect(found.status).toBe("completed");
    expect(text(await later.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toBe("wrote: while away");
    // The one rejected while away is cancelled, saying by whom and why; it never ran.
    const cancelled = await later.experimental.tasks.getTask(refused.taskId);
    expect(cancelled.status).toBe("cancelled");
    expect(text(await later.experimental.tasks.getTaskResult(refused.taskId, CallToolResultSchema))).toMatch(
      /was not run: rejected by human: no thanks/,
    );
    expect(w.calls).toEqual([]);
    // The other participant still finds nothing, now that claude's session holds them.
    await expect(other.experimental.tasks.getTask(task.taskId)).rejects.toThrow(/not found/i);
  });

  it("ends a task failed, saying the call may or may not have run, when its answer went while the face was away and the gateway restarted", {
    timeout: 90_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-task-away-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    const g1 = await spawnGateway(file);
    procs.push(g1);
    const port = g1.port;
    let w = await world(port);
    const line = await relay(port);
    closers.push(() => line.close());

    const client = new Client({ name: "tasks-away", version: "1.0.0" }, { capabilities: { tasks: {} } });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI_MAIN, "mcp", "--gateway", `ws://127.0.0.1:${line.port}`, "--space", "lab", "--only", "notes"],
        env: { PATH: process.env["PATH"] ?? "", MEWGATE_TOKEN: T.claude },
        stderr: "ignore",
      }),
    );
    closers.push(() => client.close());
    const task = await asTask(client, "slow");
    await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 10_000, "the proposal");
    w.human.approve(task.taskId);
    await waitFor(() => w.calls.includes("slow"), 10_000, "the approved call reaches the tool");
    await waitFor(async () => (await client.experimental.tasks.getTask(task.taskId)).status === "working", 10_000, "working");

    // The face's connection goes; the call ends meanwhile (told to nobody); then the gateway restarts.
    line.cut();
    releaseSlow();
    const trail = () =>
      readAudit(join(dir, ".mewgate"))
        .filter((e) => e.proposal === task.taskId)
        .map((e) => e.event);
    // (Answered, or failed as the gateway ends the calls of a proposer that left: either way it waits no more.)
    await waitFor(() => ["answered", "failed"].includes(trail().at(-1) ?? ""), 10_000, "the outcome written").catch((err: Error) => {
      throw new Error(`${err.message}; trail: ${trail().join(" → ")}`);
    });
    await killGateway(g1);
    await w.close();
    const g2 = await spawnGateway(file, { port });
    procs.push(g2);
    w = await world(port);
    line.open();

    let seen: Task | string | undefined;
    await waitFor(
      async () => {
        seen = await client.experimental.tasks.getTask(task.taskId).catch((err: Error) => err.message);
        return typeof seen === "object" && ["completed", "failed", "cancelled"].includes(seen.status);
      },
      30_000,
      "the task ends",
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last seen: ${JSON.stringify(seen)}`);
    });
    if (typeof seen !== "object") throw new Error("unreachable");
    expect(seen.status).toBe("failed");
    expect(seen.statusMessage ?? "").toMatch(/may or may not have run/);
    expect(w.calls).toEqual([]);
  });
});
