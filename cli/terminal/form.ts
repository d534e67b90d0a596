/**
 * Walking a person through a form at the interactive terminal, one field per line of
 * input. Everything the asker wrote is sanitized and bounded before it is shown.
 */
import { parseAnswer, type Field } from "./elicit.js";
import { sanitize, truncate, type Style } from "./format.js";
import type { Ask } from "./session.js";

/** Most lines of the asker's message shown, and of choices listed. */
const MESSAGE_LINES = 30;
const CHOICE_LINES = 30;

export type Step =
  | { done: false; lines: string[] }
  | { done: true; result: { action: "accept"; content?: Record<string, unknown> } | { action: "decline" | "cancel" }; lines: string[] };

export class FormWalk {
  private index = 0;
  private readonly values: Record<string, unknown> = {};

  constructor(
    readonly ask: Ask,
    private readonly style: Style,
    private readonly width: number,
  ) {}

  /** What is printed when the form starts. */
  opening(): string[] {
    const s = this.style;
    const { ask } = this;
    const about = ask.about ? ` (about ${truncate(ask.about, 120)})` : "";
    const lines = [s.yellow(`── ${sanitize(ask.from)} asks you${about} ${"─".repeat(10)}`)];
    const message = wrap(ask.form.message, this.width - 2);
    lines.push(...message.slice(0, MESSAGE_LINES).map((l) => `  ${l}`));
    if (message.length > MESSAGE_LINES) lines.push(s.dim(`  ⋯ ${message.length - MESSAGE_LINES} more lines not shown`));
    if (ask.form.mode === "url") {
      // Shown whole, never opened from here: the person decides where their browser goes.
      lines.push("  open this address yourself if you trust it:", ...wrap(ask.form.url, this.width - 4).map((l) => `    ${s.bold(l)}`));
      lines.push(s.yellow("y when you have done it · n to decline · /cancel"));
      return lines;
    }
    lines.push(
      s.yellow(
        `${ask.form.fields.length} field${ask.form.fields.length === 1 ? "" : "s"} · Enter a value for each (empty: the default, or skip) · /decline · /cancel`,
      ),
    );
    if (ask.form.fields.length > 0) lines.push(...this.fieldLines());
    return lines;
  }

  prompt(): string {
    const s = this.style;
    if (this.ask.form.mode === "url") return s.yellow("done? (y/n)> ");
    const f = this.field();
    if (!f) return s.yellow("> ");
    const hint = f.type === "boolean" ? "y/n" : f.type === "choice" ? "number" : f.type === "choices" ? "numbers, comma-separated" : f.type;
    const def = f.default !== undefined ? ` = ${truncate(JSON.stringify(f.default), 40)}` : "";
    return s.yellow(`${truncate(f.title ?? f.name, 60)}${f.required ? "*" : ""} (${hint}${def})> `);
  }

  /** The person's line: the next field, a re-ask with the reason, or the answer. */
  enter(line: string): Step {
    const t = line.trim();
    if (t === "/decline") return { done: true, result: { action: "decline" }, lines: [this.style.dim("· declined")] };
    if (t === "/cancel") return { done: true, result: { action: "cancel" }, lines: [this.style.dim("· cancelled")] };
    if (this.ask.form.mode === "url") {
      if (/^(y|yes)$/i.test(t)) return { done: true, result: { action: "accept" }, lines: [this.style.dim("· told them you did")] };
      if (/^(n|no)$/i.test(t)) return { done: true, result: { action: "decline" }, lines: [this.style.dim("· declined")] };
      return { done: false, lines: [this.style.red("! answer y or n (or /cancel)")] };
    }
    const f = this.field();
    if (f) {
      const a = parseAnswer(f, line);
      if (!a.ok) return { done: false, lines: [this.style.red(`! ${a.error}`)] };
      if (!a.skip) this.values[f.name] = a.value;
      this.index++;
    }
    if (this.field()) return { done: false, lines: this.fieldLines() };
    const shown = Object.entries(this.values).map(([k, v]) => `${truncate(k, 40)}=${truncate(JSON.stringify(v), 60)}`);
    return {
      done: true,
      result: { action: "accept", content: { ...this.values } },
      lines: [this.style.dim(`· sent ${shown.join(", ") || "an empty form"}`)],
    };
  }

  private field(): Field | undefined {
    return this.ask.form.mode === "form" ? this.ask.form.fields[this.index] : undefined;
  }

  private fieldLines(): string[] {
    const f = this.field()!;
    const s = this.style;
    const lines: string[] = [];
    if (f.description) lines.push(s.dim(`  ${truncate(f.description, this.width - 2)}`));
    if (f.type === "choice" || f.type === "choices") {
      lines.push(...f.choices.slice(0, CHOICE_LINES).map((c, i) => `    ${i + 1}. ${truncate(c.label, this.width - 10)}`));
      if (f.choices.length > CHOICE_LINES) lines.push(s.dim(`    … ${f.choices.length - CHOICE_LINES} more: type the value`));
    }
    return lines;
  }
}

/** Sanitized lines of at most `width` characters, breaking at the text's own newlines too. */
function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  for (const raw of text.split("\n")) {
    const line = sanitize(raw);
    if (line.length === 0) out.push("");
    for (let i = 0; i < line.length; i += Math.max(10, width)) out.push(line.slice(i, i + Math.max(10, width)));
  }
  return out;
}
