/**
 * The state store on real files: crashes (a real process killed with SIGKILL mid-burst,
 * also mid-compaction), torn and corrupt frames, compaction and retention, migration
 * from the first wave's files. Write failures on a full disk are tested through the
 * gateway (durability.test.ts).
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { encodeFrame, FRAME_HEADER, MAGIC, SNAPSHOT_FRAME, snapshotFrames } from "../gateway/store/frame.js";
import { peekRecord } from "../gateway/store/peek.js";
import { openStore, readHistory, repairStore, StoreError } from "../gateway/store/index.js";
import { seeded, waitFor } from "./helpers.js";

type Rec = { type: string; lane?: number; n?: number; part?: number; of?: number; pad?: string; k?: string; v?: number };

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "mewgate-store-"));
  dirs.push(d);
  return d;
}

/** A trivial owner: a key-value state, with `audit` records as history. */
function kv() {
  const state = new Map<string, number>();
  const applied: Rec[] = [];
  return {
    state,
    applied,
    hooks: {
      apply: (r: Rec) => {
        applied.push(r);
        if (r.type === "set") state.set(r.k!, r.v!);
      },
      snapshot: (): Rec[] => [...state].map(([k, v]) => ({ type: "set", k, v })),
      isHistory: (r: Rec) => r.type === "audit",
    },
  };
}

const COMMITTER = join(import.meta.dirname, "..", "dist", "test", "fixtures", "store", "committer.js");
const FILLER = join(import.meta.dirname, "..", "dist", "test", "fixtures", "store", "archive-filler.js");

describe("kill -9 during a burst of group commits", () => {
  it("keeps every acknowledged transaction, each whole, in order, through compactions too", { timeout: 90_000 }, async () => {
    const rand = seeded(7);
    const RUNS = 16;
    let acknowledged = 0;
    for (let run = 0; run < RUNS; run++) {
      const dir = tempDir();
      // Every other run compacts often, so some kills land inside a compaction.
      const compact = run % 2 ? 64 * 1024 : 16 * 1024 * 1024;
      const child = spawn(process.execPath, [COMMITTER, dir, "16", "5000", String(compact)], { stdio: ["ignore", "pipe", "pipe"] });
      const acks = new Map<number, number>();
      let out = "";
      let stderr = "";
      child.stderr.on("data", (d) => (stderr += d));
      const firstAck = new Promise<void>((resolve) => {
        child.stdout.on("data", (d) => {
          out += d;
          const lines = out.split("\n");
          out = lines.pop()!;
          for (const line of lines) {
            const [, lane, n] = line.split(" ");
            acks.set(Number(lane), Math.max(acks.get(Number(lane)) ?? -1, Number(n)));
          }
          resolve();
        });
      });
      const exited = new Promise((r) => child.once("exit", r));
      await Promise.race([firstAck, exited]);
      expect(stderr, `run ${run}: the committer started`).toBe("");
      await new Promise((r) => setTimeout(r, 10 + Math.floor(rand() * 250)));
      child.kill("SIGKILL");
      await exited;

      // Reopen: the state is "the last transaction of each lane", each record whole.
      const byLane = new Map<number, Rec[]>();
      const { store, report } = openStore<Rec>(
        { dir },
        { apply: (r) => byLane.set(r.lane!, [...(byLane.get(r.lane!) ?? []), r]), snapshot: () => [], isHistory: () => false },
      );
      await store.close();
      for (const [lane, n] of acks) {
        const recs = byLane.get(lane) ?? [];
        const last = Math.max(...recs.map((r) => r.n!));
        expect(
          last,
          `run ${run}: lane ${lane} has its acknowledged transaction ${n} (torn: ${JSON.stringify(report.torn)})`,
        ).toBeGreaterThanOrEqual(n);
        // Whole: every transaction seen has all its parts; in order: n never goes back.
        const parts = new Map<number, number>();
        let previous = -1;
        for (const r of recs) {
          parts.set(r.n!, (parts.get(r.n!) ?? 0) + 1);
          expect(r.n!, `run ${run}: lane ${lane} in order`).toBeGreaterThanOrEqual(previous);
          previous = r.n!;
        }
        for (const [n2, count] of parts)
          expect(count, `run ${run}: lane ${lane} transaction ${n2} whole`).toBe(recs.find((r) => r.n === n2)!.of);
      }
      acknowledged += [...acks.values()].reduce((a, b) => a + b + 1, 0);
    }
    expect(acknowledged).toBeGreaterThan(RUNS * 16);
  });
});

describe("reading back", () => {
  it("cuts a torn tail off and reports where, and the next commit is read back whole", async () => {
    const dir = tempDir();
    const a = kv();
    const { store } = openStore<Rec>({ dir }, a.hooks);
    await store.commit([{ type: "set", k: "a", v: 1 }]);
    await store.commit([{ type: "set", k: "b", v: 2 }]);
    await store.close();
    const file = join(dir, "journal");
    const size = statSync(file).size;
    truncateSync(file, size - 5); // a crash in the middle of the second frame

    const b = kv();
    const { store: s2, report } = openStore<Rec>({ dir }, b.hooks);
    expect(report.torn).toMatchObject({ file, reason: expect.stringContaining("past the end") });
    expect(report.torn!.offset).toBeGreaterThan(MAGIC.length);
    expect([...b.state]).toEqual([["a", 1]]);
    await s2.commit([{ type: "set", k: "c", v: 3 }]);
    await s2.close();
    const c = kv();
    const { store: s3 } = openStore<Rec>({ dir }, c.hooks);
    await s3.close();
    expect([...c.state]).toEqual([
      ["a", 1],
      ["c", 3],
    ]);
  });

  it("refuses to start on a corrupt frame with data after it, naming the byte; repair keeps what came before", async () => {
    const dir = tempDir();
    const { store } = openStore<Rec>({ dir }, kv().hooks);
    for (let i = 0; i < 5; i++) await store.commit([{ type: "set", k: `k${i}`, v: i }]);
    await store.close();
    const file = join(dir, "journal");
    const bytes = readFileSync(file);
    // Flip a byte inside the third frame's payload.
    const frames: number[] = [];
    for (let at = MAGIC.length; at < bytes.length; at += 8 + bytes.readUInt32LE(at)) frames.push(at);
    const at = frames[2]! + 12;
    bytes.writeUInt8(bytes.readUInt8(at) ^ 0xff, at);
    writeFileSync(file, bytes);

    let caught: unknown;
    try {
      openStore<Rec>({ dir }, kv().hooks);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(StoreError);
    expect(caught).toMatchObject({ code: "corrupt", offset: frames[2] });
    expect((caught as Error).message).toContain(`byte ${frames[2]}`);
    expect((caught as Error).message).toContain("mewgate state repair");

    const repaired = repairStore(dir);
    expect(repaired).toMatchObject({ kept: 2, offset: frames[2] });
    expect(existsSync(repaired.movedTo!)).toBe(true);
    const after = kv();
    const { store: s2 } = openStore<Rec>({ dir }, after.hooks);
    await s2.close();
    expect([...after.state.keys()]).toEqual(["k0", "k1"]);
  });

  it("refuses a file that is not a store journal rather than overwriting it", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "journal"), "hello, I am somebody's notes\n");
    expect(() => openStore<Rec>({ dir }, kv().hooks)).toThrow(/corrupt at byte 0/);
  });
});

describe("compaction and history", () => {
  it("writes a snapshot's frames byte for byte as a transaction of the same records, split where they would pass the frame size", () => {
    const odd = [
      { type: "set", k: "\u0000\u001b[31m\u202e\ud800 tail \udfff", v: 1 },
      JSON.parse('{"type":"set","__proto__":{"polluted":true},"k":"p"}'),
      { type: "set", k: "😀 \u2028\u2029 é", v: -0 },
    ];
    const big = Array.from({ length: 5 }, (_, i) => ({ type: "set", k: `big${i}`, pad: "ü".repeat(SNAPSHOT_FRAME / 4) }));
    const records = [...odd, ...big];
    const frames = [...snapshotFrames(42, records)];
    expect(frames.length).toBeGreaterThan(1);
    let next = 0;
    for (const frame of frames) {
      expect(frame.length).toBeLessThanOrEqual(FRAME_HEADER + SNAPSHOT_FRAME);
      const { n, r } = JSON.parse(frame.subarray(FRAME_HEADER).toString("utf8")) as { n: number; r: unknown[] };
      expect(n).toBe(42);
      expect(frame.equals(encodeFrame(42, records.slice(next, next + r.length)))).toBe(true);
      next += r.length;
    }
    expect(next).toBe(records.length);
    // No records: one empty frame when asked for (it carries the sequence number), else none.
    expect([...snapshotFrames(7, [], true)].map((f) => f.equals(encodeFrame(7, [])))).toEqual([true]);
    expect([...snapshotFrames(7, [])]).toEqual([]);
  });

  it("archives what it kept as it wrote it: the same bytes as a compaction that reads the journal back, odd records and all", async () => {
    // Hostile history first: control characters, lone surrogates, an own "__proto__", deep nesting, a long string.
    let deep: unknown = "bottom";
    for (let i = 0; i < 200; i++) deep = { d: deep };
    const odd: Rec[] = [
      { type: "audit", pad: "\u0000\u0007\u001b[31m\u202e\ud800 tail \udfff" },
      JSON.parse('{"type":"audit","__proto__":{"polluted":true},"n":1}') as Rec,
      { type: "audit", pad: "x".repeat(300_000) },
      { type: "audit", n: -0, pad: JSON.stringify(deep) },
      { type: "audit", k: "😀 \u2028\u2029", v: 1e21 },
    ];
    const writes = (i: number): Rec[] => [
      { type: "set", k: `k${i % 7}`, v: i },
      i < odd.length ? odd[i]! : { type: "audit", n: i, pad: "a".repeat(8000) },
    ];
    const segmentsOf = (dir: string) => {
      const h = join(dir, "history");
      return readdirSync(h)
        .sort()
        .map((f) => readFileSync(join(h, f)));
    };
    const N = 400;
    // One store keeps each batch's history as written; the other is reopened halfway, so its
    // journal holds history it did not write this time, and its compaction reads it back.
    const kept = tempDir();
    const readBack = tempDir();
    for (const [dir, reopenAt] of [
      [kept, -1],
      [readBack, N / 2],
    ] as const) {
      let owner = kv();
      let { store } = openStore<Rec>({ dir, compactBytes: 1024 * 1024 * 1024, fsync: false }, owner.hooks);
      for (let i = 0; i < N; i++) {
        if (i === reopenAt) {
          await store.close();
          owner = kv();
          ({ store } = openStore<Rec>({ dir, compactBytes: 1024 * 1024 * 1024, fsync: false }, owner.hooks));
        }
        const txn = writes(i);
        await store.commit(txn);
        owner.hooks.apply(txn[0]!);
      }
      // Past 2× the snapshot, with the threshold out of reach: compact by lowering it once.
      const journal = (store as unknown as { journal: { opts: { compactBytes: number }; written?: unknown } }).journal;
      // The first keeps the history it wrote; the reopened one cannot know what came before.
      expect(journal.written !== undefined, dir).toBe(reopenAt === -1);
      journal.opts.compactBytes = 1;
      await store.commit([{ type: "set", k: "last", v: 0 }]);
      // The snapshot is written while commits go on (journal.ts): the files are swapped once it is durable.
      await waitFor(() => store.stats.compactions > 0, 10_000, "the compaction");
      expect(store.stats.compactions, dir).toBe(1);
      const history = store.history((r) => r.type === "audit");
      expect(history).toHaveLength(N);
      expect(history.slice(0, odd.length).map(({ chain, ...r }: Rec & { chain?: unknown }) => r)).toEqual(
        odd.map((r) => JSON.parse(JSON.stringify(r))),
      );
      await store.close();
    }
    const a = segmentsOf(kept);
    const b = segmentsOf(readBack);
    expect(a.length).toBeGreaterThan(0);
    // Over 3 MiB of history: frames were built a MiB at a time as it was written, not only at the end.
    expect(Buffer.concat(a).length).toBeGreaterThan(3 * 1024 * 1024);
    expect(a.map((x) => x.length)).toEqual(b.map((x) => x.length));
    expect(Buffer.concat(a).equals(Buffer.concat(b))).toBe(true);
  });

  it("keeps what it kept through a compaction that fails, and archives every record once when the next one succeeds", async () => {
    const dir = tempDir();
    const owner = kv();
    const { store } = openStore<Rec>({ dir, compactBytes: 1024 * 1024 * 1024, fsync: false }, owner.hooks);
    const journal = (store as unknown as { journal: { opts: { compactBytes: number } } }).journal;
    const write = async (from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const set: Rec = { type: "set", k: `k${i % 5}`, v: i };
        await store.commit([set, { type: "audit", n: i, pad: "b".repeat(6000) }]);
        owner.hooks.apply(set);
      }
    };
    await write(0, 300);
    // The archive's directory cannot be made (a file stands in its place): the compaction fails, the journal is used on.
    writeFileSync(join(dir, "history"), "not a directory");
    journal.opts.compactBytes = 1;
    await write(300, 301);
    await new Promise((r) => setTimeout(r, 50));
    expect(store.stats.compactions).toBe(0);
    rmSync(join(dir, "history"));
    // Twice the journal's size again before it tries once more (journal.ts), then it succeeds.
    await write(301, 1000);
    await waitFor(() => store.stats.compactions > 0, 10_000, "the compaction");
    const history = store.history((r) => r.type === "audit");
    await store.close();
    expect(history.map((r) => r.n)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
  });

  it("leaves nothing of an archive append the disk cut short: history written after it stays readable, every record once", {
    timeout: 60_000,
  }, async () => {
    const dir = tempDir();
    // A file-size limit (the soft one, which the test may lift) stands in for a disk that fills
    // part way through an append and is then given room again, in the same process.
    const child = spawn("sh", ["-c", `ulimit -S -f 1024; trap '' XFSZ; exec "${process.execPath}" "${FILLER}" "${dir}"`], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let out = "";
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const line = (pattern: RegExp) =>
      new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "${pattern}" from the filler within 30 s: ${out} ${stderr}`)), 30_000);
        const look = () => {
          const m = pattern.exec(out);
          if (m) {
            clearTimeout(timer);
            child.stdout.off("data", onData);
            resolve(m[0]);
          }
        };
        const onData = (d: Buffer) => {
          out += d;
          look();
        };
        child.stdout.on("data", onData);
        look();
      });
    try {
      expect(await line(/failed\n|never failed.*\n/)).toBe("failed\n");
      // The newest segment ends in a torn frame now, or was cut back; either way the disk has room again.
      execFileSync("prlimit", ["--pid", String(child.pid), "--fsize=unlimited"]);
      child.stdin.write("go\n");
      const done = await line(/done (\d+) (\d+)\n/);
      const [, written, compactions] = /done (\d+) (\d+)/.exec(done)!.map(Number);
      // Compactions after the limit was lifted appended to the segment the failed one tore.
      expect(compactions).toBeGreaterThanOrEqual(2);
      const { store } = openStore<Rec>({ dir, fsync: false }, kv().hooks);
      const history = store.history((r) => r.type === "audit");
      await store.close();
      expect(history.map((r) => r.n)).toEqual(Array.from({ length: written! }, (_, i) => i));
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("keeps the journal bounded by the live state, moves history to the archive, and restarts reading only what is live", {
    timeout: 60_000,
  }, async () => {
    const dir = tempDir();
    const owner = kv();
    const { store } = openStore<Rec>({ dir, compactBytes: 256 * 1024, fsync: false }, owner.hooks);
    // 40,000 transactions over 50 keys, each with an audit record; each applied once
    // durable, as the gateway's ledger does.
    const N = 40_000;
    for (let i = 0; i < N; i += 500) {
      await Promise.all(
        Array.from({ length: 500 }, (_, j) => {
          const set: Rec = { type: "set", k: `k${(i + j) % 50}`, v: i + j };
          return store.commit([set, { type: "audit", n: i + j, pad: "a".repeat(40) }]).then(() => void owner.state.set(set.k!, set.v!));
        }),
      );
    }
    expect(owner.state.size).toBe(50);
    expect(store.stats.compactions).toBeGreaterThan(3);
    // Group commit: far fewer batches than commits.
    expect(store.stats.batches).toBeLessThan(store.stats.commits / 10);
    const history = store.history((r) => r.type === "audit");
    await store.close();
    expect(history).toHaveLength(N);
    expect(history.map((r) => r.n)).toEqual(Array.from({ length: N }, (_, i) => i));

    const again = kv();
    const { store: s2, report } = openStore<Rec>({ dir }, again.hooks);
    await s2.close();
    expect(report.bytes).toBeLessThan(2 * 256 * 1024 + 64 * 1024);
    expect(again.applied.length).toBeLessThan(N / 4);
    expect(again.state).toEqual(owner.state);
    console.log(`restart after ${N} transactions: read ${report.records} records, ${report.bytes} bytes, in ${report.ms} ms`);
    // And read without opening (mewgate audit while a gateway runs).
    expect(readHistory<Rec>(dir, (r) => r.type === "audit", { limit: 10 }).map((r) => r.n)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it("goes on committing while a compaction writes its snapshot: what is written meanwhile follows it into the new file", {
    timeout: 60_000,
  }, async () => {
    const dir = tempDir();
    const owner = kv();
    const compacted: Array<{ tail: number }> = [];
    const log = {
      info: (o: object, msg: string) => void (msg === "state journal compacted" && compacted.push(o as { tail: number })),
      warn: () => undefined,
      error: (o: object, msg: string) => {
        throw new Error(`${msg}: ${JSON.stringify(o)}`);
      },
    };
    // A live state of about 4 MiB, synced: its snapshot takes a while to write, and the committers do not wait for it.
    const { store } = openStore<Rec>({ dir, compactBytes: 1024 * 1024, log }, owner.hooks);
    const keys = Array.from({ length: 1000 }, (_, i) => `k${i}-${"s".repeat(4000)}`);
    let n = 0;
    const lane = async () => {
      // Bounded in count and time: until two compactions, one of them with batches written while its snapshot was.
      const deadline = Date.now() + 40_000;
      while (n < 40_000 && Date.now() < deadline && !(store.stats.compactions >= 2 && compacted.some((c) => c.tail > 0))) {
        const i = n++;
        const set: Rec = { type: "set", k: keys[i % keys.length]!, v: i };
        await store.commit([set, { type: "audit", n: i }]);
        owner.state.set(set.k!, set.v!);
      }
    };
    await Promise.all(Array.from({ length: 16 }, lane));
    const history = store.history((r) => r.type === "audit", { limit: 100_000 });
    await store.close();
    expect(store.stats.compactions).toBeGreaterThanOrEqual(2);
    expect(compacted.some((c) => c.tail > 0)).toBe(true);
    expect(readdirSync(dir)).not.toContain("journal.compact");
    // Every acknowledged commit is there after a reopen: the state, and the history once each, in order.
    expect(history.map((r) => r.n)).toEqual(Array.from({ length: n }, (_, i) => i));
    const again = kv();
    const { store: s2 } = openStore<Rec>({ dir }, again.hooks);
    await s2.close();
    expect(again.state).toEqual(owner.state);
    expect(readHistory<Rec>(dir, (r) => r.type === "audit", { limit: 100_000 }).map((r) => r.n)).toEqual(
      Array.from({ length: n }, (_, i) => i),
    );
  });

  it("drops a compaction whose snapshot the disk cannot hold, and loses nothing acknowledged", { timeout: 60_000 }, async () => {
    const dir = tempDir();
    // A 4.5 MiB disk: the journal reaches 3 MiB, then its 2 MiB snapshot does not fit beside it.
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=4608k", "tmpfs", dir], { stdio: "ignore" });
    } catch (err) {
      throw new Error(`this test fills a small disk: it mounts a tmpfs, which needs root (${(err as Error).message})`);
    }
    try {
      const owner = kv();
      const failed: string[] = [];
      const log = {
        info: () => undefined,
        warn: () => undefined,
        error: (o: object, msg: string) => void failed.push(`${msg}: ${(o as { err?: string }).err}`),
      };
      const { store } = openStore<Rec>({ dir, compactBytes: 3 * 1024 * 1024, log }, owner.hooks);
      const keys = Array.from({ length: 100 }, (_, i) => `k${i}-${"s".repeat(20_000)}`);
      let refused = 0;
      // Bounded: until the compaction failed and the journal itself is refused a write, or 2,000 commits.
      for (let i = 0; i < 2000 && !(failed.some((f) => f.startsWith("state journal compaction failed")) && refused > 0); i++) {
        const set: Rec = { type: "set", k: keys[i % keys.length]!, v: i };
        try {
          await store.commit([set]);
          owner.state.set(set.k!, set.v!);
        } catch (err) {
          expect((err as StoreError).errno).toBe("ENOSPC");
          refused++;
        }
      }
      await store.close();
      expect(
        failed.find((f) => f.startsWith("state journal compaction failed")),
        failed.join("\n"),
      ).toMatch(/ENOSPC/);
      expect(store.stats.compactions).toBe(0);
      expect(readdirSync(dir)).not.toContain("journal.compact");
      // Everything acknowledged is there, and nothing refused.
      const again = kv();
      const { store: s2 } = openStore<Rec>({ dir }, again.hooks);
      await s2.close();
      expect(again.state).toEqual(owner.state);
    } finally {
      execFileSync("umount", ["-l", dir], { stdio: "ignore" });
    }
  });

  it("drops the oldest history segments over the size limit", { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const { store } = openStore<Rec>(
      { dir, compactBytes: 64 * 1024, fsync: false, history: { maxBytes: 2 * 1024 * 1024, maxAgeMs: 86_400_000 } },
      kv().hooks,
    );
    for (let i = 0; i < 6000; i += 200) {
      await Promise.all(Array.from({ length: 200 }, (_, j) => store.commit([{ type: "audit", n: i + j, pad: "h".repeat(1000) }])));
    }
    const kept = store.history((r) => r.type === "audit");
    await store.close();
    const segments = readdirSync(join(dir, "history"));
    const total = segments.reduce((n, f) => n + statSync(join(dir, "history", f)).size, 0);
    expect(total).toBeLessThanOrEqual(2 * 1024 * 1024 + 1024 * 1024);
    expect(kept.length).toBeLessThan(6000);
    // What is kept is the newest, without gaps.
    expect(kept.at(-1)?.n).toBe(5999);
    expect(kept.map((r) => r.n)).toEqual(Array.from({ length: kept.length }, (_, i) => 6000 - kept.length + i));
  });
});

describe("migration from the first wave's files", () => {
  it("streams the jsonl files in, reports a torn line with its place, and moves the old files aside", async () => {
    const dir = tempDir();
    const lines = Array.from({ length: 20_000 }, (_, i) => JSON.stringify({ type: "set", k: `k${i % 7}`, v: i }));
    writeFileSync(join(dir, "state.jsonl"), `${lines.slice(0, 10).join("\n")}\n{"type":"set","k":"torn\n${lines.slice(10).join("\n")}\n`);
    writeFileSync(join(dir, "audit.jsonl"), `${JSON.stringify({ n: 1 })}\n${JSON.stringify({ n: 2 })}\n`);
    const warnings: Array<{ o: object; msg: string }> = [];
    const log = { info: () => {}, warn: (o: object, msg: string) => warnings.push({ o, msg }), error: () => {} };
    const owner = kv();
    const { store, report } = openStore<Rec>({ dir, log }, owner.hooks, [
      { file: "state.jsonl" },
      { file: "audit.jsonl", wrap: (e) => ({ type: "audit", ...(e as object) }) },
    ]);
    expect(report.migrated).toEqual(["state.jsonl", "audit.jsonl"]);
    expect(warnings.find((w) => w.msg.includes("does not parse"))?.o).toMatchObject({ line: 11 });
    expect(owner.state.get("k6")).toBe(19_999 - ((19_999 - 6) % 7));
    expect(store.history((r) => r.type === "audit").map((r) => r.n)).toEqual([1, 2]);
    await store.close();
    expect(existsSync(join(dir, "state.jsonl"))).toBe(false);
    expect(existsSync(join(dir, "legacy", "state.jsonl"))).toBe(true);

    // Opening again reads the journal, not the old files.
    const again = kv();
    const { store: s2, report: r2 } = openStore<Rec>({ dir }, again.hooks, [{ file: "state.jsonl" }]);
    await s2.close();
    expect(r2.migrated).toBeUndefined();
    expect(again.state).toEqual(owner.state);
  });
});

describe("looking at a line without building it (peek.ts)", () => {
  /** What peekRecord should see of a parsed value: scalars of the object and of its objects. */
  const shallow = (v: unknown): Record<string, unknown> | undefined => {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
    const scalar = (x: unknown) => x === null || typeof x !== "object";
    const fits = (x: unknown) => typeof x !== "string" || JSON.stringify(x).length <= 4096;
    // Object.fromEntries: "__proto__" is a member like any other, as in JSON.parse.
    return Object.fromEntries(
      Object.entries(v).flatMap(([k, x]): Array<[string, unknown]> => {
        if (scalar(x) && fits(x)) return [[k, x]];
        if (typeof x === "object" && x !== null && !Array.isArray(x))
          return [[k, Object.fromEntries(Object.entries(x).filter(([, y]) => scalar(y) && fits(y)))]];
        return [];
      }),
    );
  };
  const agrees = (text: string) => {
    let parsed: { ok: boolean; value?: unknown } = { ok: true };
    try {
      parsed.value = JSON.parse(text);
    } catch {
      parsed = { ok: false };
    }
    const peeked = peekRecord(Buffer.from(text, "utf8"));
    expect(peeked.kind !== "invalid", `valid alike: ${JSON.stringify(text.slice(0, 200))}`).toBe(parsed.ok);
    const plain = (o: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(o).map(([k, v]) => [k, v && typeof v === "object" ? { ...v } : v]));
    if (parsed.ok) expect(peeked.kind === "object" ? plain(peeked.view) : undefined).toEqual(shallow(parsed.value));
  };

  it("accepts exactly what JSON.parse accepts and sees the same members, however the text is cut or damaged", () => {
    const value = fc.oneof(
      fc.jsonValue(),
      fc.dictionary(fc.string(), fc.jsonValue()),
      fc.record({
        type: fc.constantFrom("proposed", "state"),
        proposal: fc.record({ id: fc.string(), state: fc.string(), params: fc.jsonValue() }),
      }),
    );
    fc.assert(
      fc.property(
        value,
        fc.nat(),
        fc.integer({ min: 0, max: 255 }),
        fc.constantFrom("whole", "cut", "byte", "space"),
        (v, at, byte, how) => {
          const text = JSON.stringify(v) ?? "null";
          const i = at % (text.length + 1);
          if (how === "whole") agrees(text);
          else if (how === "cut") agrees(text.slice(0, i));
          else if (how === "space") agrees(` \t${text}\r\n `);
          else agrees(text.slice(0, i) + String.fromCharCode(byte) + text.slice(i + 1));
        },
      ),
      { numRuns: 3000, seed: 23 },
    );
    for (const t of [
      "",
      " ",
      "{",
      "}",
      '{"a":1}x',
      '{"a":01}',
      '{"a":1.}',
      '{"a":-}',
      '{"a":1e}',
      '{"a":"\\u12"}',
      '{"a":"\\x"}',
      '{"a":"\t"}',
      "[1,]",
      '{"a":1,}',
      '{"__proto__":{"x":1},"b":2}',
      "nul",
      "truex",
      '"\\ud800"',
      "1e5",
      '{"a":1.5e-3,"b":-0.25E+2}',
      '{"a":[{"b":"c"}],"d":{"e":[1],"f":"g"}}',
    ])
      agrees(t);
    // Nesting deeper than any stack: still read, still checked.
    agrees(`{"a":${"[".repeat(200_000)}${"]".repeat(200_000)}}`);
    agrees(`{"a":${"[".repeat(200_000)}${"]".repeat(199_999)}}`);
  });
});
