/**
 * The on-disk format of the store's files: a header, then frames.
 *
 *   header  "MEWGATE\x01" (8 bytes)
 *   frame   length u32 LE | crc32 u32 LE | payload (length bytes of JSON: {"n": seq, "r": [records]})
 *
 * A frame is one transaction: it is read whole or not at all. Reading never loads a file
 * into one string: frames are read one by one through a small buffer, so a file of any
 * size is read in bounded memory. What cannot be read is classified by where it is:
 *   - torn: the last frame is incomplete or fails its checksum and nothing follows it —
 *     what a crash in the middle of a write leaves; the file is cut there;
 *   - corrupt: a frame fails its checksum (or has an impossible length) and something
 *     follows — damage that must not be skipped silently.
 */
import { closeSync, fstatSync, openSync, readSync, writeSync } from "node:fs";
import { crc32 } from "node:zlib";

export const MAGIC = Buffer.from("MEWGATE\x01", "latin1");
export const FRAME_HEADER = 8;
/** No transaction is bigger than this; a larger length is damage, not data. */
export const MAX_FRAME = 256 * 1024 * 1024;

export interface Frame<R> {
  /** Byte offset of the frame in its file. */
  offset: number;
  /** Bytes the frame takes, header included. */
  size: number;
  seq: number;
  records: R[];
}

export type ReadEnd = { kind: "end" } | { kind: "torn" | "corrupt"; offset: number; reason: string };

/** What a snapshot's frames aim at: big enough to cost few writes, far below `MAX_FRAME`. */
export const SNAPSHOT_FRAME = 4 * 1024 * 1024;

export function encodeFrame(seq: number, records: unknown[]): Buffer {
  return framePayload(JSON.stringify({ n: seq, r: records }));
}

/**
 * Encodes records that are state, not one transaction — a snapshot, or what a migration
 * keeps — as frames of about `SNAPSHOT_FRAME` bytes each, measured, not guessed from a
 * record count: however large the records, no frame is over the limit unless one record
 * alone is. Each record is serialized once; a frame is built only when it is written.
 * `always`: yield an (empty) frame even when there are no records, to carry `seq`.
 */
export function* snapshotFrames(seq: number, records: Iterable<unknown>, always = false): Generator<Buffer> {
  let parts: Buffer[] = [];
  let bytes = 0;
  let any = false;
  for (const r of records) {
    // Encoded once, as it will be written: the frame is the parts copied into place, not joined and encoded again.
    const json = Buffer.from(JSON.stringify(r), "utf8");
    if (parts.length && bytes + json.length + 1 > SNAPSHOT_FRAME) {
      yield frameOfBytes(seq, parts);
      any = true;
      parts = [];
      bytes = 0;
    }
    parts.push(json);
    bytes += json.length + 1;
  }
  if (parts.length || (always && !any)) yield frameOfBytes(seq, parts);
}

/** A frame of `seq` whose records are `parts`, each one's JSON already made: the bytes `encodeFrame` makes of them. */
export function frameOf(seq: number, parts: readonly string[]): Buffer {
  return framePayload(`{"n":${JSON.stringify(seq)},"r":[${parts.join(",")}]}`);
}

const COMMA = 0x2c;
const CLOSE = Buffer.from("]}", "latin1");

/** `frameOf` for parts already encoded (UTF-8): the same bytes, made with one copy of each. */
function frameOfBytes(seq: number, parts: readonly Buffer[]): Buffer {
  const open = Buffer.from(`{"n":${JSON.stringify(seq)},"r":[`, "latin1");
  let length = open.length + CLOSE.length + Math.max(0, parts.length - 1);
  for (const p of parts) length += p.length;
  const frame = frameBuffer(length);
  let at = FRAME_HEADER + open.copy(frame, FRAME_HEADER);
  parts.forEach((p, i) => {
    if (i) frame[at++] = COMMA;
    at += p.copy(frame, at);
  });
  CLOSE.copy(frame, at);
  return sealed(frame);
}

/** A frame of `json`: its payload encoded straight into the frame's buffer, not into one and then copied. */
function framePayload(json: string): Buffer {
  const frame = frameBuffer(Buffer.byteLength(json, "utf8"));
  frame.write(json, FRAME_HEADER, "utf8");
  return sealed(frame);
}

/** A buffer for a frame of `length` payload bytes; a transaction over the limit is refused. */
function frameBuffer(length: number): Buffer {
  if (length > MAX_FRAME) throw new RangeError(`a transaction of ${length} bytes is over the ${MAX_FRAME}-byte limit`);
  return Buffer.allocUnsafe(FRAME_HEADER + length);
}

/** `frame` with its header written: the payload's length and CRC32. */
function sealed(frame: Buffer): Buffer {
  frame.writeUInt32LE(frame.length - FRAME_HEADER, 0);
  frame.writeUInt32LE(crc32(frame.subarray(FRAME_HEADER)), 4);
  return frame;
}

/**
 * Reads the frames of `file` from after its header, calling `each` for every good one.
 * Returns how the read ended. A file that does not start with the header is corrupt at 0
 * (an empty or header-less file is torn at 0: a crash right after creating it).
 */
export function readFrames<R>(file: string, each: (f: Frame<R>) => void, opts: { upTo?: number } = {}): ReadEnd {
  const fd = openSync(file, "r");
  try {
    const size = Math.min(fstatSync(fd).size, opts.upTo ?? Infinity);
    const reader = new Reader(fd, size);
    const magic = reader.at(0, MAGIC.length);
    if (!magic) {
      const got = reader.at(0, size) ?? Buffer.alloc(0);
      return MAGIC.subarray(0, got.length).equals(got)
        ? { kind: "torn", offset: 0, reason: "no complete header" }
        : { kind: "corrupt", offset: 0, reason: "not a mewgate store file" };
    }
    if (!magic.equals(MAGIC)) return { kind: "corrupt", offset: 0, reason: "not a mewgate store file (bad header)" };
    let offset = MAGIC.length;
    while (offset < size) {
      const head = reader.at(offset, FRAME_HEADER);
      if (!head) return { kind: "torn", offset, reason: "incomplete frame header" };
      const length = head.readUInt32LE(0);
      const sum = head.readUInt32LE(4);
      const end = offset + FRAME_HEADER + length;
      if (length === 0 || length > MAX_FRAME) {
        if (zeroFrom(fd, offset, size)) return { kind: "torn", offset, reason: "zero-filled tail" };
        return { kind: "corrupt", offset, reason: `impossible frame length ${length}` };
      }
      const payload = end <= size ? reader.at(offset + FRAME_HEADER, length) : undefined;
      if (!payload) return { kind: "torn", offset, reason: `frame of ${length} bytes runs past the end of the file` };
      if (crc32(payload) !== sum) {
        const reason = "checksum mismatch";
        return end === size ? { kind: "torn", offset, reason } : { kind: "corrupt", offset, reason };
      }
      let parsed: { n: number; r: R[] };
      try {
        parsed = JSON.parse(payload.toString("utf8")) as { n: number; r: R[] };
      } catch {
        return { kind: "corrupt", offset, reason: "frame is not JSON although its checksum matches" };
      }
      each({ offset, size: end - offset, seq: parsed.n, records: parsed.r });
      offset = end;
    }
    return { kind: "end" };
  } finally {
    closeSync(fd);
  }
}

/** Reads a file through a window of at least 1 MiB, so small frames cost no syscall each. */
class Reader {
  private buf = Buffer.alloc(1024 * 1024);
  private start = 0;
  private end = 0;

  constructor(
    private readonly fd: number,
    private readonly size: number,
  ) {}

  /** `length` bytes at `offset`, or undefined if the file ends first. Valid until the next call. */
  at(offset: number, length: number): Buffer | undefined {
    if (offset + length > this.size) return undefined;
    if (offset < this.start || offset + length > this.end) {
      if (this.buf.length < length) this.buf = Buffer.alloc(length);
      const want = Math.min(this.buf.length, this.size - offset);
      let got = 0;
      while (got < want) {
        const n = readSync(this.fd, this.buf, got, want - got, offset + got);
        if (n <= 0) break;
        got += n;
      }
      this.start = offset;
      this.end = offset + got;
      if (got < length) return undefined;
    }
    return this.buf.subarray(offset - this.start, offset - this.start + length);
  }
}

/** Whether every byte of the file from `offset` to `size` is zero. */
function zeroFrom(fd: number, offset: number, size: number): boolean {
  const chunk = Buffer.alloc(64 * 1024);
  for (let at = offset; at < size; ) {
    const n = readSync(fd, chunk, 0, Math.min(chunk.length, size - at), at);
    if (n <= 0) break;
    for (let i = 0; i < n; i++) if (chunk[i] !== 0) return false;
    at += n;
  }
  return true;
}

/** Writes all of `bytes` at the file's position, or at `position`; a short write is followed by the rest. */
export function writeAllSync(fd: number, bytes: Buffer, position?: number): void {
  for (let done = 0; done < bytes.length; ) {
    const n = writeSync(fd, bytes, done, bytes.length - done, position === undefined ? null : position + done);
    if (n <= 0) throw new Error("write made no progress");
    done += n;
  }
}
