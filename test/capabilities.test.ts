import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  type Capability,
  compileCapabilities,
  compileCapability,
  covers,
  matchesGlob,
  MAX_PATTERN_DEPTH,
} from "../gateway/policy/capabilities.js";

type Env = { kind: string; payload?: unknown; [k: string]: unknown };

const toolsCall: Env = {
  kind: "mcp/request",
  from: "agent",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "read_file", arguments: { path: "a.txt" } } },
};

const match = (cap: Capability, env: Env): boolean => compileCapability(cap)(env);

describe("compileCapability", () => {
  const cases: [string, Capability, Env, boolean][] = [
    // kinds
    ["* matches any kind", { kind: "*" }, { kind: "chat" }, true],
    ["exact kind", { kind: "chat" }, { kind: "chat" }, true],
    ["spec: chat does not match mcp/request", { kind: "chat" }, toolsCall, false],
    ["prefix glob", { kind: "mcp/*" }, toolsCall, true],
    ["prefix glob, other family", { kind: "mcp/*" }, { kind: "chat" }, false],
    ["prefix glob needs the whole prefix", { kind: "mcp/*" }, { kind: "mcp" }, false],
    ["prefix glob, empty run", { kind: "mcp/*" }, { kind: "mcp/" }, true],
    ["suffix glob", { kind: "*/request" }, toolsCall, true],
    ["suffix glob miss", { kind: "*/request" }, { kind: "mcp/response" }, false],
    ["head and tail must not overlap", { kind: "ab*ba" }, { kind: "aba" }, false],
    ["head and tail", { kind: "ab*ba" }, { kind: "abba" }, true],
    ["multi-star", { kind: "m*/*st" }, toolsCall, true],
    ["multi-star miss", { kind: "m*/*x" }, toolsCall, false],
    ["multi-star, three pieces", { kind: "m*/re*st" }, toolsCall, true],
    ["multi-star order matters", { kind: "*b*a*" }, { kind: "ab" }, false],
    ["double star", { kind: "mcp/**" }, toolsCall, true],
    ["regex dot is literal", { kind: "mcp.request" }, toolsCall, false],
    ["regex specials literal", { kind: "a+(b)?[c]*" }, { kind: "a+(b)?[c]$^" }, true],
    ["regex specials literal miss", { kind: "a+*" }, { kind: "aa" }, false],
    ["literal star matched by wildcard", { kind: "a*" }, { kind: "a*" }, true],
    ["star spans newlines", { kind: "a*b" }, { kind: "a\n\nb" }, true],
    // negation
    ["negation excludes", { kind: "!chat" }, { kind: "chat" }, false],
    ["negation admits others", { kind: "!chat" }, toolsCall, true],
    ["negated glob", { kind: "!system/*" }, { kind: "system/welcome" }, false],
    ["negated glob admits", { kind: "!system/*" }, { kind: "chat" }, true],
    ["negation matches absent", { kind: "*", to: "!x" }, { kind: "chat" }, true],
    ["negation matches non-strings", { kind: "*", payload: "!x" }, { kind: "chat", payload: 7 }, true],
    ["negated star only absent", { kind: "*", payload: "!*" }, { kind: "chat" }, true],
    ["negated star rejects present", { kind: "*", payload: "!*" }, { kind: "chat", payload: null }, false],
    ["double negation: present", { kind: "*", to: "!!x" }, { kind: "c", to: "x" }, true],
    ["double negation: other", { kind: "*", to: "!!x" }, { kind: "c", to: "y" }, false],
    ["double negation: absent", { kind: "*", to: "!!x" }, { kind: "c" }, true],
    // * vs absent and types
    ["* needs presence", { kind: "chat", payload: "*" }, { kind: "chat" }, false],
    ["* matches null", { kind: "chat", payload: "*" }, { kind: "chat", payload: null }, true],
    ["* matches objects", { kind: "chat", payload: "*" }, { kind: "chat", payload: {} }, true],
    ["glob never matches a number", { kind: "*", payload: "1*" }, { kind: "c", payload: 12 }, false],
    ["literal never matches a number", { kind: "*", payload: "1" }, { kind: "c", payload: 1 }, false],
    // nested payloads
    ["spec: tools/* method", { kind: "mcp/request", payload: { method: "tools/*" } }, toolsCall, true],
    ["nested tool name glob", { kind: "mcp/request", payload: { method: "tools/call", params: { name: "read_*" } } }, toolsCall, true],
    ["nested tool name miss", { kind: "mcp/request", payload: { method: "tools/call", params: { name: "write_*" } } }, toolsCall, false],
    ["object pattern vs string payload", { kind: "chat", payload: { text: "*" } }, { kind: "chat", payload: "hi" }, false],
    ["object pattern vs array payload", { kind: "chat", payload: {} }, { kind: "chat", payload: [] }, false],
    ["object pattern vs null payload", { kind: "chat", payload: {} }, { kind: "chat", payload: null }, false],
    ["empty object matches any object", { kind: "chat", payload: {} }, { kind: "chat", payload: { a: 1 } }, true],
    ["prototype keys are absent", { kind: "*", payload: { constructor: "*" } }, { kind: "c", payload: {} }, false],
    ["other envelope fields", { kind: "*", context: "ctx-*" }, { kind: "chat", context: "ctx-1" }, true],
    // scalars
    ["number equality", { kind: "*", payload: { n: 1 } }, { kind: "c", payload: { n: 1 } }, true],
    ["number vs string", { kind: "*", payload: { n: 1 } }, { kind: "c", payload: { n: "1" } }, false],
    ["boolean", { kind: "*", payload: { ok: false } }, { kind: "c", payload: { ok: false } }, true],
    ["boolean vs absent", { kind: "*", payload: { ok: false } }, { kind: "c", payload: {} }, false],
    ["null", { kind: "*", payload: { v: null } }, { kind: "c", payload: { v: null } }, true],
    ["null vs absent", { kind: "*", payload: { v: null } }, { kind: "c", payload: {} }, false],
    // arrays
    ["array any-of", { kind: ["chat", "mcp/*"] as unknown as string }, toolsCall, true],
    ["array any-of miss", { kind: ["chat", "reasoning/*"] as unknown as string }, toolsCall, false],
    ["array subset", { kind: "*", to: ["fs"] }, toolsCall, true],
    ["array subset of larger", { kind: "*", to: ["a", "b"] }, { kind: "c", to: ["b", "c", "a"] }, true],
    ["array subset miss", { kind: "*", to: ["fs", "web"] }, toolsCall, false],
    ["array subset with globs", { kind: "*", to: ["f*"] }, toolsCall, true],
    ["empty array matches any array", { kind: "*", to: [] }, toolsCall, true],
    ["empty array matches no scalar", { kind: "*", to: [] }, { kind: "c", to: "x" }, false],
    ["array any-of with negation matches absent", { kind: "*", to: ["!x"] }, { kind: "c" }, true],
  ];

  it.each(cases)("%s", (_name, cap, env, expected) => {
    expect(match(cap, env)).toBe(expected);
  });

  it("fails closed on over-deep patterns", () => {
    let deep: unknown = "*";
    for (let i = 0; i < MAX_PATTERN_DEPTH + 5; i++) deep = { a: deep };
    let value: unknown = 1;
    for (let i = 0; i < MAX_PATTERN_DEPTH + 5; i++) value = { a: value };
    expect(match({ kind: "*", payload: deep }, { kind: "c", payload: value })).toBe(false);
    expect(match({ kind: "*", payload: { a: "*" } }, { kind: "c", payload: value })).toBe(true);
  });

  it("handles a long run of negations without recursion", () => {
    const cap = { kind: `${"!".repeat(100_001)}chat` };
    expect(match(cap, { kind: "chat" })).toBe(false);
    expect(match(cap, { kind: "x" })).toBe(true);
  });
});

describe("compileCapabilities", () => {
  it("is any-of, with an empty set matching nothing", () => {
    const set = compileCapabilities([{ kind: "chat" }, { kind: "mcp/*" }]);
    expect(set(toolsCall)).toBe(true);
    expect(set({ kind: "chat" })).toBe(true);
    expect(set({ kind: "reasoning/start" })).toBe(false);
    expect(compileCapabilities([])({ kind: "chat" })).toBe(false);
  });

  it("short-circuits a set holding {kind: '*'}", () => {
    const set = compileCapabilities([{ kind: "chat" }, { kind: "*", payload: undefined }]);
    expect(set({ kind: "anything" })).toBe(true);
  });

  it("does not short-circuit a constrained wildcard", () => {
    const set = compileCapabilities([{ kind: "*", payload: { method: "x" } }]);
    expect(set({ kind: "anything" })).toBe(false);
  });
});

describe("matchesGlob", () => {
  it("matches participant/tool globs", () => {
    expect(matchesGlob("fs/*", "fs/read_file")).toBe(true);
    expect(matchesGlob("*/read_*", "fs/read_file")).toBe(true);
    expect(matchesGlob("fs/*", "web/fetch")).toBe(false);
    expect(matchesGlob("*", "")).toBe(true);
    expect(matchesGlob("a.b", "axb")).toBe(false);
  });

  // Reference: textbook recursive glob over characters.
  const reference = (p: string, s: string): boolean => {
    if (p === "") return s === "";
    if (p[0] === "*") return reference(p.slice(1), s) || (s !== "" && reference(p, s.slice(1)));
    return s !== "" && p[0] === s[0] && reference(p.slice(1), s.slice(1));
  };
  const text = (chars: string[], max: number) => fc.array(fc.constantFrom(...chars), { maxLength: max }).map((a) => a.join(""));

  it("agrees with a reference matcher", () => {
    fc.assert(
      fc.property(text(["a", "b", "*", "."], 7), text(["a", "b", "*", ".", "\n"], 9), (p, s) => {
        expect(matchesGlob(p, s)).toBe(reference(p, s));
      }),
      { numRuns: 2000 },
    );
  });
});

describe("covers", () => {
  const readOnly: Capability = {
    kind: "mcp/request",
    payload: { method: "tools/call", params: { name: "read_*" } },
  };
  const withName = (name: unknown): Capability => ({
    kind: "mcp/request",
    payload: { method: "tools/call", params: { name } },
  });

  const cases: [string, Capability[], Capability, boolean][] = [
    ["* covers anything", [{ kind: "*" }], readOnly, true],
    ["* covers a negated kind (kind is always present)", [{ kind: "*" }], { kind: "!system/*" }, true],
    ["* covers payload negations (payload unconstrained)", [{ kind: "*" }], { kind: "c", payload: "!x" }, true],
    ["payload * does not cover an absent-matching negation", [{ kind: "*", payload: "*" }], { kind: "c", payload: "!x" }, false],
    ["payload * does not cover an unconstrained payload", [{ kind: "*", payload: "*" }], { kind: "c" }, false],
    ["payload * covers an object pattern", [{ kind: "*", payload: "*" }], { kind: "c", payload: {} }, true],
    ["prefix covers a request", [{ kind: "mcp/*" }], { kind: "mcp/request", payload: { method: "x" } }, true],
    ["prefix covers a narrower glob", [{ kind: "mcp/*" }], { kind: "mcp/req*" }, true],
    ["prefix does not cover *", [{ kind: "mcp/*" }], { kind: "*" }, false],
    ["prefix does not cover chat", [{ kind: "mcp/*" }], { kind: "chat" }, false],
    ["prefix does not cover a negation", [{ kind: "mcp/*" }], { kind: "!chat" }, false],
    ["any of the held set", [{ kind: "chat" }, { kind: "mcp/*" }], { kind: "mcp/response" }, true],
    ["equal patterns cover", [readOnly], readOnly, true],
    ["nested literal name", [readOnly], withName("read_file"), true],
    ["nested narrower glob", [readOnly], withName("read_*x"), true],
    ["nested *", [readOnly], withName("*"), false],
    ["nested other name", [readOnly], withName("write_file"), false],
    ["nested number", [readOnly], withName(3), false],
    ["missing payload", [readOnly], { kind: "mcp/request" }, false],
    ["wider kind", [readOnly], { ...withName("read_file"), kind: "mcp/*" }, false],
    ["extra constraints in wanted are fine", [readOnly], { ...withName("read_a"), to: ["fs"] }, true],
    // negations
    ["!chat covers mcp/*", [{ kind: "!chat" }], { kind: "mcp/*" }, true],
    ["!chat covers literal", [{ kind: "!chat" }], { kind: "mcp/request" }, true],
    ["!chat does not cover chat", [{ kind: "!chat" }], { kind: "chat" }, false],
    ["!chat does not cover c*", [{ kind: "!chat" }], { kind: "c*" }, false],
    ["!chat does not cover *", [{ kind: "!chat" }], { kind: "*" }, false],
    ["!system/* covers mcp/*", [{ kind: "!system/*" }], { kind: "mcp/*" }, true],
    ["!system/*x covers *y (tails clash)", [{ kind: "!system/*x" }], { kind: "*y" }, true],
    ["!system/* does not cover sys*", [{ kind: "!system/*" }], { kind: "sys*" }, false],
    ["!system/* does not cover system/join", [{ kind: "!system/*" }], { kind: "system/join" }, false],
    ["!system/* does not cover !system/join", [{ kind: "!system/*" }], { kind: "!system/join" }, false],
    ["!system/join covers !system/*", [{ kind: "!system/join" }], { kind: "!system/*" }, true],
    ["negated glob covers an object pattern", [{ kind: "*", payload: "!x*" }], { kind: "c", payload: {} }, true],
    ["negation does not cover unconstrained", [{ kind: "*", payload: "!x" }], { kind: "c" }, false],
    // arrays: only equal patterns
    ["equal arrays", [{ kind: "*", to: ["a", "b"] }], { kind: "c", to: ["a", "b"] }, true],
    ["different arrays", [{ kind: "*", to: ["a", "b"] }], { kind: "c", to: ["a"] }, false],
    ["glob vs array", [{ kind: "*", to: "*" }], { kind: "c", to: ["a"] }, true],
    ["glob vs array with negation", [{ kind: "*", to: "*" }], { kind: "c", to: ["!a"] }, false],
    ["nothing held", [], { kind: "chat" }, false],
  ];

  it.each(cases)("%s", (_name, held, wanted, expected) => {
    expect(covers(held, wanted)).toBe(expected);
  });
});

describe("properties", () => {
  const weird = fc.oneof(fc.constantFrom("*", "!", "!*", "**", ".*", "^$", "a*b*", "(", "[", "\\", ""), fc.string());
  const patternValue = fc.oneof(fc.jsonValue(), weird);
  const capability = fc
    .record({ kind: fc.oneof(weird, fc.string()), payload: patternValue }, { requiredKeys: ["kind"] })
    .chain((cap) => fc.dictionary(fc.string(), patternValue, { maxKeys: 3 }).map((extra) => ({ ...extra, ...cap })));
  const envelope = fc.record(
    {
      kind: fc.oneof(weird, fc.string()),
      payload: fc.oneof(
        fc.jsonValue({ maxDepth: 6 }),
        fc.anything({ withNullPrototype: true, withBoxedValues: true, withMap: true, withSet: true }),
        weird,
      ),
      to: fc.oneof(fc.array(weird), weird),
    },
    { requiredKeys: ["kind"] },
  );

  it("compiling and matching never throw", () => {
    fc.assert(
      fc.property(capability, fc.array(envelope, { maxLength: 4 }), (cap, envs) => {
        const one = compileCapability(cap);
        const set = compileCapabilities([cap, { kind: "x" }]);
        for (const env of envs) expect(set(env)).toBe(one(env) || env.kind === "x");
      }),
      { numRuns: 500 },
    );
  });

  it("covers never throws and is reflexive", () => {
    fc.assert(
      fc.property(capability, capability, (a, b) => {
        covers([a], b);
        expect(covers([a], a)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  // Soundness: whatever `w` lets through, `h` lets through too, over every envelope in a
  // fixed universe that includes literal `*` and `!` texts and odd payload shapes.
  const kindPatterns = ["a", "a/*", "*", "a/b", "!a", "b*", "!a/*", "*b", "a*b*", "!*", "**", "!b*"];
  const payloadPatterns: unknown[] = [undefined, "*", "!x", "x*", ["x", "y"], 1, null, {}, { m: "*" }, { m: "!x" }];
  const simplePattern = fc.record(
    {
      kind: fc.constantFrom(...kindPatterns),
      payload: fc.oneof(fc.constantFrom(...payloadPatterns), fc.record({ m: fc.constantFrom(...kindPatterns, "x", "x*", "y") })),
    },
    { requiredKeys: ["kind"] },
  );
  const kinds = ["a", "a/b", "a/c", "b", "ab", "bb", "a/*", "*", "!a", "x", "", "a*b"];
  const payloads: unknown[] = [
    undefined,
    null,
    1,
    "x",
    "y",
    "xy",
    [],
    ["x"],
    ["x", "y"],
    {},
    { m: "x" },
    { m: "a/b" },
    { m: "*" },
    { m: 2 },
  ];
  const universe: Env[] = kinds.flatMap((kind) => payloads.map((payload) => (payload === undefined ? { kind } : { kind, payload })));

  it("covers is sound", () => {
    fc.assert(
      fc.property(simplePattern, simplePattern, (h, w) => {
        if (!covers([h], w)) return;
        const mh = compileCapability(h);
        const mw = compileCapability(w);
        for (const env of universe) if (mw(env)) expect(mh(env), JSON.stringify({ h, w, env })).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
