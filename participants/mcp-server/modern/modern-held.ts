/**
 * A held call at MCP 2026-07-28 over HTTP (modern.ts): a tools/call that becomes a proposal
 * waits in its request, as it does everywhere else, and answers with the tool's result (or a
 * readable refusal) once a person decides.
 *
 * A 2026-07-28 request is stateless and a client bounds each one (the MCP SDK's default is
 * 60 s, and its multi-round-trip driver allows 10 `input_required` rounds), so a request is
 * held open for at most `legMs` (55 s by default, with progress when it asked for progress
 * and SSE keep-alive comments), then answers `input_required` with sealed request state
 * alone (held/held.ts); the client asks again at once and is held again. A person's minutes
 * take a round each, not the client's rounds in a few seconds. A client that declares URL
 * elicitation is shown the proposal's card once, at the start (its first answer); never
 * again. The call runs once, when it is approved: a resumed request never asks the face
 * again, and a replay after the decision answers the recorded result.
 *
 * A client that leaves — its request dropped while held, or no request again within
 * `abandonMs` of being told to ask again — withdraws the proposal: nothing runs for nobody
 * to read. Bounded: at most MAX_PER_PROPOSAL requests wait on one proposal and MAX_HOLDING on
 * the whole mount; past them a request answers `input_required` at once.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { HeldFace } from "../held/held.js";
import { isInputRequired, LOG_ROUTE, RETRY_META } from "../held/input.js";
import { type LogRoute, logRoute, type RequestLog } from "../logs/modern-logs.js";
import { AUTHZ_KEY, CONTEXT_ID_KEY, denial } from "../held/denials.js";

/** What a held call needs of the SDK modules (modern.ts `ModernModules`). */
export interface HeldModules {
  v2: typeof import("@modelcontextprotocol/server");
  ResultSchema: typeof import("@modelcontextprotocol/sdk/types.js").ResultSchema;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
  LoggingMessageNotificationSchema: typeof import("@modelcontextprotocol/sdk/types.js").LoggingMessageNotificationSchema;
}

/** Requests held on one proposal at once (a client sending its state many times over), and on one mount. */
const MAX_PER_PROPOSAL = 4;
const MAX_HOLDING = 1024;

/** Of this hop's envelope (the SDK lifted it), the client's capabilities go on: a server's input_required is checked against them (held/input.ts). */
const CAPABILITIES = "io.modelcontextprotocol/clientCapabilities";
/** And the log level it asked for: a server of 2026-07-28 behind the bridge logs to it at that level. */
const LOG_LEVEL = "io.modelcontextprotocol/logLevel";

/** What the request's handler context carries beside its params (the SDK v2 lifts the envelope and a retry's fields out of them). */
export type Lifted = {
  mcpReq: {
    _meta?: Record<string, unknown>;
    envelope?: Record<string, unknown>;
    inputResponses?: Record<string, unknown>;
    requestState?: () => unknown;
    log?: RequestLog;
  };
  http?: { req?: { headers?: { get(name: string): string | null } } | undefined } | undefined;
};

/**
 * The params asked of the face: the request's own, its `_meta` (but the progress token,
 * which the inner client replaces), the client's capabilities, and a retry's
 * `inputResponses` and `requestState` (in `_meta` under RETRY_META: the face's SDK v1
 * schemas drop keys they do not know; a client's own RETRY_META is replaced).
 */
export function innerParams(params: unknown, ctx: Lifted, route?: LogRoute): Record<string, unknown> {
  // A legacy `task` param is tolerated and never makes a task (tasks/task-ext.ts makes one for the extension).
  const { _meta: _, task: _task, ...rest } = typeof params === "object" && params !== null ? (params as Record<string, unknown>) : {};
  // A structured denial's context id is the face's to check (held/denials.ts), not the server's to read.
  const { progressToken: __, [RETRY_META]: ___, [LOG_ROUTE]: ____, [CONTEXT_ID_KEY]: _____, ...meta } = ctx.mcpReq._meta ?? {};
  const caps = ctx.mcpReq.envelope?.[CAPABILITIES];
  if (caps !== undefined) meta[CAPABILITIES] = caps;
  const level = ctx.mcpReq.envelope?.[LOG_LEVEL];
  if (level !== undefined) meta[LOG_LEVEL] = level;
  if (route !== undefined) meta[LOG_ROUTE] = route.id;
  // A client's trace context sent as an HTTP header only (W3C Trace Context) goes on as a `_meta` one would.
  const header = (name: string) => ctx.http?.req?.headers?.get(name) ?? undefined;
  if (meta["traceparent"] === undefined && header("traceparent") !== undefined) {
    meta["traceparent"] = header("traceparent");
    if (meta["tracestate"] === undefined && header("tracestate") !== undefined) meta["tracestate"] = header("tracestate");
  }
  const inputResponses = ctx.mcpReq.inputResponses;
  const requestState = ctx.mcpReq.requestState?.();
  if (inputResponses !== undefined || requestState !== undefined) meta[RETRY_META] = { inputResponses, requestState };
  return Object.keys(meta).length > 0 ? { ...rest, _meta: meta } : rest;
}

/** Our own progress message while a call waits (face/server.ts): its proposal id. */
const WAITING = /^waiting for approval of .* \(proposal ([^()\s]{1,200})\)$/;

type HeldCtx = {
  mcpReq: {
    requestState?: () => unknown;
    envelope?: Record<string, unknown>;
    _meta?: { progressToken?: string | number };
    signal?: AbortSignal;
    log?: RequestLog;
    notify(n: unknown): Promise<void>;
  };
};

/**
 * A tools/call at 2026-07-28: asked of the face; when it becomes a proposal the request waits
 * for the decision (above); a resumed request waits on the same proposal.
 */
export async function callHeld(
  m: HeldModules,
  client: Client,
  held: HeldFace,
  request: { params?: unknown },
  ctx: HeldCtx,
): Promise<unknown> {
  const raw = ctx.mcpReq.requestState?.();
  const name = String((request.params as { name?: unknown } | undefined)?.name ?? "");
  // A state of ours (held/held.ts `h1.`) resumes a held call; any other is the server's, passed on untouched (held/input.ts).
  if (raw !== undefined && held.states.isOurs(raw)) {
    const open = held.states.open(raw, held.space, held.seat);
    if (!open.ok) throw new m.v2.ProtocolError(-32602, open.message, { reason: "invalid_request_state" });
    if (open.claims.t !== name)
      throw new m.v2.ProtocolError(-32602, `the request state resumes a call of ${open.claims.t.slice(0, 200)}, not of this tool`, {
        reason: "invalid_request_state",
      });
    const id = open.claims.p;
    held.runs.resumed(id);
    const o = held.outcomes.read(id);
    if (o.status === "pending") return holdOn(m, held, id, raw as string, ctx);
    if (o.status === "unknown")
      throw new m.v2.ProtocolError(-32602, `the outcome of proposal ${id} is no longer kept here; the call is not run again`, {
        reason: "invalid_request_state",
      });
    return answered(m, o.result);
  }
  const token = ctx.mcpReq._meta?.progressToken;
  let proposal: ((id: string) => void) | undefined;
  const becameProposal = new Promise<string>((resolve) => (proposal = resolve));
  // The call goes on past this request (a resumed one reads its end); aborted when its client leaves it:
  // a call that needed nobody with its request (a cancellation), a held one as holdOn says.
  const abort = new AbortController();
  const dropped = () => abort.abort(ctx.mcpReq.signal?.reason);
  ctx.mcpReq.signal?.addEventListener("abort", dropped, { once: true });
  // Its log lines go to the request waiting on it (logs/modern-logs.ts).
  const route = logRoute(m.LoggingMessageNotificationSchema, client, ctx.mcpReq.log);
  const call = client.request({ method: "tools/call", params: innerParams(request.params, ctx as never, route) } as never, m.ResultSchema, {
    signal: abort.signal,
    onprogress: (p: { progress: number; total?: number; message?: string }) => {
      const id = typeof p.message === "string" ? WAITING.exec(p.message)?.[1] : undefined;
      if (id !== undefined) return proposal?.(id);
      // The server's own progress of a call that needed nobody goes to the client, when it asked for progress.
      if (token !== undefined)
        void ctx.mcpReq.notify({ method: "notifications/progress", params: { ...p, progressToken: token } }).catch(() => {});
    },
    resetTimeoutOnProgress: true,
    timeout: 24 * 60 * 60_000,
  });
  const first = await Promise.race([
    call.then(
      (result) => ({ result }),
      (err: unknown) => ({ err }),
    ),
    becameProposal.then((id) => ({ id })),
  ]);
  ctx.mcpReq.signal?.removeEventListener("abort", dropped);
  if (!("id" in first)) route.end();
  if ("result" in first) return asServerGave(first.result);
  if ("err" in first) throw asProtocolError(m, first.err);
  const id = first.id;
  held.outcomes.hold(id);
  held.runs.add(id, abort, route);
  call
    .then(
      (result) => held.outcomes.settle(id, { result }),
      (err: unknown) => {
        const e = asProtocolError(m, err) as { code?: unknown; message?: unknown; data?: unknown };
        held.outcomes.settle(id, {
          error: {
            code: typeof e.code === "number" ? e.code : -32603,
            message: String(e.message ?? err),
            ...(e.data !== undefined ? { data: e.data } : {}),
          },
        });
      },
    )
    .finally(() => {
      held.runs.ended(id);
      route.end();
    });
  const state = held.states.seal({ s: held.space, w: held.seat, p: id, t: name, e: Date.now() + held.ttlMs });
  // A client that takes URL elicitation is shown the card once, now; it then asks again and waits.
  const caps = ctx.mcpReq.envelope?.[CAPABILITIES] as { elicitation?: { url?: unknown } } | undefined;
  if (caps?.elicitation?.url !== undefined) {
    route.to(undefined);
    const url = held.cardUrl(id);
    const args = (request.params as { arguments?: unknown } | undefined)?.arguments ?? {};
    return {
      ...m.v2.inputRequired({
        inputRequests: {
          approval: m.v2.inputRequired.elicitUrl({
            message: `This call waits for approval in the space (proposal ${id}). Open the card to see it; the call goes on waiting for the decision.`,
            url,
          }),
        },
        requestState: state,
      }),
      // The structured denial (held/denials.ts): held, remediable at the card, bound to this very call.
      _meta: { [AUTHZ_KEY]: denial("held", { url, contextId: held.contexts.mint(held.space, held.seat, name, args) }) },
    };
  }
  return holdOn(m, held, id, state, ctx);
}

/** Holds the request until proposal `id` is decided, at most `legMs`; then `input_required` with the state alone. */
async function holdOn(m: HeldModules, held: HeldFace, id: string, state: string, ctx: HeldCtx): Promise<unknown> {
  const again = () => {
    held.runs.expectBack(id, held.abandonMs);
    return m.v2.inputRequired({ requestState: state });
  };
  if (held.runs.holding >= MAX_HOLDING || held.outcomes.waiting(id) >= MAX_PER_PROPOSAL) return again();
  held.runs.holding++;
  // The call's log lines go to this request while it is held.
  const route = held.runs.route(id);
  route?.to(ctx.mcpReq.log);
  const token = ctx.mcpReq._meta?.progressToken;
  let n = 0;
  const tick = () =>
    void ctx.mcpReq
      .notify({
        method: "notifications/progress",
        params: { progressToken: token, progress: ++n, message: `waiting for approval (proposal ${id})` },
      })
      .catch(() => {});
  if (token !== undefined) tick();
  const ticker = token === undefined ? undefined : setInterval(tick, held.progressMs);
  try {
    const how = await held.outcomes.until(id, held.legMs, ctx.mcpReq.signal);
    if (how === "aborted") {
      // The client dropped the request while it waited: unless another request of it waits on the same call, it is withdrawn.
      if (held.outcomes.waiting(id) === 0) held.runs.withdraw(id, "the MCP client dropped the request while it waited for approval");
      throw new m.v2.ProtocolError(-32800, "the request was dropped while it waited for approval; the call was withdrawn");
    }
    const o = held.outcomes.read(id);
    if (how === "timeout" || o.status === "pending") return again();
    if (o.status === "unknown")
      throw new m.v2.ProtocolError(-32602, `the outcome of proposal ${id} is no longer kept here; the call is not run again`, {
        reason: "invalid_request_state",
      });
    return answered(m, o.result);
  } finally {
    clearInterval(ticker);
    held.runs.holding--;
    if (held.outcomes.waiting(id) === 0) route?.to(undefined);
  }
}

function answered(m: HeldModules, end: { result: unknown } | { error: { code: number; message: string; data?: unknown } }): unknown {
  if ("error" in end) throw new m.v2.ProtocolError(end.error.code, end.error.message, end.error.data);
  return end.result;
}

export function asProtocolError(m: HeldModules, err: unknown): unknown {
  if (!(err instanceof m.McpError)) return err;
  const prefix = `MCP error ${err.code}: `;
  return new m.v2.ProtocolError(err.code, err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message, err.data);
}

/** A server's input_required as it gave it: without the `content: []` the face's SDK v1 puts in every tool result. */
export function asServerGave(result: unknown): unknown {
  if (!isInputRequired(result)) return result;
  const { content, ...rest } = result;
  return Array.isArray(content) && content.length === 0 ? rest : result;
}
