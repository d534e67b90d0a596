/**
 * The participant client's connection: opening a transport (WebSocket or in-process, behind
 * the one `Transport` seam), waiting for the welcome, noticing the connection's loss, coming
 * back with full-jitter backoff (never after an auth refusal or being replaced), the
 * client's status, and writing envelopes. What depends on the connection (pending calls,
 * served requests, the MCP server) it reaches through the ports the client gives it.
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { CloseCodes, nestsWithin, PROTOCOL } from "../../gateway/index.js";
import { ParticipantError, type ParticipantErrorCode } from "../errors.js";
import type { CloseInfo, Transport, TransportFactory } from "../transport.js";
import { webSocketTransport } from "../websocket.js";
import type { ClientEvents, ClientOptions, ClientStatus, FrameLimits, OutboundEnvelope, ReconnectOptions, WelcomeInfo } from "./types.js";

/** Close codes after which reconnecting cannot help, with the error code the owner gets. */
const FINAL_CLOSES = new Map<number, ParticipantErrorCode>([
  [CloseCodes.badRequest, "bad_request"],
  [CloseCodes.unauthorized, "unauthorized"],
  [CloseCodes.identityMismatch, "identity_mismatch"],
  [CloseCodes.unknownSpace, "unknown_space"],
  [CloseCodes.unknownParticipant, "unknown_participant"],
  // Another connection took over this identity; coming back would take it back, forever.
  [CloseCodes.replaced, "replaced"],
]);

/** A connection that stayed up this long resets the backoff. */
const STABLE_MS = 5000;
const NO_WELCOME = 4000;

/** Full-jitter exponential backoff: uniform in [0, min(max, initial·2^attempt)). */
export function backoffDelay(attempt: number, initialDelayMs: number, maxDelayMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}

/** What the connection needs from the rest of the client. */
export interface ConnectionPorts {
  /** A frame arrived on the current connection. */
  receive(text: string): void;
  /** Settles the calls and served requests that depended on the connection (`keepHeld`: not those a conversation holds). */
  settleAll(why: string, keepHeld?: boolean): void;
  /** Closes the transport of the MCP server being served, if any. */
  closeMcp(): void;
  /** The last welcome, if any. */
  welcome(): WelcomeInfo | undefined;
  emit<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void;
}

/** One client's connection, across its reconnects. The other pieces read its state; only it writes it. */
export class Connection {
  state: ClientStatus = "idle";
  /** A welcome arrived on the current transport: sending is possible. */
  welcomed = false;
  /** Some connection was open once: the next one is a reconnect. */
  everOpen = false;
  /** One child logger per client, named after the participant once welcomed. */
  log: Logger | undefined;

  private readonly factory: TransportFactory;
  private readonly reconnectOpts: Required<ReconnectOptions> | false;
  private readonly connectTimeoutMs: number;
  private readonly maxBufferedBytes: number;
  private readonly baseLog: Logger | undefined;
  private transport: Transport | undefined;
  private openedAt = 0;
  private attempts = 0;
  private welcomeTimer: NodeJS.Timeout | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private connecting:
    | { promise: Promise<WelcomeInfo>; resolve: (w: WelcomeInfo) => void; reject: (e: ParticipantError) => void }
    | undefined;
  private closeWaiters: (() => void)[] = [];

  constructor(
    opts: ClientOptions,
    private readonly ports: ConnectionPorts,
  ) {
    if ("transport" in opts) {
      this.factory = opts.transport;
    } else {
      const { url, space, token, participantId, echo, heartbeatMs, fallbackUrls } = opts;
      this.factory = webSocketTransport({ url, space, token, participantId, echo, heartbeatMs, fallbackUrls });
    }
    this.reconnectOpts =
      opts.reconnect === false
        ? false
        : {
            initialDelayMs: opts.reconnect?.initialDelayMs ?? 100,
            maxDelayMs: opts.reconnect?.maxDelayMs ?? 10_000,
            maxAttempts: opts.reconnect?.maxAttempts ?? Infinity,
            retryFirstConnect: opts.reconnect?.retryFirstConnect ?? false,
          };
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
    this.maxBufferedBytes = opts.maxBufferedBytes ?? 8 * 1024 * 1024;
    // Only the space name goes into the log context; the token stays in the transport.
    this.baseLog = opts.logger?.child({ space: "space" in opts ? opts.space : undefined, component: "participant" });
    this.log = this.baseLog;
  }

  /** Resolves with the welcome; see `ParticipantClient.connect`. */
  connect(): Promise<WelcomeInfo> {
    if (this.state === "closed") return Promise.reject(new ParticipantError("closed", "this client was closed"));
    const welcome = this.ports.welcome();
    if (this.state === "open" && welcome) return Promise.resolve(welcome);
    if (this.connecting) return this.connecting.promise;
    let resolve!: (w: WelcomeInfo) => void;
    let reject!: (e: ParticipantError) => void;
    const promise = new Promise<WelcomeInfo>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.connecting = { promise, resolve, reject };
    if (this.state === "idle") this.open();
    return promise;
  }

  /** Ends the connection for good; see `ParticipantClient.close`. */
  close(reason = "client closed"): Promise<void> {
    if (this.state === "closed" && !this.transport) return Promise.resolve();
    this.state = "closed";
    clearTimeout(this.reconnectTimer);
    this.connecting?.reject(new ParticipantError("closed", "the client was closed while connecting"));
    this.connecting = undefined;
    this.ports.closeMcp();
    const t = this.transport;
    if (!t) {
      this.ports.settleAll("the client was closed");
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        // The transport never reported its close; settle as if it had.
        if (this.transport === t) this.lost(t, { code: 1000, reason });
      }, 2000);
      this.closeWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
      t.close(1000, reason);
    });
  }

  private open(): void {
    this.state = this.everOpen ? "reconnecting" : "connecting";
    let t: Transport;
    try {
      t = this.factory();
    } catch (err) {
      this.log?.warn({ err }, "could not create a transport");
      this.lostBeforeStart({ code: 1006, reason: (err as Error).message });
      return;
    }
    this.transport = t;
    this.welcomed = false;
    t.onmessage = (text) => {
      if (this.transport === t) this.ports.receive(text);
    };
    t.onclose = (info) => {
      if (this.transport === t) this.lost(t, info);
    };
    t.onerror = (err) => this.log?.debug({ err: err.message }, "transport error");
    this.welcomeTimer = setTimeout(() => {
      if (this.transport !== t || this.welcomed) return;
      this.log?.info("no welcome in time; dropping the connection");
      this.lost(t, { code: NO_WELCOME, reason: `no welcome within ${this.connectTimeoutMs} ms` });
      t.close(1000, "no welcome");
    }, this.connectTimeoutMs);
    t.start().catch((err: Error) => this.log?.debug({ err: err.message }, "connection attempt failed"));
  }

  /** A factory that threw counts as a failed attempt. */
  private lostBeforeStart(info: CloseInfo): void {
    const t: Transport = { start: async () => {}, send: () => {}, close: () => {} };
    this.transport = t;
    this.lost(t, info);
  }

  /** The connection `t` ended. Settles everything that depended on it, then decides whether to come back. */
  private lost(t: Transport, info: CloseInfo): void {
    if (this.transport !== t) return;
    this.transport = undefined;
    clearTimeout(this.welcomeTimer);
    const wasOpen = this.welcomed;
    this.welcomed = false;
    const why = `connection closed (${info.code}${info.reason ? `: ${info.reason}` : ""})`;
    this.ports.settleAll(why, true);

    if (this.state === "closed") {
      this.ports.settleAll(why);
      this.ports.emit("close", { code: info.code, reason: info.reason, reconnecting: false });
      for (const w of this.closeWaiters.splice(0)) w();
      return;
    }
    if (wasOpen && Date.now() - this.openedAt >= STABLE_MS) this.attempts = 0;

    const final = FINAL_CLOSES.get(info.code);
    const r = this.reconnectOpts;
    let error: ParticipantError | undefined;
    if (final !== undefined) {
      error = new ParticipantError(final, info.reason || `refused with close code ${info.code}`, { closeCode: info.code });
    } else if (!r || (!this.everOpen && !r.retryFirstConnect)) {
      error = new ParticipantError(
        "connect_failed",
        `connection ${this.everOpen ? "lost" : "failed"} (${info.code}${info.reason ? `: ${info.reason}` : ""})`,
        { closeCode: info.code },
      );
    } else if (this.attempts >= r.maxAttempts) {
      error = new ParticipantError("connect_failed", `gave up after ${this.attempts} attempts (last close ${info.code})`, {
        closeCode: info.code,
      });
    }
    if (error) {
      this.state = "closed";
      this.ports.settleAll(error.message);
      this.log?.info({ code: info.code, error: error.code }, "connection ended for good");
      this.connecting?.reject(error);
      this.connecting = undefined;
      this.ports.closeMcp();
      this.ports.emit("close", { code: info.code, reason: info.reason, reconnecting: false, error });
      return;
    }
    const delayMs = backoffDelay(
      this.attempts,
      (r as Required<ReconnectOptions>).initialDelayMs,
      (r as Required<ReconnectOptions>).maxDelayMs,
    );
    this.attempts++;
    this.state = "reconnecting";
    this.log?.info({ code: info.code, attempt: this.attempts, delayMs }, "connection lost; reconnecting");
    this.ports.emit("close", { code: info.code, reason: info.reason, reconnecting: true });
    this.ports.emit("reconnecting", { attempt: this.attempts, delayMs });
    this.reconnectTimer = setTimeout(() => {
      if (this.state === "reconnecting") this.open();
    }, delayMs);
  }

  /** Writes one envelope and returns its id; see `ParticipantClient.send`. */
  send(envelope: OutboundEnvelope): string {
    const t = this.transport;
    if (this.state === "closed") throw new ParticipantError("closed", "this client was closed");
    if (!t || !this.welcomed) throw new ParticipantError("disconnected", `not connected (${this.state})`);
    if ((t.bufferedAmount ?? 0) > this.maxBufferedBytes) {
      throw new ParticipantError("backpressure", `more than ${this.maxBufferedBytes} bytes are waiting to be sent`);
    }
    const id = envelope.id ?? randomUUID();
    const out: Record<string, unknown> = { protocol: PROTOCOL, id, kind: envelope.kind };
    if (envelope.to !== undefined) out["to"] = envelope.to;
    if (envelope.correlation_id !== undefined && envelope.correlation_id.length > 0) out["correlation_id"] = envelope.correlation_id;
    if (envelope.context !== undefined) out["context"] = envelope.context;
    out["payload"] = envelope.payload ?? {};
    const text = JSON.stringify(out);
    const over = overLimits(this.ports.welcome()?.space?.limits, out, text);
    if (over) throw new ParticipantError("too_large", over.message, { data: over });
    t.send(text);
    return id;
  }

  /** Sends a JSON-RPC notification (`mcp/request` without id). Without `target` it is a broadcast. */
  notify(target: string | undefined, method: string, params?: unknown, opts: { correlationId?: string[] } = {}): string {
    return this.send({
      kind: "mcp/request",
      to: target === undefined ? undefined : [target],
      correlation_id: opts.correlationId,
      payload: { jsonrpc: "2.0", method, ...(params === undefined ? {} : { params }) },
    });
  }

  /** The first welcome on a transport: the connection is open. */
  opened(info: WelcomeInfo): void {
    clearTimeout(this.welcomeTimer);
    this.welcomed = true;
    this.everOpen = true;
    this.openedAt = Date.now();
    this.state = "open";
    this.log = this.baseLog?.child({ participant: info.id });
    this.log?.info({ reconnected: info.reconnected }, "connected");
    this.connecting?.resolve(info);
    this.connecting = undefined;
  }
}

/**
 * Why the space would refuse this frame (larger than `max_payload_bytes`, or nesting deeper
 * than `max_depth`), if it would: the gateway answers such a frame with an error nobody's
 * call is correlated to, so a request or an answer sent anyway would leave its caller waiting.
 */
export function overLimits(
  limits: FrameLimits | undefined,
  frame: object,
  text: string,
): { reason: "too_large" | "too_deep"; message: string; bytes?: number; limit: number } | undefined {
  if (!limits) return undefined;
  const bytes = Buffer.byteLength(text);
  if (bytes > limits.max_payload_bytes)
    return {
      reason: "too_large",
      message: `a frame of ${bytes} bytes is more than the space takes (${limits.max_payload_bytes} bytes: gateway.limits.max_payload_bytes)`,
      bytes,
      limit: limits.max_payload_bytes,
    };
  if (!nestsWithin(frame, limits.max_depth))
    return {
      reason: "too_deep",
      message: `a frame nesting more than ${limits.max_depth} levels deep is more than the space takes (gateway.limits.max_depth)`,
      limit: limits.max_depth,
    };
  return undefined;
}
