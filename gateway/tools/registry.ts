/**
 * The space's tool catalogue: every tool of every participant, as `participant/tool`.
 *
 * The registry only stores; calls/router.ts fetches (`tools/list`, all pages) and decides when.
 */
import * as z from "zod";
import type { Finding } from "./inspect.js";
import { type DefinitionChange, Pins } from "./pins.js";
import { isRecord } from "../wire/values.js";

/** What we keep of an MCP tool definition. Unknown fields are dropped. */
export const McpToolSchema = z.looseObject({
  name: z.string().min(1).max(256),
  title: z.string().max(512).optional(),
  description: z.string().max(16_384).optional(),
  inputSchema: z.record(z.string(), z.unknown()).optional(),
  outputSchema: z.record(z.string(), z.unknown()).optional(),
  annotations: z.record(z.string(), z.unknown()).optional(),
});
export type McpTool = z.infer<typeof McpToolSchema>;

export const ToolsListResultSchema = z.object({
  tools: z.array(z.unknown()).max(10_000),
  nextCursor: z.string().max(4096).optional(),
});

export interface ToolEntry {
  /** `participant/tool` */
  name: string;
  participant: string;
  tool: string;
  title?: string | undefined;
  description?: string | undefined;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown> | undefined;
  annotations?: Record<string, unknown> | undefined;
  /** Kept as the server gave them: MCP Apps UI resources, tasks, icons. */
  icons?: unknown;
  execution?: unknown;
  _meta?: Record<string, unknown> | undefined;
  /** What the gateway found wrong with its texts when it took it in (tools/inspect.ts); absent when nothing. */
  findings?: readonly Finding[] | undefined;
}

/** Most tools a single participant may register; more is almost certainly a bug or abuse. */
export const MAX_TOOLS_PER_PARTICIPANT = 5_000;

export class Registry {
  private readonly byOwner = new Map<string, Map<string, ToolEntry>>();
  private sorted: ToolEntry[] | undefined;
  /** Participants switched off (switches.ts): their tools are kept, and offered to nobody. */
  private readonly off = new Set<string>();
  /** Each tool's definition digest and whether it is the one confirmed (pins.ts); kept when a participant leaves. */
  readonly pins = new Pins();

  /** Hides (or shows again) every tool of `participant`. Returns whether it had any. */
  setDisabled(participant: string, disabled: boolean): boolean {
    if (disabled) this.off.add(participant);
    else this.off.delete(participant);
    this.sorted = undefined;
    return this.byOwner.has(participant);
  }

  isDisabled(participant: string): boolean {
    return this.off.has(participant);
  }

  /**
   * Replaces a participant's tools, each with what `inspect` finds in it. Returns whether
   * anything changed; `changed` hears of each tool whose definition differs from the one
   * pinned for it (a key reordering does not).
   */
  set(
    participant: string,
    tools: McpTool[],
    inspect?: (t: McpTool) => readonly Finding[],
    changed?: (c: DefinitionChange) => void,
  ): boolean {
    const next = new Map<string, ToolEntry>();
    for (const t of tools) {
      next.set(t.name, {
        name: `${participant}/${t.name}`,
        participant,
        tool: t.name,
        title: t.title,
        description: t.description,
        inputSchema: t.inputSchema ?? { type: "object" },
        outputSchema: t.outputSchema,
        annotations: t.annotations,
        ...(t["icons"] !== undefined ? { icons: t["icons"] } : {}),
        ...(t["execution"] !== undefined ? { execution: t["execution"] } : {}),
        ...(isRecord(t["_meta"]) ? { _meta: t["_meta"] } : {}),
        ...withFindings(inspect?.(t)),
      });
    }
    for (const c of this.pins.observe(
      participant,
      [...next].map(([tool, e]) => ({ ...e, name: tool })),
    ))
      changed?.(c);
    const before = this.byOwner.get(participant);
    if (before && sameTools(before, next)) return false;
    if (next.size === 0) this.byOwner.delete(participant);
    else this.byOwner.set(participant, next);
    this.sorted = undefined;
    return before !== undefined || next.size > 0;
  }

  remove(participant: string): boolean {
    this.sorted = undefined;
    return this.byOwner.delete(participant);
  }

  get(participant: string, tool: string): ToolEntry | undefined {
    if (this.off.has(participant)) return undefined;
    return this.byOwner.get(participant)?.get(tool);
  }

  /** `fs/read_file` → its entry. Participant ids never contain `/`, so the first one splits. */
  /** The participants that offer a tool of this (bare) name; `switchedOff`: those switched off instead, who offer it to nobody. */
  ownersOf(tool: string, switchedOff = false): string[] {
    const owners: string[] = [];
    for (const [participant, tools] of this.byOwner)
      if (tools.has(tool) && this.off.has(participant) === switchedOff) owners.push(participant);
    return owners;
  }

  resolve(name: string): ToolEntry | undefined {
    const slash = name.indexOf("/");
    return slash > 0 ? this.get(name.slice(0, slash), name.slice(slash + 1)) : undefined;
  }

  /** Every tool, sorted by name; cached until the next change. */
  list(): readonly ToolEntry[] {
    this.sorted ??= [...this.byOwner.entries()]
      .filter(([owner]) => !this.off.has(owner))
      .flatMap(([, m]) => [...m.values()])
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return this.sorted;
  }

  get size(): number {
    return this.list().length;
  }
}

const withFindings = (f: readonly Finding[] | undefined) => (f?.length ? { findings: f } : {});

function sameTools(a: Map<string, ToolEntry>, b: Map<string, ToolEntry>): boolean {
  if (a.size !== b.size) return false;
  for (const [name, t] of a) {
    const u = b.get(name);
    if (!u || JSON.stringify(t) !== JSON.stringify(u)) return false;
  }
  return true;
}
