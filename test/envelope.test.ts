import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseFrame, stamp } from "../gateway/wire/envelope.js";

describe("parseFrame", () => {
  it("never throws, whatever the text", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 300 }), (text) => {
        const r = parseFrame(text);
        expect(typeof r.ok).toBe("boolean");
      }),
      { numRuns: 2000 },
    );
  });

  it("never throws on arbitrary JSON, and every refusal carries a code and a message", () => {
    const field = fc.oneof(fc.jsonValue(), fc.string(), fc.constant(undefined));
    const envelopeLike = fc.record(
      {
        protocol: field,
        id: field,
        from: field,
        to: field,
        kind: field,
        correlation_id: field,
        context: field,
        payload: field,
        type: field,
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), envelopeLike), (value) => {
        const r = parseFrame(JSON.stringify(value) ?? "null");
        if (!r.ok) {
          expect(r.code).toMatch(/^[a-z_]+$/);
          expect(r.message.length).toBeGreaterThan(0);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it("accepts a minimal envelope and normalises a lone correlation id", () => {
    const r = parseFrame(JSON.stringify({ kind: "chat", correlation_id: "x", payload: { text: "hi" } }));
    expect(r).toMatchObject({ ok: true, envelope: { kind: "chat", correlation_id: ["x"] } });
    if (r.ok && "envelope" in r) {
      const env = stamp(r.envelope, "alice");
      expect(env).toMatchObject({ protocol: "mew/v0.4", from: "alice", kind: "chat", correlation_id: ["x"] });
      expect(env.id).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it("drops unknown top-level fields and refuses another protocol version", () => {
    const r = parseFrame(JSON.stringify({ kind: "chat", payload: {}, sneaky: 1 }));
    expect(r.ok && "envelope" in r && "sneaky" in r.envelope).toBe(false);
    const old = parseFrame(JSON.stringify({ protocol: "mew/v0.3", kind: "chat", payload: {} }));
    expect(old).toMatchObject({ ok: false, code: "invalid_envelope" });
    if (!old.ok) expect(old.message).toMatch(/^protocol:/);
  });

  it("recognises both MEW join shapes", () => {
    expect(parseFrame(JSON.stringify({ type: "join", space: "s", token: "t", participantId: "p" }))).toEqual({
      ok: true,
      join: { space: "s", token: "t", participantId: "p" },
    });
    expect(parseFrame(JSON.stringify({ kind: "system/join", payload: { space: "s", token: "t" } }))).toEqual({
      ok: true,
      join: { space: "s", token: "t" },
    });
    // Without a token it is a join all the same: a client that authenticated at the door names its space so.
    expect(parseFrame(JSON.stringify({ type: "join", space: "s" }))).toEqual({ ok: true, join: { space: "s" } });
    expect(parseFrame(JSON.stringify({ type: "join", space: "s", token: 5 }))).toMatchObject({ ok: false, code: "invalid_envelope" });
  });
});
