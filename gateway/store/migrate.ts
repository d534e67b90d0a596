/**
 * Migration from the first wave's files (legacy.ts reads them) to the journal, as a few
 * bounded, durable steps — none over the store's transaction limit — that a crash may
 * interrupt anywhere:
 *
 *   1. The marker `migrating` is written (via a rename): where the archive ended before
 *      the migration, and the sequence number the migrated history is numbered after.
 *   2. The files are read. History goes to the archive in batches of a few MiB, each a
 *      durable append numbered from the marker's base in file order; state is folded into
 *      the owner, ended proposals left out (legacy.ts).
 *   3. The owner's live state is written to `journal.new` in bounded frames, fsync'ed, and
 *      renamed to `journal`. This rename is the commit.
 *   4. The files are moved to `legacy/`, then the marker is removed.
 *
 * After a crash the next start resumes. Before the commit, the legacy files are as they
 * were and the marker says where the archive began: the files are read again and the
 * history batches, numbered the same way, that the archive already holds are skipped —
 * nothing is archived twice and nothing is lost. After the commit, the journal is opened
 * as usual and step 4 is finished.
 *
 * A failure the migration sees — a full disk, an unwritable directory, a damaged line —
 * undoes it instead: `journal.new` and the history archived since the marker's mark are
 * removed, then the marker, and the start fails with a `StoreError` naming the file, the
 * step and the cause. The legacy files are untouched; the next start begins again.
 */
import { closeSync, existsSync, fdatasyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { Archive, ArchiveMark } from "./archive.js";
import { StoreError, syncDir, writeStateFile } from "./journal.js";
import { type LegacyFile, readLegacy } from "./legacy.js";

interface Owner<R> {
  apply(r: R): void;
  snapshot(): R[];
  isHistory(r: R): boolean;
}

export interface MigrationLog {
  info(o: object, msg: string): void;
  warn(o: object, msg: string): void;
}

interface Marker {
  base: number;
  archive: ArchiveMark;
  files: string[];
}

const MARKER = "migrating";

/**
 * Migrates `found` (legacy files present in `dir`) into a new journal at `file`; returns
 * their names. Throws a `StoreError` ("migration_failed") after undoing what it did.
 */
export function migrate<R>(
  dir: string,
  file: string,
  found: LegacyFile<R>[],
  owner: Owner<R>,
  archive: Archive<R>,
  log?: MigrationLog,
): string[] {
  const names = found.map((f) => f.file);
  const step = (o: object, msg: string) => log?.info({ migration: true, ...o }, msg);
  /** What the migration is doing, and the file it is writing, for the error if it fails. */
  let doing: { what: string; file?: string } = { what: "writing the marker", file: join(dir, MARKER) };
  let marker = readMarker(dir);
  const resumed = marker !== undefined;
  const journalNew = `${file}.new`;
  try {
    if (!marker) {
      marker = { base: archive.lastSeq, archive: archive.mark(), files: names };
      writeMarker(dir, marker);
      step({ step: "marker", files: names }, "migrating the state to the journal");
    } else step({ step: "resume", files: names }, "resuming a migration that was interrupted");
    doing = { what: "reading the old files" };

    let seq = marker.base;
    readLegacy(
      dir,
      found,
      {
        apply: owner.apply,
        isHistory: owner.isHistory,
        history: (records, at) => {
          doing = { what: `archiving the history of ${at.file} (up to line ${at.line})`, file: archive.dir };
          // Frames the archive holds already (an attempt before a crash) are skipped.
          archive.append([{ seq: ++seq, records }]);
          step({ step: "history", file: at.file, line: at.line, seq }, "migration: history archived");
          doing = { what: "reading the old files" };
        },
      },
      log,
    );

    doing = { what: "writing the live state", file: journalNew };
    const bytes = writeStateFile(journalNew, Math.max(seq, archive.lastSeq), owner.snapshot(), false);
    step({ step: "journal", bytes }, "migration: the live state is written");
    doing = { what: "renaming it to the journal", file };
    renameSync(journalNew, file);
    syncDir(dir);
    step({ step: "committed" }, "migration: the journal is in place");
  } catch (err) {
    const cause = err as NodeJS.ErrnoException;
    const undone = undo(dir, journalNew, archive, marker);
    const where = doing.file ? ` (${doing.file})` : "";
    throw new StoreError(
      "migration_failed",
      `could not migrate the state in ${dir} (${names.join(", ")}): ${doing.what}${where} failed: ${cause.message}; ${undone ?? "nothing was kept: the old files are as they were, and the next start migrates them again"}`,
      doing.file,
      undefined,
      cause.code,
    );
  }
  finish(
    dir,
    marker.files.filter((f) => names.includes(f)),
  );
  step({ step: "moved", resumed }, "migration: the old files are in legacy/");
  return names;
}

/** After a start that found the journal: a migration interrupted after its commit is finished. */
export function finishMigration(dir: string, log?: MigrationLog): void {
  const marker = readMarker(dir);
  if (!marker) return;
  finish(dir, marker.files);
  log?.info(
    { migration: true, step: "moved", files: marker.files },
    "finished a migration that was interrupted after its commit; the old files are in legacy/",
  );
}

/**
 * No journal and no legacy files, yet a marker: the files were taken away before the
 * migration committed. What it archived is undone, and the marker removed.
 */
export function abandonMigration<R>(dir: string, archive: Archive<R>): void {
  const marker = readMarker(dir);
  if (marker) undo(dir, `${join(dir, "journal")}.new`, archive, marker);
}

/** Step 4: the migrated files into `legacy/`, then the marker away. */
function finish(dir: string, files: string[]): void {
  const moved = join(dir, "legacy");
  mkdirSync(moved, { recursive: true, mode: 0o700 });
  for (const f of files) if (existsSync(join(dir, f))) renameSync(join(dir, f), join(moved, f));
  syncDir(moved);
  syncDir(dir);
  rmSync(join(dir, MARKER), { force: true });
  syncDir(dir);
}

/** Removes what a failed migration wrote; returns what could not be undone, if anything. */
function undo<R>(dir: string, journalNew: string, archive: Archive<R>, marker: Marker | undefined): string | undefined {
  try {
    rmSync(journalNew, { force: true });
    rmSync(join(dir, `${MARKER}.new`), { force: true });
    if (marker) archive.rollback(marker.archive);
    rmSync(join(dir, MARKER), { force: true });
    syncDir(dir);
    return undefined;
  } catch (err) {
    return `undoing it failed too (${(err as Error).message}): the old files are as they were, and the next start resumes the migration`;
  }
}

function readMarker(dir: string): Marker | undefined {
  const file = join(dir, MARKER);
  if (!existsSync(file)) return undefined;
  let m: Marker;
  try {
    m = JSON.parse(readFileSync(file, "utf8")) as Marker;
  } catch (err) {
    throw new StoreError(
      "migration_failed",
      `${file} cannot be read (${(err as Error).message}); it marks a migration under way — if no gateway is migrating, remove it and the history/ it began, and start again`,
      file,
    );
  }
  if (typeof m?.base !== "number" || !Array.isArray(m.files) || !Array.isArray(m.archive?.segments))
    throw new StoreError("migration_failed", `${file} is not a migration marker`, file);
  return m;
}

/** Durably, via a rename: a marker is whole or absent. */
function writeMarker(dir: string, m: Marker): void {
  const tmp = join(dir, `${MARKER}.new`);
  writeSmallFile(tmp, JSON.stringify(m));
  renameSync(tmp, join(dir, MARKER));
  syncDir(dir);
}

function writeSmallFile(file: string, text: string): void {
  const fd = openSync(file, "w", 0o600);
  try {
    writeSync(fd, text);
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
