/**
 * Tool names a participant may not bring into the catalogue: a name holding invisible, bidi
 * or control characters, and a name that reads like another (config/confusables.ts) —
 * `wrіte_file` (Cyrillic і) beside `write_file`, or `fs/fiIes` beside another participant's
 * `fs/files` — which a person approving a call, or a model choosing one, would take for the other.
 *
 * Of two tools of one participant that read alike, the one it already had in the catalogue
 * stays; failing that, the one spelled in plain ASCII; failing that, the one listed first.
 * Between participants, the tool already in the catalogue stays.
 */
import { hiddenCharacters, lookalikeKeys, Lookalikes, shown } from "../config/confusables.js";
import { clip } from "../ports/host.js";
import type { McpTool, ToolEntry } from "../tools/registry.js";
import { ErrorCodes } from "../wire/envelope.js";

export interface RefusedTool {
  tool: string;
  code: typeof ErrorCodes.lookalikeTool | typeof ErrorCodes.hiddenCharacters;
  message: string;
  /** For the `system/error` to the owner: the tool, and the one it reads like or the characters it hides. */
  extra: Record<string, unknown>;
}

const ASCII = /^[\x20-\x7E]*$/;
/**
 * The keys of the catalogue's entries, kept as long as the entry is: every refresh compares
 * against all other participants' tools, which mostly did not change since the last one.
 */
const entryKeys = new WeakMap<ToolEntry, readonly [string, string]>();
function keysOfEntry(e: ToolEntry): readonly [string, string] {
  let keys = entryKeys.get(e);
  if (keys === undefined) {
    keys = lookalikeKeys(e.name);
    entryKeys.set(e, keys);
  }
  return keys;
}

const codePoint = (c: string): string => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
/** A name as messages show it: hidden characters written out, then cut. */
const named = (s: string): string => clip(shown(s));

/**
 * Splits `owner`'s tools into those the catalogue takes and those it refuses, against the
 * other participants' tools in `catalogue`; `had(name)`: whether `owner` already offered it.
 */
export function screenToolNames(
  owner: string,
  tools: McpTool[],
  catalogue: readonly ToolEntry[],
  had: (name: string) => boolean,
): { kept: McpTool[]; refused: RefusedTool[] } {
  const refused: RefusedTool[] = [];
  const candidates: McpTool[] = [];
  for (const t of tools) {
    const hidden = hiddenCharacters(t.name);
    if (hidden.length === 0) candidates.push(t);
    else {
      const message = `the tool name ${JSON.stringify(named(t.name))} holds invisible or control characters (${hidden.slice(0, 8).join(", ")}); it is left out of the catalogue`;
      refused.push({
        tool: t.name,
        code: ErrorCodes.hiddenCharacters,
        message,
        extra: { tool: named(t.name), characters: hidden.slice(0, 8) },
      });
    }
  }
  const rank = (t: McpTool): number => (had(t.name) ? 0 : ASCII.test(t.name) ? 1 : 2);
  // A stable sort: within a rank, the order the participant listed them in.
  const ordered = candidates.map((t, i) => ({ t, i, r: rank(t) })).sort((a, b) => a.r - b.r || a.i - b.i);
  const own = new Lookalikes();
  const others = new Lookalikes();
  for (const e of catalogue) if (e.participant !== owner) others.add(e.name, keysOfEntry(e));
  const keep = new Set<McpTool>();
  for (const { t } of ordered) {
    const sibling = own.clash(t.name);
    const like = sibling !== undefined ? `${owner}/${sibling}` : others.clash(`${owner}/${t.name}`);
    if (like === undefined) {
      own.add(t.name);
      keep.add(t);
      continue;
    }
    const name = `${owner}/${t.name}`;
    // The two names look the same on screen, so say where they differ: the letters outside ASCII.
    const foreign = [...new Set([...t.name].filter((c) => !ASCII.test(c)))].slice(0, 8).map(codePoint);
    const where = foreign.length ? ` (it holds ${foreign.join(", ")})` : "";
    const message = `the tool ${JSON.stringify(named(name))}${where} reads like ${JSON.stringify(named(like))}, so it could pass for it; it is left out of the catalogue`;
    refused.push({
      tool: t.name,
      code: ErrorCodes.lookalikeTool,
      message,
      extra: { tool: named(name), existing: named(like), ...(foreign.length ? { characters: foreign } : {}) },
    });
  }
  return { kept: candidates.filter((t) => keep.has(t)), refused };
}
