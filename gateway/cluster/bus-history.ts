/**
 * A clustered space's older history (its audit trail): what compaction moved off the state
 * subject, kept on the bus at `mewgate.state.<space>.history`, one message per compaction,
 * and in the owner's memory so that the API's history reads stay synchronous, as they are
 * against the journal's archive (store/archive.ts).
 *
 * Both copies are held to the same retention, by bytes and by age, like the archive on a
 * disk: past it the oldest batches are dropped here and purged from the bus, so the next
 * owner reads exactly the window this one served. The newest batch is always kept.
 */
import { JSONCodec } from "nats";
import type { Logger } from "pino";
import type { Retention } from "../store/archive.js";
import { type Bus, STATE_STREAM } from "./bus.js";

/** In the owner's memory rather than on a disk, so a smaller default than the journal's archive. */
export const DEFAULT_BUS_RETENTION: Retention = { maxBytes: 32 * 1024 * 1024, maxAgeMs: 90 * 86_400_000 };

interface Kept<R> {
  /** The batch's sequence in the state stream. */
  seq: number;
  /** When it was stored (ms since the epoch). */
  at: number;
  bytes: number;
  records: R[];
}

const codec = JSONCodec<{ t?: unknown[][] }>();

export class BusHistory<R> {
  private readonly kept: Kept<R>[] = [];
  private bytes = 0;

  private constructor(
    private readonly bus: Bus,
    private readonly subject: string,
    private readonly retention: Retention,
    private readonly log: Logger,
  ) {}

  /** Reads what the bus keeps of the space's older history, oldest first. */
  static async load<R>(bus: Bus, subject: string, retention: Retention, log: Logger): Promise<BusHistory<R>> {
    const h = new BusHistory<R>(bus, subject, retention, log);
    let last = 0;
    try {
      last = (await bus.jsm.streams.getMessage(STATE_STREAM, { last_by_subj: subject })).seq;
    } catch (err) {
      if (!/no message found/i.test((err as Error).message)) throw err;
    }
    if (last === 0) return h;
    const consumer = await bus.js.consumers.get(STATE_STREAM, { filterSubjects: subject });
    const iter = await consumer.consume({ max_messages: 256 });
    for await (const m of iter) {
      // History must not stand between a space and its new owner: a batch that cannot be
      // read is reported and skipped, never fatal.
      let records: R[] | undefined;
      try {
        const batch = codec.decode(m.data);
        if (Array.isArray(batch.t) && batch.t.every(Array.isArray)) records = batch.t.flat() as R[];
      } catch {
        records = undefined;
      }
      if (records) h.push({ seq: m.seq, at: Math.floor(m.info.timestampNanos / 1e6), bytes: m.data.length, records });
      else log.warn({ subject, seq: m.seq, bytes: m.data.length }, "a history batch on the cluster bus is not readable; skipped");
      if (m.seq >= last || m.info.pending === 0) break;
    }
    iter.stop();
    await h.retain();
    return h;
  }

  /** A batch compaction just stored on the bus (its sequence from the publish's acknowledgement). */
  async add(seq: number, bytes: number, records: R[]): Promise<void> {
    this.push({ seq, at: Date.now(), bytes, records });
    await this.retain();
  }

  /** Records matching `filter`, oldest first, at most `limit`, appended to `out`. */
  read(filter: (r: R) => boolean, limit: number, out: R[] = []): R[] {
    for (const k of this.kept) {
      for (const r of k.records) {
        if (out.length >= limit) return out;
        if (filter(r)) out.push(r);
      }
    }
    return out;
  }

  get size(): { batches: number; bytes: number } {
    return { batches: this.kept.length, bytes: this.bytes };
  }

  private push(k: Kept<R>): void {
    this.kept.push(k);
    this.bytes += k.bytes;
  }

  /** Drops the oldest batches past the retention (never the newest), here and on the bus. */
  private async retain(): Promise<void> {
    const oldest = Date.now() - this.retention.maxAgeMs;
    let dropped = 0;
    while (this.kept.length > 1 && (this.bytes > this.retention.maxBytes || this.kept[0]!.at < oldest)) {
      this.bytes -= this.kept.shift()!.bytes;
      dropped++;
    }
    if (dropped === 0) return;
    // Everything on the subject before the oldest batch kept.
    await this.bus.jsm.streams.purge(STATE_STREAM, { filter: this.subject, seq: this.kept[0]!.seq });
    this.log.info(
      { subject: this.subject, dropped, kept: this.kept.length, bytes: this.bytes },
      "older history past its retention dropped from the cluster bus",
    );
  }
}
