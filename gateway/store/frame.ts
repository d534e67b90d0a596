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
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
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

export function encodeFrame(seq: number, records: unknown[]): Buffer {
  const payload = Buffer.from(JSON.stringify({ n: seq, r: records }), "utf8");
  if (payload.length > MAX_FRAME) throw new RangeError(`a transaction of ${payload.length} bytes is over the ${MAX_FRAME}-byte limit`);
  const head = Buffer.allocUnsafe(FRAME_HEADER);
  head.writeUInt32LE(payload.length, 0);
  head.writeUInt32LE(crc32(payload), 4);
  return Buffer.concat([head, payload]);
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
    const magic = Buffer.alloc(MAGIC.length);
    const got = readSync(fd, magic, 0, MAGIC.length, 0);
    if (got < MAGIC.length) return size === 0 || MAGIC.subarray(0, got).equals(magic.subarray(0, got)) ? { kind: "torn", offset: 0, reason: "no complete header" } : { kind: "corrupt", offset: 0, reason: "not a mewgate store file" };
    if (!magic.equals(MAGIC)) return { kind: "corrupt", offset: 0, reason: "not a mewgate store file (bad header)" };
    const head = Buffer.alloc(FRAME_HEADER);
    let buf = Buffer.alloc(64 * 1024);
    let offset = MAGIC.length;
    while (offset < size) {
      if (offset + FRAME_HEADER > size) return { kind: "torn", offset, reason: "incomplete frame header" };
      readSync(fd, head, 0, FRAME_HEADER, offset);
      const length = head.readUInt32LE(0);
      const sum = head.readUInt32LE(4);
      const end = offset + FRAME_HEADER + length;
      if (length === 0 || length > MAX_FRAME) {
        if (zeroFrom(fd, offset, size)) return { kind: "torn", offset, reason: "zero-filled tail" };
        return { kind: "corrupt", offset, reason: `impossible frame length ${length}` };
      }
      if (end > size) return { kind: "torn", offset, reason: `frame of ${length} bytes runs past the end of the file` };
      if (buf.length < length) buf = Buffer.alloc(Math.max(length, buf.length * 2));
      readSync(fd, buf, 0, length, offset + FRAME_HEADER);
      const payload = buf.subarray(0, length);
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
