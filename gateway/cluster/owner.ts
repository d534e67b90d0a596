/**
 * The owner's side of a space served to members on other nodes: each is an ordinary
 * `Member` of the `Space`, whose `Peer` is a link to the node holding its socket. The
 * space's pipeline — identity, capabilities, policy, proposals — runs here, once, for
 * local and remote members alike.
 */
import type { Msg, Subscription } from "nats";
import type { Logger } from "pino";
import { CloseCodes } from "../wire/envelope.js";
import type { Member, Peer } from "../ports/member.js";
import type { Space } from "../space/space.js";
import type { Bus } from "./bus.js";
import { subjects } from "./bus.js";
import { LinkEnd, type Outbox, unbatch } from "./link.js";

/** What a node sends to have a connection admitted. */
export interface AttachRequest {
  conn: string;
  node: string;
  boot: string;
  /** SHA-256 of the token, base64: the token itself never crosses the bus. */
  digest: string;
  claimed?: string | undefined;
  echo?: boolean | undefined;
}

/**
 * `owner`: the node, run and term that admitted the connection, so its node can tell when
 * the space moved away from them. `retry`: this node cannot admit now (its lease is not
 * provably current); the node asks again, and whoever owns the space answers.
 */
export type AttachReply = { ok: true; id: string; owner: string } | { ok: false; code: number; reason: string; retry?: boolean };

interface Remote {
  member: Member;
  link: LinkEnd;
  node: string;
  boot: string;
}

const dec = new TextDecoder();
const enc = new TextEncoder();
/** Unacknowledged bytes a member's link may hold at least (owner side). */
const LINK_FLOOR_BYTES = 32 * 1024 * 1024;

export class OwnerDesk {
  private readonly remotes = new Map<string, Remote>();
  private readonly subs: Subscription[] = [];
  /** Connections dropped because their node went silent, by node: told again to close when the node is heard from again. */
  private readonly lost = new Map<string, Set<string>>();

  constructor(
    private readonly bus: Bus,
    private readonly outbox: Outbox,
    readonly space: Space,
    private readonly log: Logger,
    /** A node attached a member: it is watched for silence from now. */
    private readonly attached: (node: string, boot: string) => void,
    /** This node, run and term, as its lease names them. */
    private readonly self: string,
    /** Whether this node may act as the owner now (cluster/fence.ts); asked before each admission and frame. */
    private readonly acting: () => boolean = () => true,
  ) {}

  start(): void {
    const id = this.space.id;
    this.subs.push(this.bus.nc.subscribe(subjects.attach(id), { callback: (err, msg) => (err ? undefined : this.onAttach(msg)) }));
    this.subs.push(
      this.bus.nc.subscribe(subjects.up(id), {
        callback: (err, msg) => {
          if (err) return;
          for (const w of unbatch(msg.data)) {
            const remote = this.remotes.get(w.conn);
            if (remote) {
              remote.link.receive(w);
              continue;
            }
            // A connection this owner does not know (it was dropped, or the space changed
            // hands, perhaps to this very node again): its node closes the socket, and the
            // client comes back to be admitted — never left open and deaf.
            const node = w.conn.split(".", 1)[0]!;
            if (w.op !== "A" && w.op !== "X" && /^[A-Za-z0-9_-]{1,64}$/.test(node) && this.acting())
              this.outbox.send(
                subjects.node(node),
                "X",
                w.conn,
                0,
                enc.encode(`${CloseCodes.moved} the space no longer knows this connection; reconnect`),
              );
          }
        },
      }),
    );
  }

  get members(): number {
    return this.remotes.size;
  }

  private onAttach(msg: Msg): void {
    // Not admitted while the lease is not provably current: the node asks again, and the owner answers.
    if (!this.acting()) {
      msg.respond(
        enc.encode(
          JSON.stringify({
            ok: false,
            code: CloseCodes.tryAgain,
            reason: "the space is changing owners; try again",
            retry: true,
          } satisfies AttachReply),
        ),
      );
      return;
    }
    let reply: AttachReply;
    try {
      reply = this.attach(JSON.parse(dec.decode(msg.data)) as AttachRequest);
    } catch (err) {
      this.log.warn({ err: String(err) }, "a node's attach request could not be read");
      reply = { ok: false, code: CloseCodes.badRequest, reason: "malformed attach request" };
    }
    msg.respond(enc.encode(JSON.stringify(reply)));
  }

  private attach(req: AttachRequest): AttachReply {
    const optional = (v: unknown, type: "string" | "boolean") => v === undefined || v === null || typeof v === type;
    if (
      typeof req.conn !== "string" ||
      typeof req.node !== "string" ||
      typeof req.boot !== "string" ||
      typeof req.digest !== "string" ||
      !optional(req.claimed, "string") ||
      !optional(req.echo, "boolean") ||
      req.conn.length > 200 ||
      req.node.length > 64
    ) {
      return { ok: false, code: CloseCodes.badRequest, reason: "malformed attach request" };
    }
    // The node asked again (our reply was lost): it is the same connection.
    const known = this.remotes.get(req.conn);
    if (known) return { ok: true, id: known.member.id, owner: this.self };
    if (this.space.closed) return { ok: false, code: CloseCodes.moved, reason: "the space moved to another node; reconnect" };
    const auth = this.space.authenticate({ digest: Buffer.from(req.digest, "base64") }, req.claimed ?? undefined);
    if (!auth.ok) return auth;
    // What may wait for the member's node to acknowledge. The node bounds the socket
    // itself (max_buffered_bytes, as locally); this only bounds what a node that stopped
    // acknowledging — hung, cut off — costs the owner, with room for the bus's round trip.
    const maxBytes = Math.max(4 * this.space.config.gateway.limits.max_buffered_bytes, LINK_FLOOR_BYTES);
    let member: Member | undefined;
    const link = new LinkEnd(
      req.conn,
      (op, conn, seq, body) => this.outbox.send(subjects.node(req.node), op, conn, seq, body),
      (op, body) => {
        if (!member || !this.acting()) return;
        if (op === "F") this.space.pipeline.handle(member, dec.decode(body));
        else if (op === "T" || op === "B") this.space.streamFrame(member, Buffer.from(body), op === "B");
        else if (op === "L") this.drop(req.conn, dec.decode(body) || "disconnected");
      },
      maxBytes,
      () => {
        this.log.warn({ conn: req.conn, node: req.node }, "a member's node stopped acknowledging; dropping it as a slow consumer");
        // Out of band: the node closes the socket, if it still can.
        this.outbox.send(
          subjects.node(req.node),
          "X",
          req.conn,
          0,
          enc.encode(`${CloseCodes.slowConsumer} the node serving you did not keep up`),
        );
        this.drop(req.conn, "slow_consumer");
      },
    );
    const peer: Peer = {
      send: (bytes) => link.send("F", bytes),
      sendFrame: (data, binary) => link.send(binary ? "B" : "T", data),
      close: (code, reason) => {
        link.send("X", enc.encode(`${code} ${reason}`));
        // The node closes the socket and forgets it, so no leave comes back: the member
        // leaves here, once the closer (a kick, a replacement) is done — as a local
        // socket's close event would make it. A replaced member's leave is ignored.
        setImmediate(() => this.drop(req.conn, "disconnected"));
      },
    };
    this.attached(req.node, req.boot);
    member = this.space.join(auth.id, peer, { echo: req.echo ?? undefined, digest: auth.digest });
    this.remotes.set(req.conn, { member, link, node: req.node, boot: req.boot });
    return { ok: true, id: auth.id, owner: this.self };
  }

  private drop(conn: string, reason: string): void {
    const r = this.remotes.get(conn);
    if (!r) return;
    this.remotes.delete(conn);
    // Let the link acknowledge the leave before it ends.
    setTimeout(() => r.link.end(), 2000).unref();
    this.space.leave(r.member, reason);
  }

  /** A node went silent (or restarted: a new boot): its members have left. */
  nodeLost(node: string, keepBoot?: string): void {
    for (const [conn, r] of this.remotes) {
      if (r.node !== node || r.boot === keepBoot) continue;
      this.drop(conn, "node_lost");
      const lost = this.lost.get(node) ?? new Set<string>();
      if (lost.size < 100_000) this.lost.set(node, lost.add(conn));
      // If the node only seemed silent (starved, cut off for a while), it still holds the
      // socket: a member the space dropped is closed, never left open and deaf.
      this.outbox.send(
        subjects.node(node),
        "X",
        conn,
        0,
        enc.encode(`${CloseCodes.moved} the space lost track of this connection; reconnect`),
      );
    }
  }

  /**
   * A node that went silent is heard from again: the close its members were sent may have
   * been lost with the bus connection it went out on, so it is sent once more.
   */
  nodeBack(node: string): void {
    const lost = this.lost.get(node);
    if (!lost) return;
    this.lost.delete(node);
    for (const conn of lost)
      this.outbox.send(
        subjects.node(node),
        "X",
        conn,
        0,
        enc.encode(`${CloseCodes.moved} the space lost track of this connection; reconnect`),
      );
  }

  resend(all: boolean): void {
    const now = performance.now();
    for (const r of this.remotes.values()) r.link.resend(all, now);
  }

  stop(): void {
    for (const s of this.subs.splice(0)) s.unsubscribe();
    for (const r of this.remotes.values()) r.link.end();
    this.remotes.clear();
  }
}
