/**
 * Prose (a tool's description, a proposer's reason, a result) wrapped at spaces for the
 * terminal, so no word is cut in two; a word longer than the line is split as the rest of
 * the terminal splits it (`↪` marks the continuation). File content is not prose: it keeps
 * `wrapText`'s exact, character-counted lines, where a space is data.
 */
import { sanitize } from "./format.js";

export function wrapWords(text: string, width: number): string[] {
  const w = Math.max(20, width);
  const out: string[] = [];
  for (const raw of text.replace(/\r\n/g, "\n").split("\n")) {
    let rest = sanitize(raw.replace(/\t/g, "  ")).trimEnd();
    let first = true;
    // Each turn takes at least one character off: bounded by the paragraph's length.
    while (first || rest.length > 0) {
      const room = first ? w : w - 2;
      let line: string;
      if (rest.length <= room) line = rest;
      else {
        const cut = rest.lastIndexOf(" ", room);
        line = cut > 0 ? rest.slice(0, cut) : rest.slice(0, room);
      }
      out.push(first ? line : `↪ ${line}`);
      rest = rest.slice(line.length).replace(/^ +/, "");
      first = false;
    }
  }
  return out;
}
