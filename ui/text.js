// The browser's copy of gateway/wire/text.ts — the one table of characters nobody should
// read unseen (format characters, bidi controls, tags, controls, abused variation
// selectors; emoji ZWJ sequences kept). test/text-clean.test.ts holds both to the same
// property test, so they cannot drift. See that file for what is hidden and why.

// biome-ignore lint/suspicious/noMisleadingCharacterClass: the class lists single code points (combining marks, fillers) on purpose, to find them alone
const HIDDEN = /[\p{Cf}\p{Cc}\u034F\u115F\u1160\u3164\uFFA0\uFE00-\uFE0F\u{E0000}-\u{E007F}\u{E0100}-\u{E01EF}]/u;
const SELECTOR = /[\uFE00-\uFE0F\u{E0100}-\u{E01EF}]/u;
const PICTOGRAPH = /\p{Extended_Pictographic}/u;
const MODIFIER = /\p{Emoji_Modifier}/u;
const SPACE = /\s/u;
const ZWJ = "\u200D";

/** `text` with every hidden character replaced by `mark(c)`; tab and line feed kept. */
export function replaceHidden(text, mark) {
  text = String(text);
  let out = "";
  let prev = "";
  let base = "";
  for (let i = 0; i < text.length; ) {
    const cp = text.codePointAt(i);
    const c = cp > 0xffff ? text.slice(i, i + 2) : text[i];
    i += c.length;
    // Printable ASCII, the bulk of any text, skips the tables.
    if (cp >= 0x20 && cp < 0x7f) {
      out += c;
      prev = base = c;
      continue;
    }
    let keep = c === "\n" || c === "\t" || !HIDDEN.test(c);
    if (!keep && SELECTOR.test(c)) keep = prev !== "" && prev === base && !SPACE.test(prev);
    else if (!keep && c === ZWJ) {
      const next = text.codePointAt(i);
      keep =
        PICTOGRAPH.test(base) &&
        (prev === base || SELECTOR.test(prev) || MODIFIER.test(prev)) &&
        next !== undefined &&
        PICTOGRAPH.test(String.fromCodePoint(next));
    }
    if (!keep) {
      out += mark(c);
      prev = "";
      base = "";
      continue;
    }
    out += c;
    if (!SELECTOR.test(c) && !MODIFIER.test(c) && c !== ZWJ) base = c;
    prev = c;
  }
  return out;
}

export function codepointLabel(c) {
  return `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`;
}

/** `text` without its hidden characters. */
export function cleanText(text) {
  return replaceHidden(text, () => "");
}

/** `text` with each hidden character shown as ⟨U+200B⟩, so what a person reads is what is sent. */
export function revealText(text) {
  return replaceHidden(text, codepointLabel);
}
