/**
 * What the measurements share: the context run.ts hands each scenario, and the small
 * helpers they use. Each scenario has its own file (run.ts names them); each starts its
 * own server processes (so memory left over by one scenario does not show up in the
 * next), drives them with the same client code, and returns rows for the report. Every
 * loop is bounded in count and in time.
 */
import { mkdirSync } from "node:fs";
import { join as joinPath } from "node:path";
import { sleep } from "./procs.js";

export interface Context {
  dir: string;
  /** space.yaml with 5,100 participants and limits out of the way. */
  benchYaml: string;
  /** The same, but with the gateway's default max_buffered_bytes. */
  slowYaml: string;
  /** A three-participant space with default limits. */
  smallYaml: string;
  progress(line: string): void;
  /** Records how busy other processes kept the machine (in cores) during a measurement. */
  noise(cores: number): void;
}

/**
 * A round during which other processes kept more than this much of a core busy does not
 * count towards a scenario's rounds; the scenario runs extra rounds (up to a cap) instead.
 */
export const NOISY_CORES = 0.3;

export const KIB = 1024;
export const MIB = 1024 * 1024;

export function ids(prefix: string, from: number, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}${from + i}`);
}

export function pct(part: number, whole: number): string {
  return `${Math.round((part / whole) * 100)}%`;
}

export function subdir(ctx: Context, name: string): string {
  const d = joinPath(ctx.dir, name);
  mkdirSync(d, { recursive: true });
  return d;
}

/** Polls `done` every 10 ms for at most `maxMs`. */
export async function until(done: () => boolean, maxMs: number): Promise<boolean> {
  const deadline = performance.now() + maxMs;
  while (!done()) {
    if (performance.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}
