/**
 * Pinned tool definitions: what a tool said it was when a person (or a rule) trusted it.
 *
 * Each tool of the catalogue has a digest of its definition (name, title, description,
 * input and output schema, annotations, execution) — canonical JSON, keys sorted at every
 * depth so a reordering is not a change, hashed with SHA-256 — with when it was first seen.
 * A definition that differs from the one last confirmed leaves the tool *unconfirmed*:
 * policy/authority.ts then suspends grants made on another digest and every direct decision
 * by rule or annotation, until a person approves a call of the new definition (decisions.ts).
 *
 * Memory is bounded whatever a server does: per tool, only the current definition and the
 * last confirmed one (while they differ) are kept; per participant, at most a fixed number
 * of pins. The history of changes goes to the audit trail, which the store bounds by size
 * and age (quotas.audit_max_*).
 */
import { createHash } from "node:crypto";
import { isRecord } from "../wire/values.js";

/** The fields of a tool that make up its definition: what is hashed and compared. */
export interface Definition {
  name: string;
  title?: unknown;
  description?: unknown;
  inputSchema?: unknown;
  outputSchema?: unknown;
  annotations?: unknown;
  execution?: unknown;
}

/** A change of one tool's definition, as the audit trail and a proposal's card show it. */
export interface DefinitionChange {
  participant: string;
  tool: string;
  /** Digest of the definition last confirmed (or first seen). */
  from: string;
  /** Digest of the new definition. */
  to: string;
  /** In words: "description changed", "new argument `command`", "destructiveHint removed". */
  changes: string[];
  ts: string;
  /** How many times this tool's definition has changed since the gateway first saw it (this one included). */
  count: number;
}

/**
 * Whether the `count`th change of one tool goes into the audit trail: every one of the first
 * few, then one in a hundred (each saying how many there were), so a server that flips a
 * tool endlessly cannot push the rest of the space's history out of the bounded trail.
 */
export function auditable(count: number): boolean {
  return count <= 20 || count % 100 === 0;
}

interface Pin {
  digest: string;
  def: Definition;
  /** When this tool was first seen (any definition). */
  firstSeen: number;
  /** When the current definition was first seen. */
  since: number;
  /** The digest a person confirmed (or the first one seen). */
  confirmed: string;
  /** The confirmed definition, kept only while it differs from the current one. */
  confirmedDef?: Definition | undefined;
  /** Changes seen so far. */
  count: number;
}

/** What the decision point needs of a tool's pin. */
export interface PinState {
  digest: string;
  /** The current definition is the one confirmed. */
  confirmed: boolean;
  /** When the current definition was first seen (ms). */
  since: number;
  firstSeen: number;
}

/** Most pins kept per participant: its tools now, and some it dropped (a tool removed and re-added is still compared). */
const MAX_PINS_PER_PARTICIPANT = 10_000;
/** Most changes named on one card or audit entry; the rest are counted. */
const MAX_CHANGES = 20;

/** Canonical JSON: object keys sorted at every depth, `undefined` fields left out. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? "null" : canonical(x))).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v as Record<string, unknown>)
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

export function definitionOf(t: Definition): Definition {
  return {
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: t.inputSchema,
    outputSchema: t.outputSchema,
    annotations: t.annotations,
    execution: t.execution,
  };
}

export function digestOf(def: Definition): string {
  return createHash("sha256")
    .update(canonical(definitionOf(def)))
    .digest("hex");
}

/** A server-given name, short and printable, for a sentence about it. */
const named = (s: string): string => {
  const clean = s.replace(/[^\p{L}\p{N}_.:/-]/gu, "?");
  return clean.length > 48 ? `${clean.slice(0, 47)}…` : clean;
};
const same = (a: unknown, b: unknown): boolean => canonical(a) === canonical(b);

/** The difference between two definitions of one tool, in words for a person. */
export function describeChange(before: Definition, after: Definition): string[] {
  const out: string[] = [];
  const field = (label: string, a: unknown, b: unknown): void => {
    if (same(a, b)) return;
    out.push(a === undefined ? `${label} added` : b === undefined ? `${label} removed` : `${label} changed`);
  };
  field("title", before.title, after.title);
  field("description", before.description, after.description);
  const inA = isRecord(before.inputSchema) ? before.inputSchema : {};
  const inB = isRecord(after.inputSchema) ? after.inputSchema : {};
  const propsA = isRecord(inA["properties"]) ? inA["properties"] : {};
  const propsB = isRecord(inB["properties"]) ? inB["properties"] : {};
  const reqA = new Set(Array.isArray(inA["required"]) ? inA["required"].filter((x): x is string => typeof x === "string") : []);
  const reqB = new Set(Array.isArray(inB["required"]) ? inB["required"].filter((x): x is string => typeof x === "string") : []);
  for (const k of Object.keys(propsB).sort())
    if (!(k in propsA)) out.push(`new argument \`${named(k)}\`${reqB.has(k) ? " (required)" : ""}`);
  for (const k of Object.keys(propsA).sort()) if (!(k in propsB)) out.push(`argument \`${named(k)}\` removed`);
  for (const k of Object.keys(propsA).sort()) if (k in propsB && !same(propsA[k], propsB[k])) out.push(`argument \`${named(k)}\` changed`);
  for (const k of [...reqB].sort()) if (!reqA.has(k) && k in propsA) out.push(`argument \`${named(k)}\` now required`);
  for (const k of [...reqA].sort()) if (!reqB.has(k) && k in propsB) out.push(`argument \`${named(k)}\` no longer required`);
  const rest = (s: Record<string, unknown>) => ({ ...s, properties: undefined, required: undefined });
  if (!same(rest(inA), rest(inB))) out.push("input schema changed");
  field("output schema", before.outputSchema, after.outputSchema);
  const anA = isRecord(before.annotations) ? before.annotations : {};
  const anB = isRecord(after.annotations) ? after.annotations : {};
  for (const k of [...new Set([...Object.keys(anA), ...Object.keys(anB)])].sort()) {
    if (same(anA[k], anB[k])) continue;
    const show = (v: unknown) =>
      typeof v === "boolean" || typeof v === "number" ? String(v) : typeof v === "string" ? JSON.stringify(named(v)) : "…";
    if (anA[k] === undefined) out.push(`${named(k)} added (${show(anB[k])})`);
    else if (anB[k] === undefined) out.push(`${named(k)} removed`);
    else out.push(`${named(k)} changed from ${show(anA[k])} to ${show(anB[k])}`);
  }
  field("execution", before.execution, after.execution);
  if (out.length === 0) out.push("definition changed");
  return out.length > MAX_CHANGES ? [...out.slice(0, MAX_CHANGES), `and ${out.length - MAX_CHANGES} more changes`] : out;
}

/** A tool's confirmed definition, as the ledger keeps it across restarts (space/ledger.ts). */
export interface PinRecord {
  type: "pin";
  owner: string;
  tool: string;
  digest: string;
}

export class Pins {
  private readonly byOwner = new Map<string, Map<string, Pin>>();
  /** Confirmed digests read back from the ledger: a tool first listed after a restart is compared with them. */
  private readonly durable = new Map<string, Map<string, string>>();
  /**
   * Told of each digest to keep (each tool's first definition, and every one a person
   * confirms): the space's ledger, built after the registry it restores pins into, subscribes
   * to write it behind. With no subscriber, confirmations last until a restart.
   */
  readonly confirmed = new Set<(r: PinRecord) => void>();

  private keep(r: PinRecord): void {
    for (const write of this.confirmed) write(r);
  }

  /** A confirmed digest read back from the ledger (or just written). */
  apply(r: PinRecord): void {
    let kept = this.durable.get(r.owner);
    if (!kept) {
      kept = new Map();
      this.durable.set(r.owner, kept);
    }
    kept.set(r.tool, r.digest);
  }

  /** Every confirmed digest, for the ledger's compaction: what was confirmed in memory, else what was read back. */
  snapshot(): PinRecord[] {
    const out: PinRecord[] = [];
    for (const [owner, kept] of this.durable) {
      const live = this.byOwner.get(owner);
      for (const [tool, digest] of kept) if (!live?.has(tool)) out.push({ type: "pin", owner, tool, digest });
    }
    for (const [owner, pins] of this.byOwner) for (const [tool, pin] of pins) out.push({ type: "pin", owner, tool, digest: pin.confirmed });
    return out;
  }

  /**
   * A participant's tools as it registered them now: pins new tools, and returns the tools
   * whose definition differs from the one they had.
   */
  observe(participant: string, tools: Iterable<Definition>, at = Date.now()): DefinitionChange[] {
    let pins = this.byOwner.get(participant);
    if (!pins) {
      pins = new Map();
      this.byOwner.set(participant, pins);
    }
    const changes: DefinitionChange[] = [];
    const present = new Set<string>();
    for (const t of tools) {
      present.add(t.name);
      const def = definitionOf(t);
      const digest = digestOf(def);
      const pin = pins.get(t.name);
      if (!pin) {
        // Listed for the first time since the start: held to what was confirmed before it, if anything was.
        const kept = this.durable.get(participant)?.get(t.name);
        pins.set(t.name, {
          digest,
          def,
          firstSeen: at,
          since: at,
          confirmed: kept ?? digest,
          count: kept === undefined || kept === digest ? 0 : 1,
        });
        if (kept === undefined) this.keep({ type: "pin", owner: participant, tool: t.name, digest });
        else if (kept !== digest) {
          // What it was is not known any more, only that it was something else.
          changes.push({
            participant,
            tool: t.name,
            from: kept,
            to: digest,
            changes: ["definition changed while the gateway was stopped"],
            ts: new Date(at).toISOString(),
            count: 1,
          });
        }
        continue;
      }
      if (pin.digest === digest) continue;
      const before = pin.def;
      // Compared with what was last confirmed: a → b → c shows a person a → c.
      if (pin.digest === pin.confirmed) pin.confirmedDef = before;
      pin.count++;
      changes.push({
        participant,
        tool: t.name,
        from: pin.digest,
        to: digest,
        changes: describeChange(before, def),
        ts: new Date(at).toISOString(),
        count: pin.count,
      });
      pin.digest = digest;
      pin.def = def;
      pin.since = at;
      if (digest === pin.confirmed) pin.confirmedDef = undefined;
    }
    if (pins.size > MAX_PINS_PER_PARTICIPANT) {
      for (const name of pins.keys()) {
        if (pins.size <= MAX_PINS_PER_PARTICIPANT) break;
        if (!present.has(name)) pins.delete(name);
      }
    }
    return changes;
  }

  state(participant: string, tool: string): PinState | undefined {
    const pin = this.byOwner.get(participant)?.get(tool);
    return pin && { digest: pin.digest, confirmed: pin.digest === pin.confirmed, since: pin.since, firstSeen: pin.firstSeen };
  }

  /** What changed since the confirmed definition, while the tool is unconfirmed. */
  unconfirmed(participant: string, tool: string): { from: string; to: string; changes: string[] } | undefined {
    const pin = this.byOwner.get(participant)?.get(tool);
    if (!pin || pin.digest === pin.confirmed || !pin.confirmedDef) return undefined;
    return { from: pin.confirmed, to: pin.digest, changes: describeChange(pin.confirmedDef, pin.def) };
  }

  /** A person approved a call of `participant/tool` as defined by `digest`: if that is still its definition, it is confirmed. */
  confirm(participant: string, tool: string, digest: string): boolean {
    const pin = this.byOwner.get(participant)?.get(tool);
    if (!pin || pin.digest !== digest || pin.confirmed === digest) return false;
    pin.confirmed = digest;
    pin.confirmedDef = undefined;
    this.keep({ type: "pin", owner: participant, tool, digest });
    return true;
  }

  /** Definitions held in memory for a participant (for tests and figures): current ones plus confirmed ones that differ. */
  held(participant: string): number {
    let n = 0;
    for (const p of this.byOwner.get(participant)?.values() ?? []) n += p.confirmedDef ? 2 : 1;
    return n;
  }
}
