/**
 * The chain writes a history record as the canonical JSON its digest covers, with the link
 * slipped in among its members (gateway/store/chain.ts): one serialisation for the digest
 * and the frame. Hostile first: keys that sort before and after "chain", odd and huge key
 * sets, values JSON cannot keep; then arbitrary JSON records.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { directCallPlan } from "../gateway/calls/direct-audit.js";
import { Chain, canonical, digestOf, IN_ORDER } from "../gateway/store/chain.js";

const history = () => true;

function sealOne(record: Record<string, unknown>, head = "") {
  const chain = new Chain(head);
  const { records, json } = chain.seal([record], history);
  return { sealed: records[0] as Record<string, unknown> & { chain: { p: string; d: string } }, json: json[0]!, head: chain.head };
}

describe("a sealed record's JSON", () => {
  it("is the sealed record, in canonical order, and its digest verifies from what is read back", () => {
    const cases: Array<Record<string, unknown>> = [
      { type: "audit", entry: { event: "called", arguments: { b: 1, a: [1, { d: null, c: "x" }] } } },
      { a: 1, ca: 2, chaim: 3, chain0: 4, type: "audit" },
      { type: "audit", chain: { p: "forged", d: "forged" } },
      { "": 0, "\u0000": "\u2028", é: "\ud83d\ude00", type: "audit" },
      { __proto__: { polluted: true }, type: "audit" },
      JSON.parse('{"__proto__": {"x": 1}, "type": "audit"}'),
      { type: "audit", gone: undefined, fn: () => 1, list: [undefined, () => 1, Number.NaN, -0] },
      Object.fromEntries(Array.from({ length: 3000 }, (_, i) => [`k${(i * 7919) % 3000}`, i])),
      {},
      { x: undefined, zz: () => 1 },
      { a: undefined, type: "audit" },
      { "7": "index", type: "audit", entry: { "10": 1, "9": 2, b: { "0": [] } } },
    ];
    for (const record of cases) {
      const { sealed, json, head } = sealOne(record, "prev");
      const read = JSON.parse(json) as Record<string, unknown> & { chain: { p: string; d: string } };
      expect(read).toEqual(JSON.parse(JSON.stringify(sealed)));
      expect(canonical(read)).toBe(json);
      expect(read.chain.p).toBe("prev");
      expect(digestOf("prev", read)).toBe(read.chain.d);
      expect(head).toBe(read.chain.d);
      // The caller's object is left alone.
      expect(record).not.toHaveProperty("chain.d", read.chain.d);
    }
  });

  it("holds for arbitrary JSON records", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.oneof(fc.string(), fc.constantFrom("__proto__", "7", "10", "chain", "a", "type")), fc.jsonValue()),
        fc.string(),
        (record, prev) => {
          const { json } = sealOne(record, prev);
          const read = JSON.parse(json);
          expect(canonical(read)).toBe(json);
          expect(digestOf(prev, read)).toBe(read.chain.d);
          const { chain: _read, ...rest } = read;
          const { chain: _given, ...expected } = JSON.parse(JSON.stringify(record));
          expect(rest).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("canonical sorts keys as before: by UTF-16 code units, whatever their number", () => {
    const keys = ["b", "a", "B", "ä", "a1", "a10", "a2", "\ud83d\ude00", "\uffff", ""];
    const o = Object.fromEntries(keys.map((k) => [k, 1]));
    expect(Object.keys(JSON.parse(canonical(o)))).toEqual([...keys].sort().filter((k) => !/^\d+$/.test(k)));
    const many = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`z${50 - i}`, i]));
    expect(Object.keys(JSON.parse(canonical(many)))).toEqual(Object.keys(many).sort());
  });
});

describe("a direct call's record, made in canonical order", () => {
  it("serialises to its canonical JSON, and seals to what verifies, whatever the arguments", () => {
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
          const marked = (record as unknown as Record<symbol, unknown>)[IN_ORDER] === true;
          if (marked) expect(JSON.stringify(record)).toBe(canonical(record));
          const { json } = new Chain("p").seal([record], () => true);
          const read = JSON.parse(json[0]!);
          expect(canonical(read)).toBe(json[0]);
          expect(digestOf("p", read)).toBe(read.chain.d);
          expect(read.entry.event).toBe("called");
          if (args !== undefined && canonical(args).length <= 4096) expect(read.entry.arguments).toEqual(JSON.parse(canonical(args)));
        },
      ),
      { numRuns: 300 },
    );
  });
});
