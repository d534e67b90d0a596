/**
 * MCP 2026-07-28 requests on the HTTP faces (`/mcp`, `/mcp/<participant>`): stateless (no
 * `initialize`, no session id, the `_meta` envelope on every request, `server/discover`,
 * the `Mcp-Method`/`Mcp-Name` headers), beside the 2025-era sessions of http/http.ts on the same
 * endpoint.
 *
 * The SDK v2 (`@modelcontextprotocol/server`, `createMcpHandler`) answers the request: it
 * checks the envelope and the headers, answers `server/discover` and the errors of its
 * validation ladder. What a request asks is then asked of a `SpaceMcpServer` (the same
 * face the 2025 sessions get, so the same policy, proposals and approvals) through an
 * in-process SDK v1 client, one per seat and path, kept while the seat's requests come
 * (the v1 pieces stay: the face is written on the v1 `Server`).
 *
 * A tools/call that becomes a proposal waits in its request for the decision, a bounded
 * while at a time, then answers `input_required` with sealed state the client resumes it
 * with (modern-held.ts, held/held.ts). The proposal is seen from the face's own progress message.
 *
 * A `subscriptions/listen` stream carries the changes the seat sees (listen.ts).
 *
 * Not yet: the client's capabilities of each request are not offered to the server (the
 * face's own client declares none, so a server's form or sampling request is refused).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { HeldFace } from "../held/held.js";
import { asProtocolError, asServerGave, callHeld, innerParams, type Lifted } from "./modern-held.js";
import { logRoute } from "../logs/modern-logs.js";
import { ListenFeed, type ListenSchemas } from "./listen.js";
import {
  callAsTask,
  declaresTasks,
  declaresToolApproval,
  serveTaskMethod,
  TASKS_EXTENSION,
  TOOL_APPROVAL_EXTENSION,
} from "../tasks/task-ext.js";
import { AUTHZ_KEY, CONTEXT_ID_KEY, denial } from "../held/denials.js";
import { declarations, paramMismatch } from "./param-headers.js";

/** What serving 2026-07-28 needs, loaded with the endpoint's other modules. */
export interface ModernModules {
  v2: typeof import("@modelcontextprotocol/server");
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  InMemoryTransport: typeof import("@modelcontextprotocol/sdk/inMemory.js").InMemoryTransport;
  ResultSchema: typeof import("@modelcontextprotocol/sdk/types.js").ResultSchema;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
  /** The face's log lines, routed to the request they are about (logs/modern-logs.ts). */
  LoggingMessageNotificationSchema: typeof import("@modelcontextprotocol/sdk/types.js").LoggingMessageNotificationSchema;
  /** The change notifications a listen stream carries (listen.ts). */
  listen: ListenSchemas;
}

export function loadModernModules(): Promise<ModernModules> {
  return Promise.all([
    import("@modelcontextprotocol/server"),
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/inMemory.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]).then(([v2, client, memory, types]) => ({
    v2,
    Client: client.Client,
    InMemoryTransport: memory.InMemoryTransport,
    ResultSchema: types.ResultSchema,
    McpError: types.McpError,
    LoggingMessageNotificationSchema: types.LoggingMessageNotificationSchema,
    listen: types,
  }));
}

/** Whether `body` (with the request's headers) is a 2026-07-28 request: the SDK's own edge classification. */
export function isModern(m: ModernModules, req: IncomingMessage, body: unknown): boolean {
  if (req.method !== "POST") return false;
  const h = (name: string) => {
    const v = req.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  return (
    m.v2.classifyInboundRequest({
      httpMethod: "POST",
      protocolVersionHeader: h("mcp-protocol-version"),
      mcpMethodHeader: h("mcp-method"),
      body,
    }).kind !== "legacy"
  );
}

/** The methods passed to the face as they are (what its 2025 sessions answer). */
const PASSED = [
  ["tools", ["tools/list", "tools/call"]],
  ["resources", ["resources/list", "resources/read", "resources/templates/list"]],
  ["prompts", ["prompts/list", "prompts/get"]],
  ["completions", ["completion/complete"]],
] as const;

/** An in-process client of the face, for one seat at one path. */
export interface Inner {
  client: Client;
  /** What the seat's `subscriptions/listen` streams carry. */
  feed: ListenFeed;
  close(): Promise<void>;
}

/** What the pool needs to make an inner client: the face's server for the seat, and how it ends. */
interface Opened {
  mm: ModernModules;
  server: { connect(t: InstanceType<ModernModules["InMemoryTransport"]>): Promise<void>; close(): Promise<void> };
  /** Called once when the inner client is closed. */
  done(): void;
  /** Registers what to do when the seat's connection to the space ends. */
  ended(f: () => void): void;
}

/** One inner client per seat and path, made on first use, dropped when it or the seat's connection ends. */
export class InnerPool<S extends { id: string }> {
  private readonly inners = new Map<string, Promise<Inner>>();

  constructor(private readonly open: (space: S, participant: string, only: string | undefined, mm: ModernModules) => Promise<Opened>) {}

  get(space: S, participant: string, only: string | undefined, mm: ModernModules): Promise<Inner> {
    const key = `${space.id}\u0000${participant}\u0000${only ?? ""}`;
    const had = this.inners.get(key);
    if (had) return had;
    const inner: Promise<Inner> = (async () => {
      const o = await this.open(space, participant, only, mm);
      const [here, there] = mm.InMemoryTransport.createLinkedPair();
      const client = new mm.Client({ name: "mewgate-2026-07-28", version: "1.0.0" }, { capabilities: {} });
      const feed = new ListenFeed(new mm.v2.InMemoryServerEventBus(), client, mm.listen);
      let closed = false;
      const close = async () => {
        if (closed) return;
        closed = true;
        feed.end();
        if (this.inners.get(key) === inner) this.inners.delete(key);
        await client.close().catch(() => {});
        await o.server.close().catch(() => {});
        o.done();
      };
      try {
        await o.server.connect(there);
        client.onclose = () => void close();
        o.ended(() => void close());
        await client.connect(here);
      } catch (err) {
        await close();
        throw err;
      }
      return { client, feed, close };
    })();
    this.inners.set(key, inner);
    inner.catch(() => this.inners.get(key) === inner && this.inners.delete(key));
    return inner;
  }

  async closeAll(): Promise<void> {
    const open = await Promise.allSettled([...this.inners.values()]);
    await Promise.all(open.map((r) => (r.status === "fulfilled" ? r.value.close() : undefined)));
  }
}

/**
 * The SDK v2 server of one 2026-07-28 exchange, asking `client` (an in-process client of the
 * face) what each request asks: the HTTP faces make one per request, the stdio face one for
 * its connection (stdio/stdio-modern.ts). Held calls answer input_required where `held` is given.
 */
export function modernServerFactory(
  m: ModernModules,
  client: Client,
  held?: HeldFace,
  /** Serve held calls as tasks of the tasks extension where `held` is not given (the stdio face). */
  opts: { tasks?: boolean } = {},
): () => InstanceType<ModernModules["v2"]["Server"]> {
  const asTasks = held !== undefined || opts.tasks === true;
  const info = client.getServerVersion() ?? { name: "mewgate", version: "0" };
  const caps = (client.getServerCapabilities() ?? {}) as Record<string, unknown>;
  const capabilities: Record<string, unknown> = {};
  for (const [cap] of PASSED)
    if (caps[cap] !== undefined)
      capabilities[cap] =
        cap === "resources"
          ? { listChanged: true, ...((caps["resources"] as { subscribe?: unknown }).subscribe ? { subscribe: true } : {}) }
          : cap === "completions"
            ? {}
            : { listChanged: true };
  // The face logs (its waits and approvals, its servers' lines about a call): to each request's client, at the level it asked (logs/modern-logs.ts).
  if (caps["logging"] !== undefined) capabilities["logging"] = {};
  // Held calls as tasks (tasks/task-ext.ts), where calls can be held.
  if (asTasks && caps["tools"] !== undefined) capabilities["extensions"] = { [TASKS_EXTENSION]: {}, [TOOL_APPROVAL_EXTENSION]: {} };
  const instructions = client.getInstructions();
  return () => {
    const server = new m.v2.Server(
      { name: info.name, version: info.version, ...(info.title ? { title: info.title } : {}) },
      { capabilities: capabilities as never, ...(instructions ? { instructions } : {}) },
    );
    for (const [cap, methods] of PASSED) {
      if (caps[cap] === undefined) continue;
      for (const method of methods) {
        server.setRequestHandler(
          method as never,
          (async (
            request: { params?: unknown },
            ctx: { mcpReq: { _meta?: { progressToken?: string | number }; signal?: AbortSignal; notify(n: unknown): Promise<void> } },
          ) => {
            const envelope = (ctx as unknown as Lifted).mcpReq.envelope;
            if (method === "tools/call" && held) checkContext(m, held, request.params, (ctx as unknown as Lifted).mcpReq._meta);
            if (asTasks && method === "tools/call" && declaresTasks(envelope) && (await mayWait(client, request.params)))
              return callAsTask(
                m,
                client,
                innerParams(request.params, ctx as never),
                declaresToolApproval(envelope) ? { held } : undefined,
              ).catch((err: unknown) => {
                throw withDenial(m, held, request.params, asProtocolError(m, err));
              });
            if (held && method === "tools/call")
              return callHeld(m, client, held, request, ctx as never).then(
                (r) => denialContext(held, request.params, r),
                (err: unknown) => {
                  throw withDenial(m, held, request.params, err);
                },
              );
            const token = ctx.mcpReq._meta?.progressToken;
            const route = logRoute(m.LoggingMessageNotificationSchema, client, (ctx as unknown as Lifted).mcpReq.log);
            const onprogress =
              token === undefined
                ? undefined
                : (p: { progress: number; total?: number; message?: string }) =>
                    void ctx.mcpReq.notify({ method: "notifications/progress", params: { ...p, progressToken: token } }).catch(() => {});
            try {
              return asServerGave(
                await client.request({ method, params: innerParams(request.params, ctx as never, route) } as never, m.ResultSchema, {
                  ...(ctx.mcpReq.signal ? { signal: ctx.mcpReq.signal } : {}),
                  ...(onprogress ? { onprogress, resetTimeoutOnProgress: true } : {}),
                  timeout: 24 * 60 * 60_000,
                }),
              );
            } catch (err) {
              if (err instanceof m.McpError) {
                const prefix = `MCP error ${err.code}: `;
                throw new m.v2.ProtocolError(
                  err.code,
                  err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message,
                  err.data,
                );
              }
              throw err;
            } finally {
              route.end();
            }
          }) as never,
        );
      }
    }
    return server;
  };
}

/** Answers one 2026-07-28 request with the SDK v2, asking `inner` what the request asks. */
export async function serveModern(
  m: ModernModules,
  inner: Inner,
  req: IncomingMessage,
  res: ServerResponse,
  body: unknown,
  held?: HeldFace,
): Promise<void> {
  const client = inner.client;
  const header = (name: string) => {
    const v = req.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  // tasks/* of the tasks extension, which the SDK v2 does not route (tasks/task-ext.ts).
  const tasks = await serveTaskMethod(m, client, held, body, header);
  if (tasks) {
    res.writeHead(tasks.status, { "content-type": "application/json" });
    res.end(JSON.stringify(tasks.body));
    return;
  }
  const factory = modernServerFactory(m, client, held);
  // The tool a tools/call names, as the seat sees it: its Mcp-Param-* headers are checked against it, and one that may wait for a person is answered over SSE.
  const named = body as { method?: unknown; params?: { name?: unknown } } | null;
  const tool =
    named?.method === "tools/call" && typeof named.params?.name === "string" ? await findTool(client, named.params.name) : undefined;
  const mismatch = tool === undefined ? undefined : paramHeadersOf(tool, req, body);
  if (mismatch !== undefined) {
    const id = (body as { id?: unknown }).id ?? null;
    res.writeHead(400, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        jsonrpc: "2.0",
        id,
        error: { code: -32020, message: `Bad Request: the request headers and body disagree: ${mismatch}` },
      }),
    );
    return;
  }
  const listen = (body as { method?: unknown }).method === "subscriptions/listen";
  // A listen stream holds its resource subscriptions (listen.ts) until it ends; the seat's streams are bounded there.
  const hold = listen ? await inner.feed.open((body as { params?: unknown }).params) : undefined;
  if (hold && !("release" in hold)) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", id: (body as { id?: unknown }).id ?? null, error: hold }));
    return;
  }
  // A call that may wait for a person streams from the start, with keep-alive comments while it is held (modern-held.ts).
  const mayHold = held !== undefined && tool?._meta?.["mewgate/policy"] === "proposal";
  const handler = m.v2.createMcpHandler(factory, {
    legacy: "reject",
    bus: inner.feed.bus,
    ...(mayHold ? { responseMode: "sse" as const, keepAliveMs: held.keepAliveMs } : {}),
  });
  const unlisten = hold ? inner.feed.onEnd(() => void handler.close().catch(() => {})) : undefined;
  try {
    const abort = new AbortController();
    res.once("close", () => {
      abort.abort();
      // A listen stream whose client went away ends now, its subscriptions with it (finally below).
      if (listen) void handler.close().catch(() => {});
    });
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers))
      if (v !== undefined && k !== "authorization" && k !== "cookie") headers.set(k, Array.isArray(v) ? v.join(", ") : v);
    const request = new Request(`http://${req.headers.host ?? "127.0.0.1"}${req.url ?? "/"}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: abort.signal,
    });
    const response = await handler.fetch(request, { parsedBody: body });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body) {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        if (res.destroyed) break;
        // A client that does not read (a listen stream lives long) is cut rather than buffered without bound.
        if (res.writableLength > MAX_UNREAD) {
          res.destroy();
          break;
        }
        res.write(chunk);
      }
    }
    res.end();
  } finally {
    unlisten?.();
    if (hold && "release" in hold) hold.release();
    await handler.close().catch(() => {});
  }
}

/**
 * A retry echoing a structured denial's context id (held/denials.ts): refused when the id opens
 * but names another operation; an id that does not open is ignored (it is never authority).
 */
function checkContext(m: ModernModules, held: HeldFace, params: unknown, meta: Record<string, unknown> | undefined): void {
  const id = meta?.[CONTEXT_ID_KEY];
  if (id === undefined) return;
  const p = (params ?? {}) as { name?: unknown; arguments?: unknown };
  const r = held.contexts.check(id, held.space, held.seat, String(p.name ?? ""), p.arguments ?? {});
  if (!r.ok && !r.ignored) throw new m.v2.ProtocolError(-32602, r.message, { reason: "authorization_context_mismatch" });
}

/** A context id bound to this call, for a denial's envelope. */
function contextFor(held: HeldFace, params: unknown): string {
  const p = (params ?? {}) as { name?: unknown; arguments?: unknown };
  return held.contexts.mint(held.space, held.seat, String(p.name ?? ""), p.arguments ?? {});
}

/**
 * A tool result that carries a denial's envelope (a rejection, a policy's denial, a sign-in
 * needed) gets its context id; one a person can still mend (a sign-in), the console as where.
 */
function denialContext(held: HeldFace, params: unknown, result: unknown): unknown {
  const meta = (result as { _meta?: Record<string, unknown> } | null)?._meta;
  const env = meta?.[AUTHZ_KEY] as Record<string, unknown> | undefined;
  if (!env || env["authorizationContextId"] !== undefined) return result;
  const where =
    env["remediation"] === "available" && env["remediationHints"] === undefined ? [{ type: "url", url: held.consoleUrl }] : undefined;
  const next = { ...env, authorizationContextId: contextFor(held, params), ...(where ? { remediationHints: where } : {}) };
  return { ...(result as object), _meta: { ...meta, [AUTHZ_KEY]: next } };
}

/** A refusal a client can act on (a sign-in the call's person must make) carries the denial envelope in its error's data. */
function withDenial(m: ModernModules, held: HeldFace | undefined, params: unknown, err: unknown): unknown {
  const e = err as { code?: unknown; message?: unknown; data?: unknown };
  const data = e.data as Record<string, unknown> | undefined;
  const reason = data?.["reason"];
  if (typeof e.code !== "number" || (reason !== "sign_in_needed" && reason !== "step_up_needed" && reason !== "passkey_required"))
    return err;
  const envelope = denial(reason, held ? { url: held.consoleUrl, contextId: contextFor(held, params) } : {});
  return new m.v2.ProtocolError(e.code, String(e.message ?? ""), { ...data, [AUTHZ_KEY]: envelope });
}

/** Bytes a response may have waiting for its client before the client is cut. */
const MAX_UNREAD = 1024 * 1024;

/** For a tools/call: why its Mcp-Param-* headers disagree with its arguments under the tool's schema (param-headers.ts), if they do. */
function paramHeadersOf(tool: Listed | undefined, req: IncomingMessage, body: unknown): string | undefined {
  const call = body as { params?: { arguments?: unknown } };
  const decls = declarations(tool?.inputSchema);
  if (decls.length === 0) return undefined;
  return paramMismatch(decls, call.params?.arguments, (h) => {
    const v = req.headers[h];
    return Array.isArray(v) ? v[0] : v;
  });
}

type Listed = { name: string; inputSchema?: unknown; execution?: { taskSupport?: unknown }; _meta?: Record<string, unknown> };

/** The tool `name` as the face lists it to the seat (at most 20 pages), if it does. */
async function findTool(client: Client, name: string): Promise<Listed | undefined> {
  let cursor: string | undefined;
  for (let page = 0; page < 20; page++) {
    const list = (await client.listTools(cursor ? { cursor } : {}).catch(() => undefined)) as
      | { tools: Listed[]; nextCursor?: string }
      | undefined;
    const tool = list?.tools.find((t) => t.name === name);
    if (tool) return tool;
    cursor = list?.nextCursor;
    if (!cursor) return undefined;
  }
  return undefined;
}

/**
 * Whether a call of `name` may wait (a person's approval, or its server's own task): only
 * such a call is made a task for the tasks extension, so calls that never wait keep no task.
 */
async function mayWait(client: Client, params: unknown): Promise<boolean> {
  const name = (params as { name?: unknown } | undefined)?.name;
  if (typeof name !== "string") return false;
  const tool = await findTool(client, name);
  const support = tool?.execution?.taskSupport;
  return tool?._meta?.["mewgate/policy"] === "proposal" || support === "optional" || support === "required";
}
