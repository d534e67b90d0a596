/**
 * A held call as a task at MCP 2026-07-28: the `io.modelcontextprotocol/tasks` extension on
 * the HTTP faces and the stdio faces (stdio/stdio-modern.ts). The SDK v2 has no tasks extension (it answers `tasks/*` "method not
 * found"), so this is ours, written over the face's own 2025-era tasks (tasks.ts): a request
 * that declares the extension in its client capabilities and whose `tools/call` becomes a
 * proposal is answered with a task whose id is the proposal's, kept, scoped to the seat and
 * found again after a restart as the 2025 face's are.
 *
 * - `tools/call`: asked of the face as a task; one that waits (a proposal, a server's own
 *   task) answers the flat `CreateTaskResult` (`resultType: "task"`); one that ended at
 *   once answers its result as ever. A client's own legacy `task` param never makes one.
 * - `tasks/get`: the task as it stands, the approval's card as a URL input request while it
 *   waits, the result inlined once it ran (a tool error is `completed` with `isError`), the
 *   error inlined when the space failed it (`failed`).
 * - `tasks/update`: acknowledged (the decision is a person's, in the space); `tasks/cancel`
 *   withdraws the proposal and is acknowledged; if an approval got there first the call
 *   runs on, and the next `tasks/get` says so.
 * - `tasks/result` and `tasks/list` are not part of the extension: -32601, HTTP 404.
 *
 * Checked first, each with its error: the envelope, the extension in the request's client
 * capabilities (-32021), `Mcp-Method` and `Mcp-Name` against the body (-32020), the task id's
 * shape; a task id that is not the seat's is "not found" (-32602), as one that never was.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { ApprovalProgress, HeldFace } from "../held/held.js";
import { AUTHZ_KEY, denial } from "../held/denials.js";

/** What of the SDKs this needs (modern/modern.ts loads them with the face's other modules). */
type Modules = {
  v2: typeof import("@modelcontextprotocol/server");
  ResultSchema: typeof import("@modelcontextprotocol/sdk/types.js").ResultSchema;
};

export const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
/** The community's draft SEP-2848: a held call is a requestable denial answered with a `working` task (docs/mcp.md). */
export const TOOL_APPROVAL_EXTENSION = "io.modelcontextprotocol/tool-approval";
export const DISPOSITION_KEY = "io.modelcontextprotocol/tool-approval-disposition";
const IMMEDIATE_KEY = "io.modelcontextprotocol/model-immediate-response";
/** Our multi-party profile of the extension (docs/mcp.md): who approved, who may still decide. */
export const APPROVAL_PROFILE_KEY = "mewgate/approval";
const CAPABILITIES = "io.modelcontextprotocol/clientCapabilities";
const VERSION = "io.modelcontextprotocol/protocolVersion";
/** Task ids are the face's: a proposal id, or `<participant>:<server's id>`. */
const MAX_TASK_ID = 512;

/** Whether the request's client capabilities (of its `_meta` envelope) declare the tasks extension. */
export function declaresTasks(meta: Record<string, unknown> | undefined): boolean {
  const caps = meta?.[CAPABILITIES] as { extensions?: Record<string, unknown> } | undefined;
  return typeof caps?.extensions === "object" && caps.extensions !== null && Object.hasOwn(caps.extensions, TASKS_EXTENSION);
}

/** Whether the request's client capabilities declare the tool-approval extension beside the tasks extension it builds on. */
export function declaresToolApproval(meta: Record<string, unknown> | undefined): boolean {
  const caps = meta?.[CAPABILITIES] as { extensions?: Record<string, unknown> } | undefined;
  return declaresTasks(meta) && Object.hasOwn(caps!.extensions!, TOOL_APPROVAL_EXTENSION);
}

/** The multi-party profile's object for a task waiting on proposal `id`, and the status line saying whom it waits for. */
function profile(id: string, p: ApprovalProgress | undefined): { meta: Record<string, unknown>; waiting: string } {
  if (!p) return { meta: { proposal: id }, waiting: `This call waits for approval in the space (proposal ${id}).` };
  const who = p.waitingFor.length ? p.waitingFor.slice(0, 20).join(", ") : "someone who may decide it";
  const left = p.required - p.approvedBy.length;
  const waiting =
    p.required > 1
      ? `This call waits for ${left} more approval${left === 1 ? "" : "s"} of ${p.required} (approved by ${p.approvedBy.join(", ") || "nobody yet"}), from ${who} (proposal ${id}).`
      : `This call waits for approval by ${who} (proposal ${id}).`;
  return {
    meta: {
      proposal: id,
      required: p.required,
      approved_by: p.approvedBy,
      waiting_for: p.waitingFor.slice(0, 100),
      ...(p.escalated.length ? { escalated: p.escalated } : {}),
    },
    waiting,
  };
}

/** A task waiting for a person, as the tool-approval extension shows it: `working`, the denial envelope, where to act. */
function pending(flatTask: Record<string, unknown>, held: HeldFace | undefined): Record<string, unknown> {
  const id = String(flatTask["taskId"]);
  const p = profile(id, held?.approvalOf(id));
  return {
    ...flatTask,
    status: "working",
    statusMessage: p.waiting,
    _meta: {
      [AUTHZ_KEY]: denial("held", { task: true, url: held?.cardUrl(id) }),
      [IMMEDIATE_KEY]: `${p.waiting} It has not run. Go on with other work and check the task later.`,
      [APPROVAL_PROFILE_KEY]: p.meta,
    },
  };
}

type Task = {
  taskId: string;
  status: string;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  ttl?: number | null;
  pollInterval?: number;
};

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

function flat(task: Task): Record<string, unknown> {
  return {
    taskId: task.taskId,
    status: task.status,
    ...(task.statusMessage !== undefined ? { statusMessage: task.statusMessage } : {}),
    createdAt: task.createdAt,
    lastUpdatedAt: task.lastUpdatedAt,
    ttlMs: task.ttl ?? null,
    ...(task.pollInterval !== undefined ? { pollIntervalMs: task.pollInterval } : {}),
  };
}

/**
 * A `tools/call` of a client that declares the extension: the face runs it as a task. What
 * waits is answered as a `CreateTaskResult`; what ended at once, with its result (or error).
 */
export async function callAsTask(
  m: Modules,
  client: Client,
  params: Record<string, unknown>,
  /** The client speaks the tool-approval extension: a task waiting for a person is shown as that extension says. */
  approval?: { held: HeldFace | undefined },
): Promise<unknown> {
  const created = (await client.request({ method: "tools/call", params: { ...params, task: {} } } as never, m.ResultSchema)) as {
    task?: Task;
  };
  const task = created.task;
  if (!task) return created;
  if (approval && task.status === "input_required") return { resultType: "task", ...pending(flat(task), approval.held) };
  if (!TERMINAL.has(task.status)) return { resultType: "task", ...flat(task) };
  // Ended without a wait: the result itself, as a call without the extension gets it.
  return client.request({ method: "tasks/result", params: { taskId: task.taskId } } as never, m.ResultSchema);
}

/** An answer written by hand (the SDK does not route `tasks/*` at 2026-07-28). */
export interface Written {
  status: number;
  body: Record<string, unknown>;
}

/** Answers `tasks/*` for the seat behind `client`; undefined when `body` is not a tasks method. */
export async function serveTaskMethod(
  m: Modules,
  client: Client,
  held: HeldFace | undefined,
  body: unknown,
  header: (name: string) => string | undefined,
): Promise<Written | undefined> {
  const req = body as { id?: unknown; method?: unknown; params?: { taskId?: unknown; _meta?: Record<string, unknown> } } | null;
  const method = req?.method;
  if (typeof method !== "string" || !method.startsWith("tasks/")) return undefined;
  const id = typeof req!.id === "string" || typeof req!.id === "number" ? req!.id : null;
  const fail = (status: number, code: number, message: string, data?: unknown): Written => ({
    status,
    body: { jsonrpc: "2.0", id, error: { code, message, ...(data !== undefined ? { data } : {}) } },
  });
  const ok = (result: Record<string, unknown>): Written => ({
    status: 200,
    body: { jsonrpc: "2.0", id, result: { ...result, resultType: "complete" } },
  });
  if (!["tasks/get", "tasks/update", "tasks/cancel"].includes(method)) return fail(404, -32601, "Method not found");
  const meta = req!.params?._meta;
  if (typeof meta !== "object" || meta === null || meta[VERSION] !== "2026-07-28" || typeof meta[CAPABILITIES] !== "object")
    return fail(400, -32602, "Invalid params: the request's _meta must carry its protocol version and client capabilities");
  if (!declaresTasks(meta))
    return fail(400, -32021, `Missing required client capability: the ${TASKS_EXTENSION} extension`, {
      requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } },
    });
  const taskId = req!.params?.taskId;
  if (typeof taskId !== "string" || taskId.length === 0 || taskId.length > MAX_TASK_ID)
    return fail(400, -32602, `Invalid params: taskId must be a string of 1 to ${MAX_TASK_ID} characters`);
  if (header("mcp-method") !== method) return fail(400, -32020, "Bad Request: the Mcp-Method header and the body disagree");
  if (header("mcp-name") !== taskId) return fail(400, -32020, "Bad Request: the Mcp-Name header must name the task (params.taskId)");

  const ask = (what: string) => client.request({ method: what, params: { taskId } } as never, m.ResultSchema) as Promise<unknown>;
  let task: Task;
  try {
    task = (await ask("tasks/get")) as Task;
  } catch {
    return fail(200, -32602, `Invalid params: no task ${JSON.stringify(taskId.slice(0, 80))} of this seat`, { reason: "not_found" });
  }
  if (method === "tasks/update") return ok({});
  if (method === "tasks/cancel") {
    // Withdraws the proposal; if an approval got there first the call runs on, and tasks/get says so.
    if (!TERMINAL.has(task.status)) await ask("tasks/cancel").catch(() => undefined);
    return ok({});
  }
  if (declaresToolApproval(meta)) return ok(await approvalView(ask, flat(task), held));
  const detailed: Record<string, unknown> = flat(task);
  if (task.status === "input_required" && held)
    detailed["inputRequests"] = {
      approval: m.v2.inputRequired.elicitUrl({
        message: `This call waits for approval in the space (proposal ${taskId}). Open the card to see it; the task goes on once it is decided.`,
        url: held.cardUrl(taskId),
      }),
    };
  if (task.status === "completed" || task.status === "failed") {
    try {
      const result = (await ask("tasks/result")) as Record<string, unknown>;
      const { _meta: _, ...rest } = result;
      // A tool that ran and said it failed is a completed task with an error result; `failed` is for the space's failures.
      detailed["status"] = "completed";
      detailed["result"] = rest;
    } catch (err) {
      const e = err as { code?: unknown; message?: unknown; data?: unknown };
      detailed["status"] = "failed";
      detailed["error"] = {
        code: typeof e.code === "number" ? e.code : -32603,
        message: String(e.message ?? err).replace(/^MCP error -?\d+: /, ""),
        ...(e.data !== undefined ? { data: e.data } : {}),
      };
    }
  }
  return ok(detailed);
}

/**
 * `tasks/get` for a client of the tool-approval extension: a wait for a person is `working`
 * with the denial envelope repeated; an approved call that ran is `completed` with its result
 * and the disposition `approved-executed` (`execution-error` when the tool said it failed);
 * a rejected or expired one is `completed`, `isError`, saying it did not run, with
 * `denied-not-executed` and the envelope (`unavailable`); one the client withdrew is
 * `cancelled`; `failed` is the space's failure, inlined as for the tasks extension alone.
 */
async function approvalView(
  ask: (what: string) => Promise<unknown>,
  task: Record<string, unknown>,
  held: HeldFace | undefined,
): Promise<Record<string, unknown>> {
  const status = task["status"];
  if (status === "input_required") return pending(task, held);
  if (status === "working") return { ...task, statusMessage: "Approved in the space; the call is running." };
  let result: Record<string, unknown>;
  try {
    result = (await ask("tasks/result")) as Record<string, unknown>;
  } catch (err) {
    const e = err as { code?: unknown; message?: unknown; data?: unknown };
    return {
      ...task,
      status: "failed",
      error: {
        code: typeof e.code === "number" ? e.code : -32603,
        message: String(e.message ?? err).replace(/^MCP error -?\d+: /, ""),
        ...(e.data !== undefined ? { data: e.data } : {}),
      },
    };
  }
  const { _meta: _, ...rest } = result;
  if (status === "cancelled") {
    const text = String((rest["content"] as Array<{ text?: unknown }> | undefined)?.[0]?.text ?? "");
    const why = / was not run: rejected by /.test(text) ? "rejected" : / was not run: nobody approved /.test(text) ? "expired" : undefined;
    if (why === undefined) return task;
    return {
      ...task,
      status: "completed",
      result: { ...rest, isError: true, _meta: { [DISPOSITION_KEY]: "denied-not-executed", [AUTHZ_KEY]: denial(why) } },
    };
  }
  return {
    ...task,
    status: "completed",
    result: { ...rest, _meta: { [DISPOSITION_KEY]: rest["isError"] === true ? "execution-error" : "approved-executed" } },
  };
}
