/**
 * Reading the first wave's state: JSON-lines files (`proposals.jsonl`, `grants.jsonl`,
 * `audit.jsonl`), line by line through a small buffer — such a file may be larger than a
 * string can be, or than memory should hold. State lines are folded into the owner,
 * history lines handed out in batches of bounded size (migrate.ts archives them). A line
 * that does not parse, or is not a record, is reported with file, line number and byte
 * offset, never dropped in silence; a torn last line (a crash mid-write) is one of those.
 *
 * A file of changes to things that end (proposals: "proposed", then a "state" line per
 * transition) is read twice. The first pass parses every line but keeps only where the
 * lines of things still live are (their offsets), and the ids of the most recent ended
 * ones; the second reads and folds just those lines. What has ended never reaches the
 * owner, so memory and the first journal follow the live state, not the file.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { peekRecord } from "./peek.js";
import { isRecord } from "../wire/values.js";

export interface LegacyFile<R> {
  file: string;
  /** Turns a parsed line into a record (default: the line is the record). */
  wrap?: (line: unknown) => R;
  /** For a file of changes to things that end: how to tell what a record is about and whether it ends it. */
  lifecycle?: Lifecycle<R>;
}

/**
 * `id` and `ends` are given a shallow view of the record, not the record: its scalar
 * members and those of its object members (peek.ts) — what the first pass sees of a line
 * without building it.
 */
export interface Lifecycle<R> {
  /** The thing a state record is about; undefined: the record is folded in whatever happens. */
  id(r: R): string | undefined;
  /** The state a record ends its thing in; undefined while the thing goes on. */
  ends(r: R): string | undefined;
  /** How many ended things the owner remembers (the most recent), … */
  remember: number;
  /** … and the records it remembers them by: [id, the state it ended in], oldest first. */
  ended(list: Array<[string, string]>): R[];
}

export interface LegacyOwner<R> {
  apply(r: R): void;
  isHistory(r: R): boolean;
  /** History records in file order, at most `HISTORY_BYTES` of lines (or one longer line) per call. */
  history(records: R[], at: { file: string; line: number }): void;
}

export interface LegacyLog {
  warn(o: object, msg: string): void;
}

/** Longest line accepted; longer is damage. */
export const MAX_LINE = 64 * 1024 * 1024;
/** History handed out per batch: at most this many bytes of lines, or records. */
const HISTORY_BYTES = 1024 * 1024;
const HISTORY_RECORDS = 1000;

/**
 * Reads `files` (found in `dir`) into `owner`, in order. Throws, naming file and line, on
 * a line past `MAX_LINE` or a record the owner cannot take; what `owner.history` throws
 * goes through as it is.
 */
export function readLegacy<R>(dir: string, files: LegacyFile<R>[], owner: LegacyOwner<R>, log?: LegacyLog): void {
  for (const l of files) {
    const file = join(dir, l.file);
    let batch: R[] = [];
    let batchBytes = 0;
    let lastLine = 0;
    const flush = () => {
      if (batch.length) owner.history(batch, { file: l.file, line: lastLine });
      batch = [];
      batchBytes = 0;
    };
    const torn = (n: number, offset: number) =>
      log?.warn({ file, line: n, offset }, "a line of the old state file does not parse (a torn write?); it is not migrated");
    /** The record `value` makes, or undefined (reported) when it is not one. */
    const record = (value: unknown, n: number, offset: number): R | undefined => {
      const r = isRecord(value) ? (l.wrap ? l.wrap(value) : (value as R)) : undefined;
      if (typeof (r as { type?: unknown } | undefined)?.type === "string") return r;
      log?.warn({ file, line: n, offset }, "a line of the old state file is not a record; it is not migrated");
      return undefined;
    };
    /** The record on a line, or undefined (reported) when there is none. */
    const parse = (line: Buffer, n: number, offset: number): R | undefined => {
      if (blank(line)) return undefined;
      let value: unknown;
      try {
        value = JSON.parse(line.toString("utf8"));
      } catch {
        torn(n, offset);
        return undefined;
      }
      return record(value, n, offset);
    };
    const apply = (r: R, n: number) => {
      try {
        owner.apply(r);
      } catch (err) {
        throw new Error(`${l.file} line ${n}: the record cannot be taken in (${(err as Error).message})`);
      }
    };
    const history = (r: R, n: number, bytes: number) => {
      if (batchBytes + bytes > HISTORY_BYTES) flush();
      batch.push(r);
      batchBytes += bytes;
      lastLine = n;
      if (batch.length >= HISTORY_RECORDS) flush();
    };

    const lc = l.lifecycle;
    if (!lc) {
      eachLine(file, (line, n, offset) => {
        const r = parse(line, n, offset);
        if (r === undefined) return;
        if (owner.isHistory(r)) history(r, n, line.length + 1);
        else apply(r, n);
      });
      flush();
      continue;
    }

    // First pass: where the lines of live things are, and which things ended.
    const live = new Map<string, number[]>();
    const always: number[] = [];
    const ended = new Map<string, string>();
    eachLine(file, (line, n, offset) => {
      if (blank(line)) return;
      // Checked and looked at without being built (peek.ts): a line may be many MB.
      const peeked = peekRecord(line);
      if (peeked.kind === "invalid") return torn(n, offset);
      const seen = record(peeked.kind === "object" ? peeked.view : undefined, n, offset);
      if (seen === undefined) return;
      const bytes = line.length;
      if (owner.isHistory(seen)) {
        const r = parse(line, n, offset);
        return r === undefined ? undefined : history(r, n, bytes + 1);
      }
      const r = seen;
      const id = lc.id(r);
      const end = id === undefined ? undefined : lc.ends(r);
      if (id === undefined) always.push(offset, bytes, n);
      else if (end === undefined) {
        const at = live.get(id);
        if (at) at.push(offset, bytes, n);
        else live.set(id, [offset, bytes, n]);
      } else {
        live.delete(id);
        ended.delete(id);
        ended.set(id, end);
        if (ended.size > lc.remember) ended.delete(ended.keys().next().value!);
      }
    });
    flush();

    // Second pass: only the lines of what is live, in file order.
    const lines: number[][] = [];
    for (const at of [always, ...live.values()]) for (let i = 0; i < at.length; i += 3) lines.push([at[i]!, at[i + 1]!, at[i + 2]!]);
    live.clear();
    lines.sort((a, b) => a[0]! - b[0]!);
    if (ended.size) for (const r of lc.ended([...ended])) owner.apply(r);
    ended.clear();
    const fd = openSync(file, "r");
    try {
      for (const [offset, bytes, n] of lines) {
        const buf = Buffer.allocUnsafe(bytes!);
        for (let got = 0; got < bytes!; ) {
          const read = readSync(fd, buf, got, bytes! - got, offset! + got);
          if (read <= 0) throw new Error(`${l.file} line ${n}: the file changed while it was migrated`);
          got += read;
        }
        const r = parse(buf, n!, offset!);
        if (r === undefined) throw new Error(`${l.file} line ${n}: the file changed while it was migrated`);
        apply(r, n!);
      }
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Calls `each` for every line of `file` (its bytes without the newline, valid only during
 * the call), with its 1-based number and byte offset. A line longer than the read buffer
 * is read again, once its end is found, into a buffer of its size (kept for the next
 * such line if big enough): memory is the longest line, never more.
 */
function eachLine(file: string, each: (line: Buffer, n: number, offset: number) => void): void {
  const fd = openSync(file, "r");
  try {
    const chunk = Buffer.alloc(1024 * 1024);
    let long = Buffer.alloc(0);
    let position = 0;
    let n = 0;
    for (;;) {
      const got = readSync(fd, chunk, 0, chunk.length, position);
      if (got <= 0) break;
      const view = chunk.subarray(0, got);
      let from = 0;
      for (let i = view.indexOf(0x0a); i !== -1; i = view.indexOf(0x0a, from)) {
        each(view.subarray(from, i), ++n, position + from);
        from = i + 1;
      }
      if (from === 0 && got === chunk.length) {
        // A line longer than the buffer: find where it ends, then read it whole.
        const start = position;
        let end = -1;
        for (let at = position + got; end === -1; ) {
          const more = readSync(fd, chunk, 0, chunk.length, at);
          if (more <= 0) {
            end = at; // the file's torn end
            break;
          }
          const nl = chunk.subarray(0, more).indexOf(0x0a);
          if (nl !== -1) end = at + nl;
          at += more;
          if ((end === -1 ? at : end) - start > MAX_LINE)
            throw new Error(`${file}: line ${n + 1} at byte ${start} is longer than ${MAX_LINE} bytes`);
          if (end === -1 && more < chunk.length) end = at;
        }
        const length = end - start;
        if (long.length < length) long = Buffer.allocUnsafe(length);
        for (let read = 0; read < length; ) {
          const r = readSync(fd, long, read, length - read, start + read);
          if (r <= 0) throw new Error(`${file}: line ${n + 1} at byte ${start} ended while it was read`);
          read += r;
        }
        each(long.subarray(0, length), ++n, start);
        position = end + 1;
        continue;
      }
      if (got < chunk.length) {
        // The end of the file: what follows the last newline is a torn last line.
        if (from < got) each(view.subarray(from), ++n, position + from);
        break;
      }
      // The unfinished last line of the buffer is read again from its start.
      position += from;
    }
  } finally {
    closeSync(fd);
  }
}

/** Whether a line holds nothing but JSON whitespace. */
function blank(line: Buffer): boolean {
  for (const c of line) if (c !== 0x20 && c !== 0x09 && c !== 0x0d) return false;
  return true;
}
