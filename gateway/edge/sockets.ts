/**
 * Every TCP socket on the gateway's port, from its first byte (the server's `connection`
 * event) to its close: how many there are, how many from each address, and which of them
 * have not finished a request.
 *
 * A socket that has not sent a whole request's headers yet is half-open: it costs a
 * descriptor and has proved nothing. At a ceiling (the sockets the descriptor budget
 * allows, or `max_per_address` for its address) a newcomer is not refused: the socket that
 * has least claim to its place is evicted instead, in this order —
 *   1. one that has sent nothing at all for longer than `SILENT_GRACE_MS`, oldest first
 *      (a raw connect flood; a real client sends its request as soon as it connects);
 *   2. any other half-open one, oldest first (slow or never-finished headers);
 *   3. an idle keep-alive HTTP socket between requests, the longest idle first.
 * A socket that has finished its headers (a request being served, a WebSocket) is never
 * evicted here: the WebSocket caps and the operator reserve (server.ts) decide about
 * those. When nothing can be evicted the newcomer stays over the ceiling until its
 * headers arrive and is then refused with a status that names the limit (`refusal`); the
 * next newcomer would evict it first, so a ceiling is passed by one socket at most.
 */
import type { Socket } from "node:net";

/** How long a fresh socket may be silent before it is first in line for eviction: its request may not have been read yet. */
export const SILENT_GRACE_MS = 1000;
/** How often half-open sockets past the headers deadline are cut (node's own check runs every 30 s). */
const SWEEP_MS = 1000;

export interface Ceilings {
  /** Sockets on the port, every kind together. */
  sockets: number;
  /** Sockets from one remote address. */
  perAddress: number;
  /** How long a socket may take to send its request's headers. */
  headersMs: number;
}

type State = "half-open" | "busy" | "idle" | "upgraded";

interface Entry {
  readonly socket: Socket;
  readonly address: string;
  readonly at: number;
  state: State;
}

/** Half-open sockets in the order they came; those not yet seen to send a byte are kept apart. */
class HalfOpen {
  private silent = new Map<Socket, Entry>();
  private partial = new Map<Socket, Entry>();

  add(e: Entry): void {
    this.silent.set(e.socket, e);
  }

  delete(s: Socket): void {
    if (!this.silent.delete(s)) this.partial.delete(s);
  }

  /** The half-open socket to evict for `newcomer`, by the order at the top of this file. */
  victim(now: number, newcomer: Socket | undefined): Entry | undefined {
    // Sockets reach the front of `silent` in the order they came, so moving those that
    // have since sent bytes from the front keeps `partial` in that order too.
    for (const [s, e] of this.silent) {
      if (s.bytesRead === 0) break;
      this.silent.delete(s);
      this.partial.set(s, e);
    }
    const silent = first(this.silent, newcomer);
    if (silent && now - silent.at >= SILENT_GRACE_MS) return silent;
    const partial = first(this.partial, newcomer);
    if (!silent) return partial;
    if (!partial) return silent;
    return partial.at <= silent.at ? partial : silent;
  }

  /** Those that came before `before`, oldest first. */
  *olderThan(before: number): Generator<Entry> {
    for (const map of [this.silent, this.partial]) {
      for (const e of map.values()) {
        if (e.at >= before) break;
        yield e;
      }
    }
  }
}

function first(map: Map<Socket, Entry>, except: Socket | undefined): Entry | undefined {
  for (const e of map.values()) if (e.socket !== except) return e;
  return undefined;
}

/** The sockets of one address, or of the whole port. */
class Group {
  count = 0;
  readonly half = new HalfOpen();
  /** Keep-alive sockets between requests, longest idle first. */
  readonly idle = new Map<Socket, Entry>();

  victim(now: number, newcomer: Socket): Entry | undefined {
    return this.half.victim(now, newcomer) ?? this.idle.values().next().value;
  }
}

/** What was evicted since the last report, counted rather than listed: a flood makes many. */
export interface Evictions {
  /** Made room under the port's ceiling, or under an address's. */
  sockets: number;
  max_per_address: number;
  /** Of those, how many had sent nothing, part of a request, or were idle keep-alives. */
  silent: number;
  half_open: number;
  idle: number;
  /** Half-open sockets cut at the headers deadline. */
  timed_out: number;
  /** A few of the addresses they came from. */
  addresses: string[];
}

const REPORTED_ADDRESSES = 8;

function noEvictions(): Evictions {
  return { sockets: 0, max_per_address: 0, silent: 0, half_open: 0, idle: 0, timed_out: 0, addresses: [] };
}

export class SocketBook {
  private readonly entries = new Map<Socket, Entry>();
  private readonly all = new Group();
  private readonly byAddress = new Map<string, Group>();
  private readonly sweeper: NodeJS.Timeout;
  /** Evictions since the last sweep, for a log line a second rather than one per socket. */
  private evicted = noEvictions();
  private anyEvicted = false;

  constructor(
    private readonly ceilings: Ceilings,
    private readonly report: (evicted: Evictions) => void,
  ) {
    this.sweeper = setInterval(() => this.sweep(), SWEEP_MS);
    this.sweeper.unref();
  }

  get size(): number {
    return this.all.count;
  }

  /** Sockets open from `address`, this one included. */
  count(address: string): number {
    return this.byAddress.get(address)?.count ?? 0;
  }

  /** A new socket (the server's `connection` event): counted from here; over a ceiling, an older one makes room. */
  admit(socket: Socket): void {
    const address = socket.remoteAddress ?? "unknown";
    const e: Entry = { socket, address, at: performance.now(), state: "half-open" };
    let group = this.byAddress.get(address);
    if (!group) {
      group = new Group();
      this.byAddress.set(address, group);
    }
    this.entries.set(socket, e);
    group.count++;
    group.half.add(e);
    this.all.count++;
    this.all.half.add(e);
    socket.once("close", () => this.forget(socket));
    const now = e.at;
    if (group.count > this.ceilings.perAddress) {
      const victim = group.victim(now, socket);
      if (victim) this.evict(victim, "max_per_address");
    }
    if (this.all.count > this.ceilings.sockets) {
      const victim = this.all.victim(now, socket);
      if (victim) this.evict(victim, "sockets");
    }
  }

  /** A request's headers have arrived on `socket`: it is no longer half-open, nor idle. */
  busy(socket: Socket): void {
    this.move(socket, "busy");
  }

  /** Its response is sent and the socket waits for the next request (keep-alive). */
  idle(socket: Socket): void {
    const e = this.entries.get(socket);
    if (e?.state === "busy" && !socket.destroyed) this.move(socket, "idle");
  }

  /** The socket is a WebSocket now: the WebSocket caps govern it. */
  upgraded(socket: Socket): void {
    this.move(socket, "upgraded");
  }

  /**
   * Whether a request that has just finished its headers came over a ceiling with
   * nothing to evict; then it is answered with this status and closed.
   */
  refusal(socket: Socket): { status: number; reason: string } | undefined {
    const e = this.entries.get(socket);
    if (!e) return undefined;
    if (this.count(e.address) > this.ceilings.perAddress) {
      return {
        status: 429,
        reason: `too many connections from your address (gateway.limits.max_per_address: ${this.ceilings.perAddress})`,
      };
    }
    if (this.all.count > this.ceilings.sockets) {
      return {
        status: 503,
        reason: `the gateway has ${this.ceilings.sockets} connections open, all it has descriptors for; try again later`,
      };
    }
    return undefined;
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  private move(socket: Socket, state: State): void {
    const e = this.entries.get(socket);
    if (!e || e.state === state) return;
    this.leave(e);
    e.state = state;
    const group = this.byAddress.get(e.address)!;
    if (state === "idle") {
      group.idle.set(socket, e);
      this.all.idle.set(socket, e);
    }
  }

  /** Takes `e` out of the half-open and idle lines (not out of the counts). */
  private leave(e: Entry): void {
    const group = this.byAddress.get(e.address)!;
    if (e.state === "half-open") {
      group.half.delete(e.socket);
      this.all.half.delete(e.socket);
    } else if (e.state === "idle") {
      group.idle.delete(e.socket);
      this.all.idle.delete(e.socket);
    }
  }

  /** Counted off at once: the socket's close comes a tick later, after the newcomer has been counted in. */
  private forget(socket: Socket): void {
    const e = this.entries.get(socket);
    if (!e) return;
    this.entries.delete(socket);
    this.leave(e);
    const group = this.byAddress.get(e.address)!;
    if (--group.count === 0) this.byAddress.delete(e.address);
    this.all.count--;
  }

  private evict(e: Entry, reason: "sockets" | "max_per_address"): void {
    const r = this.evicted;
    r[reason]++;
    if (e.state === "idle") r.idle++;
    else if (e.socket.bytesRead === 0) r.silent++;
    else r.half_open++;
    this.note(e.address);
    this.forget(e.socket);
    e.socket.destroy();
  }

  private note(address: string): void {
    this.anyEvicted = true;
    const seen = this.evicted.addresses;
    if (seen.length < REPORTED_ADDRESSES && !seen.includes(address)) seen.push(address);
  }

  /** Cuts half-open sockets past the headers deadline, and reports what was evicted since the last sweep. */
  private sweep(): void {
    const now = performance.now();
    for (const e of [...this.all.half.olderThan(now - this.ceilings.headersMs)]) {
      this.evicted.timed_out++;
      this.note(e.address);
      this.forget(e.socket);
      e.socket.destroy();
    }
    if (this.anyEvicted) {
      const evicted = this.evicted;
      this.evicted = noEvictions();
      this.anyEvicted = false;
      this.report(evicted);
    }
  }
}
