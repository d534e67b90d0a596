/**
 * The member link's wire and its delivery rules, without a bus: what a hostile or broken
 * peer on the bus could send, loss, repeats and reordering.
 */
import { describe, expect, it } from "vitest";
import { decodeWire, encodeWire, LinkEnd, type Op, Outbox, unbatch, type Wire } from "../gateway/cluster/link.js";

const enc = new TextEncoder();
const dec = new TextDecoder();
const text = (w: Wire) => dec.decode(w.body);

describe("the link's wire", () => {
  it("drops what is not a record, and reads the rest of a message around it", () => {
    expect(decodeWire(enc.encode("no newline"))).toBeUndefined();
    expect(decodeWire(enc.encode("Q c1 1\nbody"))).toBeUndefined();
    expect(decodeWire(enc.encode("F c1 NaN\nbody"))).toBeUndefined();
    expect(decodeWire(enc.encode("F c1 1e400\nbody"))).toBeUndefined();
    expect(decodeWire(enc.encode(`F ${"c".repeat(300)} 1\nbody`))).toBeUndefined();
    // A length that runs past the message ends the reading there; nothing is invented.
    const good = encodeWire("F", "c1", 1, enc.encode("hello"));
    const msg = new Uint8Array(4 + good.length + 4 + 3);
    const view = new DataView(msg.buffer);
    view.setUint32(0, good.length);
    msg.set(good, 4);
    view.setUint32(4 + good.length, 1_000_000);
    expect([...unbatch(msg)].map(text)).toEqual(["hello"]);
    expect([...unbatch(new Uint8Array([0, 0]))]).toEqual([]);
  });

  it("sends the same bytes to several members once, and each member gets them with its own number", () => {
    const sent: Uint8Array[] = [];
    const box = new Outbox((_s, d) => sent.push(d), 256 * 1024);
    const body = enc.encode("x".repeat(1000));
    for (let i = 1; i <= 50; i++) box.send("node.n2", "F", `n2.b.${i}`, 7, body);
    box.send("node.n2", "A", "n2.b.1", 3);
    box.flush();
    expect(sent).toHaveLength(1);
    expect(sent[0]!.length).toBeLessThan(1000 + 50 * 20 + 100);
    const frames = [...unbatch(sent[0]!)];
    expect(frames).toHaveLength(51);
    expect(frames.slice(0, 50).map((w) => [w.op, w.conn, w.seq, w.body.length])).toEqual(
      Array.from({ length: 50 }, (_, i) => ["F", `n2.b.${i + 1}`, 7, 1000]),
    );
    expect(frames[50]).toMatchObject({ op: "A", conn: "n2.b.1", seq: 3 });
    // A message never grows past its bound: the queue goes out in pieces.
    const small = new Outbox((_s, d) => sent.push(d), 4096);
    sent.length = 0;
    for (let i = 0; i < 20; i++) small.send("s", "F", "c", i + 1, enc.encode(`${i}`.repeat(500)));
    small.flush();
    expect(sent.length).toBeGreaterThan(2);
    for (const m of sent) expect(m.length).toBeLessThanOrEqual(4096 + 600);
    expect(sent.flatMap((m) => [...unbatch(m)]).map((w) => w.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });
});

describe("a link's delivery", () => {
  /** Two ends wired through a lossy medium the test controls. */
  function pair() {
    const wire: Wire[] = [];
    const got: string[] = [];
    let overflowed = false;
    const toB: Wire[] = [];
    const a = new LinkEnd(
      "c",
      (op, conn, seq, body) => wire.push({ op, conn, seq, body: body ?? new Uint8Array() }),
      () => {},
      10_000,
      () => (overflowed = true),
    );
    const b = new LinkEnd(
      "c",
      (op, conn, seq, body) => toB.push({ op, conn, seq, body: body ?? new Uint8Array() }),
      (_op: Op, body) => got.push(dec.decode(body)),
      10_000,
      () => {},
    );
    return { a, b, wire, got, toB, overflowed: () => overflowed };
  }

  it("takes each frame once and in order, whatever is lost, repeated or arrives after a gap", async () => {
    const { a, b, wire, got } = pair();
    for (let i = 1; i <= 5; i++) a.send("F", enc.encode(`m${i}`));
    const [m1, m2, m3, m4, m5] = wire.splice(0);
    b.receive(m1!);
    b.receive(m1!); // repeated
    b.receive(m3!); // after a gap (m2 lost)
    b.receive(m4!);
    expect(got).toEqual(["m1"]);
    a.resend(true);
    for (const w of wire.splice(0)) b.receive(w);
    b.receive(m5!); // a late original after the resend
    expect(got).toEqual(["m1", "m2", "m3", "m4", "m5"]);
    void m2;
  });

  it("forgets what was acknowledged, sends again only what was not, and gives up past its bound", async () => {
    const { a, b, wire, toB } = pair();
    a.send("F", enc.encode("one"));
    a.send("F", enc.encode("two"));
    b.receive(wire.shift()!);
    await new Promise((r) => setImmediate(r));
    const ack = toB.find((w) => w.op === "A")!;
    expect(ack.seq).toBe(1);
    a.receive(ack);
    wire.length = 0;
    a.resend(true);
    expect(wire.map((w) => dec.decode(w.body))).toEqual(["two"]);
    const big = pair();
    for (let i = 0; i < 20 && !big.overflowed(); i++) big.a.send("F", new Uint8Array(1000));
    expect(big.overflowed()).toBe(true);
  });

  it("backs off when acknowledgements are late rather than sending everything again every second", () => {
    // Late acknowledgements on a busy machine are not loss: resending all a link holds each
    // second multiplied the load that made them late, and the cluster's fan-out collapsed.
    const { a, wire } = pair();
    const t0 = performance.now();
    for (let i = 1; i <= 3; i++) a.send("F", enc.encode(`m${i}`));
    wire.length = 0;
    a.resend(false, t0 + 500);
    expect(wire).toHaveLength(0);
    a.resend(false, t0 + 1100);
    expect(wire).toHaveLength(3);
    wire.length = 0;
    // Not again a second later: the wait doubled.
    a.resend(false, t0 + 1100 + 1100);
    expect(wire).toHaveLength(0);
    a.resend(false, t0 + 1100 + 2100);
    expect(wire).toHaveLength(3);
    wire.length = 0;
    a.resend(false, t0 + 1100 + 2100 + 2100);
    expect(wire).toHaveLength(0);
    // A reconnect still sends everything at once.
    a.resend(true, t0 + 1100 + 2100 + 2100);
    expect(wire).toHaveLength(3);
  });
});
