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
 *   JSON-RPC result or error unchanged; the server's own tasks answer only the
 *   participant that created them (tasks.ts);
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
 *
 * This file holds the status and the events and wires the parts, each given only what it
 * needs: the server's runs and restarts (server.ts), serving requests with their progress
 * and cancellation (forward.ts), what the server says outside a call (notifications.ts),
 * the server's own requests (callbacks.ts), the stdio transport (stdio.ts), and the public
 * types (types.ts).
 */
import { EventEmitter } from "node:events";
import type { Implementation } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import type { McpServerConfig } from "../../gateway/index.js";
import { ParticipantClient, type ClientOptions } from "../client.js";
import { Forwarder } from "./forward.js";
import { ServerNotifications } from "./notifications.js";
import { ServerLink, type Upstream } from "./server.js";
import { oauthFor } from "./oauth-hook.js";
import type { UpstreamAuth } from "./oauth-signin.js";
import { ServerTaskOwners } from "./tasks.js";
import type { Bridge, BridgeEvents, BridgeOptions, BridgeStatus } from "./types.js";

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
  return openBridge(opts).started;
}

/**
 * The bridge at once, and its start: a caller that may have to stop before the start ends
 * (a sign-in nobody completes) holds the bridge to stop it. `started` settles as
 * `startBridge` does.
 */
export function openBridge(opts: BridgeOptions): { bridge: Bridge; started: Promise<Bridge> } {
  const bridge = new McpBridge(opts);
  return { bridge, started: bridge.start().then(() => bridge) };
}

// ---------------------------------------------------------------------------------------
// Internals

class McpBridge implements Bridge {
  readonly id: string;
  readonly client: ParticipantClient;
  private readonly log: Logger | undefined;
  private readonly callTimeoutMs: number;
  private readonly events = new EventEmitter();
  /** The server's runs, restarts and their backoff (server.ts). */
  private readonly link: ServerLink;
  /** List changes, resource updates and subscriptions, log lines (notifications.ts). */
  private readonly notifications: ServerNotifications;
  /** Requests from the space, into the server (forward.ts). */
  private readonly forwarder: Forwarder;
  /** Signing in to a `url:` server behind OAuth (oauth-signin.ts), when the bridge was given a vault. */
  private readonly auth: UpstreamAuth | undefined;

  private state: BridgeStatus = "starting";
  private stopping: Promise<void> | undefined;

  constructor(opts: BridgeOptions) {
    const { server } = opts;
    if (server.disabled) throw new Error(`MCP server "${opts.id}" is disabled in its config`);
    if ((server.command === undefined) === (server.url === undefined))
      throw new Error(`MCP server "${opts.id}": give either command (stdio) or url (streamable HTTP)`);
    this.id = opts.id;
    this.log = opts.logger?.child({ participant: opts.id, component: "mcp-bridge" });
    this.callTimeoutMs = opts.callTimeoutMs ?? 30_000;

    const clientOpts: ClientOptions = "transport" in opts.client ? { ...opts.client } : { participantId: opts.id, ...opts.client };
    clientOpts.logger ??= opts.logger;
    this.client = new ParticipantClient(clientOpts);
    this.auth = oauthFor(this, server, opts);
    this.link = this.serverHost(server, opts);
    const bridge = this;
    this.notifications = new ServerNotifications({
      participant: this.client,
      log: this.log,
      get upstream() {
        return bridge.link.upstream;
      },
    });
    this.forwarder = new Forwarder({
      id: this.id,
      participant: this.client,
      log: this.log,
      get status() {
        return bridge.state;
      },
      callTimeoutMs: this.callTimeoutMs,
      link: this.link,
      notifications: this.notifications,
      tasks: new ServerTaskOwners(),
      tracing: opts.tracing,
      auth: this.auth,
    });
    this.client.onRequest((req) => this.forwarder.handle(req));
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
      { restart: opts.restart, startTimeoutMs: opts.startTimeoutMs, auth: this.auth },
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
      // Behind OAuth the sign-in card goes through the space: join first (no tools until signed in).
      if (this.auth) await this.client.connect();
      up = await this.link.connect();
    } catch (err) {
      this.setStatus("stopped");
      if (this.auth) await this.client.close("bridge stopped").catch(() => {});
      // The spawn's code (ENOENT, EACCES) travels along: `up` words a missing command for a person.
      throw Object.assign(
        new Error(`MCP server "${this.id}" (${this.link.label}) did not start: ${(err as Error).message}`, { cause: (err as Error).cause }),
        {
          code: (err as NodeJS.ErrnoException).code,
        },
      );
    }
    // Join after the server is up, so the gateway's first tools/list finds it.
    try {
      if (!this.auth) await this.client.connect();
      if (this.client.id !== this.id) throw new Error(`joined as "${this.client.id}", not as "${this.id}": check the token`);
    } catch (err) {
      await this.stop();
      throw err;
    }
    if (this.state === "starting") this.setStatus("running");
    this.log?.info({ pid: this.pid, serverInfo: up.client.getServerVersion() }, "MCP server bridged into the space");
    // Joining already made the registry ask for the tools (see the welcome listener); behind
    // OAuth it asked before the server was up, so it is told again.
    if (!up.lost) this.link.ready(up, this.auth !== undefined);
  }

  stop(): Promise<void> {
    if (this.stopping) return this.stopping;
    this.setStatus("stopped");
    this.link.cancelRestart();
    this.auth?.stop();
    this.stopping = (async () => {
      await this.client.close("bridge stopped").catch(() => {});
      await this.link.shutdown();
      this.log?.info("bridge stopped");
    })();
    return this.stopping;
  }

  /** The server needs a sign-in (oauth-signin.ts): listeners get the link. */
  signInNeeded(info: { issuer: string; url: string }): void {
    this.emit("signin", info);
  }

  // --- small things ----------------------------------------------------------------------

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
