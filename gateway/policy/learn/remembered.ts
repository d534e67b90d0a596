/**
 * What people said of suggestions, kept in the state directory (`suggestions.json`) so it
 * holds across restarts: which were dismissed (by whom, when), and which rejected calls a
 * suggestion would cover their rejecter has confirmed. Written whole to a temporary file
 * and renamed, so a crash leaves the old file or the new one.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";

export interface Remembered {
  dismissed: Record<string, { by: string; at: string }>;
  /** Suggestion id → person → when they confirmed covering the calls they rejected. */
  confirmed: Record<string, Record<string, string>>;
}

/** The most suggestions remembered; the oldest go first. */
const MAX = 5_000;

export class SuggestionMemory {
  private state: Remembered;
  private readonly file: string;

  constructor(stateDir: string) {
    this.file = path.join(stateDir, "suggestions.json");
    this.state = { dismissed: {}, confirmed: {} };
    if (existsSync(this.file)) {
      try {
        const read = JSON.parse(readFileSync(this.file, "utf8")) as Partial<Remembered>;
        const obj = (v: unknown) => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, never>) : {});
        this.state = { dismissed: obj(read.dismissed), confirmed: obj(read.confirmed) };
      } catch {
        // An unreadable file forgets dismissals: suggestions show again, nothing is allowed by it.
      }
    }
  }

  isDismissed(id: string): boolean {
    return Object.hasOwn(this.state.dismissed, id);
  }

  dismissedCount(): number {
    return Object.keys(this.state.dismissed).length;
  }

  confirmedBy(id: string): string[] {
    return Object.keys(this.state.confirmed[id] ?? {});
  }

  dismiss(id: string, by: string): void {
    this.state.dismissed[id] = { by, at: new Date().toISOString() };
    this.save();
  }

  confirm(id: string, by: string): void {
    this.state.confirmed[id] ??= {};
    this.state.confirmed[id]![by] = new Date().toISOString();
    this.save();
  }

  private save(): void {
    for (const key of ["dismissed", "confirmed"] as const) {
      const ids = Object.keys(this.state[key]);
      for (const id of ids.slice(0, Math.max(0, ids.length - MAX))) delete this.state[key][id];
    }
    mkdirSync(path.dirname(this.file), { recursive: true });
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.state), { mode: 0o600 });
    renameSync(tmp, this.file);
  }
}
