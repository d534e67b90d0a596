/**
 * What the space says of a task's proposal when the face was not there to hear it (tasks.ts):
 * the answer of `proposals/get` on `system:gateway` read as the task's next status.
 *
 * - pending, or interrupted (approved, then the gateway stopped before the call's outcome
 *   was written: `payload["mewgate/interrupted"]`): the task waits for a person
 *   (`input_required`), an interrupted one saying the call may or may not have run;
 * - running (approved, its call under way): `working`;
 * - ended while the seat was away (`ended`: gateway/proposals/unheard.ts, kept for the
 *   proposer only): the task ends as the proposal did — with the call's answer, or its
 *   failure, or `cancelled` for a rejection, withdrawal or expiry (the call was not run).
 *
 * Nothing here is trusted beyond its shape: the gateway answers for the seat's own
 * proposals only, and every text a person reads was the gateway's or the tool's.
 */
import type { CallToolResult, Result, Task } from "@modelcontextprotocol/sdk/types.js";
import { type Envelope, GATEWAY_ID, isRecord } from "../../../gateway/index.js";
import type { ParticipantClient } from "../../client.js";
import { ParticipantError } from "../../errors.js";
import { failureResult } from "../tools/catalogue.js";

/** What asking again needs of one of the seat's tasks. */
export interface Open {
  task: Task;
  /** The tool, as the space names it. */
  real: string;
  /** Its proposal's id. */
  proposal?: string | undefined;
}

/** The seat's store, as asking again changes it. */
export interface RecheckHost<R extends Open> {
  /** The open tasks with a proposal that no call of this process waits for any more. */
  adopted(): R[];
  /** What the space said, as the task's status. */
  apply(rec: R, reading: Reading): void;
}

/** Asks the space again about the tasks no call waits for, after a new connection's welcome. */
export class Rechecks<R extends Open> {
  constructor(
    private readonly client: ParticipantClient,
    private readonly host: RecheckHost<R>,
    private readonly perSecond: number,
  ) {}

  /**
   * At the welcome (before anything after it): each task whose proposal it lists waits for a
   * person, interrupted maybe (approved, then the gateway stopped before the call's outcome
   * was written).
   */
  relisted(listed: readonly Envelope[]): void {
    for (const rec of this.host.adopted()) {
      const id = rec.proposal!;
      const env = listed.find((e) => e.id === id);
      if (!env) continue;
      const mark = interruptionOf(env);
      this.host.apply(rec, {
        status: "input_required",
        statusMessage: mark ? interrupted(rec.real, id, mark["approved_by"]) : waiting(rec.real, id),
      });
    }
  }

  /**
   * Then each one whose proposal the welcome did not list is asked about (`proposals/get`,
   * one at a time, `perSecond` at most): pending on a later page, running, or ended while the
   * seat was away. Unknown to the space, the task ends failed: nobody will say more of it.
   */
  async recheck(listed: readonly Envelope[]): Promise<void> {
    for (const rec of this.host.adopted()) {
      const id = rec.proposal!;
      if (listed.some((e) => e.id === id)) continue;
      let res: unknown;
      try {
        res = await this.client.request(GATEWAY_ID, "proposals/get", { id }, { timeoutMs: 10_000 });
      } catch (err) {
        // A lost connection says nothing of the task: the next welcome asks again.
        if (!(err instanceof ParticipantError) || err.code !== "rpc_error") return;
        // The space knows nothing of it (any more), and kept nothing for the seat.
        res = undefined;
      }
      await new Promise((r) => setTimeout(r, 1000 / this.perSecond));
      this.host.apply(rec, readProposal(rec.real, id, this.client.id, res) ?? { status: "failed", result: lost(rec.real) });
    }
  }
}

/** The tool a proposal (as `proposals/get` shows it) calls, as the space names it. */
export function realOf(proposal: Record<string, unknown>): string {
  const payload = isRecord(proposal["payload"]) ? proposal["payload"] : {};
  const params = isRecord(payload["params"]) ? payload["params"] : {};
  const to = Array.isArray(proposal["to"]) ? String(proposal["to"][0] ?? "") : "";
  const name = params["name"];
  return typeof name === "string" ? (name.includes("/") ? name : `${to}/${name}`).slice(0, 200) : "the call";
}

/** What became of a task, read from the space. */
export type Reading =
  | { status: "input_required"; statusMessage: string }
  | { status: "working"; statusMessage: string }
  | { status: "completed" | "failed" | "cancelled"; result: Result };

/** The task's message while its proposal waits for a person. */
export function waiting(real: string, proposal: string): string {
  return `waiting for a person in the space to approve ${real} (proposal ${proposal.slice(0, 8)}, id ${proposal}); they approve it in the console or with: mewgate proposals approve ${proposal.slice(0, 8)}`;
}

/** The task's message once its approved call was interrupted and the proposal waits again. */
export function interrupted(real: string, proposal: string, approvedBy?: unknown): string {
  const by = typeof approvedBy === "string" && approvedBy !== "" ? `${approvedBy.slice(0, 64)} approved it, then ` : "";
  return `the call was interrupted: ${by}the gateway stopped before its outcome was written, so ${real} may or may not have run; it waits for a person to approve it again or reject it (proposal ${proposal.slice(0, 8)}, id ${proposal}): mewgate proposals approve ${proposal.slice(0, 8)}`;
}

/** The interruption mark of a proposal as the gateway shows it, if it has one. */
export function interruptionOf(proposal: unknown): Record<string, unknown> | undefined {
  const payload = isRecord(proposal) ? proposal["payload"] : undefined;
  const mark = isRecord(payload) ? payload["mewgate/interrupted"] : undefined;
  return isRecord(mark) ? mark : undefined;
}

/** `proposals/get`'s answer about the seat's proposal `id`, as the task's next status; undefined if it is not the seat's. */
export function readProposal(real: string, id: string, seat: string, res: unknown): Reading | undefined {
  if (!isRecord(res) || !isRecord(res["proposal"]) || res["proposal"]["from"] !== seat) return undefined;
  if (isRecord(res["ended"])) return ended(real, res["ended"]);
  if (isRecord(res["running"])) return { status: "working", statusMessage: `approved${by(res["running"]["by"])}; running ${real}` };
  const mark = interruptionOf(res["proposal"]);
  return { status: "input_required", statusMessage: mark ? interrupted(real, id, mark["approved_by"]) : waiting(real, id) };
}

/** A proposal that ended while the seat was away, as the task's end. */
function ended(real: string, end: Record<string, unknown>): Reading {
  const state = end["state"];
  const reason = str(end["reason"]);
  const text = str(end["text"]);
  const envelope = { from: str(end["by"]) ?? "an approver" } as Envelope;
  if (state === "rejected" || state === "expired" || state === "withdrawn") {
    const err = new ParticipantError(state, state, { envelope, reason, text });
    return { status: "cancelled", result: failureResult(real, err) };
  }
  const answer = isRecord(end["answer"]) ? end["answer"] : undefined;
  if (answer && isRecord(answer["result"])) {
    const result = answer["result"] as Result;
    return { status: (result as CallToolResult).isError === true ? "failed" : "completed", result };
  }
  if (answer && isRecord(answer["error"])) {
    const message = str(answer["error"]["message"]) ?? "error";
    // Ended by the gateway, not the tool: the call was cut off on its way, it may have run.
    const cut = reason === "cancelled" || reason === "target_left" || reason === "timeout";
    return {
      status: "failed",
      result: {
        content: [
          {
            type: "text",
            text: cut
              ? `${real} failed while this participant was away from the space (${message}); it may or may not have run`
              : `${real} failed: ${message}`,
          },
        ],
        isError: true,
      },
    };
  }
  // It ended (answered or failed) and the gateway kept no answer: say how, and why not.
  const outcome = str(end["outcome"]) ?? str(state) ?? "unknown";
  const dropped = str(end["dropped"]);
  return {
    status: outcome === "ok" ? "completed" : "failed",
    result: {
      isError: outcome !== "ok",
      content: [
        {
          type: "text",
          text: `${real} ${state === "answered" ? "ran" : "ended"} while this participant was away (outcome: ${outcome}); its answer was not kept${dropped ? `: ${dropped}` : ""}`,
        },
      ],
    },
  };
}

/**
 * Whether an `interrupted` failure is the space's word (the gateway's answer, or the
 * welcome's mark on the proposal) rather than a tool's error that borrowed the reason.
 */
export function fromSpace(err: ParticipantError): boolean {
  const env = err.envelope;
  return env === undefined || env.from === GATEWAY_ID || env.kind === "mcp/proposal";
}

/** Who approved an interrupted call, from the interruption's data. */
export function approver(data: unknown): unknown {
  return typeof data === "object" && data !== null ? (data as Record<string, unknown>)["approved_by"] : undefined;
}

/**
 * What the space says to the seat about an adopted task's proposal (`mcp/reject`,
 * `mcp/withdraw`, or the call's answer), as the task's status; undefined for anything else.
 */
export function heard(real: string, id: string, env: Envelope): Reading | undefined {
  const p = isRecord(env.payload) ? env.payload : {};
  if (env.kind === "mcp/reject" || env.kind === "mcp/withdraw") {
    const code = env.kind === "mcp/reject" ? "rejected" : "withdrawn";
    const err = new ParticipantError(code, code, { envelope: env, reason: str(p["reason"]), text: str(p["text"]) });
    return { status: "cancelled", result: failureResult(real, err) };
  }
  if (env.kind !== "mcp/response") return undefined;
  const e = isRecord(p["error"]) ? p["error"] : undefined;
  const data = e && isRecord(e["data"]) ? e["data"] : {};
  // The gateway's word that the approved call was interrupted: it waits for a person again.
  if (env.from === GATEWAY_ID && data["reason"] === "interrupted")
    return { status: "input_required", statusMessage: interrupted(real, id, data["approved_by"]) };
  if (p["error"] !== undefined) {
    const message = String(e?.["message"] ?? "error");
    return { status: "failed", result: { content: [{ type: "text", text: `${real} failed: ${message}` }], isError: true } };
  }
  const result = (isRecord(p["result"]) ? p["result"] : {}) as CallToolResult;
  return { status: result.isError === true ? "failed" : "completed", result };
}

/** The task's end when the space no longer knows its proposal and kept nothing of its end. */
export function lost(real: string): Result {
  return {
    content: [
      {
        type: "text",
        text: `${real}: its proposal ended while this participant was away from the space, and the space kept nothing of how; the call may or may not have run`,
      },
    ],
    isError: true,
  };
}

function by(v: unknown): string {
  return typeof v === "string" && v !== "" ? ` by ${v.slice(0, 64)}` : "";
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v.slice(0, 2000) : undefined;
}
