/**
 * History moved out of the journal: records nobody needs to rebuild the live state (the
 * audit trail), kept in segment files under `<dir>/history/` and dropped oldest first by
 * total size and by age.
 *
 * Each segment is framed like the journal; a frame carries the sequence number of the
 * journal frame its records came from, so moving history twice (a crash between moving
 * it and replacing the journal) is detected and the second copy skipped.
 */
import {
  closeSync,
  existsSync,
  fdatasyncSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  rmSync,
  statSync,
  truncateSync,
} from "node:fs";
import { join } from "node:path";
import { Chain } from "./chain.js";
import { dropByOwner } from "./retain.js";
import { frameOf, MAGIC, readFrames, writeAllSync } from "./frame.js";

const SEGMENT = /^(\d{8})\.log$/;

export interface Retention {
  maxBytes: number;
  maxAgeMs: number;
  /**
   * Whose a history record is (the participant who caused it). Given, the size limit is
   * kept per participant: over it, the records of whoever holds the most go first, oldest
   * first, so one participant's flood cannot push out the others' records (retain.ts).
   */
  owner?: ((r: unknown) => string | undefined) | undefined;
}

export interface ArchiveMark {
  existed: boolean;
  /** Segment file names, oldest first. */
  segments: string[];
  newestBytes: number;
}

/**
 * One journal frame's history, by the frame's sequence number: its records, or their JSON as
 * the journal wrote it (journal.ts keeps that since its last compaction, so compacting need not
 * read the journal back). `bytes`: the journal frame's size, when known.
 */
export type HistoryFrame<R> = { seq: number; bytes?: number | undefined } & ({ records: readonly R[] } | { json: readonly string[] });

const countOf = (f: HistoryFrame<unknown>): number => ("json" in f ? f.json.length : f.records.length);

/**
 * History gathered into archive frames of about a MiB, each ending at a journal frame's
 * boundary and carrying that frame's sequence number, so a frame is archived whole or not at
 * all. A journal frame's size counts toward the MiB (its own when known, a guess from its record
 * count when not), so frames of large records are not merged past 64 MiB. `append` gathers what
 * it is given; the journal gathers as it writes (journal.ts), so a compaction finds its frames built.
 */
export class HistoryChunks {
  private parts: string[] = [];
  private bytes = 0;
  private seq = 0;
  /** The archive frames built, each with the sequence number of the journal frame it ends at. */
  readonly built: Array<{ seq: number; frame: Buffer }> = [];

  /** Adds journal frame `seq`'s history records (their JSON); `bytes`: the journal frame's size. */
  add(seq: number, json: readonly string[], bytes: number): void {
    if (json.length === 0) return;
    if (this.parts.length && this.bytes + bytes > 64 * 1024 * 1024) this.flush();
    for (const j of json) this.parts.push(j);
    this.bytes += bytes;
    this.seq = seq;
    if (this.bytes >= 1024 * 1024) this.flush();
  }

  /** Builds what is gathered so far into a frame of its own, however small. */
  flush(): void {
    if (this.parts.length === 0) return;
    this.built.push({ seq: this.seq, frame: frameOf(this.seq, this.parts) });
    this.parts = [];
    this.bytes = 0;
  }
}

export class Archive<R> {
  readonly dir: string;
  /** Highest journal sequence whose history is archived. */
  lastSeq = 0;
  /** A segment whose end could not be read (a crash while appending), or a failed append could not be cut from: appends go to a new one. */
  private damaged: string | undefined;
  /** Where the history chain stands at the archive's end (chain.ts). */
  readonly chain = new Chain();

  constructor(
    stateDir: string,
    private readonly retention: Retention,
  ) {
    this.dir = join(stateDir, "history");
    // Segments are written in sequence order, so the newest one alone says where the
    // archive ends: opening costs one segment, however long the history.
    const newest = this.segments().at(-1);
    if (newest) {
      const end = readFrames<R>(newest, (f) => {
        if (f.seq > this.lastSeq) this.lastSeq = f.seq;
        for (const r of f.records) this.chain.follow(r as { type: string });
      });
      if (end.kind !== "end") this.damaged = newest;
    }
  }

  /** Segment files, oldest first. */
  segments(): string[] {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .filter((f) => SEGMENT.test(f))
      .sort()
      .map((f) => join(this.dir, f));
  }

  /**
   * Appends history taken from journal frames (by their sequence numbers), durably, then
   * applies retention. Frames at or below `lastSeq` are already here and skipped.
   */
  append(frames: ReadonlyArray<HistoryFrame<R>>): void {
    const chunks = new HistoryChunks();
    for (const f of frames) {
      if (f.seq <= this.lastSeq) continue;
      chunks.add(f.seq, "json" in f ? f.json : f.records.map((r) => JSON.stringify(r)), f.bytes ?? countOf(f) * 64);
    }
    this.appendChunks(chunks);
  }

  /** Appends history already gathered into frames (`HistoryChunks`), durably, then applies retention. */
  appendChunks(chunks: HistoryChunks): void {
    chunks.flush();
    // Built at journal frames' boundaries: one at or below `lastSeq` is here already, whole.
    const fresh = chunks.built.filter((c) => c.seq > this.lastSeq);
    if (fresh.length === 0) return;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const segs = this.segments();
    const segmentBytes = Math.min(8 * 1024 * 1024, Math.max(1024 * 1024, Math.floor(this.retention.maxBytes / 8)));
    let file = segs.at(-1);
    if (!file || file === this.damaged || statSync(file).size >= segmentBytes) {
      const next = file ? Number(SEGMENT.exec(file.slice(this.dir.length + 1))![1]) + 1 : 1;
      file = join(this.dir, `${String(next).padStart(8, "0")}.log`);
    }
    const fd = openSync(file, "a", 0o600);
    let before = 0;
    try {
      before = fstatSync(fd).size;
      if (before === 0) writeAllSync(fd, MAGIC);
      for (const c of fresh) writeAllSync(fd, c.frame);
      fdatasyncSync(fd);
    } catch (err) {
      // Nothing of a failed append stays (a disk that filled part way through): the next
      // compaction appends the same frames again, whole, where this one began. Were the torn
      // frame left, every frame appended after it would be unreadable. A segment this append
      // began goes whole; one that cannot be cut back is left, and the next append starts a new one.
      try {
        if (before === 0) rmSync(file, { force: true });
        else ftruncateSync(fd, before);
      } catch {
        this.damaged = file;
      }
      throw err;
    } finally {
      closeSync(fd);
    }
    this.lastSeq = fresh.at(-1)!.seq;
    this.retain();
  }

  /** Where the archive ends now, for `rollback`: its segments and the newest one's size. */
  mark(): ArchiveMark {
    const segs = this.segments();
    const newest = segs.at(-1);
    return {
      existed: existsSync(this.dir),
      segments: segs.map((f) => f.slice(this.dir.length + 1)),
      newestBytes: newest ? statSync(newest).size : 0,
    };
  }

  /**
   * Takes the archive back to `mark`: removes the segments written since and cuts the
   * then-newest one back to its size (appends only ever grow the newest segment or add
   * new ones). Segments retention dropped meanwhile are not brought back.
   */
  rollback(mark: ArchiveMark): void {
    const kept = new Set(mark.segments);
    for (const seg of this.segments()) if (!kept.has(seg.slice(this.dir.length + 1))) rmSync(seg, { force: true });
    const newest = mark.segments.at(-1);
    if (newest && existsSync(join(this.dir, newest)) && statSync(join(this.dir, newest)).size > mark.newestBytes)
      truncateSync(join(this.dir, newest), mark.newestBytes);
    if (!mark.existed) rmSync(this.dir, { recursive: true, force: true });
  }

  /**
   * Drops whole segments past the age limit, oldest first (never the newest); then, over
   * the size limit, the records of whoever holds the most (retain.ts) when records have
   * owners, else whole segments oldest first.
   */
  private retain(): void {
    const segs = this.segments().map((file) => ({ file, ...statSync(file) }));
    let total = segs.reduce((n, s) => n + s.size, 0);
    const oldest = Date.now() - this.retention.maxAgeMs;
    const byOwner = this.retention.owner;
    for (const s of segs.slice(0, -1)) {
      if ((byOwner || total <= this.retention.maxBytes) && s.mtimeMs >= oldest) break;
      rmSync(s.file, { force: true });
      total -= s.size;
    }
    if (byOwner && total > this.retention.maxBytes) dropByOwner(this.segments(), this.retention.maxBytes, byOwner);
  }

  /** History records matching `filter`, oldest first, at most `limit`. */
  read(filter: (r: R) => boolean, limit: number, out: R[] = []): R[] {
    for (const seg of this.segments()) {
      if (out.length >= limit) break;
      readFrames<R>(seg, (f) => {
        for (const r of f.records) if (out.length < limit && filter(r)) out.push(r);
      });
    }
    return out;
  }
}
