/**
 * The MCP bridge: plugs an existing MCP server (stdio or streamable HTTP) into a space as
 * one participant.
 *
 * ```ts
 * const bridge = await startBridge({
 *   id: "fs",
 *   server: { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", dir] },
 *   client: { url: "ws://127.0.0.1:7420", space: "lab", token },
 *   logger,
 * });
 * ```
 *
 * What it does:
 * - talks to the server through the MCP SDK's `Client` (which negotiates the protocol
 *   version), over a child process's stdio or over streamable HTTP;
 * - joins the space with the participant SDK and forwards every request addressed to it
 *   (tools, resources, prompts, completion, ping, logging, tasks — any method but
 *   `initialize`, which it answers from the session it holds) and returns the server's
 *   JSON-RPC result or error unchanged;
 * - passes progress back to the caller and the caller's cancellation on to the server;
 * - forwards `list_changed`: tools to `system:gateway` (which re-fetches `tools/list`),
 *   resources and prompts to the space;
 * - when the server exits or its HTTP connection breaks, fails every call pending on it at
 *   once (`server_crashed`), answers new calls at once while it is down
 *   (`server_unavailable`), restarts it with exponential backoff and jitter, and announces
 *   its tools again; a call the server leaves unanswered fails after `callTimeoutMs`
 *   (`server_timeout`) and is cancelled at the server;
 * - stays in the space across server restarts; the participant SDK itself reconnects to
 *   the gateway if the gateway restarts.
 *
 * - answers the server's own requests through the space (callbacks.ts): sampling
 *   and elicitation go back to the caller of the call it is serving, roots come from
 *   space.yaml; its log messages during a call go to that call's caller.
 */
import { EventEmitter } from "node:events";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { Transport as McpTransport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { ErrorCode, McpError, type Implementation, type Progress, type Request } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import type { McpServerConfig } from "../../gateway/config.js";
import { ChildStdioTransport } from "./stdio.js";
import { ParticipantClient, type ClientOptions, type IncomingRequest } from "../client.js";
import { RpcError, RpcErrorCodes } from "../errors.js";
import { ServerNotifications, trySend } from "./notifications.js";
import { AnyResult, ServerLink, type Forwarded, type Upstream } from "./server.js";
import { bridgeFailure, type Bridge, type BridgeEvents, type BridgeFailureReason, type BridgeOptions, type BridgeStatus } from "./types.js";

export {
  BridgeErrorCodes,
  type Bridge,
  type BridgeEvents,
  type BridgeFailureReason,
  type BridgeOptions,
  type BridgeStatus,
  type RestartOptions,
  type ServerDown,
} from "./types.js";

/** Starts the server, joins the space, and resolves once both are up. Rejects if either fails the first time. */
export async function startBridge(opts: BridgeOptions): Promise<Bridge> {
  const bridge = new McpBridge(opts);
  await bridge.start();
  return bridge;
}

// ---------------------------------------------------------------------------------------
// Internals

// setTimeout treats anything above 2^31-1 ms as 1 ms.
const MAX_TIMER_MS = 2_147_483_647;

type Settle = (then: () => void, cancelAtServer?: string) => void;

class McpBridge implements Bridge {
  readonly id: string;
  readonly client: ParticipantClient;
  private readonly log: Logger | undefined;
  private readonly callTimeoutMs: number;
  private readonly events = new EventEmitter();
  /** The server's runs, restarts and their backoff (server.ts). */
  private readonly link: ServerLink;

  private state: BridgeStatus = "starting";
  private stopping: Promise<void> | undefined;
  /** List changes, resource updates and subscriptions, log lines (notifications.ts). */
  private readonly notifications: ServerNotifications;

  constructor(opts: BridgeOptions) {
    const { server } = opts;
    if (server.disabled) throw new Error(`MCP server "${opts.id}" is disabled in its config`);
    if ((server.command === undefined) === (server.url === undefined)) throw new Error(`MCP server "${opts.id}": give either command (stdio) or url (streamable HTTP)`);
    this.id = opts.id;
    this.log = opts.logger?.child({ participant: opts.id, component: "mcp-bridge" });
    this.callTimeoutMs = opts.callTimeoutMs ?? 30_000;

    const clientOpts: ClientOptions =
      "transport" in opts.client ? { ...opts.client } : { participantId: opts.id, ...opts.client };
    clientOpts.logger ??= opts.logger;
    this.client = new ParticipantClient(clientOpts);
    this.link = this.serverHost(server, opts);
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const bridge = this;
    this.notifications = new ServerNotifications({
      participant: this.client,
      log: this.log,
      get upstream() {
        return bridge.link.upstream;
      },
    });
    this.client.onRequest((req) => this.handle(req));
    this.client.on("welcome", (w) => {
      if (w.refreshed) return;
      // The gateway asks an `mcp` participant for its tools when it joins; anyone else has to say so.
      if (w.kind !== "mcp" && this.link.available()) this.client.announceTools();
      // Whoever left while we were away (a gateway restart) will not be announced as leaving.
      this.notifications.dropAbsent(new Set(w.participants.map((p) => p.id)));
    });
    this.client.on("presence", (e) => {
      if (e.event === "leave") this.notifications.dropSubscriber(e.participant.id);
    });
    // The participant the server's roots come from says they changed: the server asks again.
    const rootsFrom = server.roots !== undefined && !Array.isArray(server.roots) ? server.roots.from : undefined;
    this.client.onNotification((n) => {
      if (n.method !== "notifications/roots/list_changed" || n.from !== rootsFrom) return;
      const up = this.link.upstream;
      if (up?.ready && !up.lost) up.client.sendRootsListChanged().catch(() => {});
    });
    this.client.on("close", (e) => {
      if (e.reconnecting || this.state === "stopped" || this.state === "starting") return;
      this.log?.warn({ code: e.code, error: e.error?.code }, "left the space for good; stopping the MCP server");
      void this.stop();
    });
  }

  get status(): BridgeStatus {
    return this.state;
  }

  get pid(): number | undefined {
    return this.link.pid;
  }

  get restarts(): number {
    return this.link.restarts;
  }

  get serverInfo(): Implementation | undefined {
    return this.link.serverInfo;
  }

  /** The server connection (server.ts), with what it may reach of the bridge. */
  private serverHost(server: McpServerConfig, opts: BridgeOptions): ServerLink {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const bridge = this;
    return new ServerLink(
      server,
      {
        id: this.id,
        participant: this.client,
        log: this.log,
        get status() {
          return bridge.state;
        },
        get stopping() {
          return bridge.stopping !== undefined;
        },
        setStatus: (status) => this.setStatus(status),
        emit: (event, ...args) => this.emit(event, ...args),
        notification: (up, n) => this.notifications.onNotification(up, n),
        renewSubscriptions: (up) => this.notifications.renew(up),
      },
      { restart: opts.restart, startTimeoutMs: opts.startTimeoutMs },
    );
  }

  on<K extends keyof BridgeEvents>(event: K, listener: (...args: BridgeEvents[K]) => void): () => void {
    this.events.on(event, listener as (...args: unknown[]) => void);
    return () => this.events.off(event, listener as (...args: unknown[]) => void);
  }

  async start(): Promise<void> {
    this.log?.info({ server: this.link.label, transport: this.link.isHttp ? "http" : "stdio" }, "starting the MCP server");
    let up: Upstream;
    try {
      up = await this.link.connect();
    } catch (err) {
      this.setStatus("stopped");
      throw new Error(`MCP server "${this.id}" (${this.link.label}) did not start: ${(err as Error).message}`, { cause: (err as Error).cause });
    }
    // Join after the server is up, so the gateway's first tools/list finds it.
    try {
      await this.client.connect();
      if (this.client.id !== this.id) throw new Error(`joined as "${this.client.id}", not as "${this.id}": check the token`);
    } catch (err) {
      await this.stop();
      throw err;
    }
    if (this.state === "starting") this.setStatus("running");
    this.log?.info({ pid: this.pid, serverInfo: up.client.getServerVersion() }, "MCP server bridged into the space");
    // Joining already made the registry ask for the tools (see the welcome listener).
    if (!up.lost) this.link.ready(up, false);
  }

  stop(): Promise<void> {
    if (this.stopping) return this.stopping;
    this.setStatus("stopped");
    this.link.cancelRestart();
    this.stopping = (async () => {
      await this.client.close("bridge stopped").catch(() => {});
      await this.link.shutdown();
      this.log?.info("bridge stopped");
    })();
    return this.stopping;
  }

  // --- serving the space ---------------------------------------------------------------

  private handle(req: IncomingRequest): unknown {
    const up = this.link.upstream;
    const ok = up !== undefined && up.ready && !up.lost;
    if (req.method === "tools/list" && (this.state === "failed" || (ok && !up.client.getServerCapabilities()?.tools))) return { tools: [] };
    if (!ok) throw this.link.unavailable();
    switch (req.method) {
      case "initialize":
        // The session is ours; a caller gets what the server told us.
        return {
          protocolVersion: protocolVersionOf(up.transport),
          capabilities: up.client.getServerCapabilities() ?? {},
          serverInfo: up.client.getServerVersion(),
          ...(up.client.getInstructions() === undefined ? {} : { instructions: up.client.getInstructions() }),
        };
      case "resources/unsubscribe":
        if (this.notifications.release(req)) return {};
        break;
    }
    return this.forward(up, req);
  }

  private forward(up: Upstream, req: IncomingRequest): Promise<unknown> {
    let params = req.params;
    let callerToken: string | number | undefined;
    let timeoutMs = this.callTimeoutMs;
    if (isRecord(params) && isRecord(params["_meta"])) {
      const { progressToken, ...meta } = params["_meta"];
      const asked = meta["mewgate/timeout_ms"];
      if (typeof asked === "number" && asked > 0) timeoutMs = Math.min(asked, MAX_TIMER_MS);
      if (typeof progressToken === "string" || typeof progressToken === "number") {
        callerToken = progressToken;
        // The SDK puts in a token of its own and maps the server's progress back to us.
        params = { ...params, _meta: meta };
      }
    }
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
          const message = `MCP server "${this.id}" did not answer ${req.method} within ${timeoutMs} ms; the request was cancelled`;
          settle(() => reject(this.failure("server_timeout", message, { timeout_ms: timeoutMs })), "timeout");
        }, timeoutMs);
      };
      // The caller cancelled, or the gateway timed the call out: nobody waits for an answer any more.
      const onCallerAbort = () => settle(() => reject(new RpcError(RpcErrorCodes.internalError, "cancelled")), String(req.signal.reason ?? "cancelled"));
      if (req.signal.aborted) return reject(new RpcError(RpcErrorCodes.internalError, "cancelled"));
      up.inflight.add(call);
      req.signal.addEventListener("abort", onCallerAbort, { once: true });
      arm();
      // Our own timer decides (it restarts on progress); the SDK's is only a backstop.
      const options: RequestOptions = { signal: controller.signal, timeout: MAX_TIMER_MS };
      if (callerToken !== undefined) {
        const token = callerToken;
        options.onprogress = (progress) => {
          if (!up.inflight.has(call)) return;
          arm();
          this.progress(req, token, progress);
        };
      }
      up.client.request({ method: req.method, params } as Request, AnyResult, options).then(
        (result) => {
          if (req.method === "resources/subscribe") this.notifications.subscribed(req);
          settle(() => resolve(result));
        },
        (err: unknown) => this.forwardFailed(up, call, err, settle, reject),
      );
    });
  }

  private forwardFailed(up: Upstream, call: Forwarded, err: unknown, settle: Settle, reject: (e: unknown) => void): void {
    if (!up.inflight.has(call)) return;
    if (err instanceof McpError && err.code !== ErrorCode.ConnectionClosed) {
      // The server's JSON-RPC error, passed on as it came.
      settle(() => reject(new RpcError(err.code, unprefixed(err), err.data)));
      return;
    }
    if (this.link.isHttp) {
      const status = err instanceof StreamableHTTPError ? err.code : undefined;
      // A refusal of this one request (auth, bad request) is not a dead server; 404 is a lost session.
      if (status !== undefined && status >= 400 && status < 500 && status !== 404) {
        settle(() => reject(new RpcError(RpcErrorCodes.internalError, (err as Error).message, { reason: "http_error", status })));
        return;
      }
      this.link.down(up, `could not be reached (${(err as Error).message})`);
      return;
    }
    // stdio: the process is gone or going; its exit status, if known yet, says how.
    const info = this.link.describeEnd(up, "closed the connection");
    settle(() => reject(this.failure("server_crashed", info.message, { exit_code: info.code, signal: info.signal })));
  }

  private progress(req: IncomingRequest, progressToken: string | number, progress: Progress): void {
    // The caller's own envelope id first: the SDK's `onProgress` finds its call by it.
    const correlationId = [req.envelope.id, ...(req.envelope.correlation_id ?? [])];
    trySend(this.log, () => this.client.notify(req.from, "notifications/progress", { ...progress, progressToken }, { correlationId }));
  }

  // --- small things ----------------------------------------------------------------------

  private failure(reason: BridgeFailureReason, message: string, extra: Record<string, unknown> = {}): RpcError {
    return bridgeFailure(this.id, reason, message, extra);
  }

  private setStatus(status: BridgeStatus): void {
    if (this.state === status || this.state === "stopped") return;
    this.state = status;
    this.emit("status", status);
  }

  private emit<K extends keyof BridgeEvents>(event: K, ...args: BridgeEvents[K]): void {
    try {
      this.events.emit(event, ...args);
    } catch (err) {
      this.log?.warn({ err, event }, "bridge event listener threw");
    }
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The SDK prefixes `MCP error <code>: ` to the server's message; the caller gets the server's own words. */
function unprefixed(err: McpError): string {
  const prefix = `MCP error ${err.code}: `;
  return err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
}

function protocolVersionOf(transport: McpTransport): string | undefined {
  if (transport instanceof ChildStdioTransport) return transport.protocolVersion;
  if (transport instanceof StreamableHTTPClientTransport) return transport.protocolVersion;
  return undefined;
}
