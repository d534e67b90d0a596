import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  decodeToolName,
  encodeFull,
  encodeToolName,
  FUNCTION_NAME_PATTERN,
  isShortened,
  ToolNameMap,
} from "../participants/agent/names.js";

/** Participant ids as space.yaml allows them: [A-Za-z0-9][A-Za-z0-9_.-]{0,63}, biased to the awkward characters. */
const participantId = fc
  .tuple(fc.constantFrom(..."aZ09"), fc.array(fc.constantFrom(..."aZ9_.-_-_"), { maxLength: 63 }))
  .map(([first, rest]) => first + rest.join(""));

/** Tool names: anything, with the characters that matter to the encoding over-represented. */
const toolName = fc.oneof(
  fc.string({ unit: fc.constantFrom(..."_-./ xUXYZHh0aA") }),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary", maxLength: 20 }),
  fc.string({ maxLength: 200 }),
);

const fullName = fc.tuple(participantId, toolName).map(([p, t]) => `${p}/${t}`);
const anyName = fc.oneof(fullName, fc.string(), fc.string({ unit: fc.constantFrom("_", "/", "a", "H", "-") }));

describe("function name encoding", () => {
  it.each([
    ["fs/read_file", "fs__read_file"],
    ["a_b/t", "a_b__t"],
    ["a__b/t", "a_U_b__t"],
    ["a-b/t", "a-b__t"],
    ["a.b/t", "a_X2eb__t"],
    ["_/t", "_U__t"],
    ["__x/t", "_U_x__t"],
    ["x_/t", "x_U__t"],
    ["a/_b", "a___b"],
    ["a/b/c", "a__b__c"],
    ["srv/get_User", "srv__get_UUser"],
    ["srv/list files", "srv__list_X20files"],
    ["日本/ツール", "_Y65e5_Y672c___Y30c4_Y30fc_Y30eb"],
    ["srv/😀", "srv___Z01f600"],
    ["no-slash", "no-slash"],
  ])("%s → %s and back", (name, fn) => {
    expect(encodeToolName(name)).toBe(fn);
    expect(fn).toMatch(FUNCTION_NAME_PATTERN);
    expect(decodeToolName(fn)).toBe(name);
  });

  it("keeps awkward ids apart", () => {
    const names = [
      "a_b/t",
      "a__b/t",
      "a-b/t",
      "a.b/t",
      "a/b_t",
      "a_/b/t",
      "a/_b/t",
      "a_b_/t",
      "_/t",
      "__x/t",
      "a/b/t",
      "a_Ub/t",
      "a_U_b/t",
    ];
    const fns = names.map(encodeToolName);
    expect(new Set(fns).size).toBe(names.length);
    for (const [i, fn] of fns.entries()) expect(decodeToolName(fn)).toBe(names[i]);
  });

  it("shortens long names to 64 characters with a hash, distinct and stable", () => {
    const long = `${"p".repeat(60)}/${"read_file_".repeat(10)}`;
    const other = `${"p".repeat(60)}/${"read_file_".repeat(10)}x`;
    const fn = encodeToolName(long);
    expect(fn).toHaveLength(64);
    expect(fn).toMatch(FUNCTION_NAME_PATTERN);
    expect(fn).toMatch(/^p{52}_H[0-9a-z]{10}$/);
    expect(encodeToolName(long)).toBe(fn);
    expect(encodeToolName(other)).not.toBe(fn);
    expect(isShortened(fn)).toBe(true);
    expect(decodeToolName(fn)).toBeUndefined();
    // A prefix cut inside `__` or after a literal `_` never leaves `_` before the `_H` marker.
    const cut = encodeToolName(`${"a".repeat(51)}/${"x".repeat(80)}`);
    expect(cut).toMatch(/^a{51}_H[0-9a-z]{10}$/);
    // Empty is not a valid function name either.
    expect(encodeToolName("")).toMatch(/^_H[0-9a-z]{10}$/);
  });

  it("rejects what the encoder never writes", () => {
    for (const fn of ["a_Ab", "a_X2", "a_Xzz", "a_", "a.b", "a_U-b", "a_X2d", "a_X2f", "a_X5f", "a_Y00e9", "_Yd83d_Yde00", ""]) {
      expect(decodeToolName(fn), fn).toBeUndefined();
    }
    expect(isShortened("fs__read_file")).toBe(false);
    expect(isShortened("a__Habcdefghij")).toBe(false); // `a/Habcdefghij`, a full name
    expect(decodeToolName("a__Habcdefghij")).toBe("a/Habcdefghij");
  });

  it("property: names that fit decode back to themselves", () => {
    fc.assert(
      fc.property(anyName, (name) => {
        const fn = encodeToolName(name);
        expect(fn).toMatch(FUNCTION_NAME_PATTERN);
        if (!isShortened(fn)) expect(decodeToolName(fn)).toBe(name);
        else expect(encodeFull(name).length === 0 || encodeFull(name).length > 64).toBe(true);
      }),
      { numRuns: 3000 },
    );
  });

  it("property: the full encoding is injective (decode ∘ encode = id) whatever the length", () => {
    fc.assert(
      fc.property(anyName, (name) => {
        const full = encodeFull(name);
        expect(full).toMatch(/^[a-zA-Z0-9_-]*$/);
        // decode's FUNCTION_NAME_PATTERN check is for length; test the codec itself on long ones.
        const back = full.length >= 1 && full.length <= 64 ? decodeToolName(full) : undefined;
        if (back !== undefined) expect(back).toBe(name);
      }),
      { numRuns: 3000 },
    );
  });

  it("property: distinct names never share a function name", () => {
    fc.assert(
      fc.property(anyName, anyName, (a, b) => {
        fc.pre(a !== b);
        expect(encodeToolName(a)).not.toBe(encodeToolName(b));
      }),
      { numRuns: 5000 },
    );
  });

  it("property: a shortened name never equals a full one", () => {
    fc.assert(
      fc.property(anyName, anyName, (a, b) => {
        const fa = encodeToolName(a);
        const fb = encodeToolName(b);
        if (isShortened(fa) && !isShortened(fb)) expect(fa).not.toBe(fb);
        // And a full encoding never looks like a shortened one.
        if (encodeFull(b).length <= 64 && b !== "") expect(isShortened(encodeFull(b))).toBe(false);
      }),
      { numRuns: 3000 },
    );
  });
});

describe("ToolNameMap", () => {
  it("maps a tool list both ways, long and unicode names included", () => {
    const names = ["fs/read_file", "a_b/x", "a__b/x", "a.b/x", `${"long".repeat(20)}/tool`, `${"long".repeat(20)}/tool2`, "weather/天気"];
    const map = new ToolNameMap([...names, "fs/read_file"]);
    expect(map.size).toBe(names.length);
    expect(map.collisions).toEqual([]);
    for (const name of names) {
      const fn = map.functionName(name)!;
      expect(fn).toMatch(FUNCTION_NAME_PATTERN);
      expect(map.toolName(fn)).toBe(name);
    }
    expect(map.toolName("nope__tool")).toBeUndefined();
    expect([...map.entries()]).toHaveLength(names.length);
  });

  it("leaves colliding names out and reports them", () => {
    // A deliberately weak encoder stands in for a hash collision, which cannot be found on demand.
    const encode = (name: string) => encodeToolName(name).slice(0, 4);
    const map = new ToolNameMap(["fs/read_file", "fs/read_dir", "web/search"], { encode });
    expect(map.collisions).toEqual([{ functionName: "fs__", names: ["fs/read_dir", "fs/read_file"] }]);
    expect(map.functionName("fs/read_file")).toBeUndefined();
    expect(map.toolName("fs__")).toBeUndefined();
    expect(map.toolName("web_")).toBe("web/search");
    expect(map.size).toBe(1);
  });

  it("property: a map built from any list resolves every name it holds", () => {
    fc.assert(
      fc.property(fc.uniqueArray(anyName, { maxLength: 40 }), (names) => {
        const map = new ToolNameMap(names);
        expect(map.collisions).toEqual([]);
        expect(map.size).toBe(names.length);
        for (const name of names) expect(map.toolName(map.functionName(name)!)).toBe(name);
      }),
      { numRuns: 300 },
    );
  });
});
