/**
 * Names that read alike: a confusable skeleton in the spirit of Unicode TR39 (section 4), so
 * that `fiIes`, `fi1es` and `fіles` (Cyrillic і) are seen to be `files`.
 *
 * What Node offers and what we use: `String.prototype.normalize` (ICU's NFKC and NFD: fullwidth
 * forms, ligatures, mathematical letters, Roman numerals and superscripts fold to plain letters)
 * and Unicode property escapes in regular expressions (format, control, default-ignorable and
 * combining characters). ICU's SpoofChecker, which holds TR39's full table, is not reachable
 * from JavaScript (`Intl` has no confusables API), and we download no data: the table below is
 * our own and small, covering what reads as Latin in the fonts people use for ids — Cyrillic,
 * Greek and a few IPA and Armenian letters, the digits and symbols that pass for letters, and
 * `rn`/`vv` for `m`/`w`. A name's skeleton is not meant to be shown; it is only compared.
 *
 * Case: ids are case-sensitive, yet `Files` reads as `files` to a person, so two names that
 * differ only in case are look-alikes too. A single case-folded skeleton would miss `fiIes`
 * (the capital I folds to `i`, not to the `l` it looks like), so each name has two keys: the
 * skeleton taken before folding (`I` is `l`) and the one taken after (`I` is `i`); two names
 * read alike when either key matches.
 */

/** Format, control and default-ignorable characters: zero-width spaces and joiners, bidi controls, soft hyphens, variation selectors. */
const INVISIBLE = /[\p{Cf}\p{Cc}\p{Default_Ignorable_Code_Point}]/gu;
/** Combining marks, once NFD has split them off their letters: `é` reads as `e`. */
const MARKS = /[\p{Mn}\p{Me}]/gu;
/** Characters a name should never hold: the invisible ones, and spaces other than U+0020 (line, paragraph and no-break spaces). */
const HIDDEN = /[\p{Cf}\p{Cc}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}\u00A0\u1680\u2000-\u200A\u202F\u205F\u3000]/gu;

/**
 * Prototype ← the characters that read as it (after NFKC and NFD, so fullwidth and accented
 * forms are not listed). Capitals that read as a lowercase prototype's capital are listed
 * with it: the skeleton is lowercased anyway.
 */
const GROUPS: Record<string, string> = {
  a: "аАɑαΑ",
  b: "ВΒЬьƄ",
  c: "сСϲϹ",
  d: "ԁɗ",
  e: "еЕΕҽ",
  g: "ɡց",
  h: "һНΗ",
  i: "іıɩι",
  j: "јЈϳ",
  k: "кКκΚ",
  // `I` (capital i), `1`, `|` and `ǀ` all read as `l`; `ӏ` and `Ӏ` are Cyrillic palochkas.
  l: "I1|ǀ∣ΙІӏӀ",
  m: "мМΜ",
  n: "ոΝ",
  o: "0OоОοΟօᴏ",
  p: "рРρΡ",
  q: "ԛ",
  r: "гᴦ",
  s: "ѕЅꜱ",
  t: "ТΤ",
  u: "υսᴜ",
  v: "νѵᴠ",
  w: "ԝѡᴡ",
  x: "хХχΧ×",
  y: "уУΥγү",
  z: "Ζᴢ",
  "3": "ЗзƷ",
  "-": "‐‑‒–—−˗⁃",
  "/": "∕⁄⧸",
};

const TABLE = new Map<string, string>();
for (const [prototype, chars] of Object.entries(GROUPS)) for (const c of chars) TABLE.set(c, prototype);

const mapChars = (s: string): string => {
  let out = "";
  for (const c of s) out += TABLE.get(c) ?? c;
  return out;
};

/** Letter pairs that read as one letter, taken after lowercasing. */
const PAIRS = /rn|vv/g;
const PAIR_OF: Record<string, string> = { rn: "m", vv: "w" };

/** Invisible characters out, compatibility forms folded, accents off. */
function prepare(s: string): string {
  return s.replace(INVISIBLE, "").normalize("NFKC").normalize("NFD").replace(MARKS, "").replace(INVISIBLE, "");
}

function finish(s: string): string {
  return mapChars(s.toLowerCase()).replace(PAIRS, (p) => PAIR_OF[p]!);
}

/**
 * Printable ASCII needs neither normalisation nor the table's non-ASCII half: most names are
 * such, and a catalogue of thousands is compared on every refresh, so they take a short road
 * to the same result.
 */
const PLAIN = /^[\x20-\x7E]*$/;
const PLAIN_LOOKALIKES = /[I1|0O]/g;
const plainPrototype = (c: string): string => TABLE.get(c)!;

/** The skeleton of `s`, taken before case folding: `fiIes`, `fi1es`, `FILES`→`flles`. */
export function skeleton(s: string): string {
  if (PLAIN.test(s))
    return s
      .replace(PLAIN_LOOKALIKES, plainPrototype)
      .toLowerCase()
      .replace(PAIRS, (p) => PAIR_OF[p]!);
  return finish(mapChars(prepare(s)));
}

/** The skeleton of `s` taken after case folding: `FILES` and `Files` → `files`. */
export function foldedSkeleton(s: string): string {
  if (PLAIN.test(s))
    return s
      .toLowerCase()
      .replace(PLAIN_LOOKALIKES, plainPrototype)
      .replace(PAIRS, (p) => PAIR_OF[p]!);
  return finish(prepare(s).toLowerCase());
}

/** Both keys of a name (see the top of this file): two names read alike when either matches. */
export function lookalikeKeys(name: string): readonly [string, string] {
  return [`s:${skeleton(name)}`, `f:${foldedSkeleton(name)}`];
}

/** Whether two different strings read alike. Equal strings are the same name, not look-alikes. */
export function readAlike(a: string, b: string): boolean {
  return a !== b && (skeleton(a) === skeleton(b) || foldedSkeleton(a) === foldedSkeleton(b));
}

/** The invisible, control and unusual space characters in `s`, as `U+200B`, in order, each once. */
export function hiddenCharacters(s: string): string[] {
  const found = new Set<string>();
  for (const m of s.matchAll(HIDDEN)) found.add(`U+${m[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`);
  return [...found];
}

/** `s` with each hidden character written out as `<U+202E>`, for messages that name it. */
export function shown(s: string): string {
  return s.replace(HIDDEN, (c) => `<U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}>`);
}

/**
 * Names indexed by their skeletons, for comparing many against many: `add` each name already
 * there, then `clash(name)` tells which one a newcomer reads like.
 */
export class Lookalikes {
  private readonly byKey = new Map<string, string>();

  constructor(names: Iterable<string> = []) {
    for (const n of names) this.add(n);
  }

  /** Adds `name` (with its `keys` when known); the first name added under a skeleton is the one `clash` reports. */
  add(name: string, keys: readonly string[] = lookalikeKeys(name)): void {
    for (const key of keys) if (!this.byKey.has(key)) this.byKey.set(key, name);
  }

  /** A different name already added that reads like `name`, if any. */
  clash(name: string, keys: readonly string[] = lookalikeKeys(name)): string | undefined {
    for (const key of keys) {
      const other = this.byKey.get(key);
      if (other !== undefined && other !== name) return other;
    }
    return undefined;
  }
}
