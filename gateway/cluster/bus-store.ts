/**
 * A space's state on the cluster's bus: its transactions are messages on the subject
 * `mewgate.state.<space>` of a JetStream stream, so whichever node owns the space next
 * reads them back. The same seam as the journal (store/index.ts `StateStore`).
 *
 * - Group commit: the transactions queued in one tick (and while a publish is on its way)
 *   go out as one message; its commits resolve when JetStream has stored it.
 * - Fencing: a new owner first writes a take-over record (its lease term) expecting the
 *   last sequence it read, and each later publish expects the subject's last sequence to
 *   be the one this owner last wrote and carries its term. A node that lost its lease and
 *   still writes is refused by the server — even when the new owner has changed nothing
 *   yet, its take-over record moved the sequence — so two owners can never interleave;
 *   the refused one stops (`onFenced`). And an owner writes only while its lease is
 *   provably current (`fence`, cluster/fence.ts), asked before each publish and again once
 *   it is stored: a change stored after that is reported failed and the owner steps
 *   down, before anything it would have caused (a routed call) happens.
 * - Exactly once: each message has an id. A publish whose acknowledgement is lost (the bus
 *   restarted meanwhile) is sent again with the same id until a deadline, and the server
 *   drops the duplicate.
 * - Compaction: past `compactMessages` messages the owner writes its live state as one
 *   snapshot message and purges what came before; history records move to the subject's
 *   `.history` sibling first (bus-history.ts), where the API still reads them. A reader
 *   starts at the last snapshot.
 */
import { headers as natsHeaders, JSONCodec } from "nats";
import type { Logger } from "pino";
import type { OpenReport, StateStore, StoreHooks, StoreOpener } from "../store/index.js";
import { StoreError } from "../store/index.js";
import type { Retention } from "../store/archive.js";
import { CommitQueue, type Pending } from "../store/queue.js";
import { type Bus, STATE_STREAM, subjects } from "./bus.js";
import { BusHistory, DEFAULT_BUS_RETENTION } from "./bus-history.js";

interface Batch<R> {
  /** Transactions, each applied whole. */
  t?: R[][];
  /** A snapshot: the live state at this point; everything before it is superseded. */
  snapshot?: R[];
  /** The writer's lease term (its fencing token); alone, a take-over record: no state. */
  term?: string;
}

/** Whether the writer's lease is provably current (cluster/fence.ts), and its term. */
export interface Fence {
  current(): boolean;
  readonly term: string;
}

const codec = JSONCodec<Batch<unknown>>();
/** How long a batch is retried across a bus outage before its commits fail. */
const PUBLISH_DEADLINE_MS = 5000;
const DEFAULT_COMPACT_MESSAGES = 4096;

/** Reads a space's state from the bus; the returned opener folds it into the ledger. */
export async function loadBusState<R extends { type: string }>(bus: Bus, space: string, opts: BusStoreOptions): Promise<StoreOpener<R>> {
  const t0 = performance.now();
  const subject = subjects.state(space);
  let messages: Array<{ seq: number; batch: Batch<R>; bytes: number }> = [];
  let last = 0;
  // Read, then claim: a stale owner's write that landed meanwhile makes the claim fail,
  // and the state is read again with that write in it.
  for (let attempt = 1; ; attempt++) {
    ({ messages, last } = await readState<R>(bus, subject));
    if (!opts.fence) break;
    const claimed = await claim(bus, subject, last, opts.fence, opts.epoch);
    if (claimed !== undefined) {
      last = claimed;
      break;
    }
    if (attempt >= 5) throw new Error(`the state of space "${space}" kept changing while this node took it over`);
  }
  const archive = await BusHistory.load<R>(bus, `${subject}.history`, opts.history ?? DEFAULT_BUS_RETENTION, opts.log);
  let from = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.batch.snapshot) {
      from = i;
      break;
    }
  }
  const ms = Math.round(performance.now() - t0);
  return (hooks: StoreHooks<R>) => {
    const history: R[] = [];
    let records = 0;
    let bytes = 0;
    for (const { batch, bytes: size } of messages.slice(from)) {
      bytes += size;
      for (const r of batch.snapshot ?? batch.t?.flat() ?? []) {
        records++;
        if (hooks.isHistory(r)) history.push(r);
        else hooks.apply(r);
      }
    }
    const report: OpenReport = { records, bytes, ms };
    opts.log.info({ space, messages: messages.length - from, records, ms }, "state read from the cluster bus");
    const store = new BusStore<R>(bus, space, last, messages.length - from, hooks, history, archive, opts);
    return { store, report };
  };
}

async function readState<R>(
  bus: Bus,
  subject: string,
): Promise<{ messages: Array<{ seq: number; batch: Batch<R>; bytes: number }>; last: number }> {
  const messages: Array<{ seq: number; batch: Batch<R>; bytes: number }> = [];
  let last = 0;
  try {
    last = (await bus.jsm.streams.getMessage(STATE_STREAM, { last_by_subj: subject })).seq;
  } catch (err) {
    if (!/no message found/i.test((err as Error).message)) throw err;
  }
  if (last > 0) {
    const consumer = await bus.js.consumers.get(STATE_STREAM, { filterSubjects: subject });
    const iter = await consumer.consume({ max_messages: 512 });
    for await (const m of iter) {
      messages.push({ seq: m.seq, batch: codec.decode(m.data) as Batch<R>, bytes: m.data.length });
      if (m.seq >= last || m.info.pending === 0) break;
    }
    iter.stop();
  }
  return { messages, last };
}

/**
 * The take-over record: the new owner's term, written expecting the last sequence it
 * read. Its sequence, undefined when another write came first (read again).
 */
async function claim(bus: Bus, subject: string, last: number, fence: Fence, epoch: string): Promise<number | undefined> {
  if (!fence.current()) throw new Error("the lease was not current by the time the state was read");
  try {
    const ack = await bus.js.publish(subject, codec.encode({ term: fence.term }), {
      msgID: `${subject}:${epoch}:takeover:${last}`,
      expect: { lastSubjectSequence: last },
      timeout: 2000,
    });
    return ack.seq;
  } catch (err) {
    if (/wrong last sequence/i.test((err as Error).message)) return undefined;
    throw err;
  }
}

export interface BusStoreOptions {
  log: Logger;
  /** This owner's run, in message ids: a retried publish is a duplicate only within one run. */
  epoch: string;
  onFenced: (why: string) => void;
  /** The owner's lease: the store writes a take-over record first, then only while it is current. */
  fence?: Fence | undefined;
  compactMessages?: number | undefined;
  /** How much older history (the audit trail) is kept, on the bus and in the owner's memory. */
  history?: Retention | undefined;
}

export class BusStore<R extends { type: string }> implements StateStore<R> {
  readonly stats = { journalBytes: 0, commits: 0, batches: 0, syncs: 0, compactions: 0 };
  private readonly queue = new CommitQueue<R[]>((batch) => this.writeBatch(batch));
  private failure: StoreError | undefined;
  private closed = false;
  private batchNo = 0;
  private readonly subject: string;

  constructor(
    private readonly bus: Bus,
    private readonly space: string,
    /** The subject's last sequence as this owner knows it: what its next publish expects. */
    private lastSeq: number,
    /** Messages since the last snapshot. */
    private messages: number,
    private readonly hooks: StoreHooks<R>,
    /** History records (the audit trail) since the last compaction, oldest first. */
    private readonly recent: R[],
    /** And what compactions moved to the `.history` subject, within its retention. */
    private readonly archive: BusHistory<R>,
    private readonly opts: BusStoreOptions,
  ) {
    this.subject = subjects.state(space);
  }

  commit(txn: R[]): Promise<void> {
    if (this.closed) return Promise.reject(new StoreError("closed", "the store is closed"));
    if (this.failure) return Promise.reject(this.failure);
    this.stats.commits++;
    return this.queue.push(txn);
  }

  /** History records matching `filter`, oldest first: the archive, then what came since the last compaction. */
  history(filter: (r: R) => boolean, opts: { limit?: number } = {}): R[] {
    const limit = opts.limit ?? Infinity;
    const out = this.archive.read(filter, limit);
    for (const r of this.recent) if (out.length < limit && filter(r)) out.push(r);
    return out;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.drain();
  }

  /** One batch: one message for all its transactions (see `CommitQueue`). */
  private async writeBatch(batch: Pending<R[]>[]): Promise<void> {
    if (this.failure) {
      for (const p of batch) p.reject(this.failure);
      return;
    }
    try {
      await this.publish({ t: batch.map((p) => p.txn) });
    } catch (err) {
      for (const p of batch) p.reject(err as Error);
      return;
    }
    this.stats.batches++;
    this.stats.syncs++;
    for (const p of batch) for (const r of p.txn) if (this.hooks.isHistory(r)) this.recent.push(r);
    for (const p of batch) p.resolve();
    if (++this.messages > (this.opts.compactMessages ?? DEFAULT_COMPACT_MESSAGES)) {
      // Let the owner apply this batch before its state is taken.
      await new Promise((r) => setImmediate(r));
      await this.compact().catch((err: Error) =>
        this.opts.log.error({ err: err.message }, "compacting the space's state on the bus failed; carrying on"),
      );
    }
  }

  /** One fenced, deduplicated publish; retried with the same id across a bus outage, while the lease is current. */
  private async publish(batch: Batch<R>): Promise<void> {
    const fence = this.opts.fence;
    const data = codec.encode(fence ? { ...batch, term: fence.term } : batch);
    const msgID = `${this.space}:${this.opts.epoch}:${++this.batchNo}`;
    const deadline = Date.now() + PUBLISH_DEADLINE_MS;
    for (;;) {
      // Not a write more once the lease may have passed: a stored change another owner never reads would be acted on here alone.
      if (fence && !fence.current())
        this.fenced(
          "this node's lease on the space is no longer provably current; the change was not written",
          "lease not current before a write",
        );
      try {
        const ack = await this.bus.js.publish(this.subject, data, { msgID, expect: { lastSubjectSequence: this.lastSeq }, timeout: 1000 });
        this.lastSeq = ack.seq;
        this.stats.journalBytes += data.length;
        // Stored, but the lease ran out on the way (a pause, a held link): the next owner reads it
        // (an approval comes back interrupted); here nothing follows from it.
        if (fence && !fence.current())
          this.fenced(
            "this node lost the space while the change was being written; the node that owns the space now has it",
            "lease not current when a write was stored",
          );
        return;
      } catch (err) {
        if (err instanceof StoreError) throw err;
        const message = (err as Error).message;
        if (/wrong last sequence/i.test(message))
          this.fenced("another node owns this space now; its state was not written here", `state write fenced: ${message}`);
        if (Date.now() > deadline)
          throw new StoreError(
            "write_failed",
            `the cluster bus did not store the change in ${PUBLISH_DEADLINE_MS} ms (${message})`,
            undefined,
            undefined,
            "EBUS",
          );
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  private fenced(message: string, why: string): never {
    this.failure ??= new StoreError("failed", message, undefined, undefined, "EFENCED");
    this.opts.onFenced(why);
    throw this.failure;
  }

  /**
   * History goes to its own subject, then the live state as a snapshot, then everything
   * before the snapshot is purged. A crash between the steps leaves a readable subject:
   * at worst history twice in the archive subject, and old messages a reader skips.
   */
  private async compact(): Promise<void> {
    // Taken off `recent` only once stored: a failed compaction keeps them readable.
    const history = this.recent.slice();
    if (history.length) {
      const h = natsHeaders();
      h.set("Nats-Msg-Id", `${this.space}:${this.opts.epoch}:history:${this.batchNo}`);
      const data = codec.encode({ t: [history] });
      const ack = await this.bus.js.publish(`${this.subject}.history`, data, { headers: h });
      this.recent.splice(0, history.length);
      await this.archive.add(ack.seq, data.length, history);
    }
    const seqBefore = this.lastSeq;
    await this.publish({ snapshot: this.hooks.snapshot() });
    await this.bus.jsm.streams.purge(STATE_STREAM, { filter: this.subject, seq: this.lastSeq });
    this.messages = 1;
    this.stats.compactions++;
    this.opts.log.info({ space: this.space, upTo: seqBefore }, "space state compacted on the cluster bus");
  }
}
