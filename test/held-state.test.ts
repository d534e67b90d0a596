/**
 * The sealed request state of a held call at MCP 2026-07-28 (participants/mcp-server/held/held.ts):
 * hostile first — a state tampered with, a state of another seat or space, odd shapes, a
 * huge one, an expired one, another key — then what a replay after the decision reads.
 */
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { HeldOutcomes, HeldStates } from "../participants/mcp-server/held/held.js";

const key = randomBytes(32);
const states = new HeldStates(key);
const claims = { s: "lab", w: "seat", p: "prop-1", t: "files__write", e: Date.now() + 60_000 };

describe("held-call request state: hostile", () => {
  it("a state changed in any part resumes nothing", () => {
    const good = states.seal(claims);
    const [v, body, mac] = good.split(".") as [string, string, string];
    const forged = Buffer.from(JSON.stringify({ ...claims, p: "prop-2" })).toString("base64url");
    const flip = (s: string) => s.slice(0, -1) + (s.endsWith("A") ? "B" : "A");
    for (const bad of [
      `${v}.${forged}.${mac}`,
      `${v}.${body}.${flip(mac)}`,
      `${v}.${flip(body)}.${mac}`,
      `h2.${body}.${mac}`,
      `${v}.${body}`,
      `${v}.${body}.${mac}.x`,
      `${v}.${body}.`,
    ]) {
      const r = states.open(bad, "lab", "seat");
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.message).toMatch(/changed|not one this gateway made/);
    }
  });

  it("a state of another seat or space is refused by name", () => {
    const good = states.seal(claims);
    for (const [space, seat] of [
      ["lab", "other"],
      ["elsewhere", "seat"],
    ] as const) {
      const r = states.open(good, space, seat);
      expect(r).toEqual({ ok: false, message: expect.stringMatching(/another seat/) });
    }
  });

  it("odd shapes, control characters and huge strings are refused without parsing", () => {
    for (const bad of [undefined, null, 42, {}, ["h1", "a", "b"], "", "h1..", "h1.\u0000\u0007.x", `h1.${"a".repeat(100_000)}.b`]) {
      const r = states.open(bad, "lab", "seat");
      expect(r.ok).toBe(false);
    }
  });

  it("a state sealed with another key, or well signed over claims of the wrong shape, is refused", () => {
    const other = new HeldStates(randomBytes(32));
    expect(states.open(other.seal(claims), "lab", "seat").ok).toBe(false);
    const wrong = states.seal({ ...claims, e: "never" } as never);
    expect(states.open(wrong, "lab", "seat")).toEqual({ ok: false, message: expect.stringMatching(/not one this gateway made/) });
  });

  it("an expired state says so and names the proposal", () => {
    const r = states.open(states.seal({ ...claims, e: 1000 }), "lab", "seat");
    expect(r).toEqual({ ok: false, message: expect.stringContaining("prop-1") });
  });

  it("a short key is refused at construction", () => {
    expect(() => new HeldStates(randomBytes(16))).toThrow(/shorter than 32 bytes/);
  });

  it("the untouched state opens for its own seat", () => {
    expect(states.open(states.seal(claims), "lab", "seat")).toEqual({ ok: true, claims });
  });
});

describe("held-call outcomes: a replay after the decision", () => {
  it("pending until decided, then the one recorded result however often it is read; a second settling is refused", () => {
    const o = new HeldOutcomes<{ text: string }>();
    expect(o.read("p")).toEqual({ status: "unknown" });
    o.hold("p");
    expect(o.read("p")).toEqual({ status: "pending" });
    expect(o.settle("p", { text: "ran once" })).toBe(true);
    expect(o.settle("p", { text: "ran twice" })).toBe(false);
    o.hold("p");
    for (let i = 0; i < 3; i++) expect(o.read("p")).toEqual({ status: "done", result: { text: "ran once" } });
  });

  it("a flood of held calls stays bounded, forgetting settled ones first", () => {
    const o = new HeldOutcomes<number>(100);
    o.hold("keep");
    for (let i = 0; i < 1000; i++) {
      o.hold(`p${i}`);
      o.settle(`p${i}`, i);
    }
    expect(o.size).toBeLessThanOrEqual(100);
    expect(o.read("keep")).toEqual({ status: "pending" });
    expect(o.read("p0")).toEqual({ status: "unknown" });
  });
});
