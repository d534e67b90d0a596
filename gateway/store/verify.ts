/**
 * `mewgate audit verify`: walks the whole history (the archive's segments, then the
 * journal) and checks every frame's checksum and every history record's link (chain.ts).
 * It reports the first break: which record (its number in the history, 1 for the oldest
 * kept), which file and byte, and what differs.
 *
 * A torn tail — a frame cut short or zero-filled at the end of a file, what a crash in the
 * middle of a write leaves — is no break: the gateway cuts it off when it starts, and it
 * was never acknowledged to anyone. A complete frame whose checksum fails is: it was
 * written whole, then changed. Its records are still read when they parse, so that the
 * break names the record whose digest no longer holds.
 *
 * Reads each file whole: segments are at most 8 MiB and the journal is compacted past
 * its threshold; this runs beside a gateway (read only), not in one.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { type ChainLink, digestOf, nextPrev } from "./chain.js";
import { FRAME_HEADER, MAGIC, MAX_FRAME } from "./frame.js";

export interface HistoryBreak {
  /** The record's number in the history, 1 for the oldest kept (0: before any record). */
  index: number;
  file: string;
  offset: number;
  reason: string;
  expected?: string;
  found?: string;
  /** A few fields of the record, to find it by (`mewgate audit`). */
  record?: Record<string, unknown>;
}

export interface VerifyReport {
  ok: boolean;
  /** History records read. */
  records: number;
  /** Records from before digests were kept (a first-wave audit): before the chain starts, not checked. */
  unchained: number;
  /** Cuts retention made, and the records dropped at them. */
  checkpoints: number;
  dropped: number;
  /** What the oldest chained record links to ("" when it is the first ever written). */
  start?: string;
  /** The head: what the next record will link to. */
  head?: string;
  torn?: { file: string; offset: number; reason: string };
  break?: HistoryBreak;
  /** A head pinned before (`audit head`): whether the chain passes through it, and after which record. */
  pinned?: { head: string; found: boolean; after?: number };
}

interface ScannedFrame {
  offset: number;
  seq?: number;
  records?: Array<{ type: string; chain?: ChainLink; to?: string; [k: string]: unknown }>;
  /** The checksum failed on a complete frame. */
  altered?: boolean;
}

type ScanEnd = { kind: "end" } | { kind: "torn" | "corrupt"; offset: number; reason: string };

/** Frames of `bytes`, checksum failures included (with their records when they still parse). */
function scan(bytes: Buffer, each: (f: ScannedFrame) => boolean): ScanEnd {
  if (bytes.length < MAGIC.length)
    return MAGIC.subarray(0, bytes.length).equals(bytes)
      ? { kind: "torn", offset: 0, reason: "no complete header" }
      : { kind: "corrupt", offset: 0, reason: "not a mewgate store file" };
  if (!bytes.subarray(0, MAGIC.length).equals(MAGIC))
    return { kind: "corrupt", offset: 0, reason: "not a mewgate store file (bad header)" };
  let offset = MAGIC.length;
  while (offset < bytes.length) {
    if (offset + FRAME_HEADER > bytes.length) return { kind: "torn", offset, reason: "incomplete frame header" };
    const length = bytes.readUInt32LE(offset);
    const sum = bytes.readUInt32LE(offset + 4);
    if (length === 0 || length > MAX_FRAME) {
      if (bytes.subarray(offset).every((b) => b === 0)) return { kind: "torn", offset, reason: "zero-filled tail" };
      return { kind: "corrupt", offset, reason: `impossible frame length ${length}` };
    }
    const end = offset + FRAME_HEADER + length;
    if (end > bytes.length) return { kind: "torn", offset, reason: `frame of ${length} bytes runs past the end of the file` };
    const payload = bytes.subarray(offset + FRAME_HEADER, end);
    const altered = crc32(payload) !== sum;
    // A write cut short inside a frame whose header made it leaves zeros where the rest was to be.
    if (altered && end === bytes.length && payload.at(-1) === 0)
      return { kind: "torn", offset, reason: "frame ends in zeros (a write cut short)" };
    let parsed: { n?: number; r?: ScannedFrame["records"] } | undefined;
    try {
      parsed = JSON.parse(payload.toString("utf8")) as typeof parsed;
    } catch {
      parsed = undefined;
    }
    if (!altered && !parsed) return { kind: "corrupt", offset, reason: "frame is not JSON although its checksum matches" };
    const go = each({
      offset,
      ...(parsed?.n !== undefined ? { seq: parsed.n } : {}),
      ...(Array.isArray(parsed?.r) ? { records: parsed.r } : {}),
      ...(altered ? { altered } : {}),
    });
    if (!go) return { kind: "end" };
    offset = end;
  }
  return { kind: "end" };
}

const SEGMENT = /^\d{8}\.log$/;

/** Checks the history in state directory `dir`; `isHistory` says which records are history. */
export function verifyHistory(dir: string, isHistory: (r: { type: string }) => boolean, opts: { pinned?: string } = {}): VerifyReport {
  const report: VerifyReport = { ok: true, records: 0, unchained: 0, checkpoints: 0, dropped: 0 };
  // A pinned head the chain never passes through: records were cut off the end (or the chain rewritten).
  const pin = opts.pinned;
  if (pin !== undefined) report.pinned = { head: pin, found: false };
  const passes = (digest: string | undefined, after: number): void => {
    if (pin !== undefined && digest === pin && !report.pinned!.found) report.pinned = { head: pin, found: true, after };
  };
  const historyDir = join(dir, "history");
  const files = existsSync(historyDir)
    ? readdirSync(historyDir)
        .filter((f) => SEGMENT.test(f))
        .sort()
        .map((f) => ({ file: join(historyDir, f), journal: false }))
    : [];
  if (existsSync(join(dir, "journal"))) files.push({ file: join(dir, "journal"), journal: true });
  let archivedSeq = 0;
  let prev: string | undefined;
  const brk = (b: HistoryBreak): false => {
    report.ok = false;
    report.break = b;
    return false;
  };
  for (const { file, journal } of files) {
    const end = scan(readFileSync(file), (f) => {
      if (!journal && f.seq !== undefined) archivedSeq = Math.max(archivedSeq, f.seq);
      // History the journal still holds although the archive has it (a crash between the two).
      if (journal && f.seq !== undefined && f.seq <= archivedSeq && !f.altered) return true;
      const records = (f.records ?? []).filter((r) => r && typeof r === "object" && isHistory(r));
      for (const r of records) {
        report.records++;
        const index = report.records;
        const at = { index, file, offset: f.offset, record: brief(r) };
        if (r.type === "checkpoint") {
          report.checkpoints++;
          report.dropped += typeof r["dropped"] === "number" ? r["dropped"] : 0;
        }
        if (!r.chain) {
          if (prev === undefined) {
            report.unchained++;
            continue;
          }
          return brk({ ...at, reason: "the record carries no digest, although the records before it do (it was slipped in)" });
        }
        if (prev === undefined) {
          report.start = r.chain.p;
          passes(r.chain.p, index - 1);
        } else if (r.chain.p !== prev)
          return brk({
            ...at,
            reason: "the record does not link to the one before it (a record before it was removed, inserted or reordered)",
            expected: prev,
            found: r.chain.p,
          });
        const d = digestOf(r.chain.p, r);
        if (d !== r.chain.d)
          return brk({ ...at, reason: "the record's content does not match its digest (it was altered)", expected: r.chain.d, found: d });
        prev = nextPrev(r);
        passes(prev, index);
      }
      if (f.altered)
        return brk({
          index: report.records + 1,
          file,
          offset: f.offset,
          reason: records.length
            ? "the frame's checksum fails although its history records hold: a record of the live state or the frame's sequence number was altered"
            : "the frame's checksum fails (it was altered after it was written)",
        });
      return true;
    });
    if (!report.ok) return report;
    if (end.kind === "torn") report.torn = { file, offset: end.offset, reason: end.reason };
    else if (end.kind === "corrupt")
      return { ...report, ok: false, break: { index: report.records + 1, file, offset: end.offset, reason: end.reason } };
  }
  if (prev !== undefined) report.head = prev;
  if (pin !== undefined && !report.pinned!.found && !(pin === "" && prev === undefined)) {
    report.ok = false;
    report.break = {
      index: report.records + 1,
      file: files.at(-1)?.file ?? dir,
      offset: -1,
      reason: `the pinned head ${pin.slice(0, 16)}… is not in the chain: records after it were cut off the end, or the chain was rewritten`,
      expected: pin,
      found: prev ?? "",
    };
  }
  return report;
}

function brief(r: Record<string, unknown>): Record<string, unknown> {
  const e = (r["entry"] ?? r) as Record<string, unknown>;
  const out: Record<string, unknown> = { type: r["type"] };
  for (const k of ["ts", "event", "proposal", "proposer", "by", "tool", "dropped"]) if (e[k] !== undefined) out[k] = e[k];
  return out;
}
