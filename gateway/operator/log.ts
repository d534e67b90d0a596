/**
 * pino, set up once per process. Tokens never reach a log line: the redaction list
 * covers every place a token travels (join frames, headers, config objects).
 */
import { chmodSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { pino, type Logger } from "pino";

export type { Logger };

export const REDACT_PATHS = [
  "token",
  "*.token",
  "*.*.token",
  "authorization",
  "headers.authorization",
  "req.headers.authorization",
  "req.url",
];

export interface LogOptions {
  /** A file path, or "-" for stderr. Absent: discard (tests). */
  file?: string | undefined;
  level?: string | undefined;
}

export function createLogger(opts: LogOptions = {}): Logger {
  const base = { level: opts.level ?? "info", redact: { paths: REDACT_PATHS, censor: "[redacted]" } };
  if (!opts.file) return pino({ ...base, enabled: false });
  if (opts.file === "-") return pino(base, pino.destination(2));
  mkdirSync(dirname(opts.file), { recursive: true, mode: 0o700 });
  // Owner only (docs/security.md): a log names participants, tools and arguments. A file
  // an older version created 0644 is narrowed too; one that is not ours to chmod is left.
  try {
    chmodSync(opts.file, 0o600);
  } catch {
    // not there yet (created 0600 below), or not ours
  }
  return pino(base, pino.destination({ dest: opts.file, mkdir: true, sync: false, mode: 0o600 }));
}
