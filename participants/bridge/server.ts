/**
 * The bridge's connection to its MCP server: one `Upstream` per run (a child process and
 * its SDK `Client`, or an HTTP session), started and initialized here; its end noticed
 * (exit, broken stream, a ping that goes unanswered), every call pending on it failed at
 * once, and the server restarted with exponential backoff and jitter until it runs stably
 * or `maxRestarts` is reached.
 *
 * The client is the SDK v2's (`@modelcontextprotocol/client`). A streamable HTTP server is
 * probed with `server/discover`: one that speaks 2026-07-28 keeps that client as `modern`
 * (for callers at 2026-07-28, forward.ts) beside a 2025-era session everyone else is served
 * through; one of 2026-07-28 only is served through the one client. SSE and stdio servers
 * are 2025-era sessions (a stdio process is one connection; no probe on it yet).
 *
 * Split from bridge.ts, which owns the status and the events and hands them over as
 * `ServerHost`; serving and notifications reach the current run through `upstream`.
 */
import { basename } from "node:path";
import {
  Client,
  type Implementation,
  type Transport as McpTransport,
  type Notification,
  ProtocolError,
  SdkHttpError,
  SSEClientTransport,
  StreamableHTTPClientTransport,
  type VersionNegotiationOptions,
} from "@modelcontextprotocol/client";
import type { Logger } from "pino";
import * as z from "zod";
import type { McpServerConfig } from "../../gateway/index.js";
import type { ParticipantClient } from "../client.js";
import type { RpcError } from "../errors.js";
import { clientCapabilities, installCallbacks, type ServedCall } from "./callbacks.js";
import type { UpstreamAuth } from "./oauth-signin.js";
import { ChildStdioTransport } from "./stdio.js";
import { bridgeFailure, type BridgeEvents, type BridgeStatus, type RestartOptions, type ServerDown } from "./types.js";

const CLIENT_INFO = { name: "mewgate-bridge", version: "0.1.0" };
/** A run this long resets the restart backoff. */
const STABLE_MS = 10_000;
/** After an HTTP transport error, the server must answer a ping within this to count as alive. */
const PROBE_TIMEOUT_MS = 2000;
/** Results travel as they are: no schema of ours between the server and the caller. */
export const AnyResult = z.unknown();
/**
 * Rounds of `input_required` the bridge fulfils itself for one call (a caller that cannot
 * take them: a 2025 session, an agent of the space) before the call fails: a server that
 * asks for ever is cut off.
 */
export const MAX_INPUT_ROUNDS = 8;

/** One connection to the server: a process and its `Client`, or an HTTP session. Replaced on restart. */
export interface Upstream {
  /** The session everyone is served through (2025-era, or 2026-07-28 for a server of that revision only). */
  client: Client;
  /** Beside a 2025-era session, a client at 2026-07-28 for callers that speak it themselves (forward.ts). */
  modern?: Client | undefined;
  /** A server at 2026-07-28 tells its list changes only on a `subscriptions/listen` stream: the one the bridge holds open. */
  listening?: { close(): Promise<void> } | undefined;
  transport: McpTransport;
  /** Initialized: calls may be forwarded, and its end is a crash. */
  ready: boolean;
  lost: boolean;
  readyAt: number;
  probing: boolean;
  readonly inflight: Set<Forwarded>;
}

/** A call forwarded to the server, which a crash fails from outside. */
export interface Forwarded extends ServedCall {
  fail(error: RpcError): void;
}

/** What the connection needs of the bridge. */
export interface ServerHost {
  readonly id: string;
  readonly participant: ParticipantClient;
  readonly log: Logger | undefined;
  readonly status: BridgeStatus;
  /** `stop()` was called. */
  readonly stopping: boolean;
  setStatus(status: BridgeStatus): void;
  emit<K extends keyof BridgeEvents>(event: K, ...args: BridgeEvents[K]): void;
  /** A notification from the server (notifications.ts). */
  notification(up: Upstream, n: Notification): void;
  /** A new run: the space's resource subscriptions are renewed at it (notifications.ts). */
  renewSubscriptions(up: Upstream): void;
}

export interface ServerLinkOptions {
  restart?: RestartOptions | undefined;
  startTimeoutMs?: number | undefined;
  /** A `url:` server behind OAuth: its requests carry a token, and a start refused with 401 waits for a sign-in (oauth-signin.ts). */
  auth?: UpstreamAuth | undefined;
}

export class ServerLink {
  readonly isHttp: boolean;
  /** The command or URL, for messages: never the env, the headers, or a URL's query. */
  readonly label: string;
  /** Over HTTP, the server's host and port (`server.address`, `server.port` of the bridge's CLIENT spans). */
  readonly address: { host: string; port: number } | undefined;
  private readonly restartOpts: Required<{ [K in keyof RestartOptions]: number }>;
  private readonly startTimeoutMs: number;
  private readonly auth: UpstreamAuth | undefined;
  /** The current run, if the server is up or starting. */
  upstream: Upstream | undefined;
  private attempts = 0;
  private restartCount = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  /** What happened to the server last, for `server_unavailable` messages. */
  private lastDown = "";

  constructor(
    private readonly server: McpServerConfig,
    private readonly host: ServerHost,
    opts: ServerLinkOptions,
  ) {
    this.isHttp = server.url !== undefined;
    this.label = this.isHttp ? safeUrl(server.url!) : commandLabel(server.command!, server.args);
    this.address = this.isHttp ? hostAndPort(server.url!) : undefined;
    this.restartOpts = {
      initialDelayMs: opts.restart?.initialDelayMs ?? 250,
      maxDelayMs: opts.restart?.maxDelayMs ?? 30_000,
      maxRestarts: opts.restart?.maxRestarts ?? Number.POSITIVE_INFINITY,
    };
    this.startTimeoutMs = opts.startTimeoutMs ?? 60_000;
    this.auth = opts.auth;
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

  /** Starts (or restarts) the server and initializes a session with it; behind OAuth, signed in first if it must be. */
  connect(): Promise<Upstream> {
    return this.auth ? this.auth.around(() => this.connectOnce()) : this.connectOnce();
  }

  private async connectOnce(): Promise<Upstream> {
    let up: Upstream | undefined;
    // A streamable HTTP server is probed first: one that speaks 2026-07-28 gets a second
    // client, in a 2025-era session, for everyone else (a 2025 caller gets the server's
    // 2025 behaviour: its own requests, subscriptions); one that does not is that session.
    const probing = this.isHttp && this.server.type !== "sse";
    const first = this.open(() => up, probing ? { mode: "auto" } : { mode: "legacy" });
    let main = first;
    let modern: Client | undefined;
    try {
      up = { client: first.client, transport: first.transport, ready: false, lost: false, readyAt: 0, probing: false, inflight: new Set() };
      this.upstream = up;
      await first.client.connect(first.transport, { timeout: this.startTimeoutMs });
      if (first.client.getProtocolEra() === "modern") {
        modern = first.client;
        const legacy = this.open(() => up, { mode: "legacy" });
        try {
          await legacy.client.connect(legacy.transport, { timeout: this.startTimeoutMs, prior: { kind: "legacy" } });
          main = legacy;
          up.client = legacy.client;
          up.transport = legacy.transport;
        } catch (err) {
          // A server of 2026-07-28 only: everyone is served through the one client.
          this.host.log?.info({ err: (err as Error).message }, "the MCP server speaks 2026-07-28 only");
          await legacy.client.close().catch(() => {});
        }
        if (main !== first) up.modern = modern;
      }
      if (up.lost) throw new Error("the connection ended right after initialization");
    } catch (err) {
      if (up) up.lost = true;
      if (this.upstream === up) this.upstream = undefined;
      await main.client.close().catch(() => {});
      if (main !== first) await first.client.close().catch(() => {});
      throw new Error(startFailure(main.transport, err), { cause: err });
    }
    up.ready = true;
    up.readyAt = Date.now();
    const at2026 = up.modern ?? (first.client.getProtocolEra() === "modern" ? first.client : undefined);
    // In the background: a server slow to acknowledge the stream does not hold up the start.
    if (at2026)
      void listenForChanges(at2026, this.host.log).then(async (sub) => {
        if (!sub) return;
        if (up.lost) await sub.close().catch(() => {});
        else up.listening = sub;
      });
    return up;
  }

  /** A client and its transport, with the server's requests answered through the space and the ends of the current main one watched. */
  private open(
    current: () => Upstream | undefined,
    versionNegotiation: VersionNegotiationOptions,
  ): { client: Client; transport: McpTransport } {
    const headers = { requestInit: { headers: this.server.headers ?? {} }, ...(this.auth ? { fetch: this.auth.fetch } : {}) };
    const transport: McpTransport = this.isHttp
      ? this.server.type === "sse"
        ? new SSEClientTransport(new URL(this.server.url!), headers)
        : new StreamableHTTPClientTransport(new URL(this.server.url!), headers)
      : new ChildStdioTransport({
          command: this.server.command!,
          args: this.server.args,
          env: this.server.env,
          cwd: this.server.cwd,
          onStderrLine: (line) => this.host.log?.info({ stream: "stderr" }, line),
        });
    const client = new Client(CLIENT_INFO, {
      capabilities: clientCapabilities(this.server),
      versionNegotiation,
      inputRequired: { autoFulfill: true, maxRounds: MAX_INPUT_ROUNDS },
    });
    installCallbacks(client, {
      id: this.host.id,
      participant: this.host.participant,
      server: this.server,
      log: this.host.log,
      inflight: () => {
        const up = current();
        return !up || up.lost ? [] : [...up.inflight];
      },
    });
    // Installed before connect(): the SDK chains it before its own close handling, so we
    // fail pending calls with the exit status before the SDK fails them with "Connection closed".
    // Only the main client's end is the server's end (a 2026-07-28 client beside it holds no connection).
    const main = () => {
      const up = current();
      return up !== undefined && up.transport === transport ? up : undefined;
    };
    transport.onclose = () => {
      const up = main();
      if (up) this.down(up);
    };
    client.onerror = (err) => {
      const up = main();
      if (up) this.transportError(up, err);
    };
    client.fallbackNotificationHandler = async (n) => {
      const up = current();
      if (up) this.host.notification(up, n);
    };
    return { client, transport };
  }

  available(): boolean {
    const up = this.upstream;
    return up?.ready === true && !up.lost;
  }

  /** After a start or restart: tell the registry, renew subscriptions, tell listeners. */
  ready(up: Upstream, announce = true): void {
    if (announce && this.host.participant.status === "open" && up.client.getServerCapabilities()?.tools)
      this.host.participant.announceTools();
    this.host.renewSubscriptions(up);
    this.host.emit("ready", { restarts: this.restartCount, serverInfo: up.client.getServerVersion(), pid: this.pid });
  }

  /** The connection `up` ended: the process exited, the HTTP session broke, or we closed it. */
  down(up: Upstream, why?: string): void {
    if (up.lost) return;
    up.lost = true;
    if (this.upstream === up) this.upstream = undefined;
    // A start that failed: its caller reports it.
    if (!up.ready) return;
    if (this.host.status === "stopped") {
      this.failAll(up, this.unavailable());
      return;
    }
    const info = this.describeEnd(up, why);
    this.lastDown = info.message;
    this.failAll(up, bridgeFailure(this.host.id, "server_crashed", info.message, { exit_code: info.code, signal: info.signal }));
    this.host.log?.warn({ exitCode: info.code, signal: info.signal }, info.message);
    this.host.emit("down", info);
    // Releases the HTTP session; a dead process is already gone.
    void this.close(up);
    if (Date.now() - up.readyAt >= STABLE_MS) this.attempts = 0;
    this.scheduleRestart();
  }

  private failAll(up: Upstream, error: RpcError): void {
    for (const call of [...up.inflight]) call.fail(error);
  }

  async close(up: Upstream): Promise<void> {
    this.failAll(up, this.unavailable());
    await up.listening?.close().catch(() => {});
    await up.modern?.close().catch(() => {});
    await up.client.close().catch(() => {});
  }

  /** `stop()`: no restart comes any more. */
  cancelRestart(): void {
    clearTimeout(this.restartTimer);
  }

  /** `stop()`: the current run ends (an HTTP session is told so, briefly); pending calls fail. */
  async shutdown(): Promise<void> {
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
  }

  private scheduleRestart(): void {
    if (this.host.status === "stopped") return;
    const { initialDelayMs, maxDelayMs, maxRestarts } = this.restartOpts;
    if (this.attempts >= maxRestarts) {
      this.host.setStatus("failed");
      this.host.log?.error({ attempts: this.attempts }, `gave up restarting the MCP server: ${this.lastDown}`);
      // The registry asks again and gets no tools: nobody is offered what cannot answer.
      if (this.host.participant.status === "open") this.host.participant.announceTools();
      return;
    }
    const ceiling = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(this.attempts, 30));
    // Jitter between half and all of the ceiling: a crash loop never restarts at once.
    const delayMs = Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
    this.attempts++;
    this.host.setStatus("restarting");
    this.host.log?.info({ attempt: this.attempts, delayMs }, "restarting the MCP server");
    this.host.emit("restarting", { attempt: this.attempts, delayMs });
    this.restartTimer = setTimeout(() => void this.restart(), delayMs);
  }

  private async restart(): Promise<void> {
    if (this.host.status !== "restarting") return;
    let up: Upstream;
    try {
      up = await this.connect();
    } catch (err) {
      if (this.host.stopping) return;
      this.lastDown = `MCP server "${this.host.id}" (${this.label}) could not be restarted: ${(err as Error).message}`;
      this.host.log?.warn({ attempt: this.attempts }, this.lastDown);
      this.scheduleRestart();
      return;
    }
    if (this.host.stopping) return;
    this.restartCount++;
    this.host.setStatus("running");
    this.host.log?.info({ restarts: this.restartCount, pid: this.pid }, "MCP server restarted");
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
      this.host.log?.warn({ err: err.message }, "MCP transport error");
      return;
    }
    if (up.probing) return;
    up.probing = true;
    up.client.ping({ timeout: PROBE_TIMEOUT_MS }).then(
      () => {
        up.probing = false;
        this.host.log?.info({ err: err.message }, "MCP transport error; the server still answers");
      },
      (pingErr: unknown) => {
        up.probing = false;
        // Any JSON-RPC answer, even an error, means someone is there.
        if (pingErr instanceof ProtocolError) return;
        this.down(up, `stopped answering (${err.message})`);
      },
    );
  }

  describeEnd(up: Upstream, why?: string): ServerDown {
    const name = `MCP server "${this.host.id}" (${this.label})`;
    const exit = up.transport instanceof ChildStdioTransport ? up.transport.exit : undefined;
    if (exit?.signal) return { message: `${name} was killed by ${exit.signal}`, code: exit.code, signal: exit.signal };
    if (exit) return { message: `${name} exited with code ${exit.code}`, code: exit.code, signal: exit.signal };
    return { message: `${name} ${why ?? "closed the connection"}` };
  }

  /** The answer to a call while the server is not running, saying why. */
  unavailable(): RpcError {
    const state = this.host.status;
    const why =
      state === "stopped"
        ? "the bridge is stopping"
        : state === "failed"
          ? `gave up restarting it; last: ${this.lastDown}`
          : state === "restarting"
            ? `restarting after: ${this.lastDown}`
            : "it is not running";
    return bridgeFailure(this.host.id, "server_unavailable", `MCP server "${this.host.id}" is unavailable: ${why}`);
  }
}

/** Why a start failed: a process that died while initializing says more through its exit status than "Connection closed". */
function startFailure(transport: McpTransport, err: unknown): string {
  const exit = transport instanceof ChildStdioTransport ? transport.exit : undefined;
  if (exit?.error) return exit.error.message;
  if (exit?.signal) return `killed by ${exit.signal} while initializing`;
  if (exit) return `exited with code ${exit.code} while initializing`;
  // Without a sign-in (oauth: false, or `mewgate bridge` with no way to consent): say what the server wants.
  if ((err instanceof SdkHttpError && err.status === 401) || (err as { code?: unknown } | undefined)?.code === 401)
    return "it answered 401 Unauthorized: it wants a sign-in (mewgate up signs in to it; or give a header with a token)";
  return err instanceof Error ? err.message : String(err);
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

/**
 * Opens the stream on which a server at 2026-07-28 tells its tool, prompt and resource list
 * changes (it has no session to send them on); they reach the client's notification
 * handlers as a 2025-era session's would (notifications.ts). Nothing when the server
 * declares no list that changes, or refuses the stream (logged: its lists are then fetched
 * when the space asks, as before).
 */
/** How long a server may take to acknowledge the bridge's listen stream. */
const LISTEN_ACK_MS = 10_000;

async function listenForChanges(client: Client, log: Logger | undefined): Promise<{ close(): Promise<void> } | undefined> {
  const caps = client.getServerCapabilities() ?? {};
  const filter = {
    ...(caps.tools?.listChanged ? { toolsListChanged: true } : {}),
    ...(caps.prompts?.listChanged ? { promptsListChanged: true } : {}),
    ...(caps.resources?.listChanged ? { resourcesListChanged: true } : {}),
  };
  if (Object.keys(filter).length === 0) return undefined;
  try {
    return await client.listen(filter, { timeout: LISTEN_ACK_MS });
  } catch (err) {
    log?.info({ err: (err as Error).message }, "the MCP server does not keep a subscriptions/listen stream open");
    return undefined;
  }
}

/** The host and port a URL names (the scheme's default port when it names none). */
function hostAndPort(url: string): { host: string; port: number } | undefined {
  try {
    const u = new URL(url);
    return { host: u.hostname.replace(/^\[|\]$/g, ""), port: u.port ? Number(u.port) : u.protocol === "https:" ? 443 : 80 };
  } catch {
    return undefined;
  }
}
