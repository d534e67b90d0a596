/**
 * `npm run bench -- --against <ref>`: how the two sides' rounds are matched and compared
 * (bench/against.ts). The runs themselves are the bench's; here, their reports as the
 * child processes hand them back.
 */
import { describe, expect, it } from "vitest";
import { merge, sideBySide } from "../bench/against.js";
import type { ChildReport, JsonRow } from "../bench/report.js";

const r = (label: string, unit: JsonRow["unit"], gateway: number | string, naive: number | null = null): JsonRow => ({
  scenario: "rtt",
  label,
  unit,
  gateway,
  naive,
  ratio: typeof gateway === "number" && naive ? gateway / naive : null,
  goal: null,
  met: null,
  details: [],
});
const report = (rows: JsonRow[], gatewayCpuMs = 1000): ChildReport => ({ rows, gatewayCpuMs, benchCpuMs: 500, noise: 0, failed: false });

describe("bench --against: merging the two sides", () => {
  it("takes each side's median over its rounds and the ratio of the medians, this over ref", () => {
    const rows = merge({
      this: [report([r("p50", "µs", 100, 80)]), report([r("p50", "µs", 300, 80)]), report([r("p50", "µs", 110, 80)])],
      old: [report([r("p50", "µs", 200, 100)]), report([r("p50", "µs", 220, 100)])],
    });
    expect(rows).toHaveLength(1);
    expect(rows[0]!.median).toEqual({ this: 110, old: 210 });
    expect(rows[0]!.ratio).toBeCloseTo(110 / 210, 6);
    expect(rows[0]!.baseRatios["this"]).toEqual([1.25, 3.75, 1.375]);
  });

  it("says which way is better by the figure's kind: a rate higher, a time lower", () => {
    const rows = merge({
      this: [report([r("fan-out, deliveries", "del/s", 2000), r("round trip", "µs", 90), r("proposals per second", "", 1500)])],
      old: [report([r("fan-out, deliveries", "del/s", 1000), r("round trip", "µs", 100), r("proposals per second", "", 2000)])],
    });
    const text = sideBySide(rows, ["this", "old"]);
    expect(text).toMatch(/fan-out, deliveries.*2\.00\s+better/);
    expect(text).toMatch(/round trip\s.*0\.90\s+better/);
    expect(text).toMatch(/proposals per second.*0\.75\s+worse/);
  });

  it("a side that failed or gave a string prints so, and no ratio is made up", () => {
    const rows = merge({
      this: [report([r("slow reader, disconnected", "", "yes, after 2.2 s"), r("only here", "µs", 5)])],
      old: [report([r("slow reader, disconnected", "", "no (ran 10.0 s)")])],
    });
    expect(rows.map((m) => m.ratio)).toEqual([undefined, undefined]);
    const text = sideBySide(rows, ["this", "old"]);
    expect(text).toContain("yes, after 2.2 s");
    expect(text).toContain("no (ran 10.0 s)");
    expect(text).toMatch(/only here\s+5\.00 µs\s+failed/);
  });
});
