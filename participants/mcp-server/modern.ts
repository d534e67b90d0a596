/**
 * MCP 2026-07-28 requests on the HTTP faces (`/mcp`, `/mcp/<participant>`): stateless (no
 * `initialize`, no session id, the `_meta` envelope on every request, `server/discover`,
 * the `Mcp-Method`/`Mcp-Name` headers), beside the 2025-era sessions of http.ts on the same
 * endpoint.
 *
 * The SDK v2 (`@modelcontextprotocol/server`, `createMcpHandler`) answers the request: it
 * checks the envelope and the headers, answers `server/discover` and the errors of its
 * validation ladder. What a request asks is then asked of a `SpaceMcpServer` (the same
 * face the 2025 sessions get, so the same policy, proposals and approvals) through an
 * in-process SDK v1 client, one per seat and path, kept while the seat's requests come
 * (the v1 pieces stay: the face is written on the v1 `Server`).
 *
 * A tools/call that becomes a proposal answers `input_required` (callHeld below, the state
 * sealed by held.ts) and goes on waiting in the gateway; the resumed request reads what it
 * ended with. The proposal is seen from the face's own progress message while it waits.
 *
 * A `subscriptions/listen` stream carries the changes the seat sees (listen.ts).
 *
 * Not yet: the client's capabilities of each request are not offered to the server (the
 * face's own client declares none, so a server's form or sampling request is refused).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { HeldFace } from "./held.js";
import { isInputRequired, RETRY_META } from "./input.js";
import { ListenFeed, type ListenSchemas } from "./listen.js";
import { callAsTask, declaresTasks, serveTaskMethod, TASKS_EXTENSION } from "./task-ext.js";
import { declarations, paramMismatch } from "./param-headers.js";

/** What serving 2026-07-28 needs, loaded with the endpoint's other modules. */
export interface ModernModules {
  v2: typeof import("@modelcontextprotocol/server");
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  InMemoryTransport: typeof import("@modelcontextprotocol/sdk/inMemory.js").InMemoryTransport;
  ResultSchema: typeof import("@modelcontextprotocol/sdk/types.js").ResultSchema;
  McpError: typeof import("@modelcontextprotocol/sdk/types.js").McpError;
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

/** Of this hop's envelope (the SDK lifted it), the client's capabilities go on: a server's input_required is checked against them (input.ts). */
const CAPABILITIES = "io.modelcontextprotocol/clientCapabilities";

/** What the request's handler context carries beside its params (the SDK v2 lifts the envelope and a retry's fields out of them). */
type Lifted = {
  mcpReq: {
    _meta?: Record<string, unknown>;
    envelope?: Record<string, unknown>;
    inputResponses?: Record<string, unknown>;
    requestState?: () => unknown;
  };
};

/**
 * The params asked of the face: the request's own, its `_meta` (but the progress token,
 * which the inner client replaces), the client's capabilities, and a retry's
 * `inputResponses` and `requestState` (in `_meta` under RETRY_META: the face's SDK v1
 * schemas drop keys they do not know; a client's own RETRY_META is replaced).
 */
function innerParams(params: unknown, ctx: Lifted): Record<string, unknown> {
  // A legacy `task` param is tolerated and never makes a task (task-ext.ts makes one for the extension).
  const { _meta: _, task: _task, ...rest } = typeof params === "object" && params !== null ? (params as Record<string, unknown>) : {};
  const { progressToken: __, [RETRY_META]: ___, ...meta } = ctx.mcpReq._meta ?? {};
  const caps = ctx.mcpReq.envelope?.[CAPABILITIES];
  if (caps !== undefined) meta[CAPABILITIES] = caps;
  const inputResponses = ctx.mcpReq.inputResponses;
  const requestState = ctx.mcpReq.requestState?.();
  if (inputResponses !== undefined || requestState !== undefined) meta[RETRY_META] = { inputResponses, requestState };
  return Object.keys(meta).length > 0 ? { ...rest, _meta: meta } : rest;
}

/** Our own progress message while a call waits (server.ts): its proposal id. */
const WAITING = /^waiting for approval of .* \(proposal ([^()\s]{1,200})\)$/;

/**
 * The SDK v2 server of one 2026-07-28 exchange, asking `client` (an in-process client of the
 * face) what each request asks: the HTTP faces make one per request, the stdio face one for
 * its connection (stdio-modern.ts). Held calls answer input_required where `held` is given.
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
  // Held calls as tasks (task-ext.ts), where calls can be held.
  if (asTasks && caps["tools"] !== undefined) capabilities["extensions"] = { [TASKS_EXTENSION]: {} };
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
            if (
              asTasks &&
              method === "tools/call" &&
              declaresTasks((ctx as unknown as Lifted).mcpReq.envelope) &&
              (await mayWait(client, request.params))
            )
              return callAsTask(m, client, innerParams(request.params, ctx as never)).catch((err: unknown) => {
                throw asProtocolError(m, err);
              });
            if (held && method === "tools/call") return callHeld(m, client, held, request, ctx as never);
            const token = ctx.mcpReq._meta?.progressToken;
            const onprogress =
              token === undefined
                ? undefined
                : (p: { progress: number; total?: number; message?: string }) =>
                    void ctx.mcpReq.notify({ method: "notifications/progress", params: { ...p, progressToken: token } }).catch(() => {});
            try {
              return asServerGave(
                await client.request({ method, params: innerParams(request.params, ctx as never) } as never, m.ResultSchema, {
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
  // tasks/* of the tasks extension, which the SDK v2 does not route (task-ext.ts).
  const tasks = await serveTaskMethod(m, client, held, body, header);
  if (tasks) {
    res.writeHead(tasks.status, { "content-type": "application/json" });
    res.end(JSON.stringify(tasks.body));
    return;
  }
  const factory = modernServerFactory(m, client, held);
  const mismatch = await paramHeadersOf(client, req, body);
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
  const handler = m.v2.createMcpHandler(factory, { legacy: "reject", bus: inner.feed.bus });
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

/** Bytes a response may have waiting for its client before the client is cut. */
const MAX_UNREAD = 1024 * 1024;

type HeldCtx = {
  mcpReq: {
    requestState?: () => unknown;
    envelope?: Record<string, unknown>;
    _meta?: { progressToken?: string | number };
    notify(n: unknown): Promise<void>;
  };
};

/**
 * A tools/call at 2026-07-28: asked of the face; when it becomes a proposal the request
 * answers `input_required` at once (a URL elicitation to the proposal's card, when the
 * client can take one, and sealed request state) while the call waits in the gateway; a
 * resumed request reads what it ended with. The call runs once, when it is approved: a
 * resumed request never asks the face again.
 */
async function callHeld(m: ModernModules, client: Client, held: HeldFace, request: { params?: unknown }, ctx: HeldCtx): Promise<unknown> {
  const raw = ctx.mcpReq.requestState?.();
  const name = String((request.params as { name?: unknown } | undefined)?.name ?? "");
  // A state of ours (held.ts `h1.`) resumes a held call; any other is the server's, passed on untouched (input.ts).
  if (raw !== undefined && held.states.isOurs(raw)) {
    const open = held.states.open(raw, held.space, held.seat);
    if (!open.ok) throw new m.v2.ProtocolError(-32602, open.message, { reason: "invalid_request_state" });
    if (open.claims.t !== name)
      throw new m.v2.ProtocolError(-32602, `the request state resumes a call of ${open.claims.t.slice(0, 200)}, not of this tool`, {
        reason: "invalid_request_state",
      });
    const o = held.outcomes.read(open.claims.p);
    if (o.status === "pending") return waitingAnswer(m, held, open.claims.p, raw as string, ctx);
    if (o.status === "unknown")
      throw new m.v2.ProtocolError(-32602, `the outcome of proposal ${open.claims.p} is no longer kept here; the call is not run again`, {
        reason: "invalid_request_state",
      });
    if ("error" in o.result) throw new m.v2.ProtocolError(o.result.error.code, o.result.error.message, o.result.error.data);
    return o.result.result;
  }
  const token = ctx.mcpReq._meta?.progressToken;
  let proposal: ((id: string) => void) | undefined;
  const becameProposal = new Promise<string>((resolve) => (proposal = resolve));
  const call = client.request({ method: "tools/call", params: innerParams(request.params, ctx as never) } as never, m.ResultSchema, {
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
  if ("result" in first) return asServerGave(first.result);
  if ("err" in first) throw asProtocolError(m, first.err);
  const id = first.id;
  held.outcomes.hold(id);
  // The call goes on in the gateway whatever the client does; what it ends with is kept for the resumed request.
  call.then(
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
  );
  const state = held.states.seal({ s: held.space, w: held.seat, p: id, t: name, e: Date.now() + held.ttlMs });
  return waitingAnswer(m, held, id, state, ctx);
}

function waitingAnswer(m: ModernModules, held: HeldFace, proposal: string, requestState: string, ctx: HeldCtx): unknown {
  const caps = ctx.mcpReq.envelope?.["io.modelcontextprotocol/clientCapabilities"] as { elicitation?: { url?: unknown } } | undefined;
  if (caps?.elicitation?.url === undefined) return m.v2.inputRequired({ requestState });
  return m.v2.inputRequired({
    inputRequests: {
      approval: m.v2.inputRequired.elicitUrl({
        message: `This call waits for approval in the space (proposal ${proposal}). Open the card to see it; send the request again once it is decided.`,
        url: held.cardUrl(proposal),
      }),
    },
    requestState,
  });
}

function asProtocolError(m: ModernModules, err: unknown): unknown {
  if (!(err instanceof m.McpError)) return err;
  const prefix = `MCP error ${err.code}: `;
  return new m.v2.ProtocolError(err.code, err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message, err.data);
}

/** A server's input_required as it gave it: without the `content: []` the face's SDK v1 puts in every tool result. */
function asServerGave(result: unknown): unknown {
  if (!isInputRequired(result)) return result;
  const { content, ...rest } = result;
  return Array.isArray(content) && content.length === 0 ? rest : result;
}

/** For a tools/call: why its Mcp-Param-* headers disagree with its arguments under the tool's schema (param-headers.ts), if they do. */
async function paramHeadersOf(client: Client, req: IncomingMessage, body: unknown): Promise<string | undefined> {
  const call = body as { method?: unknown; params?: { name?: unknown; arguments?: unknown } } | null;
  if (call?.method !== "tools/call" || typeof call.params?.name !== "string") return undefined;
  const tool = await findTool(client, call.params.name);
  const decls = declarations(tool?.inputSchema);
  if (decls.length === 0) return undefined;
  return paramMismatch(decls, call.params.arguments, (h) => {
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
