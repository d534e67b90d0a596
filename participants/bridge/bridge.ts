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
import { basename } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { Transport as McpTransport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { ErrorCode, McpError, type Implementation, type Notification, type Progress, type Request } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import * as z from "zod";
import type { McpServerConfig } from "../../gateway/config.js";
import { clientCapabilities, installCallbacks, soleCaller, type ServedCall } from "./callbacks.js";
import { ChildStdioTransport } from "./stdio.js";
import { ParticipantClient, type ClientOptions, type IncomingRequest } from "../client.js";
import { RpcError, RpcErrorCodes } from "../errors.js";
import { bridgeFailure, type Bridge, type BridgeEvents, type BridgeFailureReason, type BridgeOptions, type BridgeStatus, type RestartOptions, type ServerDown } from "./types.js";

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

const CLIENT_INFO = { name: "mewgate-bridge", version: "0.1.0" };
/** A run this long resets the restart backoff. */
const STABLE_MS = 10_000;
/** After an HTTP transport error, the server must answer a ping within this to count as alive. */
const PROBE_TIMEOUT_MS = 2000;
// setTimeout treats anything above 2^31-1 ms as 1 ms.
const MAX_TIMER_MS = 2_147_483_647;
/** Results travel as they are: no schema of ours between the server and the caller. */
const AnyResult = z.unknown();

/** One connection to the server: a process and its `Client`, or an HTTP session. Replaced on restart. */
interface Upstream {
  client: Client;
  transport: McpTransport;
  /** Initialized: calls may be forwarded, and its end is a crash. */
  ready: boolean;
  lost: boolean;
  readyAt: number;
  probing: boolean;
  readonly inflight: Set<Forwarded>;
}

interface Forwarded extends ServedCall {
  fail(error: RpcError): void;
}

type Settle = (then: () => void, cancelAtServer?: string) => void;

class McpBridge implements Bridge {
  readonly id: string;
  readonly client: ParticipantClient;
  private readonly server: McpServerConfig;
  private readonly isHttp: boolean;
  /** The command or URL, for messages: never the env, the headers, or a URL's query. */
  private readonly label: string;
  private readonly log: Logger | undefined;
  private readonly restartOpts: Required<{ [K in keyof RestartOptions]: number }>;
  private readonly callTimeoutMs: number;
  private readonly startTimeoutMs: number;
  private readonly events = new EventEmitter();

  private state: BridgeStatus = "starting";
  private upstream: Upstream | undefined;
  private attempts = 0;
  private restartCount = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  /** What happened to the server last, for `server_unavailable` messages. */
  private lastDown = "";
  private stopping: Promise<void> | undefined;
  /** Resource URI → participants subscribed to it through us. */
  private readonly subscribers = new Map<string, Set<string>>();

  constructor(opts: BridgeOptions) {
    const { server } = opts;
    if (server.disabled) throw new Error(`MCP server "${opts.id}" is disabled in its config`);
    if ((server.command === undefined) === (server.url === undefined)) throw new Error(`MCP server "${opts.id}": give either command (stdio) or url (streamable HTTP)`);
    this.id = opts.id;
    this.server = server;
    this.isHttp = server.url !== undefined;
    this.label = this.isHttp ? safeUrl(server.url!) : commandLabel(server.command!, server.args);
    this.log = opts.logger?.child({ participant: opts.id, component: "mcp-bridge" });
    this.restartOpts = {
      initialDelayMs: opts.restart?.initialDelayMs ?? 250,
      maxDelayMs: opts.restart?.maxDelayMs ?? 30_000,
      maxRestarts: opts.restart?.maxRestarts ?? Number.POSITIVE_INFINITY,
    };
    this.callTimeoutMs = opts.callTimeoutMs ?? 30_000;
    this.startTimeoutMs = opts.startTimeoutMs ?? 60_000;

    const clientOpts: ClientOptions =
      "transport" in opts.client ? { ...opts.client } : { participantId: opts.id, ...opts.client };
    clientOpts.logger ??= opts.logger;
    this.client = new ParticipantClient(clientOpts);
    this.client.onRequest((req) => this.handle(req));
    this.client.on("welcome", (w) => {
      if (w.refreshed) return;
      // The gateway asks an `mcp` participant for its tools when it joins; anyone else has to say so.
      if (w.kind !== "mcp" && this.available()) this.client.announceTools();
      // Whoever left while we were away (a gateway restart) will not be announced as leaving.
      const present = new Set(w.participants.map((p) => p.id));
      const gone = new Set([...this.subscribers.values()].flatMap((subs) => [...subs].filter((who) => !present.has(who))));
      for (const who of gone) this.dropSubscriber(who);
    });
    this.client.on("presence", (e) => {
      if (e.event === "leave") this.dropSubscriber(e.participant.id);
    });
    // The participant the server's roots come from says they changed: the server asks again.
    const rootsFrom = server.roots !== undefined && !Array.isArray(server.roots) ? server.roots.from : undefined;
    this.client.onNotification((n) => {
      if (n.method !== "notifications/roots/list_changed" || n.from !== rootsFrom) return;
      const up = this.upstream;
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
    const up = this.upstream;
    return up && !up.lost && up.transport instanceof ChildStdioTransport ? up.transport.pid : undefined;
  }

  get restarts(): number {
    return this.restartCount;
  }

  get serverInfo(): Implementation | undefined {
    return this.upstream?.client.getServerVersion();
  }

  on<K extends keyof BridgeEvents>(event: K, listener: (...args: BridgeEvents[K]) => void): () => void {
    this.events.on(event, listener as (...args: unknown[]) => void);
    return () => this.events.off(event, listener as (...args: unknown[]) => void);
  }

  async start(): Promise<void> {
    this.log?.info({ server: this.label, transport: this.isHttp ? "http" : "stdio" }, "starting the MCP server");
    let up: Upstream;
    try {
      up = await this.connect();
    } catch (err) {
      this.setStatus("stopped");
      throw new Error(`MCP server "${this.id}" (${this.label}) did not start: ${(err as Error).message}`, { cause: (err as Error).cause });
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
    if (!up.lost) this.ready(up, false);
  }

  stop(): Promise<void> {
    if (this.stopping) return this.stopping;
    this.setStatus("stopped");
    clearTimeout(this.restartTimer);
    this.stopping = (async () => {
      await this.client.close("bridge stopped").catch(() => {});
      const up = this.upstream;
      this.upstream = undefined;
      if (up) {
        // Tell an HTTP server the session is over (best effort, briefly); a process gets its stdin closed.
        if (up.ready && !up.lost && up.transport instanceof StreamableHTTPClientTransport) {
          const transport = up.transport;
          await Promise.race([transport.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000).unref())]);
        }
        await this.close(up);
      }
      this.log?.info("bridge stopped");
    })();
    return this.stopping;
  }

  // --- the server connection ---------------------------------------------------------

  /** Starts (or restarts) the server and initializes a session with it. */
  private async connect(): Promise<Upstream> {
    const headers = { requestInit: { headers: this.server.headers ?? {} } };
    const transport: McpTransport = this.isHttp
      ? this.server.type === "sse"
        ? new SSEClientTransport(new URL(this.server.url!), headers)
        : new StreamableHTTPClientTransport(new URL(this.server.url!), headers)
      : new ChildStdioTransport({
          command: this.server.command!,
          args: this.server.args,
          env: this.server.env,
          cwd: this.server.cwd,
          onStderrLine: (line) => this.log?.info({ stream: "stderr" }, line),
        });
    const client = new Client(CLIENT_INFO, { capabilities: clientCapabilities(this.server) });
    installCallbacks(client, {
      id: this.id,
      participant: this.client,
      server: this.server,
      log: this.log,
      inflight: () => (up.lost ? [] : [...up.inflight]),
    });
    const up: Upstream = { client, transport, ready: false, lost: false, readyAt: 0, probing: false, inflight: new Set() };
    // Installed before connect(): the SDK chains it before its own close handling, so we
    // fail pending calls with the exit status before the SDK fails them with "Connection closed".
    transport.onclose = () => this.down(up);
    client.onerror = (err) => this.transportError(up, err);
    client.fallbackNotificationHandler = async (n) => this.serverNotification(up, n);
    this.upstream = up;
    try {
      await client.connect(transport, { timeout: this.startTimeoutMs });
      if (up.lost) throw new Error("the connection ended right after initialization");
    } catch (err) {
      up.lost = true;
      if (this.upstream === up) this.upstream = undefined;
      await client.close().catch(() => {});
      throw new Error(startFailure(transport, err), { cause: err });
    }
    up.ready = true;
    up.readyAt = Date.now();
    return up;
  }

  private available(): boolean {
    const up = this.upstream;
    return up !== undefined && up.ready && !up.lost;
  }

  /** After a start or restart: tell the registry, renew subscriptions, tell listeners. */
  private ready(up: Upstream, announce = true): void {
    if (announce && this.client.status === "open" && up.client.getServerCapabilities()?.tools) this.client.announceTools();
    for (const uri of this.subscribers.keys()) {
      up.client.request({ method: "resources/subscribe", params: { uri } }, AnyResult).catch((err: Error) => this.log?.warn({ uri, err: err.message }, "could not renew a resource subscription"));
    }
    this.emit("ready", { restarts: this.restartCount, serverInfo: up.client.getServerVersion(), pid: this.pid });
  }

  /** The connection `up` ended: the process exited, the HTTP session broke, or we closed it. */
  private down(up: Upstream, why?: string): void {
    if (up.lost) return;
    up.lost = true;
    if (this.upstream === up) this.upstream = undefined;
    // A start that failed: its caller reports it.
    if (!up.ready) return;
    if (this.state === "stopped") {
      this.failAll(up, this.unavailable());
      return;
    }
    const info = this.describeEnd(up, why);
    this.lastDown = info.message;
    this.failAll(up, this.failure("server_crashed", info.message, { exit_code: info.code, signal: info.signal }));
    this.log?.warn({ exitCode: info.code, signal: info.signal }, info.message);
    this.emit("down", info);
    // Releases the HTTP session; a dead process is already gone.
    void this.close(up);
    if (Date.now() - up.readyAt >= STABLE_MS) this.attempts = 0;
    this.scheduleRestart();
  }

  private failAll(up: Upstream, error: RpcError): void {
    for (const call of [...up.inflight]) call.fail(error);
  }

  private async close(up: Upstream): Promise<void> {
    this.failAll(up, this.unavailable());
    await up.client.close().catch(() => {});
  }

  private scheduleRestart(): void {
    if (this.state === "stopped") return;
    const { initialDelayMs, maxDelayMs, maxRestarts } = this.restartOpts;
    if (this.attempts >= maxRestarts) {
      this.setStatus("failed");
      this.log?.error({ attempts: this.attempts }, `gave up restarting the MCP server: ${this.lastDown}`);
      // The registry asks again and gets no tools: nobody is offered what cannot answer.
      if (this.client.status === "open") this.client.announceTools();
      return;
    }
    const ceiling = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(this.attempts, 30));
    // Jitter between half and all of the ceiling: a crash loop never restarts at once.
    const delayMs = Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
    this.attempts++;
    this.setStatus("restarting");
    this.log?.info({ attempt: this.attempts, delayMs }, "restarting the MCP server");
    this.emit("restarting", { attempt: this.attempts, delayMs });
    this.restartTimer = setTimeout(() => void this.restart(), delayMs);
  }

  private async restart(): Promise<void> {
    if (this.state !== "restarting") return;
    let up: Upstream;
    try {
      up = await this.connect();
    } catch (err) {
      if (this.stopping) return;
      this.lastDown = `MCP server "${this.id}" (${this.label}) could not be restarted: ${(err as Error).message}`;
      this.log?.warn({ attempt: this.attempts }, this.lastDown);
      this.scheduleRestart();
      return;
    }
    if (this.stopping) return;
    this.restartCount++;
    this.setStatus("running");
    this.log?.info({ restarts: this.restartCount, pid: this.pid }, "MCP server restarted");
    this.ready(up);
  }

  /**
   * Errors the SDK reports outside any call. Over stdio these are lines on stdout that are
   * not JSON-RPC, or a cancellation that could not be sent: worth a log line, no more.
   * Over HTTP a stream broke or a POST failed: whether the server is gone, a ping tells.
   */
  private transportError(up: Upstream, err: Error): void {
    if (up.lost) return;
    if (!this.isHttp || !up.ready) {
      this.log?.warn({ err: err.message }, "MCP transport error");
      return;
    }
    if (up.probing) return;
    up.probing = true;
    up.client.ping({ timeout: PROBE_TIMEOUT_MS }).then(
      () => {
        up.probing = false;
        this.log?.info({ err: err.message }, "MCP transport error; the server still answers");
      },
      (pingErr: unknown) => {
        up.probing = false;
        // Any JSON-RPC answer, even an error, means someone is there.
        if (pingErr instanceof McpError && pingErr.code !== ErrorCode.RequestTimeout && pingErr.code !== ErrorCode.ConnectionClosed) return;
        this.down(up, `stopped answering (${err.message})`);
      },
    );
  }

  private describeEnd(up: Upstream, why?: string): ServerDown {
    const name = `MCP server "${this.id}" (${this.label})`;
    const exit = up.transport instanceof ChildStdioTransport ? up.transport.exit : undefined;
    if (exit?.signal) return { message: `${name} was killed by ${exit.signal}`, code: exit.code, signal: exit.signal };
    if (exit) return { message: `${name} exited with code ${exit.code}`, code: exit.code, signal: exit.signal };
    return { message: `${name} ${why ?? "closed the connection"}` };
  }

  // --- serving the space ---------------------------------------------------------------

  private handle(req: IncomingRequest): unknown {
    const up = this.upstream;
    const ok = up !== undefined && up.ready && !up.lost;
    if (req.method === "tools/list" && (this.state === "failed" || (ok && !up.client.getServerCapabilities()?.tools))) return { tools: [] };
    if (!ok) throw this.unavailable();
    switch (req.method) {
      case "initialize":
        // The session is ours; a caller gets what the server told us.
        return {
          protocolVersion: protocolVersionOf(up.transport),
          capabilities: up.client.getServerCapabilities() ?? {},
          serverInfo: up.client.getServerVersion(),
          ...(up.client.getInstructions() === undefined ? {} : { instructions: up.client.getInstructions() }),
        };
      case "resources/unsubscribe": {
        const uri = isRecord(req.params) ? req.params["uri"] : undefined;
        const subs = typeof uri === "string" ? this.subscribers.get(uri) : undefined;
        subs?.delete(req.from);
        // Others still want updates: the server's subscription stays.
        if (subs && subs.size > 0) return {};
        if (typeof uri === "string") this.subscribers.delete(uri);
        break;
      }
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
          if (req.method === "resources/subscribe") this.addSubscriber(req);
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
    if (this.isHttp) {
      const status = err instanceof StreamableHTTPError ? err.code : undefined;
      // A refusal of this one request (auth, bad request) is not a dead server; 404 is a lost session.
      if (status !== undefined && status >= 400 && status < 500 && status !== 404) {
        settle(() => reject(new RpcError(RpcErrorCodes.internalError, (err as Error).message, { reason: "http_error", status })));
        return;
      }
      this.down(up, `could not be reached (${(err as Error).message})`);
      return;
    }
    // stdio: the process is gone or going; its exit status, if known yet, says how.
    const info = this.describeEnd(up, "closed the connection");
    settle(() => reject(this.failure("server_crashed", info.message, { exit_code: info.code, signal: info.signal })));
  }

  private progress(req: IncomingRequest, progressToken: string | number, progress: Progress): void {
    // The caller's own envelope id first: the SDK's `onProgress` finds its call by it.
    const correlationId = [req.envelope.id, ...(req.envelope.correlation_id ?? [])];
    this.trySend(() => this.client.notify(req.from, "notifications/progress", { ...progress, progressToken }, { correlationId }));
  }

  private serverNotification(up: Upstream, n: Notification): void {
    if (up.lost) return;
    switch (n.method) {
      case "notifications/tools/list_changed":
        if (this.client.status === "open") this.client.announceTools();
        return;
      case "notifications/resources/list_changed":
      case "notifications/prompts/list_changed":
        // Nobody in the space keeps a catalogue of these; whoever cares hears it.
        if (this.client.status === "open") this.trySend(() => this.client.notify(undefined, n.method, n.params));
        return;
      case "notifications/resources/updated": {
        const uri = isRecord(n.params) ? n.params["uri"] : undefined;
        for (const who of (typeof uri === "string" ? this.subscribers.get(uri) : undefined) ?? []) {
          this.trySend(() => this.client.notify(who, n.method, n.params));
        }
        return;
      }
      case "notifications/message":
      case "notifications/elicitation/complete": {
        if (n.method === "notifications/message") {
          const p = isRecord(n.params) ? n.params : {};
          const level = LOG_LEVELS[String(p["level"])] ?? "info";
          this.log?.[level]({ stream: "mcp-log", logger: p["logger"], data: p["data"] }, "MCP server log message");
        }
        // During someone's calls it is about them (a log line, a URL flow they finished):
        // they hear it, and a space server passes it to its MCP client.
        const found = soleCaller([...up.inflight]);
        if ("caller" in found && this.client.status === "open") {
          const correlationId = found.calls.map((c) => c.req.envelope.id);
          this.trySend(() => this.client.notify(found.caller, n.method, n.params, { correlationId }));
        }
        return;
      }
      default:
        this.log?.debug({ method: n.method }, "notification from the MCP server; not forwarded");
    }
  }

  private addSubscriber(req: IncomingRequest): void {
    const uri = isRecord(req.params) ? req.params["uri"] : undefined;
    if (typeof uri !== "string") return;
    let subs = this.subscribers.get(uri);
    if (!subs) this.subscribers.set(uri, (subs = new Set()));
    subs.add(req.from);
  }

  /** A participant left: its subscriptions end, and the server's too when nobody else holds them. */
  private dropSubscriber(who: string): void {
    for (const [uri, subs] of this.subscribers) {
      if (!subs.delete(who) || subs.size > 0) continue;
      this.subscribers.delete(uri);
      const up = this.upstream;
      if (up?.ready && !up.lost) up.client.request({ method: "resources/unsubscribe", params: { uri } }, AnyResult).catch(() => {});
    }
  }

  // --- small things ----------------------------------------------------------------------

  private failure(reason: BridgeFailureReason, message: string, extra: Record<string, unknown> = {}): RpcError {
    return bridgeFailure(this.id, reason, message, extra);
  }

  private unavailable(): RpcError {
    const why =
      this.state === "stopped"
        ? "the bridge is stopping"
        : this.state === "failed"
          ? `gave up restarting it; last: ${this.lastDown}`
          : this.state === "restarting"
            ? `restarting after: ${this.lastDown}`
            : "it is not running";
    return this.failure("server_unavailable", `MCP server "${this.id}" is unavailable: ${why}`);
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

  private trySend(send: () => unknown): void {
    try {
      send();
    } catch (err) {
      this.log?.debug({ err: (err as Error).message }, "could not send");
    }
  }
}

const LOG_LEVELS: Record<string, "debug" | "info" | "warn" | "error"> = {
  debug: "debug",
  info: "info",
  notice: "info",
  warning: "warn",
  error: "error",
  critical: "error",
  alert: "error",
  emergency: "error",
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The SDK prefixes `MCP error <code>: ` to the server's message; the caller gets the server's own words. */
function unprefixed(err: McpError): string {
  const prefix = `MCP error ${err.code}: `;
  return err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
}

/** Why a start failed: a process that died while initializing says more through its exit status than "Connection closed". */
function startFailure(transport: McpTransport, err: unknown): string {
  const exit = transport instanceof ChildStdioTransport ? transport.exit : undefined;
  if (exit?.error) return exit.error.message;
  if (exit?.signal) return `killed by ${exit.signal} while initializing`;
  if (exit) return `exited with code ${exit.code} while initializing`;
  return err instanceof Error ? err.message : String(err);
}

function protocolVersionOf(transport: McpTransport): string | undefined {
  if (transport instanceof ChildStdioTransport) return transport.protocolVersion;
  if (transport instanceof StreamableHTTPClientTransport) return transport.protocolVersion;
  return undefined;
}

/** `node server.mjs`, `npx server-filesystem`: enough to recognise it, without arguments that might be secrets. */
function commandLabel(command: string, args: string[] | undefined): string {
  const first = args?.find((a) => !a.startsWith("-"));
  return first === undefined ? basename(command) : `${basename(command)} ${basename(first)}`;
}

/** A URL without credentials or query (either may hold a token). */
function safeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return "(invalid URL)";
  }
}
