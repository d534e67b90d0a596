/**
 * The journal: an append-only file of transactions, group-committed.
 *
 * `commit` queues a transaction and resolves once it is durable. Transactions queued
 * while a write is on its way (or in the same tick) go out together as the next batch:
 * one write, one fdatasync, however many participants they came from. Batches go out in
 * order, and their commits resolve in order.
 *
 * A failed write rejects every transaction of its batch and cuts the file back to where
 * the batch began, so nothing of it survives and the next batch is not glued to a torn
 * frame; the journal goes on. A failed fdatasync is different: the kernel may have dropped
 * the dirty pages and will not say which, so the journal stops accepting commits until it
 * is reopened (and reads what really is on disk).
 *
 * When the journal outgrows its threshold it is compacted, without stopping the commits:
 * between two batches, history records move to the archive and the live state (the owner's
 * snapshot) is serialised; the snapshot is then written and synced beside the journal while
 * batches go on being written to the journal as before, each also kept in memory once it is
 * durable; between two later batches, those are appended to the new file, it is synced, and
 * it replaces the old with an atomic rename. Until that rename the old journal holds
 * everything, so a crash at any point loses nothing acknowledged (test/store.test.ts kills
 * a committer mid-compaction); a compaction that fails is dropped and the journal used on.
 */
import { close, closeSync, fdatasync, fdatasyncSync, fsyncSync, ftruncate, openSync, renameSync, rmSync, write } from "node:fs";
import { dirname } from "node:path";
import { type Archive, type HistoryFrame, HistoryChunks } from "./archive.js";
import { Chain } from "./chain.js";
import { frameOf, MAGIC, readFrames, snapshotFrames, writeAllSync } from "./frame.js";
import { CommitQueue, type Pending } from "./queue.js";

/** The most journal bytes whose history is kept as written for the next compaction (see `Journal.written`). */
const WRITTEN_MAX = 64 * 1024 * 1024;

export class StoreError extends Error {
  constructor(
    readonly code: "write_failed" | "corrupt" | "closed" | "failed" | "migration_failed",
    message: string,
    readonly file?: string,
    readonly offset?: number,
    /** The system's error code behind it (ENOSPC, EIO, EFBIG, …), when there is one. */
    readonly errno?: string,
  ) {
    super(message);
    this.name = "StoreError";
  }
}

const errnoOf = (err: unknown): string | undefined => (err as NodeJS.ErrnoException).code;

export interface JournalOwner<R> {
  snapshot(): R[];
  isHistory(r: R): boolean;
  log?: { info(o: object, msg: string): void; error(o: object, msg: string): void } | undefined;
  onWrite?: ((seconds: number) => void) | undefined;
}

export class Journal<R> {
  private fd: number;
  private readonly queue = new CommitQueue<R[]>((batch) => this.writeBatch(batch));
  private failure: StoreError | undefined;
  private closed = false;
  readonly stats = { journalBytes: 0, commits: 0, batches: 0, syncs: 0, compactions: 0 };
  /** The history chain (chain.ts): each batch's history records are linked as it is encoded. */
  chain = new Chain();
  /**
   * The history of every frame written since the journal was last compacted (or opened with
   * none unarchived), as the JSON written, built into the archive's frames a MiB at a time as
   * it comes: what the next compaction archives, without reading the journal back and parsing
   * it, or building 16 MiB of frames, on the event loop. Undefined when not known (opened with
   * unarchived history, or past `WRITTEN_MAX`): compaction then reads the file.
   */
  private written: HistoryChunks | undefined;
  private writtenBytes = 0;
  /** The compaction under way, from its snapshot's serialisation to the rename. */
  private compacting: Compaction | undefined;

  constructor(
    readonly file: string,
    /** Bytes of good frames: where the next batch goes. */
    private size: number,
    private seq: number,
    private readonly archive: Archive<R>,
    private readonly owner: JournalOwner<R>,
    private readonly opts: { fsync: boolean; compactBytes: number },
    private snapshotBytes: number,
    /** The journal holds no history the archive lacks: what is written from now on is all there is to archive. */
    historyArchived = false,
  ) {
    if (historyArchived) this.written = new HistoryChunks();
    this.fd = openSync(file, "r+");
    this.stats.journalBytes = size;
  }

  commit(txn: R[]): Promise<void> {
    if (this.closed) return Promise.reject(new StoreError("closed", "the store is closed", this.file));
    if (this.failure) return Promise.reject(this.failure);
    this.stats.commits++;
    return this.queue.push(txn);
  }

  /** One batch: one write and one fdatasync for all its transactions (see `CommitQueue`). */
  private async writeBatch(batch: Pending<R[]>[]): Promise<void> {
    if (this.failure) {
      for (const p of batch) p.reject(this.failure);
      return;
    }
    let bytes: Buffer;
    // Linked in the order they are written; a batch that does not reach the disk gives its links back.
    const sealed = batch.map((p) => this.chain.seal(p.txn, (r) => this.owner.isHistory(r)));
    const unseal = () => sealed[0]?.undo();
    // Each record's JSON is made once: for its frame, and, if it is history, kept for compaction.
    const history: HistoryFrame<R>[] = [];
    try {
      const frames = sealed.map((s) => {
        const seq = ++this.seq;
        const json = s.records.map((r) => JSON.stringify(r));
        const frame = frameOf(seq, json);
        if (this.written) {
          const kept = json.filter((_, i) => this.owner.isHistory(s.records[i]!));
          if (kept.length) history.push({ seq, json: kept, bytes: frame.length });
        }
        return frame;
      });
      bytes = frames.length === 1 ? frames[0]! : Buffer.concat(frames);
    } catch (err) {
      this.seq -= batch.length;
      unseal();
      for (const p of batch) p.reject(new StoreError("write_failed", (err as Error).message, this.file));
      return;
    }
    const start = this.size;
    const began = performance.now();
    try {
      await writeAll(this.fd, bytes, start);
    } catch (err) {
      this.seq -= batch.length;
      unseal();
      const e = new StoreError("write_failed", `could not write ${this.file}: ${(err as Error).message}`, this.file, start, errnoOf(err));
      // Cut the partial batch off so it can never be read back.
      const cut = await truncate(this.fd, start).catch((terr: Error) => terr);
      if (cut instanceof Error)
        this.fail(
          new StoreError("failed", `could not cut a failed write from ${this.file}: ${cut.message}; restart the gateway`, this.file, start),
        );
      for (const p of batch) p.reject(e);
      return;
    }
    if (this.opts.fsync) {
      try {
        await sync(this.fd);
        this.stats.syncs++;
      } catch (err) {
        this.fail(
          new StoreError(
            "failed",
            `fdatasync of ${this.file} failed (${(err as Error).message}); the store accepts nothing more until the gateway restarts`,
            this.file,
            start,
            errnoOf(err),
          ),
        );
        for (const p of batch) p.reject(this.failure!);
        return;
      }
    }
    this.size = start + bytes.length;
    this.stats.journalBytes = this.size;
    this.keep(history, bytes.length);
    this.stats.batches++;
    this.owner.onWrite?.((performance.now() - began) / 1000);
    for (const p of batch) p.resolve();
    const c = this.compacting;
    if (c) {
      // Durable in the journal, so it follows the snapshot in the new file.
      c.tail.push(bytes);
      c.tailBytes += bytes.length;
      if (c.ready) this.finishCompaction(c);
    } else if (this.size > Math.max(this.opts.compactBytes, 2 * this.snapshotBytes)) {
      // The owner applies a transaction when its commit resolves; let every one of this
      // batch be applied before the snapshot is taken, and write nothing meanwhile.
      await new Promise((r) => setImmediate(r));
      this.startCompaction();
    }
  }

  private fail(err: StoreError): void {
    this.failure ??= err;
    this.owner.log?.error({ file: this.file, err: err.message }, "state store failed");
  }

  /**
   * Between batches: moves the journal's history to the archive, serialises the live state
   * (as it is now: the owner changes it once the next commits resolve), and starts writing it
   * beside the journal. The commits go on meanwhile; `finishCompaction` swaps the files.
   */
  private startCompaction(): void {
    const began = performance.now();
    const tmp = `${this.file}.compact`;
    let frames: Buffer[];
    let fd: number;
    let archived = 0;
    try {
      // History first: once the new journal replaces the old, the archive must hold it.
      if (this.written) this.archive.appendChunks(this.written);
      else this.archive.append(this.readHistory());
      archived = performance.now() - began;
      // The archive holds all history up to here; what is written from now on is kept for the next one.
      this.written = new HistoryChunks();
      this.writtenBytes = 0;
      // The snapshot's frames carry the current sequence number: history of later frames is newer than anything archived.
      frames = [MAGIC, ...snapshotFrames(this.seq, this.owner.snapshot(), true)];
      fd = openSync(tmp, "w", 0o600);
    } catch (err) {
      this.compactionFailed(err as Error, tmp);
      return;
    }
    const snapshot = frames.reduce((n, f) => n + f.length, 0);
    const c: Compaction = { tmp, fd, snapshot, tail: [], tailBytes: 0, ready: false, began, archived, paused: performance.now() - began };
    this.compacting = c;
    c.writing = (async () => {
      let at = 0;
      for (const f of frames) {
        await writeAll(fd, f, at);
        at += f.length;
      }
      await sync(fd);
    })().then(
      () => {
        c.ready = true;
        // Nothing is being written: swap now. Else the batch on its way does, once it is durable.
        if (!this.queue.writing && this.compacting === c) this.finishCompaction(c);
      },
      (err: Error) => {
        if (this.compacting === c) this.compacting = undefined;
        this.compactionFailed(err, tmp, fd);
      },
    );
  }

  /**
   * Between batches, once the snapshot is durable: appends the batches written since it was
   * taken, syncs, and renames the new file over the journal.
   */
  private finishCompaction(c: Compaction): void {
    this.compacting = undefined;
    // The journal stopped (a failed fdatasync): what it holds on disk is not known, so it is not copied.
    if (this.failure) {
      this.compactionFailed(undefined, c.tmp, c.fd);
      return;
    }
    const began = performance.now();
    try {
      let at = c.snapshot;
      for (const b of c.tail) {
        writeAllSync(c.fd, b, at);
        at += b.length;
      }
      if (c.tail.length) fdatasyncSync(c.fd);
      renameSync(c.tmp, this.file);
    } catch (err) {
      this.compactionFailed(err as Error, c.tmp, c.fd);
      return;
    }
    // Renamed: from here every batch goes to the new file, whatever else fails. The old one is
    // closed off the event loop: its last close frees its blocks, which can take a while.
    closeSync(c.fd);
    close(this.fd, () => undefined);
    this.fd = openSync(this.file, "r+");
    this.size = c.snapshot + c.tailBytes;
    this.snapshotBytes = c.snapshot;
    this.stats.journalBytes = this.size;
    this.stats.compactions++;
    try {
      syncDir(dirname(this.file));
    } catch (err) {
      // The rename may not survive a crash, and the old journal lacks what comes next: stop, as after a failed fdatasync.
      this.fail(new StoreError("failed", `could not make the compacted ${this.file} durable: ${(err as Error).message}`, this.file));
      return;
    }
    const paused = c.paused + (performance.now() - began);
    this.owner.log?.info(
      {
        file: this.file,
        bytes: this.size,
        tail: c.tail.length,
        ms: Math.round(performance.now() - c.began),
        // What held the event loop: the archive's append and the snapshot's serialisation, then the swap.
        paused_ms: { archive: Math.round(c.archived), snapshot: Math.round(c.paused - c.archived), swap: Math.round(paused - c.paused) },
      },
      "state journal compacted",
    );
  }

  /** A compaction that could not be done: its file removed, the journal used on, tried again only after as much growth again. */
  private compactionFailed(err: Error | undefined, tmp: string, fd?: number): void {
    if (fd !== undefined) {
      try {
        closeSync(fd);
      } catch {
        // A descriptor that will not close changes nothing here: the file is removed either way.
      }
    }
    rmSync(tmp, { force: true });
    this.snapshotBytes = this.size;
    if (err) this.owner.log?.error({ file: this.file, err: err.message }, "state journal compaction failed; the journal is used as it is");
  }

  /** Keeps a written batch's history for the next compaction, while that stays within bounds. */
  private keep(history: HistoryFrame<R>[], bytes: number): void {
    if (!this.written) return;
    this.writtenBytes += bytes;
    // Past this the journal is read back instead: memory for a journal that outgrew its threshold many times over.
    if (this.writtenBytes > WRITTEN_MAX) this.written = undefined;
    else for (const f of history) if ("json" in f) this.written.add(f.seq, f.json, f.bytes ?? 0);
  }

  /** The journal's history read back from the file: what compaction archives when it was not kept as written. */
  private readHistory(): HistoryFrame<R>[] {
    const history: HistoryFrame<R>[] = [];
    const end = readFrames<R>(
      this.file,
      (f) => history.push({ seq: f.seq, records: f.records.filter((r) => this.owner.isHistory(r)), bytes: f.size }),
      { upTo: this.size },
    );
    if (end.kind !== "end") throw new Error(`journal unreadable at ${end.offset}: ${end.reason}`);
    return history;
  }

  /** History records still in the journal (not yet archived), oldest first. */
  history(filter: (r: R) => boolean, limit: number, out: R[]): R[] {
    readFrames<R>(
      this.file,
      (f) => {
        if (f.seq <= this.archive.lastSeq) return;
        for (const r of f.records) if (out.length < limit && this.owner.isHistory(r) && filter(r)) out.push(r);
      },
      { upTo: this.size },
    );
    return out;
  }

  /** Waits for every queued commit, then closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.drain();
    const c = this.compacting;
    if (c) {
      await c.writing;
      // Ready, but left for a batch that never came: swap now, between batches as ever.
      if (this.compacting === c) this.finishCompaction(c);
    }
    closeSync(this.fd);
  }
}

/** A compaction under way (`Journal.startCompaction`). */
interface Compaction {
  /** The new file, and its descriptor. */
  tmp: string;
  fd: number;
  /** Bytes of the snapshot (header included): where the batches written since it go. */
  snapshot: number;
  /** The batches written to the journal since the snapshot was taken, as written, once durable. */
  tail: Buffer[];
  tailBytes: number;
  /** The snapshot is written and synced: the files are swapped between two batches. */
  ready: boolean;
  /** Settles once the snapshot's write ends and what follows from it is done. */
  writing?: Promise<void>;
  /** When it began; how long the archive's append, and all it did before writing, held the event loop (ms). */
  began: number;
  archived: number;
  paused: number;
}

function writeAll(fd: number, bytes: Buffer, position: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const step = (offset: number): void => {
      write(fd, bytes, offset, bytes.length - offset, position + offset, (err, written) => {
        if (err) return reject(err);
        // A short write is not an error: write the rest.
        if (offset + written < bytes.length) {
          if (written === 0) return reject(new Error("write made no progress"));
          return step(offset + written);
        }
        resolve();
      });
    };
    step(0);
  });
}

function sync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fdatasync(fd, (err) => (err ? reject(err) : resolve())));
}

function truncate(fd: number, size: number): Promise<void> {
  return new Promise((resolve, reject) => ftruncate(fd, size, (err) => (err ? reject(err) : resolve())));
}

/** Makes a rename in `dir` durable. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes `records` as a fresh store file at `file` — the header, then frames of bounded
 * size (`snapshotFrames`), all carrying `seq` — durably, and returns its size; the caller
 * renames it into place. On any failure the partial file is removed and the error thrown.
 * `always`: write a frame even when there are no records, so the file carries `seq`.
 */
export function writeStateFile(file: string, seq: number, records: Iterable<unknown>, always: boolean): number {
  let size = MAGIC.length;
  try {
    const fd = openSync(file, "w", 0o600);
    try {
      writeAllSync(fd, MAGIC);
      for (const frame of snapshotFrames(seq, records, always)) {
        writeAllSync(fd, frame);
        size += frame.length;
      }
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    rmSync(file, { force: true });
    throw err;
  }
  return size;
}
