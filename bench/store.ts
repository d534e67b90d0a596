/**
 * Durable transitions per second: the state store's group commit against the first
 * wave's way (each record written and fsync'ed on its own, as `AppendLog` did), on the
 * same disk, in the same run. Every transition is durable before it is acknowledged in
 * both; the difference is how many share one fdatasync.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { openStore } from "../gateway/index.js";
import { type Row, row } from "./report.js";

/** About the size of a proposal's records (the proposal and its audit entry). */
const RECORD = {
  type: "state",
  id: "7f3c2a9e-0000-4000-8000-000000000000",
  ts: "2026-11-24T12:00:00.000Z",
  patch: { state: "approved", decidedBy: "alice", scope: "once", reason: "looks right" },
  pad: "x".repeat(300),
};

export interface StoreFigures {
  grouped: number;
  perRecord: number;
  committers: number;
  batches: number;
  commits: number;
}

export async function benchStore(dir: string, opts: { seconds?: number; committers?: number } = {}): Promise<StoreFigures> {
  const seconds = opts.seconds ?? 3;
  const committers = opts.committers ?? 64;
  const base = mkdtempSync(join(dir, "store-"));
  try {
    // The first wave: one write and one fsync per record, in order.
    const file = join(base, "appendlog.jsonl");
    const fd = openSync(file, "a", 0o600);
    let perRecordN = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000) {
      writeSync(fd, `${JSON.stringify(RECORD)}\n`);
      fsyncSync(fd);
      perRecordN++;
    }
    const perRecord = perRecordN / ((performance.now() - t0) / 1000);
    closeSync(fd);

    // The store: `committers` participants committing at once, each its next transaction
    // as soon as the last is durable.
    const { store } = openStore<typeof RECORD>(
      { dir: join(base, "state") },
      { apply: () => {}, snapshot: () => [], isHistory: () => false },
    );
    let n = 0;
    const t1 = performance.now();
    await Promise.all(
      Array.from({ length: committers }, async () => {
        while (performance.now() - t1 < seconds * 1000) {
          await store.commit([{ ...RECORD }]);
          n++;
        }
      }),
    );
    const grouped = n / ((performance.now() - t1) / 1000);
    const { batches, commits } = store.stats;
    await store.close();
    return { grouped, perRecord, committers, batches, commits };
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

export async function storeRows(dir: string, progress: (s: string) => void): Promise<Row[]> {
  progress("store: 3 s of fsync per record, then 3 s of group commit from 64 committers");
  const f = await benchStore(dir);
  return [
    row({
      scenario: "store",
      label: `durable transitions per second, group commit (${f.committers} committers)`,
      unit: "",
      gateway: Math.round(f.grouped),
      naive: Math.round(f.perRecord),
      goal: { text: ">= 5,000/s", met: f.grouped >= 5000 },
      details: [
        `"naive" here is the first wave's way on the same disk: each record written and fsync'ed on its own`,
        `${f.commits.toLocaleString("en-US")} transactions in ${f.batches.toLocaleString("en-US")} batches: ${(f.commits / Math.max(1, f.batches)).toFixed(1)} per fdatasync`,
      ],
    }),
  ];
}
