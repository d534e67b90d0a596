/**
 * The hand readers in envelope.ts must never accept what the schemas refuse, and must build
 * exactly what the schemas build. Thousands of generated frames, hostile ones most of all,
 * are read both ways and compared.
 */
import { describe, expect, it } from "vitest";
import {
  InboundEnvelopeSchema,
  McpRequestPayloadSchema,
  McpResponsePayloadSchema,
  parseFrame,
  parseMcpRequest,
  parseMcpResponse,
  quickEnvelope,
  quickMcpRequest,
  quickMcpResponse,
} from "../gateway/wire/envelope.js";

/** A small deterministic generator (mulberry32), so that a failure repeats. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)] as T;
}

const str = (n: number, c = "a") => c.repeat(n);

/** Strings at and around every bound the schemas name, and the awkward ones. */
const STRINGS = [
  "",
  "a",
  "chat",
  "mcp/request",
  "-x",
  "a b",
  "é",
  "\u0000\u001b[2J",
  "😀",
  str(63),
  str(64),
  str(65),
  str(128),
  str(255),
  str(256),
  str(257),
  str(1024),
  str(1025),
  str(2000),
];
const KINDS = [
  "chat",
  "mcp/request",
  "mcp/response",
  "a",
  "A.b_c-d/e",
  "-chat",
  "",
  "chat!",
  "x".repeat(128),
  "x".repeat(129),
  "ch at",
  "mew/\u0000",
];
const NUMBERS = [0, -1, 1.5, 2 ** 53, -(2 ** 31), 1e308];

function value(r: () => number, depth = 0): unknown {
  switch (Math.floor(r() * (depth > 2 ? 6 : 9))) {
    case 0:
      return pick(r, STRINGS);
    case 1:
      return pick(r, NUMBERS);
    case 2:
      return null;
    case 3:
      return r() < 0.5;
    case 4:
      return pick(r, KINDS);
    case 5:
      return undefined;
    case 6:
      return Array.from({ length: Math.floor(r() * 4) }, () => value(r, depth + 1));
    default: {
      const o: Record<string, unknown> = {};
      for (let i = Math.floor(r() * 4); i > 0; i--)
        o[pick(r, ["a", "b", "code", "message", "data", "constructor", "toString"])] = value(r, depth + 1);
      return o;
    }
  }
}

function idList(r: () => number): unknown {
  const lens = [0, 1, 2, 63, 64, 65, 255, 256, 257];
  const n = pick(r, lens);
  // One bad element, if any, so that long lists of good ids are common.
  const bad = r() < 0.3 ? Math.floor(r() * n) : -1;
  return Array.from({ length: n }, (_, i) => (i === bad ? pick(r, [str(257), "", 3, null, ["a"]]) : pick(r, ["a", "bob", str(256)])));
}

/** An envelope-like object: mostly the right fields, each sometimes wrong, sometimes absent. */
function envelope(r: () => number): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  const maybe = (k: string, good: () => unknown) => {
    const x = r();
    if (x < 0.3) return;
    o[k] = x < 0.93 ? good() : value(r);
  };
  maybe("protocol", () => pick(r, ["mew/v0.4", "mew/v0.3", ""]));
  maybe("id", () => pick(r, STRINGS));
  maybe("ts", () => pick(r, STRINGS));
  maybe("from", () => pick(r, STRINGS));
  maybe("to", () => idList(r));
  if (r() < 0.95) o["kind"] = r() < 0.9 ? pick(r, KINDS) : value(r);
  maybe("correlation_id", () => (r() < 0.4 ? pick(r, STRINGS) : idList(r)));
  maybe("context", () => pick(r, STRINGS));
  maybe("payload", () => value(r));
  if (r() < 0.3) o["extra"] = value(r);
  return o;
}

function request(r: () => number): unknown {
  if (r() < 0.05) return value(r);
  const o: Record<string, unknown> = {};
  if (r() < 0.8) o["jsonrpc"] = r() < 0.9 ? "2.0" : value(r);
  if (r() < 0.7) o["id"] = r() < 0.8 ? pick(r, [1, 0, -3, 2.5, "x", str(256), str(257), ""]) : value(r);
  if (r() < 0.95) o["method"] = r() < 0.9 ? pick(r, ["tools/call", "", str(256), str(257), "notifications/x"]) : value(r);
  if (r() < 0.7) o["params"] = r() < 0.8 ? { name: "echo", arguments: value(r) } : value(r);
  if (r() < 0.2) o["extra"] = value(r);
  return o;
}

function response(r: () => number): unknown {
  if (r() < 0.05) return value(r);
  const o: Record<string, unknown> = {};
  if (r() < 0.8) o["jsonrpc"] = r() < 0.9 ? "2.0" : value(r);
  if (r() < 0.8) o["id"] = r() < 0.8 ? pick(r, [1, null, "x", str(257)]) : value(r);
  if (r() < 0.6) o["result"] = value(r);
  if (r() < 0.4) {
    o["error"] =
      r() < 0.7
        ? {
            code: pick(r, [-32000, 1.5, "1"]),
            message: pick(r, ["boom", 3, ""]),
            ...(r() < 0.5 ? { data: value(r) } : {}),
            ...(r() < 0.2 ? { extra: 1 } : {}),
          }
        : value(r);
  }
  return o;
}

/** Runs both readers on one input: the quick one may decline, but never disagree. */
function agree<T>(
  input: unknown,
  quick: (x: never) => T | undefined,
  schema: { safeParse(x: unknown): { success: boolean; data?: unknown } },
): "quick" | "schema" | "refused" {
  // A JSON round trip: the gateway only ever sees what JSON.parse makes.
  const json = JSON.parse(JSON.stringify(input ?? null)) as unknown;
  const fast = quick(json as never);
  const slow = schema.safeParse(json);
  if (fast !== undefined) {
    expect(slow.success, `quick accepted what the schema refuses: ${JSON.stringify(json).slice(0, 300)}`).toBe(true);
    expect(fast).toStrictEqual(slow.data);
    return "quick";
  }
  return slow.success ? "schema" : "refused";
}

describe("hand readers against the schemas", () => {
  it("never accept what the envelope schema refuses, and build what it builds", () => {
    const r = rng(14);
    const seen = { quick: 0, schema: 0, refused: 0 };
    for (let i = 0; i < 20_000; i++) {
      const o = envelope(r);
      seen[
        agree(
          o,
          (x: Record<string, unknown>) => (typeof x === "object" && x !== null && !Array.isArray(x) ? quickEnvelope(x) : undefined),
          InboundEnvelopeSchema,
        )
      ]++;
    }
    // Both sides are exercised: otherwise the comparison proves nothing. (Most generated
    // envelopes break some bound, so a few percent are well formed.)
    expect(seen.quick).toBeGreaterThan(400);
    // What the hand reader declines, the schema refuses too: it declines no valid envelope.
    expect(seen.schema).toBe(0);
    expect(seen.refused).toBeGreaterThan(1000);
  });

  it("agree on mcp/request and mcp/response payloads", () => {
    const r = rng(41);
    const req = { quick: 0, schema: 0, refused: 0 };
    const res = { quick: 0, schema: 0, refused: 0 };
    for (let i = 0; i < 20_000; i++) {
      req[agree(request(r), quickMcpRequest, McpRequestPayloadSchema)]++;
      res[agree(response(r), quickMcpResponse, McpResponsePayloadSchema)]++;
    }
    expect(req.quick).toBeGreaterThan(1000);
    expect(req.refused).toBeGreaterThan(1000);
    expect(res.quick).toBeGreaterThan(1000);
    expect(res.refused).toBeGreaterThan(1000);
  });

  it("leave the errors in the schema's words", () => {
    expect(parseFrame(JSON.stringify({ kind: "chat", to: ["a", 3] }))).toMatchObject({
      ok: false,
      message: expect.stringMatching(/^to\.1: /),
    });
    expect(parseFrame(JSON.stringify({ kind: "-chat" }))).toMatchObject({
      ok: false,
      message: expect.stringContaining('a kind like "chat"'),
    });
    const req = parseMcpRequest({ method: "" });
    expect(req.success).toBe(false);
    const res = parseMcpResponse({ error: [1, 2] });
    expect(res.success).toBe(false);
    // MEW's loose error (a string code) is made readable rather than refused (spec §4.2).
    expect(parseMcpResponse({ error: { code: "x", message: "m" } })).toMatchObject({
      success: true,
      data: { error: { code: -32000, message: "m", data: { code: "x" } } },
    });
  });

  it("take the common shapes by hand", () => {
    const frame = {
      protocol: "mew/v0.4",
      id: "r1",
      kind: "mcp/request",
      to: ["responder"],
      correlation_id: "p1",
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: {} } },
    };
    expect(quickEnvelope(frame)).toStrictEqual({ ...frame, correlation_id: ["p1"] });
    expect(quickMcpRequest(frame.payload)).toStrictEqual(frame.payload);
    expect(quickMcpResponse({ jsonrpc: "2.0", id: 1, result: { content: [] } })).toStrictEqual({
      jsonrpc: "2.0",
      id: 1,
      result: { content: [] },
    });
    // An own "__proto__" from JSON stays data and never becomes the prototype.
    const hostile = JSON.parse('{"method":"tools/call","params":{"__proto__":{"polluted":true}}}') as unknown;
    const read = quickMcpRequest(hostile);
    expect(Object.getPrototypeOf(read?.params)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined();
  });
});
