/**
 * The scopes the terminal's `A` offers for an "always" approval, narrowest first (these
 * arguments only, then each path-like field's directory, then the whole tool) — the same
 * choices as the console's dialog (policy/scope.ts) — and the typed answer that picks one:
 * `yes` takes the first, `yes N` the N-th. Anything else confirms nothing.
 */
import { limitOptions, type AlwaysLimit } from "../../gateway/index.js";

export interface AlwaysChoice {
  limit: AlwaysLimit;
  text: string;
}

export function alwaysChoices(args: Record<string, unknown> | undefined): AlwaysChoice[] {
  const all = limitOptions(args);
  return [...all.filter((o) => o.limit !== "tool"), ...all.filter((o) => o.limit === "tool")];
}

/** The choice a typed answer names, or undefined (not confirmed). */
export function pickChoice(answer: string, choices: readonly AlwaysChoice[]): AlwaysChoice | undefined {
  const m = /^y(?:es)?(?:\s+(\d{1,3}))?$/i.exec(answer.trim());
  if (!m) return undefined;
  const n = m[1] === undefined ? 1 : Number(m[1]);
  return choices[n - 1];
}
