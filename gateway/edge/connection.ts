/**
 * One WebSocket connection as the server keeps it: the space's `Peer` for it, and the
 * per-connection limits (rate, size, outbound buffer), with how its frames are written.
 * server.ts accepts and authenticates connections; this file is what each one is after.
 */
import { WebSocket } from "ws";
import type { Logger } from "pino";
import type { Limits } from "../config/config.js";
import { CloseCodes, ErrorCodes, errorEnvelope, parseFrame, type Join } from "../wire/envelope.js";
import type { MemberPort } from "../space/door.js";
import type { Peer } from "../ports/member.js";

/**
 * One WebSocket connection: the space's `Peer` for it, plus the per-connection limits.
 */
export class Connection implements Peer {
  alive = true;
  authenticated = false;
  private port: MemberPort | undefined;
  /** The member this connection was admitted as, kept after it leaves, for the log. */
  private admitted: MemberPort | undefined;
  private ownLog: Logger | undefined;
  /** Frame headers and payloads sent this tick, and their bytes (`write`). */
  private queued: Buffer[] | undefined;
  private queuedBytes = 0;
  /** Frames that arrived while the space was admitting this connection (a remote space answers later). */
  private early: Array<[Buffer, boolean]> | undefined;
  private tokens: number;
  private lastRefill = performance.now();
  private strikes = 0;
  private strikeWindowStart = 0;
  private lastRateError = 0;
  private dropped: string | undefined;

  constructor(
    readonly ws: WebSocket,
    private readonly limits: Limits,
    private readonly serverLog: Logger,
    private readonly remote: string,
  ) {
    this.tokens = limits.rate_burst;
    ws.on("pong", () => {
      this.alive = true;
    });
    ws.on("error", (err) => this.log.debug({ err: err.message }, "socket error"));
  }

  /** The remote address, for the operator's list of sessions. */
  get address(): string {
    return this.remote;
  }

  /**
   * The member's logger once admitted, before that a child with the remote address. Made
   * when first used: an idle connection that never logs keeps no logger of its own.
   */
  get log(): Logger {
    const admitted = this.admitted?.log;
    if (admitted !== undefined) return admitted;
    this.ownLog ??= this.serverLog.child({ remote: this.remote });
    return this.ownLog;
  }

  awaitJoin(timeoutMs: number, onJoin: (join: Join) => void, need: "token" | "space" = "token"): void {
    const timer = setTimeout(
      () =>
        this.close(
          CloseCodes.joinTimeout,
          need === "token"
            ? "no token: send Authorization: Bearer, ?token=, or a join frame first"
            : "no space: connect to /ws?space=NAME or send a join frame naming the space first",
        ),
      timeoutMs,
    );
    // A client gone before its join leaves no timer behind: it would hold the socket, and a shutdown, until it fires.
    this.ws.once("close", () => clearTimeout(timer));
    this.ws.once("message", (data, isBinary) => {
      clearTimeout(timer);
      if (this.ws.readyState !== WebSocket.OPEN) return;
      const parsed = isBinary ? undefined : parseFrame(data.toString());
      if (parsed?.ok && "join" in parsed) {
        if (need === "token" && parsed.join.token === undefined)
          return this.close(CloseCodes.unauthorized, "the join frame has no token (or authenticate at connect with Authorization: Bearer)");
        return onJoin(parsed.join);
      }
      if (need === "space")
        return this.close(CloseCodes.badRequest, "missing space: connect to /ws?space=NAME, or send a join frame naming the space first");
      this.close(CloseCodes.unauthorized, "the first frame must be a join with a token (or authenticate at connect)");
    });
  }

  /** The space is deciding on this connection: keep what the client sends meanwhile, in order. */
  admitting(): void {
    if (this.early) return;
    this.early = [];
    this.ws.on("message", (data, isBinary) => {
      if (this.port) return this.onMessage(data as Buffer, isBinary);
      // Admitted and gone again: the socket is closing, and its frames go nowhere.
      if (!this.early) return;
      if (this.early.length >= EARLY_FRAMES)
        return this.drop("flood", CloseCodes.flood, `more than ${EARLY_FRAMES} frames before the space admitted you`);
      this.early.push([data as Buffer, isBinary]);
    });
  }

  attach(port: MemberPort): void {
    this.authenticated = true;
    this.port = port;
    this.admitted = port;
    const early = this.early;
    this.early = undefined;
    // The socket closed while the space was admitting it.
    if (this.ws.readyState !== WebSocket.OPEN) return this.ended();
    for (const [data, isBinary] of early ?? []) this.onMessage(data, isBinary);
  }

  send(bytes: Buffer): void {
    this.write(bytes, false);
  }

  sendFrame(data: Buffer, binary: boolean): void {
    this.write(data, binary);
  }

  /**
   * A participant that stops reading must not grow the gateway's memory: past the cap it
   * is dropped (and the others see it leave) rather than buffered for.
   */
  private write(bytes: Buffer, binary: boolean): void {
    const ws = this.ws;
    if (ws.readyState !== WebSocket.OPEN) return;
    if (ws.bufferedAmount + this.queuedBytes + bytes.length > this.limits.max_buffered_bytes) {
      this.drop(
        "slow_consumer",
        CloseCodes.slowConsumer,
        `outbound buffer over ${this.limits.max_buffered_bytes} bytes: not reading fast enough`,
      );
      return;
    }
    // The frame is written whole here rather than by ws.send: a delivery hands the same
    // bytes to every recipient, so their header is made once (`frameHeader`), and nothing
    // else is allocated per recipient. Server frames are never masked, and the server runs
    // without compression, so the bytes on the wire are what ws would have written.
    const header = frameHeader(bytes, binary);
    if (this.queued) this.queued.push(header, bytes);
    else {
      this.queued = [header, bytes];
      if (queuedConnections.size === 0) process.nextTick(flushAll);
      queuedConnections.add(this);
    }
    this.queuedBytes += header.length + bytes.length;
  }

  /** Writes what this tick queued (`flushAll`); before a close frame, so it goes last. */
  flush(): void {
    const queued = this.queued;
    if (!queued) return;
    const total = this.queuedBytes;
    this.queued = undefined;
    this.queuedBytes = 0;
    if (this.ws.readyState === WebSocket.OPEN) writeCoalesced(socketOf(this.ws), queued, total);
  }

  close(code: number, reason: string): void {
    this.flush();
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(code, reason);
  }

  /** The socket is gone: leave the space. */
  ended(): void {
    const port = this.port;
    this.port = undefined;
    port?.leave(this.dropped ?? "disconnected");
  }

  private drop(why: string, code: number, reason: string): void {
    if (this.dropped) return;
    this.dropped = why;
    this.log.warn({ why }, reason);
    // The close frame carries the code (4429, 4503) to a peer that still reads; one that
    // does not complete the closing handshake within a second is cut off. Its frames are
    // ignored meanwhile (`dropped`).
    this.flush();
    this.ws.close(code, reason);
    setTimeout(() => this.ws.terminate(), DROP_GRACE_MS).unref();
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    const port = this.port;
    if (this.dropped || !port) return;
    if (!this.take()) return;
    if (data.length > this.limits.max_payload_bytes) {
      this.reply(ErrorCodes.payloadTooLarge, `frame of ${data.length} bytes exceeds the limit of ${this.limits.max_payload_bytes} bytes`);
      return;
    }
    // `#<stream_id>#<data>`: a MEW stream frame, text or binary, not an envelope.
    if (data[0] === 0x23) return port.streamFrame(data, isBinary);
    if (isBinary) {
      this.reply(ErrorCodes.invalidEnvelope, "binary frames carry streams only (#<stream_id>#<data>); send envelopes as text frames");
      return;
    }
    try {
      port.handle(data);
    } catch (err) {
      // A bug must cost one frame, not the gateway.
      this.log.error({ err }, "error while handling a frame");
      this.reply(ErrorCodes.internal, "the gateway failed to handle this frame");
    }
  }

  /** Token bucket. Over the rate: the frame is dropped with an error; sustained: disconnect. */
  private take(): boolean {
    const now = performance.now();
    const { rate_per_second, rate_burst, flood_strikes, flood_window_ms } = this.limits;
    this.tokens = Math.min(rate_burst, this.tokens + ((now - this.lastRefill) / 1000) * rate_per_second);
    this.lastRefill = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return true;
    }
    if (now - this.strikeWindowStart > flood_window_ms) {
      this.strikeWindowStart = now;
      this.strikes = 0;
    }
    if (++this.strikes >= flood_strikes) {
      this.drop("flood", CloseCodes.flood, `sustained flood: over ${rate_per_second} messages/s`);
      return false;
    }
    // One error a second is enough for a well-behaved client to slow down.
    if (now - this.lastRateError > 1000) {
      this.lastRateError = now;
      this.reply(ErrorCodes.rateLimited, `rate limit of ${rate_per_second} messages/s (burst ${rate_burst}) exceeded; frame dropped`);
    }
    return false;
  }

  private reply(code: (typeof ErrorCodes)[keyof typeof ErrorCodes], message: string): void {
    if (this.port) this.send(Buffer.from(JSON.stringify(errorEnvelope(this.port.id, code, message))));
  }
}

/** Frames a client may send before its space has admitted it. */
const EARLY_FRAMES = 64;
/** How long a dropped peer has to complete the closing handshake before its socket is cut. */
const DROP_GRACE_MS = 1000;

/**
 * Everything sent to one participant within a tick leaves in one write, once the tick's
 * work is done. A burst of inbound frames (a chatty sender, a wave of joins and their
 * presence) then costs each recipient one syscall instead of one per envelope, and the
 * socket's stream one chunk instead of two per envelope (its per-chunk bookkeeping was
 * most of the gateway's own cost in a join storm).
 */
const queuedConnections = new Set<Connection>();

function flushAll(): void {
  for (const c of queuedConnections) c.flush();
  queuedConnections.clear();
}

/**
 * What one socket is sent in a tick is copied into one buffer and written with one call,
 * when it fits and the socket has nothing waiting. The buffer is reused while the kernel
 * takes each write whole (the stream then holds nothing of it); a write it takes only in
 * part keeps this buffer, and the next is a new one. So a storm of small deliveries
 * allocates nothing per recipient: copies cut per write, even from node's 8 KiB pools,
 * left the allocator holding 8 KiB per connection after a storm of joins was over.
 */
const SCRATCH_BYTES = 64 * 1024;
let scratch = Buffer.allocUnsafeSlow(SCRATCH_BYTES);

function writeCoalesced(socket: SocketLike, parts: Buffer[], total: number): void {
  // Written as they are, not copied: one large frame (its payload shared by its
  // recipients), more than the buffer holds, or a socket with writes still waiting (it
  // would keep the copy, and a slow reader would hold one of every delivery).
  if (total > SCRATCH_BYTES || (parts.length === 2 && total > SCRATCH_BYTES / 2) || socket.writableLength > 0) {
    socket.cork();
    for (const part of parts) socket.write(part);
    socket.uncork();
    return;
  }
  let at = 0;
  for (const part of parts) at += part.copy(scratch, at);
  socket.write(scratch.subarray(0, total));
  if (socket.writableLength > 0) scratch = Buffer.allocUnsafeSlow(SCRATCH_BYTES);
}

interface SocketLike {
  readonly writableLength: number;
  cork(): void;
  uncork(): void;
  write(b: Buffer): boolean;
}

function socketOf(ws: WebSocket): SocketLike {
  return (ws as unknown as { _socket: SocketLike })._socket;
}

/** The last payload framed, and its header: one delivery's recipients share both. */
let framed: Buffer | undefined;
let framedBinary = false;
let framedHeader = Buffer.alloc(0);

/** An unmasked, final WebSocket frame header (RFC 6455 5.2) for `bytes`. */
function frameHeader(bytes: Buffer, binary: boolean): Buffer {
  if (bytes === framed && binary === framedBinary) return framedHeader;
  const n = bytes.length;
  const h = Buffer.allocUnsafe(n < 126 ? 2 : n < 65536 ? 4 : 10);
  h[0] = 0x80 | (binary ? 0x2 : 0x1);
  if (n < 126) h[1] = n;
  else if (n < 65536) {
    h[1] = 126;
    h.writeUInt16BE(n, 2);
  } else {
    h[1] = 127;
    h.writeUInt32BE(Math.floor(n / 0x1_0000_0000), 2);
    h.writeUInt32BE(n >>> 0, 6);
  }
  framed = bytes;
  framedBinary = binary;
  framedHeader = h;
  return h;
}
