/**
 * Append-only JSON-lines files under the state directory.
 *
 * Each append is written before it returns, so a caller that acknowledges a decision
 * after `append` knows the decision survives a `kill -9`, and fsync'ed (unless the log is
 * opened with `fsync: false`), so it survives a power cut too. Records are small and rare
 * (grants, decisions), so synchronous I/O keeps ordering trivially correct and costs
 * nothing on the message path.
 */
import { closeSync, fstatSync, fsyncSync, mkdirSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { dirname } from "node:path";

export class AppendLog<T> {
  private fd: number | undefined;

  /** `fsync: false` still writes each record before returning (it survives a killed process), but not a power cut. */
  constructor(
    readonly file: string,
    private readonly opts: { fsync?: boolean } = {},
  ) {}

  /** Every record written so far. A torn last line (a crash mid-write) is skipped. */
  readAll(): T[] {
    let text: string;
    try {
      text = readFileSync(this.file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const records: T[] = [];
    for (const line of text.split("\n")) {
      if (!line) continue;
      try {
        records.push(JSON.parse(line) as T);
      } catch {
        // Only the final line can be torn; anything else would be a corrupt file, which
        // we would rather serve around than refuse to start on.
      }
    }
    return records;
  }

  append(record: T): void {
    if (this.fd === undefined) {
      mkdirSync(dirname(this.file), { recursive: true, mode: 0o700 });
      this.fd = openSync(this.file, "a+", 0o600);
      // After a crash mid-write the file may end in a torn line; start on a fresh one so
      // the next record is not glued to it.
      const size = fstatSync(this.fd).size;
      const last = Buffer.alloc(1);
      if (size > 0 && readSync(this.fd, last, 0, 1, size - 1) === 1 && last[0] !== 0x0a) writeSync(this.fd, "\n");
    }
    writeSync(this.fd, `${JSON.stringify(record)}\n`);
    if (this.opts.fsync !== false) fsyncSync(this.fd);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
