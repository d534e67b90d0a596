/**
 * The participant client serving requests: a request handler (`onRequest`) or an MCP server
 * (`serveMcp`), the served requests in a Map keyed by envelope id with how to abort each,
 * answering them, their cancellation (by the caller, the gateway, or a lost connection),
 * and the async context that lets calls made while serving join the served request's chain.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { GATEWAY_ID, type Envelope } from "../../gateway/index.js";
import { ParticipantError, RpcErrorCodes } from "../errors.js";
import { EnvelopeServerTransport } from "../mcp-transport.js";
import type { RpcId } from "../wire.js";
import type { Calls, Pending } from "./calls.js";
import type { Connection } from "./connection.js";
import type { IncomingRequest, RequestHandler } from "./types.js";
import { isRecord } from "../../gateway/index.js";

/** Which served request (if any) the current async context is running for. */
interface ServingContext {
  owner: Serving;
  envelopeId: string;
}
const servingContext = new AsyncLocalStorage<ServingContext>();

/** Runs `fn` outside any served request's context: what arrives belongs to no request being served. */
export function outsideServing(fn: () => void): void {
  servingContext.exit(fn);
}

interface Served {
  from: string;
  rpcId: RpcId;
  /** What was asked (unknown for a call adopted after a restart): named when the answer cannot be sent. */
  method?: string | undefined;
  abort: (reason: string) => void;
  /** The calls of ours this request is a callback of: their clocks restart when it ends. */
  holds?: Pending[] | undefined;
}

/** The requests one client is serving, and what serves them. */
export class Serving {
  private readonly served = new Map<string, Served>();
  private requestHandler: RequestHandler | undefined;
  /** The transport of the MCP server being served, if any. */
  private mcp: EnvelopeServerTransport | undefined;

  constructor(
    private readonly conn: Connection,
    private readonly calls: Calls,
    /** My participant id, from the last welcome. */
    private readonly me: () => string | undefined,
  ) {}

  /** Takes one request handler; see `ParticipantClient.onRequest`. */
  onRequest(handler: RequestHandler): () => void {
    if (this.requestHandler || this.mcp) throw new Error("this client already serves requests (onRequest or serveMcp)");
    this.requestHandler = handler;
    return () => {
      if (this.requestHandler === handler) this.requestHandler = undefined;
    };
  }

  /** Takes up a call served before a restart; see `ParticipantClient.adopt`. */
  adopt(
    envelopeId: string,
    from: string,
    rpcId: RpcId,
  ): { signal: AbortSignal; answer(result: unknown): void; fail(error: unknown): void } {
    const controller = new AbortController();
    if (!this.served.has(envelopeId)) this.served.set(envelopeId, { from, rpcId, abort: (reason) => controller.abort(reason) });
    return {
      signal: controller.signal,
      answer: (result) => this.respond(envelopeId, { result: result === undefined ? {} : result }),
      fail: (error) => this.respond(envelopeId, { error: toRpcError(error) }),
    };
  }

  /** Serves an MCP server through an envelope transport; see `ParticipantClient.serveMcp`. */
  async serveMcp(server: McpServer | Server): Promise<void> {
    if (this.requestHandler || this.mcp) throw new Error("this client already serves requests (onRequest or serveMcp)");
    const transport = new EnvelopeServerTransport({
      respond: (envelopeId, outcome) => this.respond(envelopeId, outcome),
      notifyCaller: (envelopeId, method, params) => {
        const s = this.served.get(envelopeId);
        if (s) this.trySend(() => this.conn.notify(s.from, method, params, { correlationId: [envelopeId] }));
      },
      requestCaller: (envelopeId, method, params) => {
        const s = this.served.get(envelopeId);
        if (!s) return Promise.reject(new ParticipantError("disconnected", "the request this belongs to is no longer being served"));
        // A callback to the caller is not a nested call: the chain would call it a cycle.
        return this.calls.request(s.from, method, params, { chain: false });
      },
      notifyUnrelated: (method, params) => {
        if (method.endsWith("/list_changed")) this.trySend(() => this.conn.notify(GATEWAY_ID, method, params));
        else this.conn.log?.debug({ method }, "notification from the MCP server outside any request; dropped");
      },
      detach: () => {
        if (this.mcp === transport) this.mcp = undefined;
      },
    });
    this.mcp = transport;
    await server.connect(transport);
    if (this.conn.welcomed) this.announceTools();
  }

  /** Sends `notifications/tools/list_changed` to the gateway; see `ParticipantClient.announceTools`. */
  announceTools(): void {
    this.trySend(() => this.conn.notify(GATEWAY_ID, "notifications/tools/list_changed"));
  }

  /** An MCP server is being served (its tools are announced after every welcome). */
  get servesMcp(): boolean {
    return this.mcp !== undefined;
  }

  /** Closes the MCP server's transport, if one is served: the client is done. */
  closeMcp(): void {
    if (this.mcp) void this.mcp.close();
  }

  /** A notification addressed to me goes to the MCP server, if one is served. */
  deliverNotification(method: string, params: unknown): void {
    if (this.mcp) this.mcp.deliverNotification(method, params);
  }

  /** The request served in the current async context, if it is one of this client's and still served. */
  servedHere(): string | undefined {
    const ctx = servingContext.getStore();
    return ctx?.owner === this && this.served.has(ctx.envelopeId) ? ctx.envelopeId : undefined;
  }

  /** Aborts every served request, except those in `keep`: none can be answered on a new connection. */
  abortAll(keep: ReadonlySet<string>): void {
    for (const [id, s] of [...this.served]) {
      if (keep.has(id)) continue;
      this.served.delete(id);
      s.abort("disconnected");
    }
  }

  /** An `mcp/request` addressed to me: the MCP server or the handler answers it. */
  serve(env: Envelope, rpcId: RpcId, method: string, params: unknown): void {
    if (this.served.has(env.id)) return;
    this.holdCallers(env, rpcId, method);
    const mcp = this.mcp;
    if (mcp) {
      this.served.get(env.id)!.abort = (reason) => mcp.cancel(env.id, reason);
      // The SDK runs the handler in promise continuations of this call, so it inherits the context.
      servingContext.run({ owner: this, envelopeId: env.id }, () => mcp.deliverRequest(env.id, method, params));
      return;
    }
    const handler = this.requestHandler;
    if (!handler) {
      this.respond(env.id, {
        error: { code: RpcErrorCodes.methodNotFound, message: `"${this.me()}" does not serve requests (${method})` },
      });
      return;
    }
    const controller = new AbortController();
    this.served.get(env.id)!.abort = (reason) => controller.abort(reason);
    const request: IncomingRequest = { method, params, from: env.from, rpcId, envelope: env, signal: controller.signal };
    void servingContext.run({ owner: this, envelopeId: env.id }, async () => {
      try {
        const result = await handler(request);
        this.respond(env.id, { result: result === undefined ? {} : result });
      } catch (err) {
        this.respond(env.id, { error: toRpcError(err) });
      }
    });
  }

  /**
   * Starts serving `env`. When it is a callback — the target of a call of ours asks us
   * something about it (a form, a completion) — that call's clock stands still until we
   * answer: the target is waiting on us, not late.
   */
  private holdCallers(env: Envelope, rpcId: RpcId, method: string): void {
    const holds = this.calls.hold(env);
    this.served.set(env.id, { from: env.from, rpcId, method, abort: () => {}, holds: holds.length > 0 ? holds : undefined });
  }

  /** Stops serving `envelopeId`; the calls it held get their clocks back. */
  private endServing(envelopeId: string): Served | undefined {
    const s = this.served.get(envelopeId);
    if (!s) return undefined;
    this.served.delete(envelopeId);
    for (const p of s.holds ?? []) this.calls.release(p);
    return s;
  }

  /**
   * Answers a served request, unless it was cancelled meanwhile. An answer the space would
   * refuse (larger or deeper than its frames: connection.ts `overLimits`) goes as an error
   * saying so (a tool error for `tools/call`), so the caller learns at once rather than when
   * its call times out.
   */
  private respond(envelopeId: string, outcome: { result: unknown } | { error: { code: number; message: string; data?: unknown } }): void {
    const s = this.endServing(envelopeId);
    if (!s) return;
    const send = (o: typeof outcome) =>
      this.conn.send({
        kind: "mcp/response",
        to: [s.from],
        correlation_id: [envelopeId],
        payload: { jsonrpc: "2.0", id: s.rpcId, ...o },
      });
    this.trySend(() => {
      try {
        send(outcome);
      } catch (err) {
        if (!(err instanceof ParticipantError) || err.code !== "too_large") throw err;
        const over = err.data as { reason: string; bytes?: number; limit: number };
        const what = `"${this.me() ?? "this participant"}" answered ${s.method ?? "the call"}`;
        const message =
          over.reason === "too_deep"
            ? `${what} with an answer nested more than ${over.limit - 2} levels deep (gateway.limits.max_depth); it is not passed on`
            : `${what} with ${over.bytes} bytes, more than a frame of the space carries (${over.limit} bytes: gateway.limits.max_payload_bytes); it is not passed on`;
        // A tool's failure is a tool error the caller's model can read; any other answer, a JSON-RPC error.
        send(
          s.method === "tools/call"
            ? { result: { content: [{ type: "text", text: message }], isError: true } }
            : { error: { code: RpcErrorCodes.internalError, message, data: { reason: over.reason, limit: over.limit } } },
        );
      }
    });
  }

  /** A `notifications/cancelled` names the request by the caller's JSON-RPC id; the envelope id, when correlated, is exact. */
  cancelServing(env: Envelope, params: unknown): void {
    let target: string | undefined;
    for (const id of env.correlation_id ?? []) if (this.served.has(id)) target = id;
    if (target === undefined && isRecord(params) && params["requestId"] !== undefined) {
      const requestId = params["requestId"];
      for (const [id, s] of this.served) {
        if (s.rpcId !== requestId) continue;
        if (s.from === env.from) {
          target = id;
          break;
        }
        // The gateway cancels on a caller's behalf (its call timeout).
        if (env.from === GATEWAY_ID) target ??= id;
      }
    }
    if (target === undefined) return;
    const s = this.served.get(target)!;
    if (s.from !== env.from && env.from !== GATEWAY_ID) return;
    this.endServing(target);
    const reason = isRecord(params) && typeof params["reason"] === "string" ? params["reason"] : "cancelled";
    s.abort(reason);
  }

  private trySend(send: () => unknown): void {
    try {
      send();
    } catch (err) {
      this.conn.log?.warn({ err: (err as Error).message }, "could not send");
    }
  }
}

function toRpcError(err: unknown): { code: number; message: string; data?: unknown } {
  if (isRecord(err) || err instanceof Error) {
    const e = err as { code?: unknown; message?: unknown; data?: unknown };
    const code = typeof e.code === "number" && Number.isSafeInteger(e.code) ? e.code : RpcErrorCodes.internalError;
    const message = typeof e.message === "string" && e.message ? e.message : "internal error";
    return e.data === undefined ? { code, message } : { code, message, data: e.data };
  }
  return { code: RpcErrorCodes.internalError, message: String(err) };
}
