/**
 * `tools/list` of `system:gateway` as the catalogue's readers get it, made once per
 * catalogue change rather than per request: each tool with its title, description and
 * schema texts cleaned (wire/text.ts: no hidden or bidi characters reach another
 * participant) and serialised, kept until the registry's list changes (tools/registry.ts
 * makes a new one on every change). A request then adds only what depends on its caller —
 * the policy that applies to it, decided afresh each time — and the page's bytes.
 */
import type { Decision } from "../policy/rules.js";
import type { ToolEntry } from "../tools/registry.js";
import { cleanText, cleanTexts } from "../wire/text.js";

/** One tool, serialised: `head` is its JSON without the closing brace, in UTF-8. */
interface Listed {
  participant: string;
  tool: string;
  head: Buffer;
}

/** What closes a tool's JSON for each policy, and what goes between tools. */
const TAIL: Record<Decision, Buffer> = {
  direct: Buffer.from(',"policy":"direct"}'),
  proposal: Buffer.from(',"policy":"proposal"}'),
  denied: Buffer.from(',"policy":"denied"}'),
};
const COMMA = Buffer.from(",");

/** A catalogue entry as another participant reads it: title, description and schema texts cleaned; the name is the id and is left whole. */
export function readable<T extends { description?: unknown; title?: unknown; inputSchema?: unknown; annotations?: unknown }>(t: T): T {
  return {
    ...t,
    ...(typeof t.title === "string" ? { title: cleanText(t.title) } : {}),
    ...(typeof t.description === "string" ? { description: cleanText(t.description) } : {}),
    ...(t.inputSchema !== undefined ? { inputSchema: cleanTexts(t.inputSchema) } : {}),
    ...(t.annotations !== undefined ? { annotations: cleanTexts(t.annotations) } : {}),
  };
}

export interface ToolsPage {
  /** The page's tools, each with its `policy` for the caller: the bytes of a JSON array's members, to go between "[" and "]". */
  parts: Buffer[];
  /** Where the next page starts; absent on the last page. */
  next?: string;
}

export class ToolListing {
  private list: readonly ToolEntry[] | undefined;
  private listed: Listed[] = [];

  private of(list: readonly ToolEntry[]): Listed[] {
    if (list !== this.list) {
      this.listed = list.map((t) => ({
        participant: t.participant,
        tool: t.tool,
        head: Buffer.from(JSON.stringify(readable(t)).slice(0, -1)),
      }));
      this.list = list;
    }
    return this.listed;
  }

  /**
   * From `start`, as many tools as fit in `budget` bytes and at most `max` (as wire/paging.ts
   * `takePage` counts: each item's JSON and a comma, at least one), each with `policy(tool)`.
   */
  page(list: readonly ToolEntry[], start: number, budget: number, policy: (t: Listed) => Decision, max = 1000): ToolsPage {
    const items = this.of(list);
    const parts: Buffer[] = [];
    let taken = 0;
    let i = start;
    for (; i < items.length && taken < max; i++) {
      const item = items[i]!;
      const tail = TAIL[policy(item)];
      const n = item.head.length + tail.length + 1;
      if (n > budget && taken > 0) break;
      budget -= n;
      if (taken++ > 0) parts.push(COMMA);
      parts.push(item.head, tail);
    }
    return i < items.length ? { parts, next: `c${i}` } : { parts };
  }
}
