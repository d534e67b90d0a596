/**
 * Several gateway processes serving the same spaces, over NATS.
 *
 * Each space has one owner at a time, decided by a lease in a JetStream key-value bucket
 * (after Kelpie's single activation). The owner renews it a few times per lease. Expiry
 * is observed, not timed by clocks: a node that sees the same revision of a lease for a
 * whole lease period of its own time takes the space over by replacing exactly that
 * revision, so only one node can win, and no clock skew between machines matters. Only
 * the owner runs the space's state machine (`Space`), with its state read from and
 * written to the bus (bus-store.ts), fenced so that an owner which lost its lease can no
 * longer write. Every other node is an edge for the space: it keeps its members' sockets
 * and links them to the owner (edge.ts, owner.ts). When the owner changes, the edges
 * close those sockets with 1012 and the clients reconnect — to any node — and are
 * admitted by the new owner.
 *
 * After the bus comes back from an outage, nobody could renew during it: every node
 * starts its observation again, and an owner whose lease the bus lost writes it anew.
 *
 * Fencing: an owner acts only while its lease is provably current (fence.ts), measured on
 * its own monotonic clock from the sending of its last renewal that succeeded; it asks
 * before admitting a member, handling a frame or writing its state, and a watchdog steps
 * it down the moment the answer is no — before the lease could have passed to anyone,
 * whatever its renewal is doing (a renewal has a deadline of its own). Each take-over is
 * a new term, named in the lease: the new owner's first write to the state is a
 * take-over record (bus-store.ts), so a stale owner's next write is refused by the bus,
 * and edges that see a new term — the same node's included — re-admit their members.
 *
 * Past 500 lines because it is one concern, the lease of each space on this node: observing,
 * renewing, taking over and stepping down all read and write the same slots, and the door
 * asks the same fence. What stands alone already does: the fence (fence.ts), links (link.ts),
 * the edge and owner sides (edge.ts, owner.ts), state on the bus (bus-store.ts), HTTP passed
 * on (proxy.ts).
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import { CloseCodes } from "../wire/envelope.js";
import type { AdmitRequest, SpaceDoor } from "../space/door.js";
import { localDoor } from "../space/door.js";
import type { StateRecord } from "../space/ledger.js";
import type { Peer } from "../ports/member.js";
import type { Space } from "../space/space.js";
import type { StoreOpener } from "../store/index.js";
import { Bus, subjects } from "./bus.js";
import { DEFAULT_BUS_RETENTION } from "./bus-history.js";
import { loadBusState } from "./bus-store.js";
import { Edge } from "./edge.js";
import { LeaseClock } from "./fence.js";
import { Outbox, unbatch } from "./link.js";
import { OwnerDesk } from "./owner.js";

export interface ClusterOptions {
  url: string;
  node: string;
  leaseMs: number;
  /** Copies JetStream keeps of the state and the leases (3 on a JetStream cluster); default 1. */
  replicas?: number | undefined;
}

/** What the cluster needs of the gateway: to open and close the spaces it comes to own. */
export interface ClusterHost {
  readonly log: Logger;
  open(config: SpaceConfig, store: StoreOpener<StateRecord>): Space;
  closed(space: Space): void;
  /** Where this node's HTTP server listens (for requests another node passes on). */
  httpUrl(): string;
}

interface Holder {
  node: string;
  /** Which run of the node: a node restarted under the same name is another owner. */
  boot?: string;
  http: string;
  /** The holder's lease length: how long others wait on an unchanged revision. */
  lease_ms: number;
  /** Which take-over of the node's run: a node that owns the space again is another owner. */
  term?: string;
}

interface Slot {
  config: SpaceConfig;
  mode: "edge" | "loading" | "owner";
  /** The lease's revision while this node holds it. */
  rev: number;
  /** When the lease was last renewed (or taken). */
  renewedAt: number;
  holder: Holder | undefined;
  /** The lease revision last seen, and since when (this node's clock). */
  seen: { rev: number; at: number } | undefined;
  space?: Space | undefined;
  desk?: OwnerDesk | undefined;
  busy: boolean;
  renewing?: boolean;
  /** Whether this node's lease is provably current (fence.ts). */
  clock: LeaseClock;
  /** This node's term while it holds the lease, and the lease's value naming it. */
  term?: string | undefined;
  value?: Uint8Array | undefined;
}

/** How an owner (node and run) is named in attach replies and compared with leases. */
const ownerKey = (h: { node: string; boot?: string | undefined; term?: string | undefined }) => `${h.node}/${h.boot ?? ""}/${h.term ?? ""}`;

const BEAT_MS = 500;
/** Link frames per bus message, at most. */
const OUTBOX_BYTES = 256 * 1024;
/** Room beside a frame of `max_payload_bytes` on the bus: the link's header, and the gateway's own fields on what it forwards. */
const FRAME_HEADROOM = 64 * 1024;
/** A node not heard from for this long is gone, and so are its members. */
const NODE_SILENT_MS = 3000;

export class Cluster {
  private readonly slots = new Map<string, Slot>();
  private readonly boot = randomBytes(4).toString("hex");
  private readonly beats = new Map<string, { boot: string; at: number }>();
  private readonly edge: Edge;
  /** Link frames, one bus message per subject per tick. */
  private readonly outbox: Outbox;
  private timers: NodeJS.Timeout[] = [];
  private stopped = false;
  private connected = true;
  /** Until then no lease is taken: the bus just came back, and owners have a lease's time to renew. */
  private graceUntil = 0;
  private readonly log: Logger;
  private terms = 0;

  private constructor(
    private readonly bus: Bus,
    private readonly opts: ClusterOptions,
    private readonly host: ClusterHost,
    configs: SpaceConfig[],
  ) {
    this.log = host.log.child({ node: opts.node });
    this.outbox = new Outbox((subject, data) => bus.nc.publish(subject, data), Math.min(OUTBOX_BYTES, bus.maxPayload));
    this.edge = new Edge(bus, this.outbox, this.boot, this.log, opts.leaseMs);
    for (const config of configs)
      this.slots.set(config.space.id, {
        config,
        mode: "edge",
        rev: 0,
        renewedAt: 0,
        holder: undefined,
        seen: undefined,
        busy: false,
        clock: new LeaseClock(opts.leaseMs),
      });
  }

  /** Joins the cluster and settles, for every space, who owns it. */
  static async start(opts: ClusterOptions, host: ClusterHost, configs: SpaceConfig[]): Promise<Cluster> {
    const bus = await Bus.open({ url: opts.url, node: opts.node, log: host.log, replicas: opts.replicas ?? 1 });
    // Any frame a member may send or be sent must fit one bus message.
    const needed = Math.max(...configs.map((c) => c.gateway.limits.max_payload_bytes)) + FRAME_HEADROOM;
    if (bus.maxPayload < needed) {
      await bus.close();
      throw new Error(
        `the NATS server at ${opts.url} takes messages of at most ${bus.maxPayload} bytes; the cluster needs ${needed} (gateway.limits.max_payload_bytes plus ${FRAME_HEADROOM}). Start nats-server with "max_payload: ${Math.ceil(needed / 1048576)}MB" in its config`,
      );
    }
    const cluster = new Cluster(bus, opts, host, configs);
    cluster.listen();
    await cluster.tick();
    return cluster;
  }

  get node(): string {
    return this.opts.node;
  }

  /** Who owns space `id` now, as far as this node knows. */
  owner(id: string): Holder | undefined {
    const slot = this.slots.get(id);
    return slot?.mode === "owner"
      ? { node: this.opts.node, http: this.host.httpUrl(), lease_ms: this.opts.leaseMs, term: slot.term }
      : slot?.holder;
  }

  owns(id: string): boolean {
    return this.slots.get(id)?.mode === "owner";
  }

  /**
   * Whether this node may act as the space's owner now; if it holds the space but its
   * lease is not provably current, it steps down at once (the members it admitted are
   * closed with 1012 and come back to whoever owns the space next).
   */
  private acting(slot: Slot): boolean {
    if (slot.mode !== "owner") return false;
    if (slot.clock.current()) return true;
    void this.stepDown(slot, "its lease was not provably current when it was to act");
    return false;
  }

  door(id: string): SpaceDoor | undefined {
    const slot = this.slots.get(id);
    if (!slot) return undefined;
    return {
      id,
      admit: async (who: AdmitRequest, peer: Peer) => {
        const space = slot.space;
        if (!this.acting(slot) || !space || space.closed)
          return this.edge.admit(id, who, peer, slot.config.gateway.limits.max_buffered_bytes);
        const admission = await localDoor(space).admit(who, peer);
        if (!admission.ok) return admission;
        // Each frame is handled only while this node still owns the space, provably.
        const port = admission.port;
        const fenced = () => slot.space === space && this.acting(slot);
        return {
          ok: true,
          port: {
            id: port.id,
            log: port.log,
            handle: (data) => void (fenced() && port.handle(data)),
            streamFrame: (data, binary) => void (fenced() && port.streamFrame(data, binary)),
            leave: (reason) => port.leave(reason),
          },
        };
      },
    };
  }

  private listen(): void {
    const nc = this.bus.nc;
    nc.subscribe(subjects.node(this.opts.node), {
      callback: (err, msg) => {
        if (err) return;
        for (const w of unbatch(msg.data)) this.edge.receive(w);
      },
    });
    nc.subscribe(subjects.beat, {
      callback: (err, msg) => {
        if (err) return;
        const [node, boot] = new TextDecoder().decode(msg.data).split(" ");
        if (!node || !boot || node === this.opts.node) return;
        const was = this.beats.get(node);
        this.beats.set(node, { boot, at: Date.now() });
        // Heard again after it was given up for silent: the members it lost are told again to close.
        if (!was) for (const s of this.slots.values()) s.desk?.nodeBack(node);
        // The node restarted: the members it had are gone.
        if (was && was.boot !== boot) for (const s of this.slots.values()) s.desk?.nodeLost(node, boot);
      },
    });
    const beat = new TextEncoder().encode(`${this.opts.node} ${this.boot}`);
    nc.publish(subjects.beat, beat);
    this.every(BEAT_MS, () => {
      nc.publish(subjects.beat, beat);
      // Cut off from the bus, this node hears nobody: that says nothing about the others.
      if (!this.connected) return;
      const now = Date.now();
      for (const [node, b] of this.beats) {
        if (now - b.at < NODE_SILENT_MS) continue;
        this.beats.delete(node);
        this.log.warn({ lost: node }, "a cluster node went silent; its members have left");
        for (const s of this.slots.values()) s.desk?.nodeLost(node);
      }
    });
    this.every(Math.max(100, Math.floor(this.opts.leaseMs / 5)), () => void this.tick());
    // The watchdog: an owner whose lease is no longer provably current steps down now, whatever its renewal is doing.
    this.every(Math.max(20, Math.min(100, Math.floor(this.opts.leaseMs / 20))), () => {
      for (const slot of this.slots.values())
        if (slot.mode !== "edge" && !slot.clock.current()) void this.stepDown(slot, "its lease was not renewed in time");
    });
    this.every(250, () => this.resend(false));
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") this.connected = false;
        if (s.type !== "reconnect") continue;
        this.connected = true;
        // Every node gets its full silence allowance again from now.
        const now = Date.now();
        for (const b of this.beats.values()) b.at = now;
        for (const slot of this.slots.values()) if (slot.seen) slot.seen.at = now;
        this.graceUntil = now + this.opts.leaseMs;
        this.resend(true);
      }
    })();
  }

  private every(ms: number, f: () => void): void {
    const t = setInterval(f, ms);
    t.unref();
    this.timers.push(t);
  }

  private resend(all: boolean): void {
    this.edge.resend(all);
    for (const s of this.slots.values()) s.desk?.resend(all);
  }

  /** One round of the lease for every space. */
  private async tick(): Promise<void> {
    await Promise.all([...this.slots.values()].map((slot) => this.round(slot)));
  }

  private async round(slot: Slot): Promise<void> {
    if (slot.busy || this.stopped) return;
    slot.busy = true;
    const id = slot.config.space.id;
    try {
      if (slot.mode !== "edge") return await this.renew(slot);
      const entry = await this.bus.leases.get(id);
      const now = Date.now();
      let rev: number;
      if (entry && entry.operation === "PUT") {
        const holder = JSON.parse(new TextDecoder().decode(entry.value)) as Holder;
        // Another owner (another node, run or term): the members the earlier one admitted come back to it.
        if (slot.holder && ownerKey(slot.holder) !== ownerKey(holder))
          this.edge.moved(id, "the space moved to another owner; reconnect", (owner) => owner !== ownerKey(holder));
        slot.holder = holder;
        if (slot.seen?.rev !== entry.revision) slot.seen = { rev: entry.revision, at: now };
        // Renewed within its lease, as far as this node has watched: the owner lives.
        if (now - slot.seen.at < (holder.lease_ms || this.opts.leaseMs) || now < this.graceUntil) return;
        this.log.warn(
          { space: id, holder: holder.node, silentMs: now - slot.seen.at },
          "the space's owner stopped renewing its lease; taking over",
        );
        // Only the members the silent owner admitted: one another node admitted meanwhile (it won the race) stays.
        const silent = ownerKey(holder);
        this.edge.moved(id, "the node serving the space stopped; reconnect", (owner) => owner === silent);
        slot.holder = undefined;
        const sentAt = LeaseClock.now();
        try {
          rev = await this.bus.leases.update(id, this.newTerm(slot), entry.revision);
          slot.clock.confirmed(sentAt);
        } catch {
          // Another node was quicker: learn which, so requests can go to it at once.
          return void (await this.learnHolder(slot));
        }
      } else {
        // Never owned, or handed over on shutdown.
        if (now < this.graceUntil) return;
        if (slot.holder) {
          const gone = ownerKey(slot.holder);
          this.edge.moved(id, "the node serving the space stopped; reconnect", (owner) => owner === gone);
        }
        slot.holder = undefined;
        const sentAt = LeaseClock.now();
        try {
          rev = await this.bus.leases.create(id, this.newTerm(slot));
          slot.clock.confirmed(sentAt);
        } catch {
          return void (await this.learnHolder(slot));
        }
      }
      slot.seen = undefined;
      await this.takeOver(slot, rev);
    } catch (err) {
      this.log.debug({ space: id, err: String(err) }, "lease round failed");
    } finally {
      slot.busy = false;
    }
  }

  private async learnHolder(slot: Slot): Promise<void> {
    const entry = await this.bus.leases.get(slot.config.space.id).catch(() => null);
    if (entry?.operation !== "PUT") return;
    slot.holder = JSON.parse(new TextDecoder().decode(entry.value)) as Holder;
    slot.seen = { rev: entry.revision, at: Date.now() };
  }

  /** A new term for a take-over of `slot`: the lease value that names it. */
  private newTerm(slot: Slot): Uint8Array {
    slot.term = `${this.boot}.${++this.terms}`;
    slot.value = new TextEncoder().encode(
      JSON.stringify({
        node: this.opts.node,
        boot: this.boot,
        http: this.host.httpUrl(),
        lease_ms: this.opts.leaseMs,
        term: slot.term,
      } satisfies Holder),
    );
    return slot.value;
  }

  private async renew(slot: Slot): Promise<void> {
    // One renewal at a time: two with the same revision would make the second look taken.
    // None once stepped down (the take-over's own renewals may still be due).
    if (slot.renewing || slot.mode === "edge" || !slot.value) return;
    slot.renewing = true;
    try {
      await this.renewOnce(slot);
    } finally {
      slot.renewing = false;
    }
  }

  private async renewOnce(slot: Slot): Promise<void> {
    const id = slot.config.space.id;
    const value = slot.value!;
    const sentAt = LeaseClock.now();
    // A renewal has a deadline of its own: one that hangs (a frozen link) must not hold the next one back.
    const deadline = Math.max(50, slot.clock.left(sentAt));
    try {
      const rev = await withDeadline(
        this.bus.leases.update(id, value, slot.rev),
        deadline,
        "the renewal was not answered before the lease would have run out",
      );
      if (slot.mode === "edge" || slot.value !== value) return;
      slot.rev = rev;
      slot.renewedAt = Date.now();
      slot.clock.confirmed(sentAt);
    } catch (err) {
      if (slot.mode === "edge" || slot.value !== value) return;
      const message = (err as Error).message;
      if (/wrong last sequence/i.test(message)) {
        const entry = await this.bus.leases.get(id).catch(() => undefined);
        // A renewal of ours that missed its deadline landed after all: the lease is still this term's.
        if (entry && entry.operation === "PUT" && sameBytes(entry.value, value)) {
          slot.rev = entry.revision;
          return;
        }
        // The bus may have lost the lease (a restart): write it anew if nobody holds it.
        if (entry === null || (entry && entry.operation !== "PUT")) {
          const again = LeaseClock.now();
          try {
            slot.rev = await this.bus.leases.create(id, value);
            slot.renewedAt = Date.now();
            slot.clock.confirmed(again);
            this.log.warn({ space: id }, "the bus had lost this node's lease; written again");
            return;
          } catch {
            // Someone else wrote it meanwhile.
          }
        }
        return void this.stepDown(slot, `its lease was taken (${message})`);
      }
      // Cut off from the bus: the watchdog steps down once the lease is no longer provably current.
      if (!slot.clock.current()) return void this.stepDown(slot, `could not renew its lease (${message})`);
    }
  }

  private async takeOver(slot: Slot, rev: number): Promise<void> {
    const id = slot.config.space.id;
    slot.mode = "loading";
    slot.rev = rev;
    slot.renewedAt = Date.now();
    const t0 = performance.now();
    // The lease is renewed while the state is read.
    const keep = setInterval(() => void this.renew(slot), Math.max(100, Math.floor(this.opts.leaseMs / 5)));
    try {
      const term = slot.term!;
      const opener = await loadBusState<StateRecord>(this.bus, id, {
        log: this.log,
        epoch: `${this.opts.node}.${this.boot}.${rev}`,
        onFenced: (why) => void this.stepDown(slot, why),
        // The take-over record first, then a write only while the lease is current, under this term.
        fence: { current: () => slot.mode !== "edge" && slot.term === term && slot.clock.current(), term },
        // The audit trail's retention, with its bytes held in the owner's memory: no more than the bus store's default.
        history: {
          maxBytes: Math.min(slot.config.quotas.audit_max_bytes, DEFAULT_BUS_RETENTION.maxBytes),
          maxAgeMs: slot.config.quotas.audit_max_age_days * 86_400_000,
        },
      });
      if (slot.mode !== "loading") return;
      const space = this.host.open(slot.config, opener);
      slot.space = space;
      slot.desk = new OwnerDesk(
        this.bus,
        this.outbox,
        space,
        this.log.child({ space: id }),
        (node, boot) => {
          // A node with members here is watched from its first attach, beat or no beat yet —
          // but never this node: it hears no beat of its own, and members that came in
          // through it while it was loading the space (over its own link) would be
          // dropped as "node_lost" three seconds later.
          if (node !== this.opts.node && !this.beats.has(node)) this.beats.set(node, { boot, at: Date.now() });
        },
        ownerKey({ node: this.opts.node, boot: this.boot, term }),
        () => slot.space === space && this.acting(slot),
      );
      slot.desk.start();
      slot.mode = "owner";
      slot.holder = undefined;
      this.log.info({ space: id, ms: Math.round(performance.now() - t0), rev }, "this node owns the space now");
    } catch (err) {
      this.log.error({ space: id, err: String(err) }, "taking the space over failed; releasing it");
      await this.stepDown(slot, "take-over failed");
    } finally {
      clearInterval(keep);
    }
  }

  private async stepDown(slot: Slot, why: string): Promise<void> {
    if (slot.mode === "edge") return;
    const id = slot.config.space.id;
    this.log.warn({ space: id, why }, "this node no longer owns the space");
    slot.mode = "edge";
    slot.clock.revoke();
    // What this node writes from now is refused by the bus: its lease, if still its own, is handed over
    // (deleted at exactly its revision), so that another node need not wait a whole lease for it.
    const rev = slot.rev;
    slot.value = undefined;
    slot.term = undefined;
    if (!this.stopped) void this.bus.leases.delete(id, { previousSeq: rev }).catch(() => {});
    const { space, desk } = slot;
    slot.space = undefined;
    slot.desk = undefined;
    if (!space) return desk?.stop();
    this.host.closed(space);
    // Every member is told (a remote one through its link), then the links end.
    const closing = space.closeAll(CloseCodes.moved, "the space moved to another node; reconnect");
    desk?.stop();
    await closing.catch((err: unknown) => this.log.error({ space: id, err: String(err) }, "closing the space's state failed"));
  }

  /** Hands every owned space over at once (the lease is deleted, not left to run out), then leaves. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.edge.stop("this gateway node is shutting down; reconnect");
    for (const slot of this.slots.values()) {
      if (slot.mode === "edge") continue;
      const rev = slot.rev;
      await this.stepDown(slot, "shutting down");
      await this.bus.leases.delete(slot.config.space.id, { previousSeq: rev }).catch(() => {});
    }
    this.outbox.flush();
    await this.bus.close();
  }
}

/** `p`, or a rejection after `ms` (the request itself is not cancelled: its answer is ignored). */
function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
