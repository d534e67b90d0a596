/**
 * Retention per participant: when the archive is over its size limit, the records of the
 * participant that holds the most bytes go first, oldest first, until the archive is down
 * to three quarters of the limit (so that it is not rewritten at every compaction). A
 * hostile agent that floods the trail (propose, withdraw, again) only ever pushes out its
 * own records; a person's decisions go only once they are themselves the largest share.
 *
 * Where records were dropped, a `checkpoint` record stands in their place (chain.ts):
 * how many, whose, and the digest of the last one, so the chain is still checkable across
 * the cut. Each segment that loses records is rewritten beside itself and renamed into
 * place: a crash leaves it as it was or as it should be, never half of one.
 */
import { closeSync, fdatasyncSync, fsyncSync, openSync, renameSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { type ChainLink, type CheckpointRecord, digestOf, nextPrev } from "./chain.js";
import { encodeFrame, MAGIC, readFrames, writeAllSync } from "./frame.js";

type Rec = { type: string; chain?: ChainLink; to?: string };

interface Item {
  seg: number;
  frame: number;
  at: number;
  bytes: number;
}

export function dropByOwner(segments: string[], maxBytes: number, owner: (r: unknown) => string | undefined): void {
  const frames: Array<Array<{ seq: number; records: Rec[] }>> = segments.map((file) => {
    const out: Array<{ seq: number; records: Rec[] }> = [];
    readFrames<Rec>(file, (f) => out.push({ seq: f.seq, records: f.records }));
    return out;
  });
  const queues = new Map<string, { items: Item[]; next: number; bytes: number }>();
  let total = 0;
  frames.forEach((segFrames, seg) => {
    segFrames.forEach((f, frame) => {
      f.records.forEach((r, at) => {
        const bytes = Buffer.byteLength(JSON.stringify(r)) + 1;
        total += bytes;
        const who = r.type === "checkpoint" ? undefined : owner(r);
        if (who === undefined) return;
        let q = queues.get(who);
        if (!q) {
          q = { items: [], next: 0, bytes: 0 };
          queues.set(who, q);
        }
        q.items.push({ seg, frame, at, bytes });
        q.bytes += bytes;
      });
    });
  });
  const target = Math.floor(maxBytes * 0.75);
  const dropped = new Set<string>();
  const whose = new Map<string, string>();
  while (total > target) {
    let top: [string, { items: Item[]; next: number; bytes: number }] | undefined;
    for (const e of queues) if (e[1].next < e[1].items.length && (!top || e[1].bytes > top[1].bytes)) top = e;
    if (!top) break;
    const item = top[1].items[top[1].next++]!;
    top[1].bytes -= item.bytes;
    total -= item.bytes;
    const key = `${item.seg}:${item.frame}:${item.at}`;
    dropped.add(key);
    whose.set(key, top[0]);
  }
  if (dropped.size === 0) return;
  frames.forEach((segFrames, seg) => {
    let touched = false;
    const rewritten = segFrames.map((f, frame) => {
      const kept: Rec[] = [];
      let cut: { first: Rec; last: Rec; count: number; who: Set<string> } | undefined;
      const close = () => {
        if (!cut) return;
        kept.push(checkpoint(cut));
        cut = undefined;
      };
      f.records.forEach((r, at) => {
        const key = `${seg}:${frame}:${at}`;
        if (!dropped.has(key)) {
          close();
          kept.push(r);
          return;
        }
        touched = true;
        cut ??= { first: r, last: r, count: 0, who: new Set() };
        cut.last = r;
        cut.count++;
        cut.who.add(whose.get(key)!);
      });
      close();
      return { seq: f.seq, records: kept };
    });
    if (!touched) return;
    const file = segments[seg]!;
    const tmp = `${file}.retain`;
    try {
      writeFramesFile(tmp, rewritten);
      renameSync(tmp, file);
      const dir = openSync(dirname(file), "r");
      try {
        fsyncSync(dir);
      } finally {
        closeSync(dir);
      }
    } catch (err) {
      rmSync(tmp, { force: true });
      throw err;
    }
  });
}

/** The record that stands where `cut.count` records were dropped, linked where the first of them was. */
function checkpoint(cut: { first: Rec; last: Rec; count: number; who: Set<string> }): Rec {
  const to = nextPrev(cut.last);
  const c: CheckpointRecord = {
    type: "checkpoint",
    ts: new Date().toISOString(),
    dropped: cut.count,
    participants: [...cut.who].sort(),
    to: to ?? "",
  };
  if (cut.first.chain && to !== undefined) c.chain = { p: cut.first.chain.p, d: digestOf(cut.first.chain.p, c) };
  return c;
}

/** Writes `frames` (each with its own sequence number) as a fresh segment file, durably; the caller renames it into place. */
function writeFramesFile(file: string, frames: Array<{ seq: number; records: unknown[] }>): void {
  const fd = openSync(file, "w", 0o600);
  try {
    writeAllSync(fd, MAGIC);
    for (const f of frames) writeAllSync(fd, encodeFrame(f.seq, f.records));
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
