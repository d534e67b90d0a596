/**
 * The chain's digest of a history record is over its canonical JSON (gateway/store/chain.ts),
 * made fast (a key-sorted copy, one JSON.stringify) or handed over by the record's maker
 * (`CANONICAL`, calls/direct-audit.ts); the record is written as it is, its members in
 * their order. Hostile first: keys that sort before and after "chain", integer-like keys,
 * an own "__proto__", values JSON cannot keep; then arbitrary JSON.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { directCallPlan } from "../gateway/calls/direct-audit.js";
import { CANONICAL, Chain, canonical, digestOf } from "../gateway/store/chain.js";

const history = () => true;

/** What the journal writes of a sealed record, read back. */
function sealedAndRead(record: object, head = "") {
  const chain = new Chain(head);
  const sealed = chain.seal([record], history).records[0] as Record<string, unknown>;
  const text = JSON.stringify(sealed);
  return { text, read: JSON.parse(text) as Record<string, unknown> & { chain: { p: string; d: string } }, head: chain.head };
}

describe("a sealed record", () => {
  it("verifies from what is read back, and is written with its members in their order", () => {
    const cases: Array<Record<string, unknown>> = [
      { type: "audit", entry: { event: "called", arguments: { path: "a", content: "b", n: [1, { d: null, c: "x" }] } } },
      { a: 1, ca: 2, chaim: 3, chain0: 4, type: "audit" },
      { type: "audit", chain: { p: "forged", d: "forged" } },
      { "": 0, "\u0000": "\u2028", é: "\ud83d\ude00", type: "audit" },
      JSON.parse('{"__proto__": {"x": 1}, "type": "audit"}'),
      { type: "audit", gone: undefined, fn: () => 1, list: [undefined, () => 1, Number.NaN, -0] },
      Object.fromEntries(Array.from({ length: 3000 }, (_, i) => [`k${(i * 7919) % 3000}`, i])),
      { "7": "index", type: "audit", entry: { "10": 1, "9": 2, b: { "0": [] } } },
      {},
    ];
    for (const record of cases) {
      const { read, head } = sealedAndRead(record, "prev");
      expect(read.chain.p).toBe("prev");
      expect(digestOf("prev", read)).toBe(read.chain.d);
      expect(head).toBe(read.chain.d);
      const { chain: _c, ...rest } = read;
      const { chain: _g, ...given } = JSON.parse(JSON.stringify(record));
      expect(Object.keys(rest)).toEqual(Object.keys(given));
      expect(rest).toEqual(given);
    }
  });

  it("verifies for arbitrary JSON records", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.oneof(fc.string(), fc.constantFrom("__proto__", "7", "10", "chain", "a", "type")), fc.jsonValue()),
        fc.string(),
        (record, prev) => {
          const { read } = sealedAndRead(record, prev);
          expect(digestOf(prev, read)).toBe(read.chain.d);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("canonical sorts keys as before: by UTF-16 code units, whatever their number", () => {
    const keys = ["b", "a", "B", "ä", "a1", "a10", "a2", "\ud83d\ude00", "\uffff", ""];
    const o = Object.fromEntries(keys.map((k) => [k, 1]));
    expect(Object.keys(JSON.parse(canonical(o)))).toEqual([...keys].sort());
    const many = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`z${50 - i}`, i]));
    expect(Object.keys(JSON.parse(canonical(many)))).toEqual(Object.keys(many).sort());
    // Integer-like keys and an own __proto__ take the member-by-member way, to the same text.
    expect(canonical(JSON.parse('{"b":1,"10":2,"9":3,"__proto__":4}'))).toBe('{"10":2,"9":3,"__proto__":4,"b":1}');
  });
});

describe("a direct call's record", () => {
  it("hands the chain its canonical JSON, keeps its arguments as they were sent, and verifies", () => {
    fc.assert(
      fc.property(
        fc.option(
          fc.oneof(fc.dictionary(fc.oneof(fc.string(), fc.constantFrom("__proto__", "7", "b", "a")), fc.jsonValue()), fc.jsonValue()),
          {
            nil: undefined,
          },
        ),
        fc.option(fc.string(), { nil: undefined }),
        (args, name) => {
          const params: Record<string, unknown> = {};
          if (args !== undefined) params["arguments"] = args;
          if (name !== undefined) params["name"] = name;
          const { records } = directCallPlan({ id: "r1", caller: "bot", target: "fs", method: "tools/call", params, reason: undefined }, 0);
          const record = records[0]!;
          const made = (record as unknown as Record<symbol, unknown>)[CANONICAL];
          if (made !== undefined) expect(made).toBe(canonical(record));
          const { read } = sealedAndRead(record, "p");
          expect(digestOf("p", read)).toBe(read.chain.d);
          const entry = read["entry"] as Record<string, unknown>;
          expect(entry["event"]).toBe("called");
          if (args !== undefined && canonical(args).length <= 4096) expect(JSON.stringify(entry["arguments"])).toBe(JSON.stringify(args));
        },
      ),
      { numRuns: 300 },
    );
  });
});
