/**
 * A receive-only WebSocket client that counts frames without decoding them.
 *
 * Why: in the fan-out scenario the bench process receives every delivery of both servers
 * on one core. Decoding each frame into a message event (what `ws` does) costs the client
 * about as much as sending it costs the server, so with many receivers the client, not
 * the server, would set the pace and every server would look alike. This counter only
 * walks the frame headers of each chunk read from the socket.
 *
 * It speaks just enough of RFC 6455 for that: the client handshake, unmasked server frames
 * (any length, fragmented or not), and a close when the socket ends. It never sends data.
 */
import { randomBytes } from "node:crypto";
import { connect, type Socket } from "node:net";
import type { Target } from "./clients.js";
import { SPACE, tokenFor } from "./clients.js";

export class FrameCounter {
  /** Complete data frames (text, binary, continuation with FIN) since connect or reset. */
  received = 0;
  /** Called after each counted frame. */
  onFrame: (() => void) | undefined;
  closed = false;
  readonly closedAt: Promise<void>;
  private skip = 0;
  private partial: Buffer | undefined;

  constructor(
    readonly id: string,
    readonly socket: Socket,
  ) {
    this.closedAt = new Promise((resolve) =>
      socket.once("close", () => {
        this.closed = true;
        resolve();
      }),
    );
    socket.on("error", () => {});
  }

  /** Walks the frames in `chunk`; a header split over two chunks is kept for the next one. */
  feed(chunk: Buffer): void {
    let buf = chunk;
    let off = 0;
    if (this.skip > 0) {
      const n = Math.min(this.skip, buf.length);
      this.skip -= n;
      off = n;
    }
    if (this.partial) {
      buf = Buffer.concat([this.partial, buf.subarray(off)]);
      off = 0;
      this.partial = undefined;
    }
    while (off < buf.length) {
      if (buf.length - off < 2) break;
      const b0 = buf[off]!;
      const b1 = buf[off + 1]!;
      let len = b1 & 0x7f;
      let header = 2;
      if (len === 126) {
        if (buf.length - off < 4) break;
        len = buf.readUInt16BE(off + 2);
        header = 4;
      } else if (len === 127) {
        if (buf.length - off < 10) break;
        len = Number(buf.readBigUInt64BE(off + 2));
        header = 10;
      }
      if (b1 & 0x80) header += 4; // a masked frame; servers do not send them
      if (buf.length - off < header) break;
      const opcode = b0 & 0x0f;
      const fin = (b0 & 0x80) !== 0;
      if (fin && opcode < 0x8) {
        this.received++;
        this.onFrame?.();
      }
      const end = off + header + len;
      if (end > buf.length) {
        this.skip = end - buf.length;
        return;
      }
      off = end;
    }
    if (off < buf.length) this.partial = Buffer.from(buf.subarray(off));
  }

  terminate(): void {
    this.socket.destroy();
  }
}

/**
 * Connects as participant `id` and resolves once ready: after the welcome on the gateway
 * (the one frame this client reads), at once on the naive forwarder.
 */
export function joinCounter(target: Target, id: string, timeoutMs = 10_000): Promise<FrameCounter> {
  const port = Number(new URL(target.base).port);
  const socket = connect({ host: "127.0.0.1", port, noDelay: true });
  const counter = new FrameCounter(id, socket);
  return new Promise<FrameCounter>((resolve, reject) => {
    let head = Buffer.alloc(0);
    let upgraded = false;
    const fail = (why: string) => {
      clearTimeout(timer);
      socket.destroy();
      reject(new Error(`${id}: ${why}`));
    };
    const timer = setTimeout(() => fail(`not ready within ${timeoutMs} ms`), timeoutMs);
    const onError = (err: Error) => fail(err.message);
    const onClose = () => fail("closed during the handshake");
    socket.once("error", onError);
    socket.once("close", onClose);
    socket.on("connect", () => {
      socket.write(
        `GET /ws?space=${SPACE} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n` +
          `Authorization: Bearer ${tokenFor(id)}\r\n\r\n`,
      );
    });
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (!upgraded) {
        const end = head.indexOf("\r\n\r\n");
        if (end < 0) return;
        if (!head.subarray(0, 12).toString().startsWith("HTTP/1.1 101"))
          return fail(`handshake refused: ${head.subarray(0, end).toString()}`);
        upgraded = true;
        head = head.subarray(end + 4);
        if (target.kind !== "gateway") return ready(head);
      }
      // The gateway's first frame is its welcome: read it whole, check it, and count from there.
      if (head.length < 2) return;
      let len = head[1]! & 0x7f;
      let header = 2;
      if (len === 126) {
        if (head.length < 4) return;
        len = head.readUInt16BE(2);
        header = 4;
      } else if (len === 127) {
        if (head.length < 10) return;
        len = Number(head.readBigUInt64BE(2));
        header = 10;
      }
      if (head.length < header + len) return;
      const first = head.subarray(header, header + len);
      if (!first.includes('"system/welcome"')) return fail(`first frame was not system/welcome: ${first.toString("utf8", 0, 200)}`);
      ready(head.subarray(header + len));
    };
    const ready = (rest: Buffer) => {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("error", onError);
      socket.off("close", onClose);
      socket.on("data", (c: Buffer) => counter.feed(c));
      if (rest.length) counter.feed(Buffer.from(rest));
      resolve(counter);
    };
    socket.on("data", onData);
  });
}

/**
 * Windowed flow control for fan-out: `sender` keeps at most `window` messages ahead of the
 * slowest receiver, so no server's buffers balloon and each is measured at the rate it
 * can sustain rather than the rate it can queue. Returns how to stop, and how many went.
 */
export function pumpWindowed(
  sender: { send(frame: Buffer): void },
  rx: readonly FrameCounter[],
  frame: Buffer,
  window: number,
): { stop(): void; readonly sent: number } {
  let sent = 0;
  let sending = true;
  const pump = () => {
    if (!sending) return;
    let min = Infinity;
    for (const r of rx) if (r.received < min) min = r.received;
    for (let room = window - (sent - min); room > 0; room--) {
      sender.send(frame);
      sent++;
    }
  };
  for (const r of rx) r.onFrame = pump;
  pump();
  return {
    stop: () => {
      sending = false;
    },
    get sent() {
      return sent;
    },
  };
}
