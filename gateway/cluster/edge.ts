/**
 * A node's side of spaces it does not own: the sockets stay here, with their limits
 * (server.ts), and their frames travel to the owner over a link (link.ts). Behind
 * `SpaceDoor` a connection cannot tell this from a local space.
 *
 * Each attempt to have a connection admitted has a link id of its own, so two owners (a
 * stale one answering late, and the one after it) can never admit the same id: what one
 * of them sends or closes never reaches a member the other admitted. A late admission
 * by an attempt given up on is told to leave. An owner may admit two attempts of the same
 * socket (the first answered after the edge gave up waiting and asked again: a bus link
 * that stalled); the second replaces the first, and the close that replacement sends on
 * the first attempt's link only ends that attempt, never the socket: until the admission
 * is settled, no attempt's close reaches the client (it would read "replaced", which a
 * client takes as final, and never come back). A member whose frames no owner
 * acknowledges for `noAnswerMs` is closed with 1013 (try again) rather than left
 * connected and deaf.
 */
import type { Logger } from "pino";
import { CloseCodes } from "../wire/envelope.js";
import type { AdmitRequest, Admission, MemberPort } from "../space/door.js";
import type { Peer } from "../ports/member.js";
import { TokenBook } from "../identity/tokens.js";
import type { Bus } from "./bus.js";
import { subjects } from "./bus.js";
import { LinkEnd, type Outbox, type Wire } from "./link.js";
import type { AttachReply, AttachRequest } from "./owner.js";

interface EdgeConn {
  space: string;
  link: LinkEnd;
  peer: Peer;
  /** The owner (node and run) that admitted it, once it has. */
  owner?: string;
  /** The attempt the admission kept: until then an owner's close ends the attempt, not the socket. */
  settled?: boolean;
}

const enc = new TextEncoder();
const dec = new TextDecoder();
/** How long a connection waits for its space to have an owner (during a takeover). */
const ATTACH_DEADLINE_MS = 5000;
/** Attempts given up on, remembered this long (and this many) to tell a late admission to leave. */
const ABANDONED_MS = 60_000;
const ABANDONED_MAX = 10_000;

export class Edge {
  private readonly conns = new Map<string, EdgeConn>();
  /** Link ids of attempts given up on: their space, and since when. */
  private readonly abandoned = new Map<string, { space: string; at: number }>();
  private n = 0;
  /** How long a member's oldest frame may wait for an owner's acknowledgement. */
  private readonly noAnswerMs: number;

  constructor(
    private readonly bus: Bus,
    private readonly outbox: Outbox,
    private readonly boot: string,
    private readonly log: Logger,
    leaseMs = 1500,
  ) {
    this.noAnswerMs = Math.max(3 * leaseMs, 5000);
  }

  /** A frame or acknowledgement from an owner (mewgate.node.<this node>). */
  receive(w: Wire): void {
    const c = this.conns.get(w.conn);
    if (!c) {
      // An owner admitted an attempt this node gave up on: it is told the connection left.
      const gone = this.abandoned.get(w.conn);
      if (gone && w.op !== "A" && w.op !== "X") {
        this.abandoned.delete(w.conn);
        this.outbox.send(subjects.up(gone.space), "L", w.conn, 1, enc.encode("disconnected"));
      }
      return;
    }
    // Out of band (sequence 0): the owner does not know this connection any more.
    if (w.op === "X" && w.seq === 0) {
      this.forget(w.conn);
      // One attempt of an admission still under way: the others, or a new try, decide.
      if (!c.settled) return;
      const text = dec.decode(w.body);
      const code = Number(text.slice(0, text.indexOf(" ")));
      return code === CloseCodes.slowConsumer
        ? c.peer.close(code, text.slice(text.indexOf(" ") + 1))
        : c.peer.close(CloseCodes.moved, "the space lost track of this connection; reconnect");
    }
    c.link.receive(w);
  }

  async admit(space: string, who: AdmitRequest, peer: Peer, maxBytes: number): Promise<Admission> {
    const open = (conn: string): LinkEnd =>
      new LinkEnd(
        conn,
        (op, c, seq, body) => this.outbox.send(subjects.up(space), op, c, seq, body),
        (op, body) => {
          // A view, not a copy: the same bytes may go to several sockets, as on one node.
          const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
          if (op === "F") peer.send(bytes);
          else if (op === "T" || op === "B") peer.sendFrame?.(bytes, op === "B");
          else if (op === "X") {
            const text = dec.decode(body);
            const at = text.indexOf(" ");
            const settled = this.conns.get(conn)?.settled === true;
            this.forget(conn);
            // Closed while the admission is under way (its own later attempt replaced it): only this attempt ends.
            if (!settled) return;
            peer.close(Number(text.slice(0, at)) || CloseCodes.goingAway, text.slice(at + 1));
          }
        },
        // The socket bounds what the client may queue (rate limits); this bounds a hung owner.
        Math.max(4 * maxBytes, 32 * 1024 * 1024),
        () => {
          this.forget(conn);
          peer.close(CloseCodes.tryAgain, "the space's owner stopped acknowledging your frames; reconnect");
        },
      );
    const digest = TokenBook.digestOf(who.token);
    const attempts: string[] = [];
    const attempt = (): AttachRequest => {
      const conn = `${this.bus.node}.${this.boot}.${++this.n}`;
      attempts.push(conn);
      // Registered before asking: the welcome may arrive before the reply.
      this.conns.set(conn, { space, link: open(conn), peer });
      return { conn, node: this.bus.node, boot: this.boot, digest, claimed: who.claimed, echo: who.echo };
    };
    const given = (keep?: string) => {
      for (const a of attempts) {
        if (a === keep) continue;
        this.forget(a);
        this.abandon(a, space);
      }
    };
    const answered = await this.attach(space, attempt).catch((err: Error) => {
      given();
      throw err;
    });
    const { reply, conn } = answered;
    given(conn);
    if (!reply.ok) {
      this.forget(conn);
      return reply;
    }
    const c = this.conns.get(conn);
    if (!c) {
      // Closed while the owner was admitting it (the space moved meanwhile): the owner
      // must not keep a member whose socket is gone. Its link is ended, so the leave
      // goes out as the link's first frame, by hand.
      this.outbox.send(subjects.up(space), "L", conn, 1, enc.encode("disconnected"));
      return { ok: false, code: CloseCodes.moved, reason: "the space moved to another node; reconnect" };
    }
    c.owner = reply.owner;
    c.settled = true;
    const link = c.link;
    const log = this.log.child({ participant: reply.id, conn });
    const port: MemberPort = {
      id: reply.id,
      log,
      // The frame's bytes as they came: the owner decodes them once.
      handle: (data) => link.send("F", data),
      streamFrame: (data, binary) => link.send(binary ? "B" : "T", data),
      leave: (reason) => {
        if (!this.conns.has(conn)) return;
        link.send("L", enc.encode(reason));
        // Kept a little, for the owner to acknowledge (or have it sent again).
        setTimeout(() => this.forget(conn), 3000).unref();
      },
    };
    return { ok: true, port };
  }

  /**
   * Asks the owner, again while the space has none (a takeover is under way) or its owner
   * cannot admit now; each attempt under a link id of its own. The reply and whose it is.
   */
  private async attach(space: string, attempt: () => AttachRequest): Promise<{ reply: AttachReply; conn: string }> {
    const deadline = Date.now() + ATTACH_DEADLINE_MS;
    for (;;) {
      const req = attempt();
      let why: string;
      try {
        const msg = await this.bus.nc.request(subjects.attach(space), enc.encode(JSON.stringify(req)), { timeout: 1000 });
        const reply = JSON.parse(dec.decode(msg.data)) as AttachReply;
        if (reply.ok || !reply.retry) return { reply, conn: req.conn };
        why = reply.reason;
      } catch (err) {
        why = (err as Error).message;
      }
      if (Date.now() > deadline) throw new Error(`no node serves space "${space}" (${why})`);
      await new Promise((r) => setTimeout(r, 150));
    }
  }

  private abandon(conn: string, space: string): void {
    if (this.abandoned.size >= ABANDONED_MAX) this.abandoned.delete(this.abandoned.keys().next().value!);
    this.abandoned.set(conn, { space, at: Date.now() });
  }

  private forget(conn: string): void {
    const c = this.conns.get(conn);
    if (!c) return;
    c.link.end();
    this.conns.delete(conn);
  }

  /**
   * The space has a new owner (or none): its members here that `stale` says were admitted
   * by an owner gone reconnect, to be admitted anew. Those the new owner admitted already
   * (they may have come in before this node noticed the change) stay, and so do those
   * still being admitted: whoever answers is the owner now.
   */
  moved(space: string, reason: string, stale: (owner: string) => boolean = () => true): void {
    for (const [conn, c] of this.conns) {
      if (c.space !== space || c.owner === undefined || !stale(c.owner)) continue;
      this.forget(conn);
      c.peer.close(CloseCodes.moved, reason);
    }
  }

  resend(all: boolean): void {
    const now = performance.now();
    for (const [conn, c] of this.conns) {
      // No owner answered this member's frames for so long: it is told to come back, not left deaf.
      if (c.owner !== undefined && c.link.waiting(now) > this.noAnswerMs) {
        this.forget(conn);
        c.peer.close(CloseCodes.tryAgain, "the space's owner did not answer; reconnect");
        continue;
      }
      c.link.resend(all, now);
    }
    const old = Date.now() - ABANDONED_MS;
    for (const [conn, a] of this.abandoned) {
      if (a.at > old) break;
      this.abandoned.delete(conn);
    }
  }

  get size(): number {
    return this.conns.size;
  }

  stop(reason: string): void {
    for (const [conn, c] of this.conns) {
      this.forget(conn);
      c.peer.close(CloseCodes.goingAway, reason);
    }
  }
}
