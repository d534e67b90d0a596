/**
 * The HTTP + WebSocket server. It owns everything about connections — authentication at
 * the door, size and rate limits, heartbeats, outbound backpressure (each connection's
 * share is in connection.ts) — and hands each authenticated frame to its space's door.
 *
 * Past 500 lines because it is one concern, a connection's way from the port to a door:
 * what it routes elsewhere is already elsewhere (/metrics in operator/metrics-route.ts, a
 * cluster's passing on in cluster/proxy.ts, the descriptor budget in descriptors.ts, each
 * connection's share in connection.ts and sockets.ts); what is left shares the server's state.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { hostname } from "node:os";
import { type WebSocket, WebSocketServer } from "ws";
import type { Logger } from "pino";
import type { Limits, SpaceConfig } from "../config/config.js";
import type { ReloadReport } from "../space/reload.js";
import { reloadSpaces } from "./reload.js";
import { CloseCodes } from "../wire/envelope.js";
import { createLogger } from "../operator/log.js";
import { Space } from "../space/space.js";
import { type Admission, localDoor, type SpaceDoor } from "../space/door.js";
import { Connection } from "./connection.js";
import { fitToDescriptors } from "./descriptors.js";
import { type Evictions, SocketBook } from "./sockets.js";
import { serveMetrics } from "../operator/metrics-route.js";
import { mountOperatorApi } from "../operator/api.js";
import { mountConsole } from "../operator/console.js";
import { mountInjection } from "../operator/inject.js";
import { mountResourceMetadata } from "../operator/resource.js";
import { mountSignIn } from "../operator/signin.js";
import { bearer, resourceUrls } from "../operator/http.js";
import { OriginGuard } from "./origin.js";
import { TokenBook } from "../identity/tokens.js";
import type { StateRecord } from "../space/ledger.js";
import type { StoreOpener } from "../store/index.js";
// Loaded only by a clustered gateway: the NATS client is not paid for at every start.
import type { Cluster } from "../cluster/index.js";
import { passToOwner } from "../cluster/proxy.js";
import { mcpFaceHost, type McpFaceHost } from "./mcp-face.js";

export type HttpHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface GatewayOptions {
  /** The spaces to host. Host, port and limits come from the first one's `gateway` block. */
  spaces: SpaceConfig[];
  host?: string;
  port?: number;
  log?: Logger;
  env?: NodeJS.ProcessEnv;
  /** Serve the spaces together with other gateway processes (`gateway.cluster` or `--cluster`). */
  cluster?:
    | {
        url: string;
        node?: string | undefined;
        lease_ms?: number | undefined;
        advertise?: string | undefined;
        replicas?: number | undefined;
      }
    | undefined;
}

/** ws refuses (closing with 1009) frames beyond this many times the soft limit; below it a too-large frame is answered with an error and the connection is kept. */
const HARD_PAYLOAD_FACTOR = 4;
const HARD_PAYLOAD_CEILING = 64 * 1024 * 1024;
/** A space's lease in a cluster: how soon another node takes it over when its owner dies. */
const DEFAULT_LEASE_MS = 1500;

export class Gateway {
  /** The spaces this process runs (in a cluster, the ones it owns now). */
  readonly spaces = new Map<string, Space>();
  /** Set once a clustered gateway listens (cluster/index.ts). */
  private cluster: Cluster | undefined;
  private readonly http: Server;
  private readonly wss: WebSocketServer;
  private readonly connections = new Set<Connection>();
  private readonly limits: Limits;
  private readonly log: Logger;
  private readonly routes = new Map<string, HttpHandler>();
  /** Routes that serve every path under a prefix (`/api/`, `/ui/`). */
  private readonly prefixes: Array<[string, HttpHandler]> = [];
  private readonly guard: OriginGuard;
  /** Every socket on the port from its first byte, per address, and which have not sent a request yet (sockets.ts). */
  private readonly sockets: SocketBook;
  /** WebSocket connections not yet authenticated. */
  private unauthenticated = 0;
  private lastAcceptError = 0;
  /** The socket ceiling and the descriptor limit it was fitted under, for the start line. */
  private readonly fit: { ceiling: number; descriptors: number | "unlimited" };
  private heartbeat: NodeJS.Timeout | undefined;
  private closing = false;
  /** Reloads run one after another (`reload`). */
  private reloading: Promise<unknown> = Promise.resolve();
  private readonly reloadListeners = new Set<(reports: ReloadReport[]) => void>();

  constructor(private readonly opts: GatewayOptions) {
    const first = opts.spaces[0];
    if (!first) throw new Error("a gateway needs at least one space");
    this.log = opts.log ?? createLogger();
    const ids = new Set<string>();
    for (const config of opts.spaces) {
      if (ids.has(config.space.id)) throw new Error(`space "${config.space.id}" is defined twice`);
      ids.add(config.space.id);
      // A clustered gateway opens a space when it comes to own it.
      if (!this.clustered) this.spaces.set(config.space.id, this.openSpace(config));
    }
    // Once the spaces' journals are open: what is in use now is counted, the rest kept as headroom.
    const fitted = fitToDescriptors(first.gateway.limits, opts.spaces, this.clustered, this.log);
    this.limits = fitted.limits;
    this.fit = { ceiling: fitted.sockets, descriptors: Number.isFinite(fitted.descriptors) ? fitted.descriptors : "unlimited" };
    this.guard = new OriginGuard({
      host: first.gateway.host,
      allowedOrigins: first.gateway.allowed_origins,
      allowedHosts: first.gateway.allowed_hosts,
    });
    this.http = createServer((req, res) => {
      // Its headers are in: no longer half-open, and idle again once answered (keep-alive).
      this.sockets.busy(req.socket);
      res.once("finish", () => this.sockets.idle(req.socket));
      // A socket that came over a ceiling with nothing older to evict is told which.
      const over = this.sockets.refusal(req.socket);
      if (over) {
        res.writeHead(over.status, {
          "content-type": "text/plain",
          connection: "close",
          ...(over.status === 503 ? { "retry-after": "1" } : {}),
        });
        res.end(`${over.reason}\n`);
        return;
      }
      // Before anything else, on every route (DESIGN: refuse before doing work).
      const admitted = this.guard.check(req);
      if (!admitted.ok) {
        this.log.info({ remote: req.socket.remoteAddress, reason: admitted.reason }, "HTTP request refused");
        res.writeHead(403, { "content-type": "text/plain", connection: "close" });
        res.end(`forbidden: ${admitted.reason}\n`);
        return;
      }
      const path = (req.url ?? "/").split("?", 1)[0]!;
      if (this.cluster && passToOwner(req, res, path, this.opts.spaces, this.spaces, this.cluster, this.log)) return;
      const route = this.routes.get(path) ?? this.prefixes.find(([prefix]) => path.startsWith(prefix))?.[1];
      if (route) {
        route(req, res);
        return;
      }
      if (req.method === "GET" && path === "/metrics") return serveMetrics(req, res, [...this.spaces.values()], this.connections.size);
      // /health is MEW's name for it; its scenarios and tools poll it.
      if (req.method === "GET" && (path === "/healthz" || path === "/health")) {
        // Nothing secret: no participant ids, no tokens.
        res.writeHead(200, { "content-type": "application/json" });
        // A cluster node also says which spaces it owns now: what a load balancer or an operator asks.
        const cluster = this.cluster ? { node: this.cluster.node, owns: [...this.spaces.keys()] } : undefined;
        res.end(
          JSON.stringify({
            status: this.closing ? "closing" : "ok",
            protocol: "mew/v0.4",
            spaces: this.spaces.size,
            ...(cluster ? { cluster } : {}),
          }),
        );
        return;
      }
      res.writeHead(404, { "content-type": "text/plain" });
      res.end(
        `not found: mewgate serves GET /ws?space=NAME (WebSocket), GET /healthz${this.routes.size ? `, ${[...this.routes.keys()].join(", ")}` : ""}\n`,
      );
    });
    const maxPayload = Math.min(HARD_PAYLOAD_CEILING, this.limits.max_payload_bytes * HARD_PAYLOAD_FACTOR);
    this.wss = new WebSocketServer({ noServer: true, maxPayload, perMessageDeflate: false, clientTracking: false });
    // Slow or silent clients do not hold a socket for minutes: the request line and
    // headers must arrive within seconds.
    this.http.headersTimeout = Math.max(2000, this.limits.join_timeout_ms * 2);
    this.http.requestTimeout = 60_000;
    // Counted from the first byte; at the ceiling the oldest socket without a request makes room.
    this.sockets = new SocketBook(
      { sockets: this.fit.ceiling, perAddress: this.limits.max_per_address, headersMs: this.http.headersTimeout },
      (evicted) => this.evicted(evicted),
    );
    this.http.on("connection", (socket: Socket) => this.sockets.admit(socket));
    // The last line, should sockets pile up faster than they close: node cuts those beyond
    // it at accept, still within the descriptors kept free beside the ceiling.
    this.http.maxConnections = this.fit.ceiling + Math.floor(fitted.headroom / 2);
    // The operator API, and the web console on it, are part of every gateway.
    mountOperatorApi(this);
    mountConsole(this);
    mountInjection(this);
    mountResourceMetadata(this);
    mountSignIn(this);
    this.http.on("upgrade", (req, socket, head) => {
      this.sockets.upgraded(req.socket);
      // A request target such as "//" is no URL: refused here, since a throw in this handler stops the process.
      const url = requestUrl(req);
      const refusal =
        url === undefined ? { status: "400 Bad Request", reason: "the request target is not a valid path" } : this.refuseUpgrade(req, url);
      if (refusal) {
        this.log.info({ remote: req.socket.remoteAddress, status: refusal.status, reason: refusal.reason }, "WebSocket upgrade refused");
        socket.end(`HTTP/1.1 ${refusal.status}\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n${refusal.reason}\n`);
        return;
      }
      if (url) this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, req, url));
    });
  }

  private openSpace(config: SpaceConfig, store?: StoreOpener<StateRecord>): Space {
    const { book } = TokenBook.load(Object.entries(config.participants), {
      stateDir: config.gateway.state_dir,
      ...(this.opts.env ? { env: this.opts.env } : {}),
    });
    return new Space(config, book, this.log.child({ space: config.space.id }), {
      ...(store ? { store } : {}),
      ...(this.opts.env ? { env: this.opts.env } : {}),
    });
  }

  private get clustered(): boolean {
    return this.opts.cluster !== undefined;
  }

  /** This node's part in a cluster, once it listens. */
  get clusterNode(): Cluster | undefined {
    return this.cluster;
  }

  /** The limits the gateway runs with: the first space's `gateway.limits`, lowered where they did not fit the descriptor limit. */
  get limitsInForce(): Limits {
    return this.limits;
  }

  /**
   * Whether (and why not) a WebSocket upgrade may go ahead, decided from its headers
   * alone: origin and host, shutdown, path, then the connection caps. Past
   * `max_connections` only a human of the space who authenticates at the door gets in,
   * into the operator reserve.
   */
  private refuseUpgrade(req: IncomingMessage, url: URL): { status: string; reason: string } | undefined {
    const admitted = this.guard.check(req);
    if (!admitted.ok) return { status: "403 Forbidden", reason: `forbidden: ${admitted.reason}` };
    if (this.closing) return { status: "503 Service Unavailable", reason: "the gateway is shutting down" };
    // MEW clients connect to the root; ours to /ws.
    if (url.pathname !== "/ws" && url.pathname !== "/")
      return { status: "404 Not Found", reason: "WebSocket connections go to /ws?space=NAME (or /)" };
    const { max_connections, operator_reserve, max_unauthenticated } = this.limits;
    // Over the address's share, or over the port's ceiling, with nothing half-open to evict.
    const over = this.sockets.refusal(req.socket);
    if (over) return { status: over.status === 429 ? "429 Too Many Requests" : "503 Service Unavailable", reason: over.reason };
    const token = bearer(req.headers.authorization) ?? url.searchParams.get("token") ?? undefined;
    if (this.connections.size >= max_connections) {
      const space = this.spaces.get(url.searchParams.get("space") ?? "");
      const auth = token !== undefined && space ? space.authenticate(token) : undefined;
      const operator = auth?.ok === true && space!.config.participants[auth.id]?.kind === "human";
      if (!operator || this.connections.size >= max_connections + operator_reserve) {
        return {
          status: "503 Service Unavailable",
          reason: `the gateway is at its connection limit (gateway.limits.max_connections: ${max_connections}); try again later`,
        };
      }
    }
    if (token === undefined && this.unauthenticated >= max_unauthenticated) {
      return {
        status: "503 Service Unavailable",
        reason: `too many connections waiting to authenticate (gateway.limits.max_unauthenticated: ${max_unauthenticated}); authenticate at connect with Authorization: Bearer`,
      };
    }
    return undefined;
  }

  /**
   * Serves `path` (exact, without query) with `handler` on the gateway's HTTP port. This is
   * how code outside `gateway/` — the space-as-MCP-server's streamable HTTP endpoint — is
   * mounted without the gateway importing it.
   */
  addHttpRoute(path: string, handler: HttpHandler): void {
    if (path === "/ws" || path === "/healthz" || path === "/health" || this.routes.has(path)) throw new Error(`HTTP path ${path} is taken`);
    this.routes.set(path, handler);
  }

  /** Serves every path that starts with `prefix` (which ends in "/") with `handler`, after the Origin and Host checks like every route. */
  addHttpPrefix(prefix: string, handler: HttpHandler): void {
    if (!prefix.endsWith("/") || this.prefixes.some(([p]) => p === prefix))
      throw new Error(`HTTP prefix ${prefix} is taken or does not end in /`);
    this.prefixes.push([prefix, handler]);
  }

  /** What the MCP faces over HTTP may use of this gateway (mcp-face.ts): they are mounted on its port without seeing it. */
  mcpFace(): McpFaceHost {
    return mcpFaceHost({
      spaces: this.spaces,
      limits: () => this.limits,
      addRoute: (path, handler) => this.addHttpRoute(path, handler),
      addPrefix: (prefix, handler) => this.addHttpPrefix(prefix, handler),
    });
  }

  /** Starts listening; resolves once connections are accepted. */
  async listen(): Promise<{ host: string; port: number; url: string }> {
    const first = this.opts.spaces[0]!;
    const host = this.opts.host ?? first.gateway.host;
    const port = this.opts.port ?? first.gateway.port;
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.http.once("error", onError);
      this.http.listen(port, host, () => {
        this.http.off("error", onError);
        resolve();
      });
    });
    const address = this.http.address() as AddressInfo;
    // An accept that fails (EMFILE: descriptors taken by something else) must not stop the
    // gateway: node reports it as the server's error, which would throw with no listener.
    this.http.on("error", (err: NodeJS.ErrnoException) => {
      const now = Date.now();
      if (now - this.lastAcceptError < 1000) return;
      this.lastAcceptError = now;
      this.log.error({ err: err.message, code: err.code, sockets: this.sockets.size }, "could not accept a connection");
    });
    if (this.limits.heartbeat_ms > 0) {
      this.heartbeat = setInterval(() => this.beat(), this.limits.heartbeat_ms);
      this.heartbeat.unref();
    }
    const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
    const url = `ws://${shownHost}:${address.port}`;
    const consoleHost = address.address === "0.0.0.0" || address.address === "::" ? "127.0.0.1" : shownHost;
    const consoleUrl = `http://${consoleHost}:${address.port}/ui/`;
    for (const space of this.spaces.values()) space.consoleUrl = consoleUrl;
    const cluster = this.opts.cluster;
    if (cluster) {
      const node =
        cluster.node ??
        `${hostname()
          .replace(/[^A-Za-z0-9_-]/g, "-")
          .slice(0, 40)}-${address.port}`;
      // Where other nodes send HTTP about the spaces this one owns: a wildcard address is
      // no address to them, so the host name stands in unless one is given.
      const wildcard = address.address === "0.0.0.0" || address.address === "::";
      const http = (cluster.advertise ?? `http://${wildcard ? hostname() : shownHost}:${address.port}`).replace(/\/$/, "");
      try {
        const { Cluster } = await import("../cluster/index.js");
        this.cluster = await Cluster.start(
          { url: cluster.url, node, leaseMs: cluster.lease_ms ?? DEFAULT_LEASE_MS, replicas: cluster.replicas },
          {
            log: this.log,
            httpUrl: () => http,
            open: (config, store) => {
              const space = this.openSpace(config, store);
              space.consoleUrl = consoleUrl;
              this.spaces.set(config.space.id, space);
              return space;
            },
            closed: (space) => {
              if (this.spaces.get(space.id) === space) this.spaces.delete(space.id);
            },
          },
          this.opts.spaces,
        );
      } catch (err) {
        await new Promise<void>((resolve) => this.http.close(() => resolve()));
        throw err;
      }
      this.log.info({ node, owns: [...this.spaces.keys()] }, "joined the cluster");
    }
    this.log.info({ url, spaces: [...this.spaces.keys()], sockets: this.fit }, "gateway listening");
    return { host: address.address, port: address.port, url };
  }

  /**
   * Reads each space's space.yaml again (the file it started from) and applies it without a
   * restart (space/reload.ts): `space` names one, else every space this process runs. The
   * files are parsed and validated with the code a start uses and their tokens loaded
   * before any space changes: an invalid file throws its `ConfigError` (file:line:col) and
   * nothing changes. `by` is who asked, for the audit trail. One reload at a time.
   */
  reload(opts: { space?: string | undefined; by: string }): Promise<ReloadReport[]> {
    const targets =
      opts.space === undefined ? [...this.spaces.values()] : [this.spaces.get(opts.space)].filter((s): s is Space => s !== undefined);
    if (opts.space !== undefined && targets.length === 0)
      return Promise.reject(new Error(`no space "${opts.space.slice(0, 64)}" runs in this process`));
    const run = this.reloading
      .then(() => reloadSpaces(targets, this.opts.env ?? process.env, opts.by))
      .then((reports) => {
        for (const listener of this.reloadListeners) {
          try {
            listener(reports);
          } catch (err) {
            this.log.error({ err: String(err) }, "a reload listener failed");
          }
        }
        return reports;
      });
    this.reloading = run.catch(() => {});
    return run;
  }

  /** Hears each reload once it applied (`mewgate up` starts and stops the MCP servers it adds and removes). Returns the unsubscribe. */
  onReload(listener: (reports: ReloadReport[]) => void): () => void {
    this.reloadListeners.add(listener);
    return () => this.reloadListeners.delete(listener);
  }

  /** The environment space.yaml is read with, by a reload and by an accepted suggestion's check. */
  configEnv(): NodeJS.ProcessEnv {
    return this.opts.env ?? process.env;
  }

  /** Graceful shutdown: tell every participant, give sockets a moment to close, then stop. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.heartbeat);
    this.sockets.close();
    // Each space's store flushes what it was writing before the gateway says it stopped.
    // A cluster node hands its spaces over first: another node owns them at once.
    // Bounded: a bus that went away with this node (or hangs) must not hold the shutdown.
    const left = this.cluster?.stop().catch((err: unknown) => this.log.error({ err: String(err) }, "leaving the cluster failed"));
    if (left)
      await Promise.race([
        left,
        new Promise<void>((r) =>
          setTimeout(() => {
            this.log.warn("leaving the cluster took too long; stopping anyway");
            return r();
          }, 2000).unref(),
        ),
      ]);
    const flushed = [...this.spaces.values()].map((space) => space.closeAll(CloseCodes.goingAway, "gateway shutting down"));
    for (const c of this.connections) c.close(CloseCodes.goingAway, "gateway shutting down");
    const deadline = Date.now() + 2000;
    while (this.connections.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const c of this.connections) c.ws.terminate();
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    // Idle keep-alive HTTP sockets (an MCP client between requests) would hold close() open.
    this.http.closeAllConnections();
    await closed;
    const failed = (await Promise.allSettled(flushed)).filter((r) => r.status === "rejected");
    for (const r of failed) this.log.error({ err: String((r as PromiseRejectedResult).reason) }, "a space's state could not be flushed");
    this.log.info("gateway stopped");
  }

  private beat(): void {
    for (const c of this.connections) {
      if (!c.alive) {
        c.log.info("no pong since the last ping; dropping");
        c.ws.terminate();
        continue;
      }
      c.alive = false;
      c.ws.ping();
    }
  }

  private accept(ws: WebSocket, req: IncomingMessage, url: URL): void {
    const address = req.socket.remoteAddress ?? "unknown";
    const conn = new Connection(ws, this.limits, this.log, address);
    this.connections.add(conn);
    this.unauthenticated++;
    ws.on("close", () => {
      this.connections.delete(conn);
      if (!conn.authenticated) this.unauthenticated--;
      conn.ended();
    });
    const token = bearer(req.headers.authorization) ?? url.searchParams.get("token") ?? undefined;
    const spaceId = url.searchParams.get("space") ?? undefined;
    const claimed = url.searchParams.get("participant") ?? url.searchParams.get("participantId") ?? undefined;
    // Unset in the URL, the participant's `echo` in space.yaml applies.
    const echoParam = url.searchParams.get("echo");
    const echo = echoParam === null ? undefined : echoParam === "1" || echoParam === "true";
    const audiences = resourceUrls(req);
    if (token !== undefined && spaceId !== undefined) {
      this.admit(conn, { token, space: spaceId, claimed, echo, audiences });
      return;
    }
    // A MEW client names its space in its first frame (spec: connect to `/`, then join),
    // and authenticates there too unless it did at the door. The door's token wins: a join
    // frame cannot swap the identity the connection presented.
    conn.awaitJoin(
      this.limits.join_timeout_ms,
      (join) =>
        this.admit(conn, {
          token: token ?? join.token!,
          space: spaceId ?? join.space,
          claimed: join.participantId ?? join.participant_id ?? claimed,
          echo,
          audiences,
        }),
      token === undefined ? "token" : "space",
    );
  }

  private admit(
    conn: Connection,
    who: { token: string; space: string | undefined; claimed: string | undefined; echo: boolean | undefined; audiences: string[] },
  ): void {
    if (who.space === undefined) return conn.close(CloseCodes.badRequest, "missing space: connect to /ws?space=NAME");
    const door = this.door(who.space);
    if (!door) return conn.close(CloseCodes.unknownSpace, `no space named "${who.space.slice(0, 64)}"`);
    const settle = (admission: Admission) => {
      if (!admission.ok) {
        conn.log.info({ code: admission.code }, "refused");
        return conn.close(admission.code, admission.reason);
      }
      // A socket that closed while a remote space was admitting it was counted off then.
      if (this.connections.has(conn)) this.unauthenticated--;
      conn.attach(admission.port);
    };
    conn.admitting();
    let admission: Admission | Promise<Admission>;
    try {
      admission = door.admit({ token: who.token, claimed: who.claimed, echo: who.echo, audiences: who.audiences }, conn);
    } catch (err) {
      conn.log.error({ err: String(err) }, "admission failed");
      return conn.close(CloseCodes.tryAgain, "the gateway could not admit you; try again");
    }
    if (!(admission instanceof Promise)) return settle(admission);
    admission.then(settle, (err: unknown) => {
      conn.log.warn({ err: String(err) }, "admission failed");
      conn.close(CloseCodes.tryAgain, "the space is not reachable right now; try again");
    });
  }

  /** Once a second at most: what was evicted to make room, and from where. */
  private evicted(e: Evictions): void {
    if (e.sockets + e.max_per_address > 0)
      this.log.warn({ evicted: e }, "evicted connections that had not sent a request, to make room for new ones");
    else this.log.info({ evicted: e }, "closed connections that did not send their request headers in time");
  }

  /** Where connections to space `id` go: its local door, or a cluster's. */
  private door(id: string): SpaceDoor | undefined {
    if (this.cluster) return this.cluster.door(id);
    const space = this.spaces.get(id);
    return space ? localDoor(space) : undefined;
  }
}

/** The request's target as a URL, or undefined when it is none (`//`, `//[`, `//a:b@`). */
function requestUrl(req: IncomingMessage): URL | undefined {
  try {
    return new URL(req.url ?? "/", "http://gateway");
  } catch {
    return undefined;
  }
}
