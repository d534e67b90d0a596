/**
 * Approvals as MCP tasks (2025-11-25): a `tools/call` with `task` whose call needs
 * approval is answered at once with a task in `input_required`; it moves to `working`
 * when someone approves, then `completed` (or `failed`, for an error result or a failure)
 * with the result; `cancelled` when the proposal is rejected, withdrawn or expires, or the
 * client cancels the task (`tasks/cancel`, which withdraws the proposal).
 *
 * The SDK's `Protocol` serves `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`
 * from a `TaskStore`; this is that store, for one participant (the seat) rather than one
 * MCP session: every session of the seat sees the seat's tasks, no other seat ever does.
 *
 * Durable with the proposal: a task waiting for approval has the proposal's id as its
 * task id, so the proposal the gateway journals is the task↔proposal mapping. After a
 * restart (of the gateway, or of this process) a task id this store does not know is
 * looked up with `proposals/get` on `system:gateway`: a proposal of this seat's still
 * pending (or interrupted) is adopted again, and its approval and answer (which the gateway
 * routes to the proposer, correlated to the proposal) complete it; one that ended while the
 * seat was away is adopted ended, as the gateway kept it. A call that settles
 * without a proposal (it needed none, or was refused at once) is a task with a fresh id,
 * kept in memory only.
 *
 * A face that stays up while its connection to the space goes (or the gateway restarts)
 * asks again, at the next welcome, about each task whose call it no longer waits on: a
 * proposal interrupted (approved, then the gateway stopped before the call's outcome was
 * written) makes its task wait for a person again (`input_required`, saying the call may or
 * may not have run), and a new approval's answer, or the rejection, ends it; one that ended
 * while the seat was away ends as the gateway kept it for the seat (task-ends.ts,
 * gateway/proposals/unheard.ts), answer included.
 *
 * A tool whose server runs tasks (`execution.taskSupport` `required`/`optional`) is called
 * as one once any approval is given, and the server's task followed behind ours (`tasks/get`
 * at most once per poll interval, `tasks/result` once it ended, `tasks/cancel` passed on:
 * server-task.ts), asked as this seat, whose bridge answers for the seat's own tasks only
 * (bridge/tasks.ts).
 * Made without a wait, its id is `<participant>:<server's task id>`, found again from a new
 * session by asking that participant; a face serving one participant (`view`) sees its own.
 */
import { randomUUID } from "node:crypto";
import type { TaskStore } from "@modelcontextprotocol/sdk/experimental/tasks/interfaces.js";
import { ErrorCode, type CallToolResult, type CreateTaskResult, type Result, type Task } from "@modelcontextprotocol/sdk/types.js";
import { GATEWAY_ID, type Envelope } from "../../../gateway/index.js";
import type { ParticipantClient } from "../../client.js";
import { ParticipantError, RpcError } from "../../errors.js";
import { failureResult } from "../tools/catalogue.js";
import { DEFAULT_TTL_MS, type Followed, POLL_MS, ServerTaskFollower, serverTask, TERMINAL } from "./server-task.js";
import { approver, fromSpace, heard, interrupted, type Reading, Rechecks, readProposal, realOf, waiting } from "./task-ends.js";

/** Most tasks one seat holds at once (open or finished and not yet expired); past it a new one is refused. */
export const DEFAULT_MAX_TASKS = 1000;
const MAX_TTL_MS = 24 * 60 * 60_000;
const PAGE = 100;
/**
 * Unknown task ids looked up at the gateway per second, at most: each is a request on the
 * seat's connection, and a client asking for forged ids in a loop must not get that
 * connection closed as a flood (or flood the gateway). Past it an unknown id is not found.
 */
const ADOPT_PER_SECOND = 20;

interface Rec extends Followed {
  result?: Result | undefined;
  proposal?: string | undefined;
}

/** What starting the call gives back: its result, and the proposal when it became one. */
export type RunCall = (signal: AbortSignal, onProposal: (proposal: Envelope) => void) => Promise<CallToolResult | CreateTaskResult>;

export class SeatTasks implements TaskStore {
  private readonly recs = new Map<string, Rec>();
  private readonly listeners = new Set<(task: Task) => void>();
  private readonly aborts = new Map<string, AbortController>();
  /** Tasks being started (their call not yet a proposal): they count against the quota. */
  private starting = 0;
  private adoptBudget = ADOPT_PER_SECOND;
  private adoptRefilled = Date.now();
  /** Follows the server's own task behind one of ours. */
  private readonly follower: ServerTaskFollower;

  constructor(
    private readonly client: ParticipantClient,
    private readonly maxTasks = DEFAULT_MAX_TASKS,
  ) {
    this.follower = new ServerTaskFollower(client, {
      set: (rec, status, statusMessage) => this.set(rec, status, statusMessage),
      // The follower is only ever handed this store's own records.
      finish: (rec, status, result) => this.finish(rec as Rec, status, result),
    });
    client.on("envelope", (env) => this.envelope(env));
    // A new connection: the tasks no call waits for any more are asked about again (task-ends.ts).
    const rechecks = new Rechecks(client, { adopted: () => this.adopted(), apply: (rec, r) => this.apply(rec, r) }, ADOPT_PER_SECOND);
    client.on("welcome", (w) => {
      if (!w.reconnected) return;
      rechecks.relisted(w.proposals);
      // After the calls this welcome ended have settled (their rejections come first).
      setTimeout(() => void rechecks.recheck(w.proposals), 0).unref();
    });
  }

  /** Hears every status change of the seat's tasks (each session sends `notifications/tasks/status`). Returns how to stop. */
  listen(fn: (task: Task) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * Starts a call as a task: resolves with the task as soon as the call became a proposal
   * (`input_required`) or settled without one. Refused past the seat's quota, and when the
   * gateway refuses the call outright (its error is the answer, and no task is kept).
   */
  async start(real: string, ttl: number | null | undefined, run: RunCall): Promise<Task> {
    this.sweep();
    if (this.recs.size + this.starting >= this.maxTasks) {
      throw new RpcError(
        ErrorCode.InvalidRequest,
        `task quota: this participant holds ${this.maxTasks} tasks; wait for some to finish or cancel them (tasks/cancel)`,
        { reason: "task_quota", max: this.maxTasks },
      );
    }
    const controller = new AbortController();
    let proposed!: (env: Envelope) => void;
    const proposal = new Promise<Envelope>((resolve) => (proposed = resolve));
    this.starting++;
    let first: { env: Envelope } | { result: CallToolResult | CreateTaskResult } | { err: unknown };
    const done = run(controller.signal, (env) => proposed(env));
    done.catch(() => {});
    try {
      first = await Promise.race([
        proposal.then((env) => ({ env })),
        done.then(
          (result) => ({ result }),
          (err: unknown) => ({ err }),
        ),
      ]);
    } finally {
      this.starting--;
    }
    const ttlMs = Math.min(MAX_TTL_MS, ttl ?? DEFAULT_TTL_MS);
    if ("err" in first)
      throw first.err instanceof ParticipantError
        ? new RpcError(ErrorCode.InvalidRequest, first.err.message, { reason: first.err.code })
        : first.err;
    if ("result" in first) {
      const upstream = serverTask(first.result);
      const rec = this.add(upstream ? `${ownerOf(real)}:${upstream.taskId}` : randomUUID(), real, ttlMs, undefined);
      if (upstream) this.link(rec, upstream);
      else this.finish(rec, (first.result as CallToolResult).isError ? "failed" : "completed", first.result);
      return rec.task;
    }
    const id = first.env.id;
    const rec = this.add(id, real, ttlMs, id);
    this.aborts.set(id, controller);
    this.follow(rec, done);
    return rec.task;
  }

  // --- TaskStore (the SDK's task handlers; the session id is not ours to scope by) ------

  async createTask(): Promise<Task> {
    throw new RpcError(ErrorCode.InvalidRequest, "tasks are created by tools/call");
  }

  async getTask(taskId: string): Promise<Task | null> {
    return (await this.find(taskId, undefined))?.task ?? null;
  }

  /** The seat's task `taskId` as a face serving `only` (or every participant) may see it, its server's task asked about if due. */
  private async find(taskId: string, only: string | undefined): Promise<Rec | undefined> {
    this.sweep();
    const rec = this.recs.get(taskId) ?? (await this.adopt(taskId, only));
    if (!rec || (only !== undefined && rec.owner !== only)) return undefined;
    await this.follower.poll(rec);
    return rec;
  }

  /** The store as a face sees it: serving one participant, the tasks of that participant's tools only. */
  view(only: string | undefined): TaskStore & { sees(task: Task): boolean } {
    if (only === undefined) return Object.assign(this, { sees: () => true });
    const notFound = (taskId: string) => new RpcError(ErrorCode.InvalidParams, `Task not found: ${String(taskId).slice(0, 64)}`);
    return {
      createTask: () => this.createTask(),
      getTask: async (taskId) => (await this.find(taskId, only))?.task ?? null,
      storeTaskResult: async (taskId, status, result) =>
        this.recs.get(taskId)?.owner === only ? this.storeTaskResult(taskId, status, result) : undefined,
      getTaskResult: async (taskId) => {
        if (this.recs.get(taskId)?.owner !== only) throw notFound(taskId);
        return this.getTaskResult(taskId);
      },
      updateTaskStatus: async (taskId, status, statusMessage) => {
        if (!(await this.find(taskId, only))) throw notFound(taskId);
        return this.updateTaskStatus(taskId, status, statusMessage);
      },
      listTasks: (cursor) => this.list(cursor, only),
      sees: (task) => this.recs.get(task.taskId)?.owner === only,
    };
  }

  async storeTaskResult(taskId: string, status: "completed" | "failed", result: Result): Promise<void> {
    const rec = this.recs.get(taskId);
    if (rec) this.finish(rec, status, result);
  }

  async getTaskResult(taskId: string): Promise<Result> {
    const rec = this.recs.get(taskId);
    if (rec?.upstream && rec.result === undefined && TERMINAL.has(rec.task.status))
      rec.result = await this.follower.result(rec, rec.upstream);
    if (!rec?.result) throw new RpcError(ErrorCode.InvalidParams, `task ${taskId.slice(0, 64)} has no result yet`);
    return rec.result;
  }

  /**
   * The SDK calls this for `tasks/cancel` (with `cancelled`). Cancelling withdraws the
   * proposal; when an approval got there first the cancel is refused and the task runs on.
   */
  async updateTaskStatus(taskId: string, status: Task["status"], statusMessage?: string): Promise<void> {
    const rec = this.recs.get(taskId) ?? (await this.adopt(taskId, undefined));
    if (!rec) throw new RpcError(ErrorCode.InvalidParams, `Task not found: ${taskId.slice(0, 64)}`);
    if (status !== "cancelled") return this.set(rec, status, statusMessage);
    if (TERMINAL.has(rec.task.status)) return;
    if (rec.upstream) return this.follower.cancel(rec, rec.upstream);
    if (rec.task.status === "working" || rec.proposal === undefined) {
      throw new RpcError(ErrorCode.InvalidParams, `the call was already approved and runs; it cannot be cancelled now`, {
        reason: "already_approved",
      });
    }
    await this.withdraw(rec);
  }

  async listTasks(cursor?: string): Promise<{ tasks: Task[]; nextCursor?: string }> {
    return this.list(cursor, undefined);
  }

  private async list(cursor: string | undefined, only: string | undefined): Promise<{ tasks: Task[]; nextCursor?: string }> {
    this.sweep();
    const all = [...this.recs.values()].filter((r) => only === undefined || r.owner === only).map((r) => r.task);
    const start = cursor === undefined ? 0 : Number(cursor);
    if (!Number.isInteger(start) || start < 0 || start > all.length)
      throw new RpcError(ErrorCode.InvalidParams, "tasks/list: unknown cursor");
    const tasks = all.slice(start, start + PAGE);
    return start + PAGE < all.length ? { tasks, nextCursor: String(start + PAGE) } : { tasks };
  }

  // --- the life of one task --------------------------------------------------------------

  private add(id: string, real: string, ttlMs: number, proposal: string | undefined): Rec {
    const now = new Date().toISOString();
    const task: Task = {
      taskId: id,
      status: "input_required",
      ttl: ttlMs,
      createdAt: now,
      lastUpdatedAt: now,
      pollInterval: POLL_MS,
      ...(proposal ? { statusMessage: waiting(real, proposal) } : {}),
    };
    const rec: Rec = { task, real, owner: ownerOf(real), proposal };
    this.recs.set(id, rec);
    return rec;
  }

  /** The call behind a task settled: its result, or why not. */
  private follow(rec: Rec, done: Promise<CallToolResult | CreateTaskResult>): void {
    done.then(
      (result) => {
        const upstream = serverTask(result);
        if (upstream) return this.link(rec, upstream);
        this.finish(rec, (result as CallToolResult).isError ? "failed" : "completed", result);
      },
      (err: unknown) => {
        if (!(err instanceof ParticipantError))
          return this.finish(rec, "failed", { content: [{ type: "text", text: String(err) }], isError: true });
        // Approved, then the gateway stopped before the call's outcome was written: the
        // proposal waits for a person again, and so does the task; a new approval's answer
        // (or the rejection) ends it (`envelope`).
        if (err.code === "interrupted" && fromSpace(err)) {
          this.aborts.delete(rec.task.taskId);
          return this.set(rec, "input_required", interrupted(rec.real, rec.task.taskId, approver(err.data)));
        }
        // The connection to the space went (this process or the gateway stops): the task stays
        // as it is, adopted (no call waits for it any more); what the space says of the proposal
        // (`envelope`), or asked at the next welcome (`recheck`), settles it.
        if (err.code === "disconnected" || err.code === "closed" || err.code === "connect_failed") {
          this.aborts.delete(rec.task.taskId);
          return;
        }
        const cancelled = err.code === "rejected" || err.code === "withdrawn" || err.code === "expired" || err.code === "cancelled";
        this.finish(rec, cancelled ? "cancelled" : "failed", failureResult(rec.real, err));
      },
    );
  }

  private finish(rec: Rec, status: Task["status"], result: Result): void {
    if (TERMINAL.has(rec.task.status)) return;
    rec.result = result;
    this.aborts.delete(rec.task.taskId);
    const text = (result as CallToolResult).content?.find((c) => c.type === "text");
    this.set(rec, status, status === "completed" ? undefined : text?.type === "text" ? text.text.slice(0, 500) : undefined);
    rec.expires = Date.now() + (rec.task.ttl ?? DEFAULT_TTL_MS);
  }

  private set(rec: Followed, status: Task["status"], statusMessage: string | undefined): void {
    if (TERMINAL.has(rec.task.status)) return;
    const { statusMessage: _old, ...rest } = rec.task;
    rec.task = { ...rest, status, lastUpdatedAt: new Date().toISOString(), ...(statusMessage ? { statusMessage } : {}) };
    for (const fn of this.listeners) fn(rec.task);
  }

  /** What the space says about the seat's proposals: approved → working; answered or ended → done. */
  private envelope(env: Envelope): void {
    const ids = env.correlation_id ?? [];
    for (const id of ids) {
      const rec = this.recs.get(id);
      if (!rec || TERMINAL.has(rec.task.status)) continue;
      // Calls this process still waits on settle through `follow`; an adopted one only hears these.
      const adopted = !this.aborts.has(id);
      if (env.kind === "mcp/approve") this.set(rec, "working", `approved by ${env.from}; running ${rec.real}`);
      else if (adopted) {
        const reading = heard(rec.real, id, env);
        if (reading) this.apply(rec, reading);
      }
    }
  }

  /**
   * A task id this store does not know: a pending proposal of this seat's, from before a
   * restart, or (`<participant>:<id>`) a task of that participant's server the seat made.
   */
  private async adopt(taskId: string, only: string | undefined): Promise<Rec | undefined> {
    if (typeof taskId !== "string" || taskId.length > 200 || this.recs.size >= this.maxTasks) return undefined;
    const colon = taskId.indexOf(":");
    // Serving one participant, an id naming another is not looked up at all.
    if (colon > 0 && only !== undefined && taskId.slice(0, colon) !== only) return undefined;
    const now = Date.now();
    this.adoptBudget = Math.min(ADOPT_PER_SECOND, this.adoptBudget + ((now - this.adoptRefilled) / 1000) * ADOPT_PER_SECOND);
    this.adoptRefilled = now;
    if (this.adoptBudget < 1) return undefined;
    this.adoptBudget--;
    if (colon > 0) return this.adoptUpstream(taskId, taskId.slice(0, colon), taskId.slice(colon + 1));
    let res: unknown;
    try {
      res = await this.client.request(GATEWAY_ID, "proposals/get", { id: taskId }, { timeoutMs: 10_000 });
    } catch {
      return undefined;
    }
    const proposal = (res as { proposal?: Record<string, unknown> } | undefined)?.proposal;
    // Only the seat's own proposals: another participant's is not its task, whoever may see it.
    if (!proposal || proposal["from"] !== this.client.id || this.recs.has(taskId)) return this.recs.get(taskId);
    const real = realOf(proposal);
    const reading = readProposal(real, taskId, this.client.id, res);
    if (!reading) return undefined;
    const rec = this.add(taskId, real, DEFAULT_TTL_MS, taskId);
    if (typeof proposal["ts"] === "string") rec.task = { ...rec.task, createdAt: proposal["ts"] };
    this.apply(rec, reading);
    return rec;
  }

  /** What the space says of a task's proposal, as the task's status (task-ends.ts). */
  private apply(rec: Rec, reading: Reading): void {
    if (!("result" in reading)) {
      if (reading.status !== rec.task.status || reading.statusMessage !== rec.task.statusMessage)
        this.set(rec, reading.status, reading.statusMessage);
      return;
    }
    const upstream = serverTask(reading.result);
    if (upstream) this.link(rec, upstream);
    else this.finish(rec, reading.status, reading.result);
  }

  /** Tasks this process no longer waits on a call for, waiting for the space to say how they end. */
  private adopted(): Rec[] {
    return [...this.recs.values()].filter(
      (r) => r.proposal !== undefined && !r.upstream && !TERMINAL.has(r.task.status) && !this.aborts.has(r.proposal),
    );
  }

  // --- the server's own task behind one of ours (server-task.ts) --------------------------

  /** The call came back as the server's own task: ours follows it from now on. */
  private link(rec: Rec, upstream: Task): void {
    this.aborts.delete(rec.task.taskId);
    this.follower.link(rec, upstream);
  }

  /** `<participant>:<id>` from a new session or process: the server's task, if that participant's bridge says it is the seat's. */
  private async adoptUpstream(taskId: string, participant: string, upstreamId: string): Promise<Rec | undefined> {
    let upstream: Task | undefined;
    try {
      upstream = await this.follower.lookUp(participant, upstreamId);
    } catch {
      return undefined;
    }
    if (!upstream || this.recs.has(taskId)) return this.recs.get(taskId);
    const rec = this.add(taskId, `${participant}/?`, DEFAULT_TTL_MS, undefined);
    rec.real = `the task of ${participant}`;
    rec.task = { ...rec.task, createdAt: upstream.createdAt };
    this.link(rec, upstream);
    return rec;
  }

  /** Withdraws the proposal behind `rec` and waits until the space says how it ended. */
  private async withdraw(rec: Rec): Promise<void> {
    const id = rec.proposal!;
    const settled = new Promise<void>((resolve) => {
      const off = this.listen((t) => {
        if (t.taskId === id && (t.status === "working" || TERMINAL.has(t.status))) {
          off();
          resolve();
        }
      });
      setTimeout(() => {
        off();
        resolve();
      }, 10_000).unref();
    });
    this.client.send({
      kind: "mcp/withdraw",
      to: [GATEWAY_ID],
      correlation_id: [id],
      payload: { reason: "cancelled by the MCP client (tasks/cancel)" },
    });
    // Our own withdrawal is not echoed: ask the gateway whether the proposal is still pending.
    for (let i = 0; i < 50 && !TERMINAL.has(rec.task.status) && rec.task.status !== "working"; i++) {
      const pending = await this.client.request(GATEWAY_ID, "proposals/get", { id }, { timeoutMs: 5000 }).then(
        () => true,
        () => false,
      );
      if (!pending) break;
      await Promise.race([settled, new Promise((r) => setTimeout(r, 100))]);
    }
    // Give an approval that crossed the withdrawal its moment to arrive.
    await Promise.race([settled, new Promise((r) => setTimeout(r, 50))]);
    if (rec.task.status === "working")
      throw new RpcError(ErrorCode.InvalidParams, "the call was approved before the cancellation reached the space; it runs", {
        reason: "already_approved",
      });
    if (!TERMINAL.has(rec.task.status)) {
      this.aborts.get(id)?.abort("cancelled");
      this.finish(
        rec,
        "cancelled",
        failureResult(rec.real, new ParticipantError("withdrawn", "withdrawn", { reason: "cancelled by the MCP client" })),
      );
    }
  }

  /** Finished tasks past their TTL go. */
  private sweep(): void {
    const now = Date.now();
    for (const [id, rec] of this.recs) if (rec.expires !== undefined && rec.expires < now) this.recs.delete(id);
  }
}

/** `participant` of `participant/tool`. */
function ownerOf(real: string): string {
  const slash = real.indexOf("/");
  return slash > 0 ? real.slice(0, slash) : real;
}

const seats = new WeakMap<ParticipantClient, SeatTasks>();

/** The tasks of the participant `client` is (one store per client, shared by its MCP sessions). */
export function tasksOf(client: ParticipantClient, maxTasks?: number): SeatTasks {
  let t = seats.get(client);
  if (!t) {
    t = new SeatTasks(client, maxTasks);
    seats.set(client, t);
  }
  return t;
}
