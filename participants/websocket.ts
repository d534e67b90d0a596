/**
 * The WebSocket `Transport`. This is the only file on the participant side that imports
 * `ws`; everything else talks to the `Transport` interface.
 */
import { WebSocket } from "ws";
import type { CloseInfo, Transport, TransportFactory } from "./transport.js";

export interface WebSocketTransportOptions {
  /** Gateway address, e.g. `ws://127.0.0.1:7420`. `/ws` is appended when the URL has no path. */
  url: string;
  space: string;
  /**
   * Sent as `Authorization: Bearer <token>`, never in the URL (URLs end up in logs). A
   * function is asked again for each connection: a token rotated meanwhile is used.
   */
  token: string | (() => string);
  /** Optional claimed id; the gateway refuses it (4403) when it disagrees with the token. */
  participantId?: string | undefined;
  /** Ask the gateway to send this participant its own envelopes back. */
  echo?: boolean | undefined;
  /**
   * Client-side liveness check: ping the gateway this often and drop the connection when
   * the previous ping got no pong, so a half-open TCP connection turns into a reconnect.
   * 0 turns it off. Default 30 000.
   */
  heartbeatMs?: number | undefined;
  /**
   * Other nodes of the same cluster (same space and token), tried in turn after `url`: a
   * connection that could not open, or ended without a close frame (1006: the node died)
   * or with the node going away (1001), comes back through the next. After a 1012 (the
   * space moved to another owner) it stays: the node lives and admits it again.
   */
  fallbackUrls?: readonly string[] | undefined;
}

/** Builds the `/ws?space=…` URL from a gateway base URL. */
export function gatewayUrl(opts: Pick<WebSocketTransportOptions, "url" | "space" | "participantId" | "echo">): string {
  const url = new URL(opts.url);
  if (url.pathname === "" || url.pathname === "/") url.pathname = "/ws";
  url.searchParams.set("space", opts.space);
  if (opts.participantId !== undefined) url.searchParams.set("participant", opts.participantId);
  if (opts.echo) url.searchParams.set("echo", "1");
  return url.toString();
}

/** A factory that opens a new WebSocket connection to the gateway on every call. */
export function webSocketTransport(opts: WebSocketTransportOptions): TransportFactory {
  const urls = [opts.url, ...(opts.fallbackUrls ?? [])].map((url) => gatewayUrl({ ...opts, url }));
  let at = 0;
  return () => {
    const token = typeof opts.token === "function" ? opts.token() : opts.token;
    const t = new WebSocketTransport(urls[at % urls.length]!, token, opts.heartbeatMs ?? 30_000);
    if (urls.length > 1) {
      const onclose = (info: CloseInfo) => {
        if (!t.opened || info.code === 1006 || info.code === 1001) at++;
      };
      t.watch(onclose);
    }
    return t;
  };
}

class WebSocketTransport implements Transport {
  onmessage?: ((text: string) => void) | undefined;
  onclose?: ((info: CloseInfo) => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  private ws: WebSocket | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private closed = false;
  /** The WebSocket opened (the handshake succeeded). */
  opened = false;
  private watcher: ((info: CloseInfo) => void) | undefined;
  /** Anything heard from the gateway (frame, ping, pong) since the last heartbeat tick. */
  private heard = true;

  constructor(
    private readonly url: string,
    private readonly token: string,
    private readonly heartbeatMs: number,
  ) {}

  get bufferedAmount(): number {
    return this.ws?.bufferedAmount ?? 0;
  }

  start(): Promise<void> {
    if (this.ws) return Promise.reject(new Error("transport already started"));
    const ws = new WebSocket(this.url, { headers: { authorization: `Bearer ${this.token}` }, perMessageDeflate: false });
    this.ws = ws;
    ws.on("message", (data, isBinary) => {
      this.heard = true;
      // The gateway only sends text frames; anything else is not an envelope.
      if (isBinary) return;
      this.onmessage?.((data as Buffer).toString("utf8"));
    });
    ws.on("close", (code, reason) => this.finish({ code, reason: reason.toString() }));
    return new Promise((resolve, reject) => {
      ws.once("open", () => {
        this.opened = true;
        this.startHeartbeat(ws);
        resolve();
      });
      ws.on("error", (err) => {
        // Before open this is the connect failure (refused, DNS, HTTP error); ws follows
        // it with "close", which settles the connection.
        if (ws.readyState === WebSocket.CONNECTING) reject(err);
        this.onerror?.(err);
      });
    });
  }

  send(text: string): void {
    if (this.ws?.readyState !== WebSocket.OPEN) throw new Error("the connection is not open");
    this.ws.send(text);
  }

  close(code = 1000, reason = ""): void {
    const ws = this.ws;
    if (!ws) return;
    if (ws.readyState === WebSocket.CONNECTING) {
      // ws.close() on a connecting socket throws; terminate() aborts the handshake.
      ws.terminate();
    } else if (ws.readyState === WebSocket.OPEN) {
      ws.close(code, reason);
    }
  }

  private startHeartbeat(ws: WebSocket): void {
    if (this.heartbeatMs <= 0) return;
    ws.on("pong", () => (this.heard = true));
    ws.on("ping", () => (this.heard = true));
    this.heartbeat = setInterval(() => {
      if (!this.heard) {
        ws.terminate();
        return;
      }
      this.heard = false;
      ws.ping();
    }, this.heartbeatMs);
    this.heartbeat.unref();
  }

  /** Told of the close before the connection is (the factory picks the next address). */
  watch(f: (info: CloseInfo) => void): void {
    this.watcher = f;
  }

  private finish(info: CloseInfo): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.heartbeat);
    this.watcher?.(info);
    this.onclose?.(info);
  }
}
