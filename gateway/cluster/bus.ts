/**
 * The cluster's bus: one NATS connection per gateway process, with JetStream for what
 * must outlive a node (a space's state, cluster/bus-store.ts) and a key-value bucket for
 * who owns each space (cluster/index.ts).
 *
 * Subjects (space ids are `[a-z0-9][a-z0-9_-]*`, node ids `[A-Za-z0-9_-]+`, so both are
 * single subject tokens as they are):
 *   mewgate.state.<space>      the space's state transactions (stream MEWGATE_STATE)
 *   mewgate.up.<space>         frames from members on other nodes to the space's owner
 *   mewgate.attach.<space>     a node asks the owner to admit a connection (request/reply)
 *   mewgate.node.<node>        frames from owners to the members connected to <node>
 *   mewgate.beat               every node says it is alive, twice a second
 */
import { connect, type JetStreamClient, type JetStreamManager, type KV, type NatsConnection, RetentionPolicy, StorageType } from "nats";
import type { Logger } from "pino";

export const STATE_STREAM = "MEWGATE_STATE";
export const LEASE_BUCKET = "mewgate_owners";

export const subjects = {
  state: (space: string) => `mewgate.state.${space}`,
  up: (space: string) => `mewgate.up.${space}`,
  attach: (space: string) => `mewgate.attach.${space}`,
  node: (node: string) => `mewgate.node.${node}`,
  beat: "mewgate.beat",
};

export interface BusOptions {
  /** nats://host:port, or several separated by commas. */
  url: string;
  node: string;
  log: Logger;
  /** Copies JetStream keeps of the state stream and the lease bucket, when this node makes them. */
  replicas: number;
}

export class Bus {
  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly leases: KV,
    readonly node: string,
  ) {}

  /** Connects, and makes the state stream and the lease bucket if this is the first node. */
  static async open(opts: BusOptions): Promise<Bus> {
    const nc = await connect({
      servers: opts.url.split(",").map((s) => s.trim().replace(/^nats:\/\//, "")),
      name: `mewgate ${opts.node}`,
      // A bus that restarts is waited for, not given up on: the lease decides who serves.
      maxReconnectAttempts: -1,
      reconnectTimeWait: 100,
      reconnectJitter: 50,
      pingInterval: 2000,
      maxPingOut: 2,
      timeout: 3000,
    }).catch((err: Error) => {
      throw new Error(`cannot reach the cluster's NATS server at ${opts.url}: ${err.message}`);
    });
    const jsm = await nc.jetstreamManager().catch((err: Error) => {
      void nc.close();
      throw new Error(`the NATS server at ${opts.url} has no JetStream (start it with -js): ${err.message}`);
    });
    try {
      await jsm.streams.info(STATE_STREAM);
    } catch {
      await jsm.streams
        .add({
          name: STATE_STREAM,
          subjects: ["mewgate.state.>"],
          storage: StorageType.File,
          retention: RetentionPolicy.Limits,
          max_msgs_per_subject: -1,
          duplicate_window: 120_000_000_000,
          num_replicas: opts.replicas,
        })
        .catch((err: Error) => {
          // Another node made it first.
          if (/already in use/i.test(err.message)) return;
          void nc.close();
          throw new Error(`could not make the cluster's state stream on ${opts.url} (replicas: ${opts.replicas}): ${err.message}`);
        });
    }
    const js = nc.jetstream();
    // No TTL: a lease expires by what its readers observe (cluster/index.ts), so nodes with
    // different lease lengths, or a bus that restarts, cannot cut one short.
    const leases = await js.views.kv(LEASE_BUCKET, { history: 1, storage: StorageType.File, replicas: opts.replicas });
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect" || s.type === "reconnect")
          opts.log.warn({ bus: s.type, server: s.data }, `cluster bus ${s.type === "reconnect" ? "reconnected" : "lost"}`);
      }
    })();
    return new Bus(nc, js, jsm, leases, opts.node);
  }

  /** The largest message the server takes. */
  get maxPayload(): number {
    return this.nc.info?.max_payload ?? 1024 * 1024;
  }

  /** Sends what is queued and leaves; a bus that is gone is not waited for. */
  async close(): Promise<void> {
    const drained = this.nc.drain().catch(() => undefined);
    const late = await Promise.race([drained.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), 2000).unref())]);
    if (late) await this.nc.close().catch(() => undefined);
  }
}
