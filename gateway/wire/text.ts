/**
 * The one table of characters nobody should read unseen: what every reader of participant
 * text applies — the console (ui/text.js holds the same table for the browser, checked
 * against this one by test/text-clean.test.ts), the terminal, the link page, notices, the
 * `system:gateway` tool list, agent prompts and `/mcp`.
 *
 * Hidden, and removed (for a model) or made visible (for a person):
 * - Unicode format characters (Cf): zero-width space, non-joiner and joiner, word joiner,
 *   U+200E/F marks, U+061C, U+FEFF, bidi embeddings, overrides and isolates
 *   (U+202A–E, U+2066–9), soft hyphen, interlinear annotation, Arabic number signs;
 * - tag characters U+E0000–E007F (they spell text no one sees);
 * - C0 and C1 controls and DEL, except tab and line feed (a carriage return can overwrite
 *   what came before it on a terminal, so it is hidden too);
 * - the Hangul fillers U+115F, U+1160, U+3164, U+FFA0 and the combining grapheme joiner
 *   U+034F, which draw as nothing;
 * - variation selectors (U+FE00–FE0F, U+E0100–E01EF) except one directly after a visible
 *   character: `❤️` and `1️⃣` keep theirs, a run of selectors hiding bytes after an emoji
 *   (or one at the start, after a space or after another selector) does not.
 *
 * Kept on purpose: emoji ZWJ sequences. A zero-width joiner stays when it joins two
 * pictographs (`👩‍💻`, with a skin tone or a selector between), and is hidden anywhere else.
 * Emoji tag sequences (the flags of England, Scotland, Wales) lose their tags and show as
 * a black flag: tags are never kept.
 */

// biome-ignore lint/suspicious/noMisleadingCharacterClass: the class lists single code points (combining marks, fillers) on purpose, to find them alone
const HIDDEN = /[\p{Cf}\p{Cc}\u034F\u115F\u1160\u3164\uFFA0\uFE00-\uFE0F\u{E0000}-\u{E007F}\u{E0100}-\u{E01EF}]/u;
const SELECTOR = /[\uFE00-\uFE0F\u{E0100}-\u{E01EF}]/u;
const PICTOGRAPH = /\p{Extended_Pictographic}/u;
const MODIFIER = /\p{Emoji_Modifier}/u;
const SPACE = /\s/u;
const ZWJ = "\u200D";

/**
 * `text` with every hidden character (above) replaced by `mark(c)`; tab and line feed
 * are kept. What `cleanText` and `revealText` are made of.
 */
export function replaceHidden(text: string, mark: (c: string) => string): string {
  let out = "";
  let prev = "";
  let base = "";
  for (let i = 0; i < text.length; ) {
    const cp = text.codePointAt(i)!;
    const c = cp > 0xffff ? text.slice(i, i + 2) : text[i]!;
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

/** Whether `text` holds any hidden character. */
export function hasHidden(text: string): boolean {
  return replaceHidden(text, () => "\u0000") !== text;
}

/** `text` without its hidden characters: what a model, a notice or a tool list is given. */
export function cleanText(text: string): string {
  return replaceHidden(text, () => "");
}

/** `text` with each hidden character shown as ⟨U+200B⟩: what a person reads where every character counts (a card's arguments). */
export function revealText(text: string): string {
  return replaceHidden(text, codepointLabel);
}

export function codepointLabel(c: string): string {
  return `⟨U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}⟩`;
}

/**
 * A JSON schema (or annotations) with every `description` and `title` string cleaned, to
 * `maxDepth` levels; deeper it is left as it is. Property names are left whole: they are
 * what the tool is called with (the catalogue flags hidden characters in them).
 */
export function cleanTexts(value: unknown, maxDepth = 32): unknown {
  if (maxDepth <= 0 || typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return value.map((v) => cleanTexts(v, maxDepth - 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const cleaned = (k === "description" || k === "title") && typeof v === "string" ? cleanText(v) : cleanTexts(v, maxDepth - 1);
    Object.defineProperty(out, k, { value: cleaned, enumerable: true, writable: true, configurable: true });
  }
  return out;
}
