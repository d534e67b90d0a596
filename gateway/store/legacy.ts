/**
 * Migration from the first wave's state: JSON-lines files (`proposals.jsonl`,
 * `grants.jsonl`, `audit.jsonl`), read line by line through a small buffer — such a file
 * may be larger than a string can be — state lines folded into the owner, history lines
 * moved to the archive. A line that does not parse is reported with file, line number
 * and byte offset, never dropped in silence.
 *
 * Safe to redo: nothing is removed until the new journal is durable (index.ts), and the
 * archive skips history it already holds.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import type { Archive } from "./archive.js";

export interface LegacyFile<R> {
  file: string;
  /** Turns a parsed line into a record (default: the line is the record). */
  wrap?: (line: unknown) => R;
}

interface Owner<R> {
  apply(r: R): void;
  isHistory(r: R): boolean;
}

/** Longest line accepted; longer is damage. */
const MAX_LINE = 64 * 1024 * 1024;
/** History lines moved to the archive per frame. */
const HISTORY_BATCH = 1000;

/** Migrates `files` (found in `dir`); returns their names. */
export function migrate<R>(dir: string, files: LegacyFile<R>[], owner: Owner<R>, archive: Archive<R>, log?: { warn(o: object, msg: string): void }): string[] {
  // The archive's sequence numbers for migrated history start above what it holds.
  let seq = archive.lastSeq;
  let history: R[] = [];
  const flush = () => {
    if (history.length) archive.append([{ seq: ++seq, records: history }]);
    history = [];
  };
  for (const l of files) {
    const file = join(dir, l.file);
    eachLine(file, (line, n, offset) => {
      if (!line.trim()) return;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        log?.warn({ file, line: n, offset }, "a line of the old state file does not parse (a torn write?); it is not migrated");
        return;
      }
      const r = l.wrap ? l.wrap(value) : (value as R);
      if (owner.isHistory(r)) {
        history.push(r);
        if (history.length >= HISTORY_BATCH) flush();
      } else owner.apply(r);
    });
    flush();
  }
  return files.map((f) => f.file);
}

/** Calls `each` for every line of `file` (without its newline), with its 1-based number and byte offset. */
function eachLine(file: string, each: (line: string, n: number, offset: number) => void): void {
  const fd = openSync(file, "r");
  try {
    const chunk = Buffer.alloc(1024 * 1024);
    let carry: Buffer[] = [];
    let carried = 0;
    let position = 0;
    let lineStart = 0;
    let n = 0;
    for (;;) {
      const got = readSync(fd, chunk, 0, chunk.length, position);
      if (got <= 0) break;
      let from = 0;
      for (let i = 0; i < got; i++) {
        if (chunk[i] !== 0x0a) continue;
        const piece = chunk.subarray(from, i);
        const line = carried ? Buffer.concat([...carry, piece]).toString("utf8") : piece.toString("utf8");
        each(line, ++n, lineStart);
        lineStart = position + i + 1;
        carry = [];
        carried = 0;
        from = i + 1;
      }
      if (from < got) {
        carried += got - from;
        if (carried > MAX_LINE) throw new Error(`${file}: line ${n + 1} at byte ${lineStart} is longer than ${MAX_LINE} bytes`);
        carry.push(Buffer.from(chunk.subarray(from, got)));
      }
      position += got;
    }
    if (carried) each(Buffer.concat(carry).toString("utf8"), ++n, lineStart);
  } finally {
    closeSync(fd);
  }
}
