/**
 * The gateway's RFC 3339 timestamps (gateway/wire/envelope.ts `isoTime`): the minute made
 * once, the seconds by hand; the same text as toISOString whatever the instant.
 */
import { describe, expect, it } from "vitest";
import { isoTime } from "../gateway/wire/envelope.js";

describe("isoTime", () => {
  it("writes what toISOString writes, across minutes, hours, days, leap days and odd years", () => {
    const starts = [
      0,
      Date.UTC(2024, 1, 29, 23, 59, 59, 990),
      Date.UTC(2026, 11, 31, 23, 59, 58, 7),
      Date.now(),
      -1,
      253402300799000,
      8.64e15 - 5000,
    ];
    for (const start of starts) {
      for (let ms = start; ms < start + 2500; ms += 7) expect(isoTime(ms)).toBe(new Date(ms).toISOString());
      // Going back in time (a clock stepped back) too.
      for (let ms = start + 2500; ms > start - 2500; ms -= 997) expect(isoTime(ms)).toBe(new Date(ms).toISOString());
    }
  });
});
