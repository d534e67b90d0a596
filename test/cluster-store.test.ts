/**
 * A space's state on the bus (gateway/cluster/bus-store.ts) against a real nats-server:
 * what one owner wrote, the next reads back, through compaction; a fenced writer changes
 * nothing; a read after a crash between compaction's steps is whole.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pino from "pino";
import { Bus, STATE_STREAM, subjects } from "../gateway/cluster/bus.js";
import { type Fence, loadBusState } from "../gateway/cluster/bus-store.js";
import { LeaseClock } from "../gateway/cluster/fence.js";
import type { StoreHooks } from "../gateway/store/index.js";
import { NatsServer, natsServerPath } from "../cli/nats.js";

type R = { type: "set"; k: string; v: number } | { type: "audit"; n: number };
const log = pino({ level: "silent" });

const bin = natsServerPath();
if (!bin) throw new Error("these tests need nats-server (apt-get install nats-server)");
let nats: NatsServer;
let bus: Bus;
beforeAll(async () => {
  nats = new NatsServer(bin);
  await nats.start();
  bus = await Bus.open({ url: nats.url, node: "t", log, replicas: 1 });
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
});

function owner() {
  const state = new Map<string, number>();
  const hooks: StoreHooks<R> = {
    apply: (r) => void (r.type === "set" && state.set(r.k, r.v)),
    snapshot: () => [...state].map(([k, v]): R => ({ type: "set", k, v })),
    isHistory: (r) => r.type === "audit",
  };
  return { state, hooks };
}

async function open(
  space: string,
  epoch: string,
  opts: {
    compactMessages?: number;
    onFenced?: (why: string) => void;
    history?: { maxBytes: number; maxAgeMs: number };
    fence?: Fence;
  } = {},
) {
  const o = owner();
  const opener = await loadBusState<R>(bus, space, {
    log,
    epoch,
    onFenced: opts.onFenced ?? (() => {}),
    compactMessages: opts.compactMessages,
    history: opts.history,
    fence: opts.fence,
  });
  const { store } = opener(o.hooks);
  return { ...o, store };
}

describe("state on the bus", () => {
  it("refuses a stale owner's write once a new owner has taken over, though the new owner changed nothing yet", async () => {
    // A paused owner resumes before the next one wrote any state: its take-over record alone moves the sequence.
    const stale: string[] = [];
    const a = await open("fenced-takeover", "e1", { fence: { current: () => true, term: "a.1" }, onFenced: (why) => stale.push(why) });
    await a.store.commit([{ type: "set", k: "x", v: 1 }]);
    const b = await open("fenced-takeover", "e2", { fence: { current: () => true, term: "b.1" } });
    expect(Object.fromEntries(b.state)).toEqual({ x: 1 });
    await expect(a.store.commit([{ type: "set", k: "x", v: 2 }])).rejects.toThrow(/another node owns this space/);
    expect(stale).toHaveLength(1);
    // And nothing the stale owner tried is read by the owner after.
    const c = await open("fenced-takeover", "e3", { fence: { current: () => true, term: "c.1" } });
    expect(Object.fromEntries(c.state)).toEqual({ x: 1 });
    await b.store.close();
    await c.store.close();
  });

  it("writes nothing while the lease is not provably current, and reports a change stored as the lease ran out", async () => {
    let current = true;
    const fenced: string[] = [];
    const fence: Fence = { current: () => current, term: "a.1" };
    const a = await open("fenced-clock", "e1", { fence, onFenced: (why) => fenced.push(why) });
    await a.store.commit([{ type: "set", k: "x", v: 1 }]);
    current = false;
    await expect(a.store.commit([{ type: "set", k: "x", v: 2 }])).rejects.toThrow(/no longer provably current/);
    expect(fenced).toEqual(["lease not current before a write"]);
    // Every later write is refused too: the owner is stepping down.
    await expect(a.store.commit([{ type: "set", k: "x", v: 3 }])).rejects.toThrow(/no longer provably current/);
    const b = await open("fenced-clock", "e2", { fence: { current: () => true, term: "b.1" } });
    expect(Object.fromEntries(b.state)).toEqual({ x: 1 });
    // Stored, but the lease ran out on the way: the write is reported failed, and the next owner has it.
    // Asked at the take-over, before the publish, and once it is stored: current twice, then no more.
    let asked = 0;
    const c = await open("fenced-late", "e1", { fence: { current: () => ++asked <= 2, term: "c.1" }, onFenced: (why) => fenced.push(why) });
    const write = c.store.commit([{ type: "set", k: "y", v: 1 }]);
    await expect(write).rejects.toThrow(/lost the space while the change was being written/);
    const d = await open("fenced-late", "e2", { fence: { current: () => true, term: "d.1" } });
    expect(Object.fromEntries(d.state)).toEqual({ y: 1 });
    expect(fenced.at(-1)).toBe("lease not current when a write was stored");
    await b.store.close();
    await d.store.close();
  });

  it("does not take a space over on a lease that is not current: no take-over record is written", async () => {
    await expect(open("fenced-claim", "e1", { fence: { current: () => false, term: "a.1" } })).rejects.toThrow(/not current/);
    await expect(bus.jsm.streams.getMessage(STATE_STREAM, { last_by_subj: subjects.state("fenced-claim") })).rejects.toThrow(
      /no message found/i,
    );
  });

  it("counts a lease from when its renewal was sent, never from when the answer came", () => {
    const clock = new LeaseClock(1500);
    expect(clock.marginMs).toBe(300);
    expect(clock.current(0)).toBe(false);
    // Sent at 1000, answered much later: current until 1000 + 1500 - 300, whenever it was answered.
    clock.confirmed(1000);
    expect(clock.current(2199)).toBe(true);
    expect(clock.current(2200)).toBe(false);
    // An older renewal answered late never shortens, nor lengthens, what a newer one proved.
    clock.confirmed(500);
    expect(clock.current(2199)).toBe(true);
    expect(clock.left(2000)).toBe(200);
    clock.revoke();
    expect(clock.current(1001)).toBe(false);
    expect(new LeaseClock(200).marginMs).toBe(150);
  });

  it("reads back what was committed, through compactions, with the whole audit trail", async () => {
    const a = await open("compact", "e1", { compactMessages: 8 });
    for (let i = 0; i < 40; i++) {
      const txn: R[] = [
        { type: "set", k: `k${i % 5}`, v: i },
        { type: "audit", n: i },
      ];
      await a.store.commit(txn);
      a.hooks.apply(txn[0]!);
    }
    expect(a.store.stats.compactions).toBeGreaterThan(2);
    const info = await bus.jsm.streams.info(STATE_STREAM, { subjects_filter: subjects.state("compact") } as never);
    const left = (info.state as { subjects?: Record<string, number> }).subjects?.[subjects.state("compact")] ?? 0;
    expect(left, "messages left on the subject after compaction").toBeGreaterThan(0);
    expect(left, "messages left on the subject after compaction").toBeLessThanOrEqual(9);
    await a.store.close();
    const b = await open("compact", "e2");
    expect(Object.fromEntries(b.state)).toEqual({ k0: 35, k1: 36, k2: 37, k3: 38, k4: 39 });
    // The whole audit trail, compactions or not, in order, on the next owner.
    const all = Array.from({ length: 40 }, (_, n) => ({ type: "audit", n }));
    expect(b.store.history(() => true)).toEqual(all);
    expect(b.store.history((r) => r.type === "audit" && r.n % 10 === 0)).toEqual([0, 10, 20, 30].map((n) => ({ type: "audit", n })));
    expect(b.store.history(() => true, { limit: 3 })).toEqual(all.slice(0, 3));
    await b.store.close();
  });

  it("keeps the audit trail readable on the owner that compacted it", async () => {
    const a = await open("own-history", "e1", { compactMessages: 4 });
    for (let i = 0; i < 30; i++) await a.store.commit([{ type: "audit", n: i }]);
    expect(a.store.stats.compactions).toBeGreaterThan(3);
    expect(a.store.history(() => true)).toEqual(Array.from({ length: 30 }, (_, n) => ({ type: "audit", n })));
    await a.store.close();
  });

  it("skips a history batch it cannot read, and still takes the space over", async () => {
    const a = await open("junk-history", "e1", { compactMessages: 4 });
    for (let i = 0; i < 12; i++) await a.store.commit([{ type: "audit", n: i }]);
    await a.store.close();
    const subject = `${subjects.state("junk-history")}.history`;
    await bus.js.publish(subject, new TextEncoder().encode("{not json"));
    await bus.js.publish(subject, new TextEncoder().encode('{"t":"not batches"}'));
    const b = await open("junk-history", "e2");
    expect(b.store.history(() => true)).toEqual(Array.from({ length: 12 }, (_, n) => ({ type: "audit", n })));
    await b.store.close();
  });

  it("drops the oldest history past its retention, on the bus as in memory, and never the newest", async () => {
    // Each compaction moves about 5 records (~130 bytes) to the history subject; keep about two.
    const history = { maxBytes: 300, maxAgeMs: 86_400_000 };
    const a = await open("retained", "e1", { compactMessages: 4, history });
    for (let i = 0; i < 60; i++) await a.store.commit([{ type: "audit", n: i }]);
    const kept = a.store.history(() => true) as Array<{ n: number }>;
    expect(kept.length).toBeLessThan(30);
    expect(kept.at(-1)).toEqual({ type: "audit", n: 59 });
    // What is kept has no gap: the window is the newest records.
    expect(kept.map((r) => r.n)).toEqual(Array.from({ length: kept.length }, (_, i) => 60 - kept.length + i));
    const info = await bus.jsm.streams.info(STATE_STREAM, { subjects_filter: `${subjects.state("retained")}.history` } as never);
    const left = (info.state as { subjects?: Record<string, number> }).subjects?.[`${subjects.state("retained")}.history`] ?? 0;
    expect(left, "history messages left on the bus").toBeGreaterThan(0);
    expect(left, "history messages left on the bus").toBeLessThanOrEqual(3);
    await a.store.close();
    // The next owner serves the same window.
    const b = await open("retained", "e2", { history });
    expect(b.store.history(() => true)).toEqual(kept);
    await b.store.close();
  });

  it("refuses the writes of an owner whose place was taken, and keeps the new owner's", async () => {
    let fenced = "";
    const old = await open("fence", "old", { onFenced: (why) => (fenced = why) });
    await old.store.commit([{ type: "set", k: "x", v: 1 }]);
    const next = await open("fence", "new");
    expect(next.state.get("x")).toBe(1);
    await next.store.commit([{ type: "set", k: "x", v: 2 }]);
    await expect(old.store.commit([{ type: "set", k: "x", v: 99 }])).rejects.toThrow(/another node owns this space/);
    expect(fenced).toMatch(/fenced/);
    // And the refused owner stays refused.
    await expect(old.store.commit([{ type: "set", k: "y", v: 1 }])).rejects.toThrow(/another node owns this space/);
    const third = await open("fence", "third");
    expect(Object.fromEntries(third.state)).toEqual({ x: 2 });
  });
});
