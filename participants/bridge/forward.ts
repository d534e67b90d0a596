/**
 * Serving the space: each request addressed to the bridge goes to the MCP server through
 * the SDK `Client` (any method but `initialize`, answered from the session we hold), and
 * its result or JSON-RPC error comes back unchanged. Progress and cancellation live with
 * the forwarding because they are one call's timer: the server's progress goes to the
 * caller and re-arms the call's timeout, the caller's cancellation (or that timeout) is
 * passed on to the server, and a crash fails the call from outside.
 *
 * Split from bridge.ts; what it needs comes as `ForwardHost`.
 */
import {
  type Progress,
  ProtocolError,
  type Request,
  type RequestOptions,
  SdkError,
  SdkErrorCode,
  SdkHttpError,
} from "@modelcontextprotocol/client";
import type { Logger } from "pino";
import { type Tracing, isRecord } from "../../gateway/index.js";
import type { IncomingRequest, ParticipantClient } from "../client.js";
import { RpcError, RpcErrorCodes } from "../errors.js";
import { trySend, type ServerNotifications } from "./notifications.js";
import { AnyResult, type Forwarded, MAX_INPUT_ROUNDS, type ServerLink, type Upstream } from "./server.js";
import type { UpstreamAuth } from "./oauth-signin.js";
import type { ServerTaskOwners } from "./tasks.js";
import { withoutStated } from "./client-caps.js";
import { outboundSpan } from "./trace.js";
import { bridgeFailure, type BridgeStatus } from "./types.js";

// setTimeout treats anything above 2^31-1 ms as 1 ms.
const MAX_TIMER_MS = 2_147_483_647;

type Settle = (then: () => void, cancelAtServer?: string) => void;

/** What serving needs of the bridge. */
export interface ForwardHost {
  readonly id: string;
  readonly participant: ParticipantClient;
  readonly log: Logger | undefined;
  readonly status: BridgeStatus;
  /** A call's timeout when its caller gives none. */
  readonly callTimeoutMs: number;
  readonly link: ServerLink;
  readonly notifications: ServerNotifications;
  /** Who created which of the server's own tasks (tasks.ts). */
  readonly tasks: ServerTaskOwners;
  /** The space's traces, when the bridge runs beside the gateway and it exports them (trace.ts). */
  readonly tracing?: Tracing | undefined;
  /** A `url:` server behind OAuth: whose credentials each request uses (oauth-signin.ts). */
  readonly auth?: UpstreamAuth | undefined;
}

export class Forwarder {
  constructor(private readonly host: ForwardHost) {}

  /** A request from the space, answered from the session or forwarded to the server. */
  handle(req: IncomingRequest): unknown {
    const up = this.host.link.upstream;
    const ok = up?.ready === true && !up.lost;
    if (req.method === "tools/list" && (this.host.status === "failed" || (ok && !up.client.getServerCapabilities()?.tools)))
      return { tools: [] };
    if (!ok) throw this.host.link.unavailable();
    switch (req.method) {
      case "initialize":
        // The session is ours; a caller gets what the server told us.
        return {
          protocolVersion: up.client.getNegotiatedProtocolVersion(),
          capabilities: up.client.getServerCapabilities() ?? {},
          serverInfo: up.client.getServerVersion(),
          ...(up.client.getInstructions() === undefined ? {} : { instructions: up.client.getInstructions() }),
        };
      case "logging/setLevel":
        // The caller hears the server's log lines sent outside a call too (log-listeners.ts).
        this.host.notifications.logListeners.asked(req.from, req.params);
        break;
      case "resources/unsubscribe":
        if (this.host.notifications.release(req)) return {};
        break;
      // The server's own tasks: each caller reaches its own and no other's (tasks.ts).
      case "tasks/get":
      case "tasks/result":
      case "tasks/cancel":
        this.host.tasks.check(req.from, req.params);
        break;
      case "tasks/list":
        return this.forward(up, req).then((result) => this.host.tasks.filter(req.from, result));
      case "tools/call":
        if (isRecord(req.params) && req.params["task"] !== undefined) {
          return this.forward(up, req).then((result) => {
            this.host.tasks.created(req.from, result);
            return result;
          });
        }
        break;
    }
    return this.forward(up, req);
  }

  private forward(up: Upstream, req: IncomingRequest): Promise<unknown> {
    // A CLIENT span for the call out to the server, under the routed call's (trace.ts).
    const client = this.clientFor(up, req.params);
    const span = outboundSpan(
      this.host.tracing,
      this.host.id,
      {
        http: this.host.link.isHttp,
        address: this.host.link.address,
        // A 2026-07-28 request has no session.
        sessionId: client === up.client ? sessionOf(up.transport) : undefined,
        protocolVersion: client.getNegotiatedProtocolVersion(),
      },
      req.method,
      req.params,
    );
    const sent = this.send(up, req, span?.params ?? req.params);
    return span ? span.around(sent) : sent;
  }

  /** The client a request goes out on: the 2026-07-28 one for a caller that takes input_required itself (send, below), else the session. */
  private clientFor(up: Upstream, params: unknown): Upstream["client"] {
    const meta = isRecord(params) && isRecord(params["_meta"]) ? params["_meta"] : undefined;
    const takes = meta?.[TAKES_INPUT] === true && (up.modern ?? up.client).getProtocolEra() === "modern";
    return takes ? (up.modern ?? up.client) : up.client;
  }

  private send(up: Upstream, req: IncomingRequest, outgoing: unknown): Promise<unknown> {
    // The caller's stated client capabilities are the bridge's to act on (client-caps.ts), not the server's to read.
    let params = withoutStated(outgoing);
    let callerToken: string | number | undefined;
    let timeoutMs = this.host.callTimeoutMs;
    let takesInput = false;
    let person: unknown;
    if (isRecord(params) && isRecord(params["_meta"])) {
      const { progressToken, [TAKES_INPUT]: takes, ...meta } = params["_meta"];
      const asked = meta["mewgate/timeout_ms"];
      // The person the call acts for: the gateway's stamp (gateway/calls/person.ts), for `oauth: {as: caller}`.
      person = meta["mewgate/person"];
      if (typeof asked === "number" && asked > 0) timeoutMs = Math.min(asked, MAX_TIMER_MS);
      if (typeof progressToken === "string" || typeof progressToken === "number") callerToken = progressToken;
      takesInput = takes === true && (up.modern ?? up.client).getProtocolEra() === "modern";
      // The SDK puts in a token of its own and maps the server's progress back to us; the gateway's keys
      // (mewgate/…: a timeout, the person a call acts for) are ours to read, not the server's — but for
      // the approval's signed receipt, which is the server's to check (docs/security.md, receipts).
      const passed = Object.fromEntries(Object.entries(meta).filter(([key]) => !key.startsWith("mewgate/") || key === RECEIPT_KEY));
      const kept = Object.keys(passed).length;
      if (callerToken !== undefined || takes !== undefined || kept !== Object.keys(meta).length)
        params = kept > 0 ? { ...params, _meta: passed } : withoutKey(params, "_meta");
    }
    // Whose upstream credentials this request uses; a call for nobody, or for a person not signed in, goes no further.
    const auth = this.host.auth;
    const acting = auth?.actingFor(req.method, person);
    if (acting && "refusal" in acting)
      return Promise.reject(
        new RpcError(RpcErrorCodes.internalError, acting.refusal, { reason: "sign_in_needed", participant: this.host.id }),
      );
    const asSubject = <T>(request: () => T): T => (auth && acting ? auth.run(acting.subject, request) : request());
    return new Promise((resolve, reject) => {
      const controller = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      const settle: Settle = (then, cancelAtServer) => {
        if (!up.inflight.delete(call)) return;
        clearTimeout(timer);
        req.signal.removeEventListener("abort", onCallerAbort);
        // Abort makes the SDK send notifications/cancelled to the server.
        if (cancelAtServer !== undefined) controller.abort(cancelAtServer);
        then();
      };
      // While the server waits on its caller (a form, a completion), its own clock stands still.
      let paused = 0;
      const call: Forwarded = {
        req,
        fail: (error) => settle(() => reject(error)),
        pause: () => {
          paused++;
          clearTimeout(timer);
        },
        resume: () => {
          if (--paused === 0 && up.inflight.has(call)) arm();
        },
      };
      const arm = () => {
        clearTimeout(timer);
        if (paused > 0) return;
        timer = setTimeout(() => {
          const message = `MCP server "${this.host.id}" did not answer ${req.method} within ${timeoutMs} ms; the request was cancelled`;
          settle(() => reject(bridgeFailure(this.host.id, "server_timeout", message, { timeout_ms: timeoutMs })), "timeout");
        }, timeoutMs);
      };
      // The caller cancelled, or the gateway timed the call out: nobody waits for an answer any more.
      const onCallerAbort = () =>
        settle(() => reject(new RpcError(RpcErrorCodes.internalError, "cancelled")), String(req.signal.reason ?? "cancelled"));
      if (req.signal.aborted) return reject(new RpcError(RpcErrorCodes.internalError, "cancelled"));
      up.inflight.add(call);
      req.signal.addEventListener("abort", onCallerAbort, { once: true });
      arm();
      // Our own timer decides (it restarts on progress); the SDK's is only a backstop.
      // A caller at 2026-07-28 (the face) gets the server's input_required as it came, request
      // state untouched, and answers it itself; for anyone else the bridge asks the caller
      // through the space (callbacks.ts), a bounded number of rounds.
      const options: RequestOptions = {
        signal: controller.signal,
        timeout: MAX_TIMER_MS,
        ...(takesInput ? { allowInputRequired: true } : {}),
      };
      if (callerToken !== undefined) {
        const token = callerToken;
        options.onprogress = (progress) => {
          if (!up.inflight.has(call)) return;
          arm();
          this.progress(req, token, progress);
        };
      }
      // A caller at 2026-07-28 is served by the server at 2026-07-28; everyone else in the session (server.ts).
      const client = takesInput ? (up.modern ?? up.client) : up.client;
      // A tools/call at 2026-07-28 goes through callTool, which mirrors the arguments a tool
      // marks with x-mcp-header into Mcp-Param-* headers, as the server checks (SEP-2243).
      let sent: Promise<unknown>;
      try {
        sent = asSubject(() =>
          takesInput && req.method === "tools/call" && isRecord(params) && typeof params["name"] === "string"
            ? client.callTool(params as { name: string }, options)
            : client.request({ method: req.method, params } as Request, AnyResult, options),
        );
      } catch (err) {
        // The SDK refuses some requests before sending them (a method the revision lacks): the same path as any failure.
        sent = Promise.reject(err);
      }
      sent.then(
        (result) => {
          if (req.method === "resources/subscribe") this.host.notifications.subscribed(req);
          settle(() => resolve(result));
        },
        (err: unknown) => this.forwardFailed(up, call, err, settle, reject),
      );
    });
  }

  private forwardFailed(up: Upstream, call: Forwarded, err: unknown, settle: Settle, reject: (e: unknown) => void): void {
    if (!up.inflight.has(call)) return;
    if (err instanceof ProtocolError) {
      // The server's JSON-RPC error, passed on as it came.
      settle(() => reject(new RpcError(err.code, err.message, err.data)));
      return;
    }
    if (err instanceof SdkError && err.code === SdkErrorCode.InputRequiredRoundsExceeded) {
      const message = `MCP server "${this.host.id}" asked for input more than ${MAX_INPUT_ROUNDS} times in one ${call.req.method}; the call was stopped`;
      settle(() =>
        reject(
          new RpcError(RpcErrorCodes.internalError, message, {
            reason: "input_rounds_exceeded",
            participant: this.host.id,
            rounds: MAX_INPUT_ROUNDS,
          }),
        ),
      );
      return;
    }
    if (err instanceof SdkError && UNSPOKEN.has(err.code)) {
      // A method the server's revision has no word for (resources/subscribe at 2026-07-28…): this request's refusal, not a dead server.
      const message = `MCP server "${this.host.id}" cannot be asked ${call.req.method}: ${err.message}`;
      settle(() => reject(new RpcError(RpcErrorCodes.methodNotFound, message, { reason: "not_in_revision", participant: this.host.id })));
      return;
    }
    if (err instanceof SdkError && INVALID_ANSWERS.has(err.code)) {
      // An answer the SDK could not take (a malformed input_required, an unknown result type): this call's failure, not a dead server.
      settle(() =>
        reject(
          new RpcError(RpcErrorCodes.internalError, `MCP server "${this.host.id}" answered badly: ${err.message}`, {
            reason: "bad_answer",
          }),
        ),
      );
      return;
    }
    if (this.host.link.isHttp) {
      const status = err instanceof SdkHttpError ? err.status : undefined;
      // A refusal of this one request (auth, bad request) is not a dead server; 404 is a lost session.
      if (status !== undefined && status >= 400 && status < 500 && status !== 404) {
        // Our own refusal of it (oauth-signin.ts): a sign-in, or one with more scope, is the caller's to make.
        const signIn = (status === 401 || status === 403) && this.host.auth?.refusalOf((err as Error).message);
        const data = signIn ? { reason: signIn, participant: this.host.id, status } : { reason: "http_error", status };
        settle(() => reject(new RpcError(RpcErrorCodes.internalError, (err as Error).message, data)));
        return;
      }
      this.host.link.down(up, `could not be reached (${(err as Error).message})`);
      return;
    }
    // stdio: the process is gone or going; its exit status, if known yet, says how.
    const info = this.host.link.describeEnd(up, "closed the connection");
    settle(() => reject(bridgeFailure(this.host.id, "server_crashed", info.message, { exit_code: info.code, signal: info.signal })));
  }

  private progress(req: IncomingRequest, progressToken: string | number, progress: Progress): void {
    // The caller's own envelope id first: the SDK's `onProgress` finds its call by it.
    const correlationId = [req.envelope.id, ...(req.envelope.correlation_id ?? [])];
    trySend(this.host.log, () =>
      this.host.participant.notify(req.from, "notifications/progress", { ...progress, progressToken }, { correlationId }),
    );
  }
}

/** The approval receipt the gateway stamps on an approved call (gateway/calls/person.ts), passed to the server. */
const RECEIPT_KEY = "mewgate/receipt";

/** The `_meta` flag the face sets on a request from a 2026-07-28 client: it takes `input_required` itself. */
export const TAKES_INPUT = "mewgate/input_required";

/** SDK refusals to send a request the negotiated revision or the server's capabilities do not have. */
const UNSPOKEN = new Set<string>([SdkErrorCode.MethodNotSupportedByProtocolVersion, SdkErrorCode.CapabilityNotSupported]);

/** SDK failures that are about one answer, not about the connection. */
const INVALID_ANSWERS = new Set<string>([SdkErrorCode.InvalidResult, SdkErrorCode.UnsupportedResultType]);

function withoutKey(o: Record<string, unknown>, key: string): Record<string, unknown> {
  const { [key]: _, ...rest } = o;
  return rest;
}

function sessionOf(transport: unknown): string | undefined {
  const id = (transport as { sessionId?: unknown }).sessionId;
  return typeof id === "string" ? id : undefined;
}
