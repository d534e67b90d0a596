/**
 * The server's own task behind one of ours (tasks.ts): a tool whose server runs tasks
 * (`execution.taskSupport` `required`/`optional`) answers an approved call with its own
 * task, and the seat's task follows it from then on. Here is that following: `tasks/get`
 * at most once per poll interval (each change, and only a change, told to the sessions),
 * `tasks/result` once it ended, `tasks/cancel` passed on, and the lookup of a
 * `<participant>:<server's task id>` from a new session or process. All of it is asked as
 * the seat, whose bridge answers for the seat's own tasks only (bridge/tasks.ts).
 *
 * What the task is and how it changes (its record, its status, its end) stays with the
 * seat's store, which this reaches through `FollowerHost`.
 */
import { CreateTaskResultSchema, ErrorCode, GetTaskResultSchema, type Result, type Task } from "@modelcontextprotocol/sdk/types.js";
import { stripHidden } from "../../../gateway/index.js";
import type { ParticipantClient } from "../../client.js";
import { ParticipantError, RpcError } from "../../errors.js";

/** How often a client is told to poll a task, and at most how often the server's task is asked about. */
export const POLL_MS = 1000;
/** How long a finished task is kept for `tasks/get` / `tasks/result` when the client asks for no TTL. */
export const DEFAULT_TTL_MS = 60 * 60_000;
export const TERMINAL = new Set<Task["status"]>(["completed", "failed", "cancelled"]);
/** Failures that say nothing about the task: the connection to the space went, or the answer was slow. */
const TRANSIENT = new Set(["disconnected", "closed", "connect_failed", "timeout"]);

/** Where the server's task is: the participant whose tool it is, and its own id for it. */
export interface Upstream {
  participant: string;
  taskId: string;
}

/** What following needs of one of the seat's tasks. */
export interface Followed {
  task: Task;
  /** The tool, as the space names it. */
  real: string;
  /** The participant whose tool it is. */
  owner: string;
  expires?: number | undefined;
  /** The server's own task behind this one, where `tasks/get`, `tasks/result` and `tasks/cancel` go. */
  upstream?: Upstream | undefined;
  polled?: number | undefined; // when the server's task was last asked about, and (below) the asking under way
  polling?: Promise<void> | undefined;
}

/** The seat's store, as following the server's task changes it. */
export interface FollowerHost {
  set(rec: Followed, status: Task["status"], statusMessage: string | undefined): void;
  finish(rec: Followed, status: Task["status"], result: Result): void;
}

export class ServerTaskFollower {
  constructor(
    private readonly client: ParticipantClient,
    private readonly host: FollowerHost,
  ) {}

  /** The call came back as the server's own task: ours follows it from now on. */
  link(rec: Followed, upstream: Task): void {
    rec.upstream = { participant: rec.owner, taskId: upstream.taskId };
    rec.polled = Date.now();
    this.mirror(rec, upstream);
  }

  /** The server's task as it said it is; a change (and only a change) is told to the sessions. */
  private mirror(rec: Followed, upstream: Task): void {
    if (TERMINAL.has(rec.task.status)) return;
    const message = upstream.statusMessage === undefined ? undefined : stripHidden(upstream.statusMessage).slice(0, 500);
    if (upstream.status === rec.task.status && message === rec.task.statusMessage) return;
    this.host.set(rec, upstream.status, message);
    if (TERMINAL.has(upstream.status)) rec.expires = Date.now() + (rec.task.ttl ?? DEFAULT_TTL_MS);
  }

  /** Asks the server how its task stands, when it was last asked a poll interval ago or more. */
  poll(rec: Followed): Promise<void> {
    const up = rec.upstream;
    if (!up || TERMINAL.has(rec.task.status)) return Promise.resolve();
    if (rec.polling) return rec.polling;
    if (Date.now() - (rec.polled ?? 0) < POLL_MS / 2) return Promise.resolve();
    rec.polling = (async () => {
      try {
        const parsed = GetTaskResultSchema.safeParse(
          await this.client.request(up.participant, "tasks/get", { taskId: up.taskId }, { timeoutMs: 10_000 }),
        );
        if (parsed.success) this.mirror(rec, parsed.data);
      } catch (err) {
        // The server (or its bridge) no longer knows the task, or will not say: it cannot end well.
        // A lost connection is not that: the next poll asks again.
        if (err instanceof ParticipantError && !TRANSIENT.has(err.code)) {
          this.host.finish(rec, "failed", {
            content: [
              { type: "text", text: `${rec.real}: the server's task ${up.taskId.slice(0, 64)} cannot be followed: ${err.message}` },
            ],
            isError: true,
          });
        }
      } finally {
        rec.polled = Date.now();
        rec.polling = undefined;
      }
    })();
    return rec.polling;
  }

  /** The result of the server's task, once it ended; why not, as an error result, when it has none. */
  async result(rec: Followed, up: Upstream): Promise<Result> {
    try {
      const res = await this.client.request(up.participant, "tasks/result", { taskId: up.taskId }, { timeoutMs: 30_000 });
      if (typeof res === "object" && res !== null) return res as Result;
    } catch (err) {
      if (err instanceof ParticipantError && TRANSIENT.has(err.code))
        throw new RpcError(ErrorCode.InternalError, `${rec.real}: could not fetch the result: ${err.message}`);
      return {
        content: [
          {
            type: "text",
            text: `${rec.real} ${rec.task.status}${rec.task.statusMessage ? `: ${rec.task.statusMessage}` : ""} (${(err as Error).message})`,
          },
        ],
        isError: true,
      };
    }
    return { content: [], isError: true };
  }

  /** `tasks/cancel` of a task the server runs: passed on to the server, whose answer says how it stands. */
  async cancel(rec: Followed, up: Upstream): Promise<void> {
    let res: unknown;
    try {
      res = await this.client.request(up.participant, "tasks/cancel", { taskId: up.taskId }, { timeoutMs: 10_000 });
    } catch (err) {
      if (err instanceof ParticipantError)
        throw new RpcError(err.code === "rpc_error" ? (err.rpcCode ?? ErrorCode.InvalidParams) : ErrorCode.InternalError, err.message, {
          reason: err.code,
        });
      throw err;
    }
    const parsed = GetTaskResultSchema.safeParse(res);
    if (parsed.success) this.mirror(rec, parsed.data);
    if (!TERMINAL.has(rec.task.status)) this.host.set(rec, "cancelled", "cancelled by the MCP client (tasks/cancel)");
    rec.expires = Date.now() + (rec.task.ttl ?? DEFAULT_TTL_MS);
  }

  /**
   * The server's task `upstreamId` of `participant`, if that participant's bridge says it is
   * the seat's; undefined if its answer is not that task. Throws when there is no answer.
   */
  async lookUp(participant: string, upstreamId: string): Promise<Task | undefined> {
    const res = await this.client.request(participant, "tasks/get", { taskId: upstreamId }, { timeoutMs: 10_000 });
    const parsed = GetTaskResultSchema.safeParse(res);
    return parsed.success && parsed.data.taskId === upstreamId ? parsed.data : undefined;
  }
}

/** A call's answer that is the server's own task (`CreateTaskResult`), not its result. */
export function serverTask(result: unknown): Task | undefined {
  // A tool's result (which has content) is never taken for one, whatever else it carries.
  if (typeof result !== "object" || result === null || !("task" in result) || "content" in result) return undefined;
  const parsed = CreateTaskResultSchema.safeParse(result);
  return parsed.success ? parsed.data.task : undefined;
}
