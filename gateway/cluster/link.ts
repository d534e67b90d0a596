/**
 * One member's link between the node that holds its socket and the node that owns its
 * space: frames in order, each delivered once, across a bus that drops what it held when
 * it restarted.
 *
 * Each direction numbers its frames. The receiver takes only the next number (a later
 * one means something was lost: it waits for the resend), acknowledges what it took at
 * the end of the tick, and ignores what it already has. The sender keeps what is not yet
 * acknowledged and sends it all again after a reconnect or when the oldest has waited a
 * second (go-back-N). Past `maxBytes` unacknowledged the far end is not keeping up, as a
 * socket's buffer would say locally, and the link gives up.
 *
 * Wire: `<op> <conn> <seq>\n<body>`; an acknowledgement is `A <conn> <seq>\n`. What one
 * node sends to one subject within a tick travels as one bus message (`Outbox`): a chat
 * to fifty members on another node is one message there, not fifty.
 */

export type Op = "F" | "T" | "B" | "L" | "X";

export interface Wire {
  op: Op | "A";
  conn: string;
  seq: number;
  body: Uint8Array;
}

const NL = 0x0a;
const enc = new TextEncoder();
const dec = new TextDecoder();

export function encodeWire(op: Op | "A", conn: string, seq: number, body?: Uint8Array): Uint8Array {
  const head = enc.encode(`${op} ${conn} ${seq}\n`);
  if (!body || body.length === 0) return head;
  const out = new Uint8Array(head.length + body.length);
  out.set(head, 0);
  out.set(body, head.length);
  return out;
}

export function decodeWire(data: Uint8Array): Wire | undefined {
  const nl = data.indexOf(NL);
  if (nl < 0 || nl > 200) return undefined;
  const [op, conn, seq] = dec.decode(data.subarray(0, nl)).split(" ");
  const n = Number(seq);
  if (!op || !conn || !Number.isSafeInteger(n) || !"FTBLXA".includes(op) || op.length !== 1) return undefined;
  return { op: op as Wire["op"], conn, seq: n, body: data.subarray(nl + 1) };
}

/** How long an unacknowledged frame waits before everything unacknowledged is sent again. */
export const RESEND_AFTER_MS = 1000;

const acking = new Set<LinkEnd>();

export class LinkEnd {
  private next = 1;
  private readonly unacked: Array<{ seq: number; data: Uint8Array; at: number }> = [];
  private unackedBytes = 0;
  private received = 0;
  private ackDue = false;
  private dead = false;

  constructor(
    readonly conn: string,
    /** Publishes to the far end. */
    private readonly out: (data: Uint8Array) => void,
    /** One frame from the far end, in order, once. */
    private readonly deliver: (op: Op, body: Uint8Array) => void,
    private readonly maxBytes: number,
    /** The far end stopped acknowledging: more than `maxBytes` wait. */
    private readonly overflow: () => void,
  ) {}

  send(op: Op, body: Uint8Array): void {
    if (this.dead) return;
    const seq = this.next++;
    const data = encodeWire(op, this.conn, seq, body);
    this.unacked.push({ seq, data, at: performance.now() });
    this.unackedBytes += data.length;
    this.out(data);
    if (this.unackedBytes > this.maxBytes) {
      this.dead = true;
      this.overflow();
    }
  }

  /** A frame or acknowledgement from the far end. */
  receive(w: Wire): void {
    if (w.op === "A") return this.acked(w.seq);
    if (w.seq === this.received + 1) {
      this.received = w.seq;
      this.deliver(w.op, w.body);
    }
    // In order, a repeat, or after a gap: the far end learns how far we got.
    if (!this.ackDue) {
      this.ackDue = true;
      if (acking.size === 0) setImmediate(flushAcks);
      acking.add(this);
    }
  }

  sendAck(): void {
    this.ackDue = false;
    if (!this.dead) this.out(encodeWire("A", this.conn, this.received));
  }

  private acked(seq: number): void {
    let n = 0;
    while (n < this.unacked.length && this.unacked[n]!.seq <= seq) this.unackedBytes -= this.unacked[n++]!.data.length;
    if (n) this.unacked.splice(0, n);
  }

  /** Sends again what waited too long (or everything, `all`: the bus reconnected). */
  resend(all: boolean, now = performance.now()): void {
    if (this.dead || this.unacked.length === 0) return;
    if (!all && now - this.unacked[0]!.at < RESEND_AFTER_MS) return;
    for (const u of this.unacked) {
      u.at = now;
      this.out(u.data);
    }
  }

  end(): void {
    this.dead = true;
    this.unacked.length = 0;
    this.unackedBytes = 0;
    acking.delete(this);
  }
}

function flushAcks(): void {
  for (const l of acking) l.sendAck();
  acking.clear();
}

/**
 * Frames for the same subject, queued within a tick, published as one message: each
 * frame is preceded by its length (4 bytes, big-endian).
 */
export class Outbox {
  private readonly queued = new Map<string, { parts: Uint8Array[]; bytes: number }>();
  private scheduled = false;

  constructor(
    private readonly publish: (subject: string, data: Uint8Array) => void,
    /** A message grows to this many bytes at most (a larger frame goes alone). */
    private readonly maxBytes: number,
  ) {}

  send(subject: string, frame: Uint8Array): void {
    let q = this.queued.get(subject);
    if (q && q.bytes + 4 + frame.length > this.maxBytes) {
      this.emit(subject, q);
      q = undefined;
    }
    if (!q) this.queued.set(subject, (q = { parts: [], bytes: 0 }));
    q.parts.push(frame);
    q.bytes += 4 + frame.length;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  flush(): void {
    this.scheduled = false;
    for (const [subject, q] of this.queued) this.emit(subject, q);
    this.queued.clear();
  }

  private emit(subject: string, q: { parts: Uint8Array[]; bytes: number }): void {
    this.queued.delete(subject);
    const out = new Uint8Array(q.bytes);
    const view = new DataView(out.buffer);
    let at = 0;
    for (const p of q.parts) {
      view.setUint32(at, p.length);
      out.set(p, at + 4);
      at += 4 + p.length;
    }
    try {
      this.publish(subject, out);
    } catch {
      // The connection is closing or gone: the links send their frames again.
    }
  }
}

/** The frames of one `Outbox` message; stops at the first that does not fit. */
export function* unbatch(data: Uint8Array): Generator<Wire> {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  for (let at = 0; at + 4 <= data.length; ) {
    const n = view.getUint32(at);
    if (at + 4 + n > data.length) return;
    const w = decodeWire(data.subarray(at + 4, at + 4 + n));
    if (w) yield w;
    at += 4 + n;
  }
}
