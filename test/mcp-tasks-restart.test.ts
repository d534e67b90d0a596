/**
 * MCP tasks over a stdio face (`mewgate mcp --only`) that stays up while the gateway
 * behind it is killed and started again over its state: an approved call whose outcome
 * the gateway never wrote comes back `interrupted`, and its task ends failed saying so
 * (never `working` for ever); a task whose proposal was still pending at the kill is
 * approved after the restart and completes with the result (it stayed `working` for ever:
 * the face still took it for its own call in flight, and ignored the answer); a new task
 * still completes. An approved task whose call ended while the face's connection was cut
 * (a loopback relay) ends failed, saying the call may or may not have run: its outcome went
 * to a connection that is gone. A real gateway process, a real face process, the SDK's
 * own client.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { CallToolResultSchema, CreateTaskResultSchema, type CallToolResult, type Task } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import { readAudit } from "../gateway/space/ledger.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { CLI_MAIN, killGateway, spawnGateway, waitFor, waitForTool, type GatewayProcess } from "./helpers.js";

const T = { human: "human-token-0001", notes: "notes-token-0002", claude: "claude-token-003" };
const SPACE = `
space: {id: lab}
gateway: {state_dir: .mewgate}
policy: {proposal_ttl_ms: 600000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}}
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

/** `notes` serves write_note (needs approval); a call whose text is `hang` never answers, `slow` waits for `releaseSlow`. `human` decides. */
async function world(port: number): Promise<World> {
  const url = `ws://127.0.0.1:${port}`;
  const calls: string[] = [];
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    calls.push(text);
    if (text === "hang") await new Promise(() => {});
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

const asTask = (client: Client, text: string) =>
  client
    .request({ method: "tools/call", params: { name: "write_note", arguments: { text }, task: { ttl: 600_000 } } }, CreateTaskResultSchema)
    .then((r) => r.task);

const text = (r: unknown) => ((r as CallToolResult).content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");

describe("a task over a stdio face that outlives a gateway restart", () => {
  it("ends an interrupted task saying so, completes one approved after the restart, never leaves one working; the face serves on", {
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

    const client = new Client({ name: "tasks-restart", version: "1.0.0" }, { capabilities: { tasks: {} } });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI_MAIN, "mcp", "--gateway", `ws://127.0.0.1:${port}`, "--space", "lab", "--only", "notes"],
        env: { PATH: process.env["PATH"] ?? "", MEWGATE_TOKEN: T.claude },
        stderr: "ignore",
      }),
    );
    closers.push(() => client.close());
    const task = await asTask(client, "hang");
    expect(task.status).toBe("input_required");
    await waitFor(() => w.proposals.some((p) => p.id === task.taskId), 10_000, "the proposal");
    w.human.approve(task.taskId);
    await waitFor(() => w.calls.includes("hang"), 10_000, "the approved call reaches the tool");
    await waitFor(async () => (await client.experimental.tasks.getTask(task.taskId)).status === "working", 10_000, "working");
    // A second task still waits for its approval when the gateway dies.
    const held = await asTask(client, "held");
    await waitFor(() => w.proposals.some((p) => p.id === held.taskId), 10_000, "the second proposal");

    // The gateway dies with the call at the tool; started again over the same state, on the same port.
    await killGateway(g1);
    await w.close();
    const g2 = await spawnGateway(file, { port });
    procs.push(g2);
    w = await world(port);

    // The face reconnects by itself; the gateway tells it the call was interrupted.
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
    expect(seen.statusMessage ?? "").toMatch(/interrupted|may or may not have run/);
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/may or may not have run/);

    // The task that waited is approved after the restart: it runs and completes with the result.
    await waitFor(
      async () => (await w.human.listProposals()).some((p) => p.id === held.taskId),
      10_000,
      "the held proposal after the restart",
    );
    w.human.approve(held.taskId);
    await waitFor(() => w.calls.includes("held"), 10_000, "the held call runs");
    let heldSeen: Task | string | undefined;
    await waitFor(
      async () => {
        heldSeen = await client.experimental.tasks.getTask(held.taskId).catch((err: Error) => err.message);
        return typeof heldSeen === "object" && heldSeen.status === "completed";
      },
      15_000,
      "the held task completes",
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last seen: ${JSON.stringify(heldSeen)}`);
    });
    expect(text(await client.experimental.tasks.getTaskResult(held.taskId, CallToolResultSchema))).toBe("wrote: held");

    // The face serves on: a new task for the same tool completes once approved.
    const next = await asTask(client, "after the restart");
    await waitFor(() => w.proposals.some((p) => p.id === next.taskId), 10_000, "the new proposal");
    w.human.approve(next.taskId);
    expect(text(await client.experimental.tasks.getTaskResult(next.taskId, CallToolResultSchema))).toBe("wrote: after the restart");
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
