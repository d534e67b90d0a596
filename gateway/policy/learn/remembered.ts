/**
 * What people said of suggestions, kept in the state directory (`suggestions.json`) so it
 * holds across restarts: which were dismissed (by whom, when); which rejected calls a
 * suggestion would cover each rejecter confirmed (by the calls' ids: a new rejection of a
 * covered call is not covered by an old word, so the rejecter is asked again); and who gave
 * a destructive tool's rule the second person's word. Written whole to a temporary file and
 * renamed, so a crash leaves the old file or the new one.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { isRecord } from "../../wire/values.js";

export interface Remembered {
  dismissed: Record<string, { by: string; at: string }>;
  /** Suggestion id → person → when they confirmed covering which of the calls they rejected. */
  confirmed: Record<string, Record<string, { at: string; calls: string[] }>>;
  /** Suggestion id → person → when they gave a destructive tool's rule their word as the second person. */
  seconded: Record<string, Record<string, string>>;
}

/** The most suggestions remembered; the oldest go first. */
const MAX = 5_000;
/** The most calls one confirmation names. */
const MAX_CALLS = 1_000;

const obj = (v: unknown) => (isRecord(v) ? (v as Record<string, unknown>) : {});

export class SuggestionMemory {
  private state: Remembered;
  private readonly file: string;

  constructor(stateDir: string) {
    this.file = path.join(stateDir, "suggestions.json");
    this.state = { dismissed: {}, confirmed: {}, seconded: {} };
    if (existsSync(this.file)) {
      try {
        const read = JSON.parse(readFileSync(this.file, "utf8")) as Partial<Remembered>;
        // A confirmation without the calls it covered (an older file) covers none: the rejecter is asked again.
        const confirmed: Remembered["confirmed"] = {};
        for (const [id, people] of Object.entries(obj(read.confirmed)))
          for (const [person, v] of Object.entries(obj(people))) {
            const calls = obj(v)["calls"];
            if (!Array.isArray(calls) || !calls.every((c) => typeof c === "string")) continue;
            confirmed[id] ??= {};
            confirmed[id]![person] = { at: String(obj(v)["at"] ?? ""), calls: calls as string[] };
          }
        this.state = {
          dismissed: obj(read.dismissed) as Remembered["dismissed"],
          confirmed,
          seconded: obj(read.seconded) as Remembered["seconded"],
        };
      } catch {
        // An unreadable file forgets dismissals and confirmations: suggestions show again, nothing is allowed by it.
      }
    }
  }

  isDismissed(id: string): boolean {
    return Object.hasOwn(this.state.dismissed, id);
  }

  dismissedCount(): number {
    return Object.keys(this.state.dismissed).length;
  }

  /** Who confirmed every call they rejected among `rejected` (person → the calls of theirs it would cover). */
  confirmedBy(id: string, rejected: Record<string, readonly string[]>): string[] {
    const mine = this.state.confirmed[id] ?? {};
    return Object.entries(rejected)
      .filter(([person, calls]) => {
        const said = mine[person]?.calls;
        return said !== undefined && calls.every((c) => said.includes(c));
      })
      .map(([person]) => person)
      .sort();
  }

  /** Who gave the second person's word on suggestion `id`. */
  secondedBy(id: string): string[] {
    return Object.keys(this.state.seconded[id] ?? {}).sort();
  }

  dismiss(id: string, by: string): void {
    this.state.dismissed[id] = { by, at: new Date().toISOString() };
    this.save();
  }

  /** `by` confirms the rule may cover `calls`, the calls they rejected that it covers now. */
  confirm(id: string, by: string, calls: readonly string[]): void {
    this.state.confirmed[id] ??= {};
    this.state.confirmed[id]![by] = { at: new Date().toISOString(), calls: calls.slice(0, MAX_CALLS) };
    this.save();
  }

  second(id: string, by: string): void {
    this.state.seconded[id] ??= {};
    this.state.seconded[id]![by] = new Date().toISOString();
    this.save();
  }

  private save(): void {
    for (const key of ["dismissed", "confirmed", "seconded"] as const) {
      const ids = Object.keys(this.state[key]);
      for (const id of ids.slice(0, Math.max(0, ids.length - MAX))) delete this.state[key][id];
    }
    mkdirSync(path.dirname(this.file), { recursive: true });
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.state), { mode: 0o600 });
    renameSync(tmp, this.file);
  }
}
