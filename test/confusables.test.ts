import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { foldedSkeleton, hiddenCharacters, Lookalikes, readAlike, skeleton } from "../gateway/config/confusables.js";

describe("confusable skeletons", () => {
  // [a, b]: names a person reads as the same.
  const alike: Array<[string, string, string]> = [
    ["files", "fiIes", "capital I for l"],
    ["files", "fi1es", "digit 1 for l"],
    ["files", "fi|es", "bar for l"],
    ["files", "fiǀes", "Latin dental click for l"],
    ["files", "FILES", "case only"],
    ["files", "Files", "case only"],
    ["files", "FiIes", "case and capital I"],
    ["mail", "rnail", "rn for m"],
    ["web", "vveb", "vv for w"],
    ["docs", "d0cs", "zero for o"],
    ["docs", "dOcs", "capital O for o"],
    ["write_file", "wrіte_file", "Cyrillic і"],
    ["apple", "аррlе", "Cyrillic а, р, е"],
    ["copy", "сору", "Cyrillic с, о, р, у"],
    ["xsj", "хѕј", "Cyrillic х, ѕ, ј"],
    ["dog", "ԁoɡ", "Cyrillic ԁ, IPA ɡ"],
    ["AIM", "ΑΙΜ", "Greek capitals"],
    ["BEZHKNOPTYX", "ΒΕΖΗΚΝΟΡΤΥΧ", "Greek capitals"],
    ["files", "ｆｉｌｅｓ", "fullwidth"],
    ["files", "ﬁles", "ligature fi"],
    ["files", "𝐟𝐢𝐥𝐞𝐬", "mathematical bold"],
    ["files", "fi\u200Bles", "zero-width space"],
    ["files", "fil\u00ADes", "soft hyphen"],
    ["files", "\u202Efiles", "bidi override"],
    ["files", "fil\u200Des", "zero-width joiner"],
    ["files", "filés", "accent"],
    ["files", "file\u0301s", "combining accent"],
    ["read-file", "read‐file", "hyphen U+2010"],
    ["notes", "nоtеs", "Cyrillic о, е"],
  ];
  it.each(alike)("%s reads like %s (%s)", (a, b) => {
    expect(readAlike(a, b)).toBe(true);
    expect(readAlike(b, a)).toBe(true);
    expect(new Lookalikes([a]).clash(b)).toBe(a);
  });

  const distinct: Array<[string, string]> = [
    ["files", "fines"],
    ["li", "il"],
    ["files", "fiies"],
    ["alice", "bob"],
    ["fs", "fs2"],
    ["read_file", "read-file"],
    ["read_file", "read_files"],
    ["agent", "agent.1"],
    ["notes", "nodes"],
  ];
  it.each(distinct)("%s and %s are told apart", (a, b) => {
    expect(readAlike(a, b)).toBe(false);
    expect(new Lookalikes([a]).clash(b)).toBeUndefined();
  });

  it("a name is not its own look-alike", () => {
    expect(readAlike("files", "files")).toBe(false);
    expect(new Lookalikes(["files"]).clash("files")).toBeUndefined();
  });

  it("skeletons by table", () => {
    expect(skeleton("fiIes")).toBe("files");
    expect(skeleton("FILES")).toBe("flles");
    expect(foldedSkeleton("FILES")).toBe("files");
    expect(skeleton("rnail")).toBe("mail");
    expect(skeleton("0O")).toBe("oo");
    expect(skeleton("wrіte_file")).toBe("write_file");
    expect(skeleton("")).toBe("");
  });

  it("names the hidden characters in a name, each once", () => {
    expect(hiddenCharacters("write_file")).toEqual([]);
    expect(hiddenCharacters("write file")).toEqual([]);
    expect(hiddenCharacters("wr\u200Bite\u200B_\u202Efile")).toEqual(["U+200B", "U+202E"]);
    expect(hiddenCharacters("a\u00A0b\u0000c\uFE0F")).toEqual(["U+00A0", "U+0000", "U+FE0F"]);
  });

  it("plain ASCII takes a short road to the same skeleton as the long one", () => {
    // A zero-width space sends a name down the long road (normalisation, the whole table).
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom(..."aAbIl1|0Oo-_.rnmvVwW9 ".split("")), maxLength: 20 }), (s) => {
        expect(skeleton(s)).toBe(skeleton(`${s}\u200B`));
        expect(foldedSkeleton(s)).toBe(foldedSkeleton(`\u200B${s}`));
      }),
      { numRuns: 500 },
    );
  });

  it("a long hostile name folds in one pass", () => {
    expect(skeleton("rn".repeat(100_000) + "\u200B".repeat(100_000))).toBe("m".repeat(100_000));
  });
});
