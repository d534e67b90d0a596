/**
 * A participant that did not start, or stopped, said in one line a person can act on:
 * `helper: command "no-such-binary" not found (spawn ENOENT)`, or for a crash the last
 * line of its log that says what went wrong, rather than "exited with code 1" with the
 * cause buried in many lines of JSON. What comes from a log is sanitised: it reaches a
 * terminal.
 */
import { closeSync, openSync, readSync, fstatSync } from "node:fs";
import { oneLine } from "./terminal/format.js";

/** Why a command could not be spawned, from its error (`spawn x ENOENT`, …). */
export function spawnFailure(command: string, err: Error): string {
  const code = (err as NodeJS.ErrnoException).code;
  const name = oneLine(command, 80);
  if (code === "ENOENT") return `command "${name}" not found (spawn ENOENT)`;
  if (code === "EACCES") return `command "${name}" is not executable (spawn EACCES)`;
  return `could not start command "${name}" (${oneLine(err.message, 160)})`;
}

const TAIL_BYTES = 64 * 1024;
const ERRORISH = /\b(error|exception|fatal|panic|traceback|cannot|can't|could not|failed|not found|denied|refused|invalid|missing)\b/i;
const LEVEL_ERROR = 50;

/** What one log line says, if anything: a pino/JSON line's message (with its error), or the text. */
function lineSays(line: string): { text: string; error: boolean } | undefined {
  const t = line.trim();
  if (!t || t.startsWith("--- ")) return undefined;
  if (t.startsWith("{")) {
    try {
      const o = JSON.parse(t) as Record<string, unknown>;
      const err = o["err"] as { message?: unknown; type?: unknown } | string | undefined;
      const errText = typeof err === "string" ? err : typeof err?.message === "string" ? err.message : undefined;
      const msg = typeof o["msg"] === "string" ? o["msg"] : typeof o["message"] === "string" ? o["message"] : undefined;
      const text = [msg, errText].filter((x) => x && x.length > 0).join(": ");
      if (!text) return undefined;
      const level =
        typeof o["level"] === "number" ? o["level"] : typeof o["level"] === "string" && /error|fatal/i.test(o["level"]) ? LEVEL_ERROR : 0;
      return { text, error: level >= LEVEL_ERROR || errText !== undefined };
    } catch {
      // not JSON after all: the text itself
    }
  }
  // A stack frame says where, not what.
  if (/^at\s/.test(t)) return undefined;
  return { text: t, error: ERRORISH.test(t) };
}

/**
 * The last line of the log's last run (after the latest `--- … starting` marker) that
 * reads as an error; else its last line with any text; undefined for an empty log.
 */
export function lastErrorLine(logFile: string): string | undefined {
  let text: string;
  try {
    const fd = openSync(logFile, "r");
    try {
      const size = fstatSync(fd).size;
      const start = Math.max(0, size - TAIL_BYTES);
      const buf = Buffer.alloc(size - start);
      readSync(fd, buf, 0, buf.length, start);
      text = buf.toString("utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  const marker = text.lastIndexOf("\n--- ");
  const run = (marker >= 0 ? text.slice(marker + 1) : text).split("\n");
  let fallback: string | undefined;
  for (let i = run.length - 1; i >= 0; i--) {
    const said = lineSays(run[i]!);
    if (!said) continue;
    if (said.error) return oneLine(said.text, 200);
    fallback ??= said.text;
  }
  return fallback === undefined ? undefined : oneLine(fallback, 200);
}
