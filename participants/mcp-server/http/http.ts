/**
 * The space as an MCP server over streamable HTTP, served by the gateway itself on one of
 * its HTTP routes (default `/mcp`).
 *
 * - It sees the gateway only through `McpFaceHost` (gateway/edge/mcp-face.ts): the spaces,
 *   their bearer check, an in-process seat, a session held to its token, its routes.
 * - Every request carries `Authorization: Bearer <participant token>`; the space's token
 *   book decides who it is, exactly as for a WebSocket connection. The space comes from
 *   `?space=ID` or the `Mcp-Space` header, or is the only space the gateway hosts
 *   (http-who.ts: who presents a request, what it addresses, the answer to a refusal).
 * - `initialize` opens a stateful MCP session (`Mcp-Session-Id`) with its own SDK transport
 *   and its own `SpaceMcpServer`. Later requests must present the same participant's token.
 * - All sessions of one participant share one in-process connection to the space: a
 *   second connection under the same id would replace the first (close 4409), and an MCP
 *   client often opens a new session before the old one is gone. The participant leaves
 *   the space when its last session ends.
 * - `<path>/<participant>` (`/mcp/fs`) serves that one participant as itself (face/face.ts,
 *   `OnlyParticipant`), to the same tokens, under the same policy. A session belongs to
 *   the path that opened it: presented at another, it is refused.
 * - A session ends on `DELETE`, after `idleTimeoutMs` without any request (an open GET
 *   stream does not count), when the participant's connection ends (gateway shutdown,
 *   replaced), when the token that opened it is revoked, rotated or expires (the space holds
 *   it to that token: space/sessions.ts), or on `close()`. At most `maxSessions` are open at once.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { Logger } from "pino";
import type { McpFaceHost, McpFaceSpace } from "../../../gateway/index.js";
import type { ParticipantClient } from "../../client.js";
import { header, readJson, rpcError, RPC_INTERNAL_ERROR, RPC_PARSE_ERROR, RPC_SERVER_ERROR, RPC_SESSION_NOT_FOUND } from "./http-io.js";
import type { SpaceMcpServer } from "../face/server.js";
import { faceTrace } from "../face/face-trace.js";
import { identify, onlyOf, refuse } from "./http-who.js";
import { HeldCalls, type HoldOptions } from "../held/held.js";
import { InnerPool, isModern, loadModernModules, serveModern, type Inner, type ModernModules } from "../modern/modern.js";

/*
 * Only type imports above: this module is on the gateway's start path (`mewgate gateway`
 * mounts /mcp), and the MCP SDK, the participant client and the space-as-MCP-server cost
 * more to load than the whole gateway. They are loaded by the first request to the route.
 */

/** What serving MCP over HTTP needs, loaded on the first request (see `loadMcpHttpModules`). */
export interface McpHttpModules {
  StreamableHTTPServerTransport: typeof import("@modelcontextprotocol/sdk/server/streamableHttp.js").StreamableHTTPServerTransport;
  isInitializeRequest: typeof import("@modelcontextprotocol/sdk/types.js").isInitializeRequest;
  ParticipantClient: typeof import("../../client.js").ParticipantClient;
  createSpaceMcpServer: typeof import("../face/server.js").createSpaceMcpServer;
  describeParticipant: typeof import("../face/face.js").describeParticipant;
}

let shared: Promise<McpHttpModules> | undefined;

/**
 * Loads the modules the endpoint needs, once per process. A failed load is not kept: the
 * next request tries again (a missing file may have been restored; an evaluation error
 * fails again, and says so again).
 */
export function loadMcpHttpModules(): Promise<McpHttpModules> {
  if (shared) return shared;
  const loading = Promise.all([
    import("@modelcontextprotocol/sdk/server/streamableHttp.js"),
    import("@modelcontextprotocol/sdk/types.js"),
    import("../../client.js"),
    import("../face/server.js"),
    import("../face/face.js"),
  ]).then(([http, types, client, server, face]) => ({
    StreamableHTTPServerTransport: http.StreamableHTTPServerTransport,
    isInitializeRequest: types.isInitializeRequest,
    ParticipantClient: client.ParticipantClient,
    createSpaceMcpServer: server.createSpaceMcpServer,
    describeParticipant: face.describeParticipant,
  }));
  shared = loading;
  loading.catch(() => {
    if (shared === loading) shared = undefined;
  });
  return loading;
}

export interface McpHttpOptions {
  /** Default `/mcp`. */
  path?: string | undefined;
  /** A session with no open request for this long is closed. Default `gateway.limits.mcp_idle_ms` (30 min). */
  idleTimeoutMs?: number | undefined;
  /** Most sessions open at once; past it `initialize` gets 503. Default `gateway.limits.mcp_sessions` (256). */
  maxSessions?: number | undefined;
  /** Largest `initialize` body read before a session exists. Default 4 MiB (the SDK's own limit for later requests). */
  maxBodyBytes?: number | undefined;
  approvalProgressMs?: number | undefined;
  /** Most tasks one participant holds at once (tasks/tasks.ts). Default 1000. */
  maxTasks?: number | undefined;
  /** How a 2026-07-28 request that waits for a person is held (held/held.ts, modern/modern-held.ts). */
  hold?: HoldOptions | undefined;
  logger?: Logger | undefined;
  /** How the endpoint's modules are loaded on its first request. Default `loadMcpHttpModules` (tests replace it). */
  loadModules?: (() => Promise<McpHttpModules>) | undefined;
}

export interface McpHttpMount {
  readonly path: string;
  /** Open MCP sessions. */
  readonly sessions: number;
  /** Ends every session; the route answers 503 afterwards. */
  close(): Promise<void>;
}

interface Pooled {
  key: string;
  client: ParticipantClient;
  ready: Promise<unknown>;
  sessions: Set<Session>;
  users: number;
}

interface Session {
  id: string | undefined;
  space: string;
  participant: string;
  /** The participant this session serves as itself (`/mcp/<participant>`), if any. */
  only: string | undefined;
  pooled: Pooled;
  server: SpaceMcpServer;
  transport: StreamableHTTPServerTransport;
  open: number;
  lastSeen: number;
  closed: boolean;
  /** Stops holding the session to the token that opened it (space/sessions.ts), once it ends. */
  unhold?: (() => void) | undefined;
}

const DEFAULT_IDLE_MS = 30 * 60_000;
const DEFAULT_MAX_BODY = 4 * 1024 * 1024;

/**
 * Serves the space-as-MCP-server on the gateway's HTTP port. The route exists from this
 * call on; the modules behind it are loaded by its first request (concurrent first
 * requests wait for the same load). If they cannot be loaded, requests get a 500 saying
 * so and the failure is logged; the next request tries again.
 */
export function mountHttp(gateway: { mcpFace(): McpFaceHost }, opts: McpHttpOptions = {}): McpHttpMount {
  const host = gateway.mcpFace();
  const path = opts.path ?? "/mcp";
  const idleMs = opts.idleTimeoutMs ?? host.limits.mcp_idle_ms ?? DEFAULT_IDLE_MS;
  const maxSessions = opts.maxSessions ?? host.limits.mcp_sessions;
  /** Sessions being opened (their initialize is in progress): they count against the cap. */
  let opening = 0;
  const maxBody = opts.maxBodyBytes ?? DEFAULT_MAX_BODY;
  const log = opts.logger?.child({ component: "mcp-http" });
  const sessions = new Map<string, Session>();
  const pool = new Map<string, Pooled>();
  let closing = false;
  /** Set once the modules are loaded: later requests do not wait on a promise. */
  let mods: McpHttpModules | undefined;
  let loading: Promise<McpHttpModules> | undefined;

  function load(): Promise<McpHttpModules> {
    if (loading) return loading;
    const started = performance.now();
    const attempt = (opts.loadModules ?? loadMcpHttpModules)().then(
      (m) => {
        mods = m;
        log?.debug({ ms: Math.round(performance.now() - started) }, "MCP server modules loaded");
        return m;
      },
      (err: Error) => {
        if (loading === attempt) loading = undefined;
        log?.error({ err }, "could not load the MCP server modules; /mcp requests fail with 500 until a load succeeds");
        throw err;
      },
    );
    loading = attempt;
    return attempt;
  }

  const sweeper = setInterval(
    () => {
      const now = Date.now();
      for (const s of sessions.values()) {
        if (s.open === 0 && now - s.lastSeen > idleMs) {
          log?.info({ participant: s.participant }, "MCP session idle; closing it");
          void closeSession(s);
        }
      }
    },
    Math.max(250, Math.min(60_000, Math.floor(idleMs / 2))),
  );
  sweeper.unref();

  async function acquire(m: McpHttpModules, space: McpFaceSpace, participant: string): Promise<Pooled> {
    const key = `${space.id}\u0000${participant}`;
    let p = pool.get(key);
    if (!p || p.client.status === "closed") {
      const client = new m.ParticipantClient({
        transport: () => space.connect(participant),
        reconnect: false,
        logger: opts.logger,
      });
      const created: Pooled = { key, client, ready: client.connect(), sessions: new Set(), users: 0 };
      created.ready.catch(() => {});
      client.on("close", (e) => {
        if (e.reconnecting) return;
        if (pool.get(key) === created) pool.delete(key);
        for (const s of [...created.sessions]) void closeSession(s);
      });
      pool.set(key, created);
      p = created;
    }
    p.users++;
    try {
      await p.ready;
    } catch (err) {
      release(p);
      throw err;
    }
    return p;
  }

  /** 2026-07-28 requests (modern/modern.ts): the SDK v2's modules, and one in-process client of the face per seat and path. */
  let modern: Promise<ModernModules> | undefined;
  const held = new HeldCalls({ progressMs: opts.approvalProgressMs, ...opts.hold });
  const inners = new InnerPool(async (space: McpFaceSpace, participant: string, onlyId: string | undefined, mm: ModernModules) => {
    const m = await load();
    const pooled = await acquire(m, space, participant);
    try {
      const only = onlyId === undefined ? undefined : await m.describeParticipant(pooled.client, onlyId);
      const server = m.createSpaceMcpServer({
        client: pooled.client,
        logger: opts.logger,
        approvalProgressMs: opts.approvalProgressMs,
        maxTasks: opts.maxTasks,
        only,
        trace: faceTrace(space.tracing, space.id, participant, "tcp", "2026-07-28"),
        takesInput: true,
      });
      return {
        mm,
        server,
        done: () => release(pooled),
        ended: (f: () => void) => void pooled.client.on("close", (e) => void (e.reconnecting ? undefined : f())),
      };
    } catch (err) {
      release(pooled);
      throw err;
    }
  });

  function release(p: Pooled): void {
    if (--p.users > 0) return;
    if (pool.get(p.key) === p) pool.delete(p.key);
    void p.client.close("no MCP sessions left");
  }

  async function closeSession(s: Session): Promise<void> {
    if (s.closed) return;
    s.closed = true;
    s.unhold?.();
    if (s.id !== undefined) sessions.delete(s.id);
    s.pooled.sessions.delete(s);
    try {
      await s.server.close();
    } catch (err) {
      log?.debug({ err: (err as Error).message }, "closing an MCP session");
    }
    release(s.pooled);
    log?.info({ participant: s.participant, session: s.id }, "MCP session closed");
  }

  async function openSession(
    m: McpHttpModules,
    space: McpFaceSpace,
    participant: string,
    onlyId: string | undefined,
    digest: string | undefined,
  ): Promise<Session> {
    const pooled = await acquire(m, space, participant);
    let only: Awaited<ReturnType<McpHttpModules["describeParticipant"]>> | undefined;
    try {
      only = onlyId === undefined ? undefined : await m.describeParticipant(pooled.client, onlyId);
    } catch (err) {
      release(pooled);
      throw err;
    }
    const server = m.createSpaceMcpServer({
      client: pooled.client,
      logger: opts.logger,
      approvalProgressMs: opts.approvalProgressMs,
      maxTasks: opts.maxTasks,
      only,
      trace: faceTrace(space.tracing, space.id, participant, "tcp"),
    });
    const session: Session = {
      id: undefined,
      space: space.id,
      participant,
      only: onlyId,
      pooled,
      server,
      transport: undefined as never,
      open: 0,
      lastSeen: Date.now(),
      closed: false,
    };
    session.transport = new m.StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        session.id = id;
        sessions.set(id, session);
        log?.info({ participant, session: id }, "MCP session opened");
      },
      onsessionclosed: () => void closeSession(session),
    });
    // Set before connect: the SDK chains the transport's own handler before its own.
    session.transport.onclose = () => void closeSession(session);
    pooled.sessions.add(session);
    // The token that opened it revoked, rotated or expired: the session ends, its open stream with it.
    if (digest !== undefined) session.unhold = space.hold(participant, digest, "MCP session", () => void closeSession(session));
    await server.connect(session.transport);
    return session;
  }

  async function serve(s: Session, req: IncomingMessage, res: ServerResponse, body?: unknown): Promise<void> {
    s.lastSeen = Date.now();
    // A request in progress keeps its session alive; the standalone GET stream, which a
    // client holds open for as long as it likes, does not: idle means no requests.
    if (req.method !== "GET") {
      s.open++;
      res.once("close", () => {
        s.open--;
        s.lastSeen = Date.now();
      });
    }
    await s.transport.handleRequest(req, res, body);
  }

  async function handle(m: McpHttpModules, req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (closing) return rpcError(res, 503, RPC_SERVER_ERROR, "the MCP endpoint is shutting down", "closing");
    const url = new URL(req.url ?? "/", "http://gateway");
    const only = onlyOf(path, url.pathname);
    if (only === null)
      return rpcError(res, 404, RPC_SERVER_ERROR, `not found: serve one participant at ${path}/<participant>`, "not_found");
    const sid = header(req, "mcp-session-id");
    const session = sid === undefined ? undefined : sessions.get(sid);
    const suffix = only === undefined ? path : `${path}/${encodeURIComponent(only)}`;
    const who = await identify(host, req, url, session?.space, suffix);
    if (!who.ok) return refuse(req, res, who, suffix);
    if (sid !== undefined) {
      // 404 tells an MCP client to start a new session (the spec's rule for unknown ids).
      if (!session) return rpcError(res, 404, RPC_SESSION_NOT_FOUND, "session not found: initialize a new one", "unknown_session");
      if (session.space !== who.space.id || session.participant !== who.participant) {
        return rpcError(res, 403, RPC_SERVER_ERROR, "this session belongs to another participant", "forbidden");
      }
      if (session.only !== only)
        return rpcError(
          res,
          403,
          RPC_SERVER_ERROR,
          `this session was opened at ${session.only === undefined ? path : `${path}/${session.only}`}; use it there`,
          "forbidden",
        );
      return serve(session, req, res);
    }
    if (req.method !== "POST") return rpcError(res, 400, RPC_SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required", "bad_request");
    // Read the body ourselves: only an initialize may open a session (and join the space).
    const read = await readJson(req, maxBody);
    if (!read.ok) {
      // The rest of an oversized body is not read: close the connection after answering.
      if (read.status === 413) res.once("finish", () => req.destroy());
      return rpcError(
        res,
        read.status,
        read.status === 413 ? RPC_SERVER_ERROR : RPC_PARSE_ERROR,
        read.message,
        read.status === 413 ? "too_large" : "parse_error",
        read.status === 413 ? { connection: "close" } : undefined,
      );
    }
    // A 2026-07-28 request: stateless, answered at once (modern/modern.ts).
    modern ??= loadModernModules();
    const mm = await modern;
    if (isModern(mm, req, read.body)) {
      if (who.space.closed) return rpcError(res, 503, RPC_SERVER_ERROR, `space "${who.space.id}" has shut down`, "unavailable");
      if (only !== undefined && !who.space.declares(only)) {
        return rpcError(
          res,
          404,
          RPC_SERVER_ERROR,
          `space "${who.space.id}" declares no participant "${only.slice(0, 64)}"`,
          "unknown_participant",
        );
      }
      let inner: Inner;
      try {
        inner = await inners.get(who.space, who.participant, only, mm);
      } catch (err) {
        return rpcError(res, 503, RPC_SERVER_ERROR, `could not join space "${who.space.id}": ${(err as Error).message}`, "unavailable");
      }
      return serveModern(mm, inner, req, res, read.body, held.face(req, who.space, who.participant));
    }
    const initializes = Array.isArray(read.body) ? read.body.some((msg) => m.isInitializeRequest(msg)) : m.isInitializeRequest(read.body);
    if (!initializes) return rpcError(res, 400, RPC_SERVER_ERROR, "Bad Request: no session; send initialize first", "bad_request");
    if (who.space.closed) return rpcError(res, 503, RPC_SERVER_ERROR, `space "${who.space.id}" has shut down`, "unavailable");
    if (only !== undefined && !who.space.declares(only)) {
      return rpcError(
        res,
        404,
        RPC_SERVER_ERROR,
        `space "${who.space.id}" declares no participant "${only.slice(0, 64)}"`,
        "unknown_participant",
      );
    }
    // Each session holds an SDK server and transport: their number is bounded.
    if (sessions.size + opening >= maxSessions) {
      log?.warn({ participant: who.participant, sessions: sessions.size }, "MCP session cap reached");
      return rpcError(
        res,
        503,
        RPC_SERVER_ERROR,
        `the gateway has ${maxSessions} MCP sessions open, its limit (gateway.limits.mcp_sessions); close one or try again later`,
        "too_many_sessions",
        { "retry-after": "30" },
      );
    }
    let s: Session;
    // Counted from here until the SDK has registered the session (or refused it).
    opening++;
    try {
      try {
        s = await openSession(m, who.space, who.participant, only, who.digest);
      } catch (err) {
        log?.warn({ participant: who.participant, err: (err as Error).message }, "could not join the space for an MCP session");
        return rpcError(res, 503, RPC_SERVER_ERROR, `could not join space "${who.space.id}": ${(err as Error).message}`, "unavailable");
      }
      await serve(s, req, res, read.body);
    } finally {
      opening--;
    }
    // An initialize the SDK refused opened no session: nothing will ever address this one.
    if (s.id === undefined) await closeSession(s);
  }

  /** Answers a request that arrived before the modules were loaded, once they are (or are not). */
  async function handleFirst(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (closing) return rpcError(res, 503, RPC_SERVER_ERROR, "the MCP endpoint is shutting down", "closing");
    let m: McpHttpModules;
    try {
      m = await load();
    } catch (err) {
      return rpcError(
        res,
        500,
        RPC_INTERNAL_ERROR,
        `the MCP endpoint is unavailable: the gateway could not load its MCP server modules (${(err as Error).message})`,
        "unavailable",
      );
    }
    return handle(m, req, res);
  }

  // RFC 9728 protected-resource metadata for this path is served by the gateway (gateway/operator/resource.ts).

  const route = (req: IncomingMessage, res: ServerResponse) => {
    (mods ? handle(mods, req, res) : handleFirst(req, res)).catch((err: Error) => {
      log?.error({ err }, "MCP HTTP request failed");
      if (!res.headersSent) rpcError(res, 500, RPC_INTERNAL_ERROR, "internal error");
      else res.end();
    });
  };
  host.route(path, `${path}/`, route);

  return {
    path,
    get sessions() {
      return sessions.size;
    },
    async close() {
      closing = true;
      clearInterval(sweeper);
      const all = new Set<Session>(sessions.values());
      for (const p of pool.values()) for (const s of p.sessions) all.add(s);
      await Promise.all([...all].map((s) => closeSession(s)));
      await inners.closeAll();
    },
  };
}
