/**
 * A space's state on the bus (gateway/cluster/bus-store.ts) against a real nats-server:
 * what one owner wrote, the next reads back, through compaction; a fenced writer changes
 * nothing; a read after a crash between compaction's steps is whole.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pino from "pino";
import { Bus, STATE_STREAM, subjects } from "../gateway/cluster/bus.js";
import { loadBusState } from "../gateway/cluster/bus-store.js";
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

async function open(space: string, epoch: string, opts: { compactMessages?: number; onFenced?: (why: string) => void } = {}) {
  const o = owner();
  const opener = await loadBusState<R>(bus, space, { log, epoch, onFenced: opts.onFenced ?? (() => {}), ...(opts.compactMessages ? { compactMessages: opts.compactMessages } : {}) });
  const { store } = opener(o.hooks);
  return { ...o, store };
}

describe("state on the bus", () => {
  it("reads back what was committed, through compactions, with the history since the last one", async () => {
    const a = await open("compact", "e1", { compactMessages: 8 });
    for (let i = 0; i < 40; i++) {
      const txn: R[] = [{ type: "set", k: `k${i % 5}`, v: i }, { type: "audit", n: i }];
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
    const history = b.store.history(() => true);
    expect(history.length).toBeGreaterThan(0);
    expect(history.at(-1)).toEqual({ type: "audit", n: 39 });
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
