/**
 * The state store: the one seam through which a space's durable facts pass.
 *
 *   <dir>/journal          live state and recent history, group-committed (journal.ts)
 *   <dir>/history/*.log    older history, kept by size and age (archive.ts)
 *   <dir>/legacy/          the first wave's jsonl files, once migrated (legacy.ts, migrate.ts)
 *
 * Generic over the record type: the owner folds records into its state (`apply`), says
 * which records are history rather than state (`isHistory`), and gives the records that
 * rebuild its state now (`snapshot`) when the journal is compacted. Opening reads only the
 * journal — live state plus what came since the last compaction — frame by frame, so
 * start-up time and memory follow the live state, not the length of the history.
 */
import {
  closeSync,
  existsSync,
  fdatasyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { Archive, type Retention } from "./archive.js";
import { Chain } from "./chain.js";
import { encodeFrame, MAGIC, readFrames } from "./frame.js";
import { Journal, StoreError, syncDir, writeStateFile } from "./journal.js";
import type { LegacyFile } from "./legacy.js";
import { abandonMigration, finishMigration, migrate } from "./migrate.js";

export { StoreError } from "./journal.js";
export type { LegacyFile, Lifecycle } from "./legacy.js";

export interface StoreLog {
  info(o: object, msg: string): void;
  warn(o: object, msg: string): void;
  error(o: object, msg: string): void;
}

export interface StoreOptions {
  dir: string;
  /** fdatasync per batch; default true. */
  fsync?: boolean;
  /** Compact when the journal exceeds this and twice its last snapshot; default 16 MiB. */
  compactBytes?: number;
  history?: Retention;
  log?: StoreLog;
  /** Told how long each batch took to become durable (write and fdatasync), in seconds. */
  onWrite?: ((seconds: number) => void) | undefined;
}

export interface StoreHooks<R extends { type: string }> {
  apply(record: R): void;
  snapshot(): R[];
  isHistory(record: R): boolean;
}

export interface OpenReport {
  records: number;
  bytes: number;
  ms: number;
  torn?: { file: string; offset: number; reason: string };
  migrated?: string[];
}

const DEFAULT_RETENTION: Retention = { maxBytes: 256 * 1024 * 1024, maxAgeMs: 90 * 86_400_000 };

/**
 * What a space's ledger needs of a store, whichever keeps the records: the journal here,
 * or a stream on the cluster's bus (cluster/bus-store.ts).
 */
export interface StateStore<R extends { type: string }> {
  commit(txn: R[]): Promise<void>;
  history(filter: (r: R) => boolean, opts?: { limit?: number }): R[];
  readonly stats: { journalBytes: number; commits: number; batches: number; syncs: number; compactions: number };
  close(): Promise<void>;
}

/** Opens a space's state: folds what the store holds into the owner and returns the store. */
export type StoreOpener<R extends { type: string }> = (hooks: StoreHooks<R>) => { store: StateStore<R>; report: OpenReport };

export class Store<R extends { type: string }> implements StateStore<R> {
  constructor(
    private readonly journal: Journal<R>,
    private readonly archive: Archive<R>,
  ) {}

  /** Writes one transaction atomically; resolves once it is durable. Rejects with a `StoreError`. */
  commit(txn: R[]): Promise<void> {
    return this.journal.commit(txn);
  }

  /** History records matching `filter`, oldest first: the archive, then the journal. */
  history(filter: (r: R) => boolean, opts: { limit?: number } = {}): R[] {
    const limit = opts.limit ?? Infinity;
    return this.journal.history(filter, limit, this.archive.read(filter, limit));
  }

  get stats(): Journal<R>["stats"] {
    return this.journal.stats;
  }

  close(): Promise<void> {
    return this.journal.close();
  }
}

/**
 * Opens (creating, or migrating from the first wave's files) the store in `opts.dir` and
 * folds its live records into the owner. A torn tail is cut off and reported; a corrupt
 * frame with data after it stops the open with a `StoreError` naming file and offset.
 */
export function openStore<R extends { type: string }>(
  opts: StoreOptions,
  hooks: StoreHooks<R>,
  legacy: LegacyFile<R>[] = [],
): { store: Store<R>; report: OpenReport } {
  const t0 = performance.now();
  mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
  const file = join(opts.dir, "journal");
  const archive = new Archive<R>(opts.dir, opts.history ?? DEFAULT_RETENTION);
  const report: OpenReport = { records: 0, bytes: 0, ms: 0 };

  // What a crash in the middle of writing a new journal leaves: never the journal itself.
  for (const tmp of [`${file}.new`, `${file}.compact`]) rmSync(tmp, { force: true });

  if (!existsSync(file)) {
    const found = legacy.filter((l) => existsSync(join(opts.dir, l.file)));
    if (found.length) {
      // The migrated state is folded into the owner and written as the first journal.
      report.migrated = migrate(opts.dir, file, found, hooks, archive, opts.log);
      opts.log?.info({ files: report.migrated }, "state migrated to the journal; the old files are in legacy/");
    } else {
      abandonMigration(opts.dir, archive);
      writeJournal(file, 0, []);
    }
  } else finishMigration(opts.dir, opts.log);

  let seq = archive.lastSeq;
  let good = MAGIC.length;
  let first = 0;
  const fold = report.migrated === undefined;
  // The history chain goes on from the last history record written: the journal's, else the archive's.
  const chain = new Chain(archive.chain.head);
  let unarchived = false;
  const end = readFrames<R>(file, (f) => {
    seq = Math.max(seq, f.seq);
    good = f.offset + f.size;
    if (first === 0) first = good;
    report.records += f.records.length;
    for (const r of f.records) {
      if (!hooks.isHistory(r)) {
        if (fold) hooks.apply(r);
      } else if (f.seq > archive.lastSeq) {
        chain.follow(r);
        unarchived = true;
      }
    }
  });
  if (end.kind === "corrupt") {
    throw new StoreError(
      "corrupt",
      `${file} is corrupt at byte ${end.offset} (${end.reason}); run \`mewgate state repair --state-dir ${opts.dir}\` (with the gateway stopped) to keep what comes before it`,
      file,
      end.offset,
    );
  }
  if (end.kind === "torn") {
    report.torn = { file, offset: end.offset, reason: end.reason };
    opts.log?.warn(report.torn, "the state journal ends in a torn frame (a crash mid-write); cut off there");
    if (end.offset < MAGIC.length) writeJournal(file, seq, []);
    else truncateSync(file, good);
  }
  report.bytes = good;
  report.ms = Math.round(performance.now() - t0);
  const journal = new Journal<R>(
    file,
    good,
    seq,
    archive,
    { snapshot: hooks.snapshot, isHistory: hooks.isHistory, log: opts.log, onWrite: opts.onWrite },
    { fsync: opts.fsync !== false, compactBytes: opts.compactBytes ?? 16 * 1024 * 1024 },
    Math.max(first, good / 2),
    !unarchived,
  );
  journal.chain = chain;
  return { store: new Store(journal, archive), report };
}

/** Writes a fresh journal holding `records` (in bounded frames), durably, via a rename. */
function writeJournal(file: string, seq: number, records: unknown[]): void {
  const tmp = `${file}.new`;
  writeStateFile(tmp, seq, records, false);
  renameSync(tmp, file);
  syncDir(join(file, ".."));
}

/** History records from a state directory without opening the store (for `mewgate audit`, even while a gateway runs). */
export function readHistory<R extends { type: string }>(
  dir: string,
  filter: (r: R) => boolean,
  opts: { limit?: number; isHistory?: (r: R) => boolean } = {},
): R[] {
  const limit = opts.limit ?? Infinity;
  const archive = new Archive<R>(dir, DEFAULT_RETENTION);
  const out = archive.read(filter, limit);
  const file = join(dir, "journal");
  if (!existsSync(file)) return out;
  readFrames<R>(file, (f) => {
    if (f.seq <= archive.lastSeq) return;
    for (const r of f.records) if (out.length < limit && (opts.isHistory?.(r) ?? true) && filter(r)) out.push(r);
  });
  return out;
}

/**
 * What a repair adds after the cut: the owner reads the transactions kept and the bytes
 * dropped, and gives records to write in one more transaction (for a space: proposals the
 * dropped part decided or ran end rather than come back pending, and an audit record of
 * the repair). History records among them are chained on from the last one kept.
 */
export interface RepairHook<R> {
  isHistory(r: R): boolean;
  after(kept: R[], dropped: Buffer, cut: { offset: number; movedTo: string }): R[];
}

/**
 * Cuts the journal at its first unreadable frame, keeping every transaction before it,
 * and moves the rest aside (`journal.damaged-<time>`) for whoever wants to look at it.
 * With a `hook`, writes what it gives after the cut (see `RepairHook`).
 */
export function repairStore<R extends { type: string } = { type: string }>(
  dir: string,
  hook?: RepairHook<R>,
): { kept: number; movedTo?: string; offset?: number; added: R[] } {
  const file = join(dir, "journal");
  if (!existsSync(file)) return { kept: 0, added: [] };
  let kept = 0;
  let good = MAGIC.length;
  let seq = 0;
  const frames: Array<{ seq: number; records: R[] }> = [];
  const end = readFrames<R>(file, (f) => {
    kept++;
    good = f.offset + f.size;
    seq = Math.max(seq, f.seq);
    if (hook) frames.push({ seq: f.seq, records: f.records });
  });
  if (end.kind === "end") return { kept, added: [] };
  const movedTo = `${file}.damaged-${new Date().toISOString().replace(/[:.]/g, "-")}`;
  const size = statSync(file).size;
  const fd = openSync(movedTo, "w", 0o600);
  const src = openSync(file, "r");
  try {
    const buf = Buffer.alloc(64 * 1024);
    for (let at = good; at < size; ) {
      const n = readSync(src, buf, 0, Math.min(buf.length, size - at), at);
      writeSync(fd, buf, 0, n);
      at += n;
    }
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
    closeSync(src);
  }
  truncateSync(file, Math.max(good, MAGIC.length));
  const added = hook
    ? hook.after(
        frames.flatMap((f) => f.records),
        readFileSync(movedTo),
        { offset: end.offset, movedTo },
      )
    : [];
  if (added.length > 0) {
    // The chain goes on from the last history record kept: the journal's, else the archive's.
    const archive = new Archive<R>(dir, DEFAULT_RETENTION);
    const chain = new Chain(archive.chain.head);
    for (const f of frames) if (f.seq > archive.lastSeq) for (const r of f.records) if (hook!.isHistory(r)) chain.follow(r);
    const sealed = chain.seal(added, (r) => hook!.isHistory(r)).records;
    const fd = openSync(file, "a");
    try {
      writeSync(fd, encodeFrame(Math.max(seq, archive.lastSeq) + 1, sealed));
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
  return { kept, movedTo, offset: end.offset, added };
}
