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
 * node sends to one subject within a tick travels as one bus message (`Outbox`), and the
 * same bytes sent to several members there travel once, as `M <op> <conn>:<seq>,…\n<body>`:
 * a chat to fifty members on another node is one copy in one message, not fifty.
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

/** The frames of one wire record: one, or several sharing a body (`M`). */
function* decodeRecord(data: Uint8Array): Generator<Wire> {
  if (data[0] !== 0x4d /* M */) {
    const w = decodeWire(data);
    if (w) yield w;
    return;
  }
  const nl = data.indexOf(NL);
  if (nl < 0) return;
  const [, op, pairs] = dec.decode(data.subarray(0, nl)).split(" ");
  if (op?.length !== 1 || !"FTBLX".includes(op) || !pairs) return;
  const body = data.subarray(nl + 1);
  for (const pair of pairs.split(",")) {
    const at = pair.lastIndexOf(":");
    const seq = Number(pair.slice(at + 1));
    if (at > 0 && Number.isSafeInteger(seq)) yield { op: op as Op, conn: pair.slice(0, at), seq, body };
  }
}

export function decodeWire(data: Uint8Array): Wire | undefined {
  const nl = data.indexOf(NL);
  if (nl < 0 || nl > 200) return undefined;
  const [op, conn, seq] = dec.decode(data.subarray(0, nl)).split(" ");
  const n = Number(seq);
  if (!op || !conn || !Number.isSafeInteger(n) || !"FTBLXA".includes(op) || op.length !== 1) return undefined;
  return { op: op as Wire["op"], conn, seq: n, body: data.subarray(nl + 1) };
}

/**
 * How long an unacknowledged frame waits before everything unacknowledged is sent again, at
 * least. Each link learns its own wait from the acknowledgements it gets (as TCP does: the
 * smoothed round trip plus four deviations, never timed on a frame sent twice) and doubles
 * it after each resend that was not answered, up to RESEND_MAX_MS. A fixed second was the
 * cluster's fan-out collapsing on a busy machine: acknowledgements late by more than that
 * made every link send all it held again, frame by frame — fifty members' worth of copies
 * of what had not been lost — which made the next acknowledgements later still.
 */
export const RESEND_AFTER_MS = 1000;
const RESEND_MAX_MS = 30_000;

const acking = new Set<LinkEnd>();

export class LinkEnd {
  private next = 1;
  private readonly unacked: Array<{ seq: number; op: Op; body: Uint8Array; at: number; sent: number; again?: boolean }> = [];
  /** Smoothed round trip and its deviation (ms), once measured; the current resend wait. */
  private srtt = 0;
  private rttvar = 0;
  private rto = RESEND_AFTER_MS;
  private unackedBytes = 0;
  private received = 0;
  private ackDue = false;
  private dead = false;

  constructor(
    readonly conn: string,
    /** Publishes one frame (or, with no body, an acknowledgement) to the far end. */
    private readonly out: (op: Op | "A", conn: string, seq: number, body?: Uint8Array) => void,
    /** One frame from the far end, in order, once. */
    private readonly deliver: (op: Op, body: Uint8Array) => void,
    private readonly maxBytes: number,
    /** The far end stopped acknowledging: more than `maxBytes` wait. */
    private readonly overflow: () => void,
  ) {}

  send(op: Op, body: Uint8Array): void {
    if (this.dead) return;
    const seq = this.next++;
    const now = performance.now();
    this.unacked.push({ seq, op, body, at: now, sent: now });
    this.unackedBytes += body.length + 32;
    this.out(op, this.conn, seq, body);
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
    if (!this.dead) this.out("A", this.conn, this.received);
  }

  private acked(seq: number): void {
    let n = 0;
    while (n < this.unacked.length && this.unacked[n]!.seq <= seq) this.unackedBytes -= this.unacked[n++]!.body.length + 32;
    if (!n) return;
    const last = this.unacked[n - 1]!;
    // Timed only on a frame sent once: an answer to a resent one says nothing of the round trip.
    if (!last.again) this.sample(performance.now() - last.at);
    this.unacked.splice(0, n);
  }

  private sample(ms: number): void {
    if (this.srtt === 0) {
      this.srtt = ms;
      this.rttvar = ms / 2;
    } else {
      this.rttvar = 0.75 * this.rttvar + 0.25 * Math.abs(this.srtt - ms);
      this.srtt = 0.875 * this.srtt + 0.125 * ms;
    }
    this.rto = Math.min(RESEND_MAX_MS, Math.max(RESEND_AFTER_MS, this.srtt + 4 * this.rttvar));
  }

  /** How long the oldest frame not yet acknowledged has waited since it was first sent (ms; 0 if none waits). */
  waiting(now = performance.now()): number {
    return this.dead || this.unacked.length === 0 ? 0 : now - this.unacked[0]!.sent;
  }

  /** Sends again what waited too long (or everything, `all`: the bus reconnected). */
  resend(all: boolean, now = performance.now()): void {
    if (this.dead || this.unacked.length === 0) return;
    if (!all && now - this.unacked[0]!.at < this.rto) return;
    // Not answered in time: wait longer before the next resend (a reconnect is not a timeout).
    if (!all) this.rto = Math.min(RESEND_MAX_MS, this.rto * 2);
    for (const u of this.unacked) {
      u.at = now;
      u.again = true;
      this.out(u.op, this.conn, u.seq, u.body);
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
interface Item {
  op: Op | "A";
  conn: string;
  seq: number;
  body: Uint8Array | undefined;
}

export class Outbox {
  private readonly queued = new Map<string, { items: Item[]; bytes: number }>();
  private scheduled = false;

  constructor(
    private readonly publish: (subject: string, data: Uint8Array) => void,
    /** A message grows to this many bytes at most (a larger frame goes alone). */
    private readonly maxBytes: number,
  ) {}

  send(subject: string, op: Op | "A", conn: string, seq: number, body?: Uint8Array): void {
    let q = this.queued.get(subject);
    const last = q?.items[q.items.length - 1];
    // The same bytes again (a delivery to several members) cost only their address.
    const size = 48 + conn.length + (body && body !== last?.body ? body.length : 0);
    if (q && q.bytes + size > this.maxBytes) {
      this.emit(subject, q);
      q = undefined;
    }
    if (!q) {
      q = { items: [], bytes: 0 };
      this.queued.set(subject, q);
    }
    q.items.push({ op, conn, seq, body });
    q.bytes += size;
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

  private emit(subject: string, q: { items: Item[] }): void {
    this.queued.delete(subject);
    const records: Uint8Array[] = [];
    const items = q.items;
    for (let i = 0; i < items.length; ) {
      const first = items[i]!;
      let j = i + 1;
      if (first.body && first.body.length > 0 && first.op !== "A")
        while (j < items.length && items[j]!.body === first.body && items[j]!.op === first.op) j++;
      if (j - i === 1) records.push(encodeWire(first.op, first.conn, first.seq, first.body));
      else {
        const pairs = items
          .slice(i, j)
          .map((it) => `${it.conn}:${it.seq}`)
          .join(",");
        const head = enc.encode(`M ${first.op} ${pairs}\n`);
        const rec = new Uint8Array(head.length + first.body!.length);
        rec.set(head, 0);
        rec.set(first.body!, head.length);
        records.push(rec);
      }
      i = j;
    }
    let bytes = 0;
    for (const r of records) bytes += 4 + r.length;
    const out = new Uint8Array(bytes);
    const view = new DataView(out.buffer);
    let at = 0;
    for (const r of records) {
      view.setUint32(at, r.length);
      out.set(r, at + 4);
      at += 4 + r.length;
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
    yield* decodeRecord(data.subarray(at + 4, at + 4 + n));
    at += 4 + n;
  }
}
