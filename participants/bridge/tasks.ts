/**
 * The server's own tasks (MCP 2025-11-25), kept apart per caller. The bridge holds one MCP
 * session with its server, so every task the server creates lives in that one session,
 * whoever in the space asked for it: left alone, any participant allowed to send
 * `tasks/get` here could read, await or cancel another's task by its id, and `tasks/list`
 * would show them all. So the bridge remembers who created each task (the `from` the
 * gateway stamped on the `tools/call` that the server answered with a `CreateTaskResult`)
 * and answers `tasks/get`, `tasks/result` and `tasks/cancel` for that caller only —
 * anyone else hears "Task not found", as for an id that never was — and filters
 * `tasks/list` to the caller's own.
 *
 * In memory: a task of a bridge that restarted (or of a server that restarted, whose
 * tasks are gone anyway) is not found.
 */
import { ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { RpcError } from "../errors.js";
import { isRecord } from "../../gateway/index.js";

/** Most server tasks remembered at once; past it the oldest are forgotten (and answer "not found"). */
const MAX_TASKS = 10_000;
/** Longest task id taken from a server (or a caller). */
const MAX_ID = 256;

export class ServerTaskOwners {
  /** Server task id → the participant that created it. Insertion order is age. */
  private readonly owners = new Map<string, string>();

  constructor(private readonly max = MAX_TASKS) {}

  /** `caller`'s `tools/call` was answered with `result`: a task of its own when it is a `CreateTaskResult`. */
  created(caller: string, result: unknown): void {
    const task = isRecord(result) && isRecord(result["task"]) ? result["task"] : undefined;
    const id = task?.["taskId"];
    if (typeof id !== "string" || id.length > MAX_ID) return;
    // A server that hands out an id twice keeps it with its first creator.
    if (this.owners.has(id)) return;
    this.owners.set(id, caller);
    for (const old of this.owners.keys()) {
      if (this.owners.size <= this.max) break;
      this.owners.delete(old);
    }
  }

  /** Refuses a `tasks/get`, `tasks/result` or `tasks/cancel` that names no task of `caller`'s. */
  check(caller: string, params: unknown): void {
    const id = isRecord(params) ? params["taskId"] : undefined;
    if (typeof id === "string" && this.owners.get(id) === caller) return;
    const shown = typeof id === "string" ? id.slice(0, 64) : String(id).slice(0, 16);
    throw new RpcError(ErrorCode.InvalidParams, `Task not found: ${shown}`);
  }

  /** A page of the server's `tasks/list`, cut down to `caller`'s tasks. */
  filter(caller: string, result: unknown): unknown {
    if (!isRecord(result) || !Array.isArray(result["tasks"])) return result;
    const tasks = result["tasks"].filter((t) => isRecord(t) && typeof t["taskId"] === "string" && this.owners.get(t["taskId"]) === caller);
    return { ...result, tasks };
  }
}
