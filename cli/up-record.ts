/**
 * The record a running `up` leaves in its state directory (`up.pid`, `up.json`; read by
 * space.ts for `status`, `down` and the rest): refusing a second `up`, writing it, and
 * removing it if it is still ours.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import type { SpaceConfig } from "../gateway/index.js";
import { CliError, isOurUp, processArgv, processStartTicks, readUpRecord, upFiles, type UpRecord } from "./space.js";

/** Refuses to start a second `up` on the same state directory (two gateways would share its files). */
export function refuseIfRunning(stateDir: string): void {
  const rec = readUpRecord(stateDir);
  if (rec && rec.pid !== process.pid && isOurUp(rec)) {
    throw new CliError(
      `this space is already running (pid ${rec.pid}, ${rec.url}); stop it with mewgate down ${rec.config}, or use another --state-dir`,
    );
  }
}

export function writeUpRecord(
  stateDir: string,
  o: { url: string; config: SpaceConfig; file: string; nodes?: Array<{ name: string; url: string }> | undefined },
): { pid: string; json: string } {
  const files = upFiles(stateDir);
  const record: UpRecord = {
    pid: process.pid,
    url: o.url,
    space: o.config.space.id,
    config: resolve(o.file),
    stateDir,
    startTicks: processStartTicks(process.pid),
    argv: processArgv(process.pid) ?? process.argv,
    startedAt: new Date().toISOString(),
    ...(o.nodes ? { nodes: o.nodes } : {}),
  };
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(files.json, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
  writeFileSync(files.pid, `${process.pid}\n`, { mode: 0o600 });
  return files;
}

/** Removes the pid files if they are still ours (a newer `up` may have replaced them). */
export function removeUpRecord(files: { pid: string; json: string }): void {
  try {
    if (readFileSync(files.pid, "utf8").trim() !== String(process.pid)) return;
  } catch {
    return;
  }
  rmSync(files.pid, { force: true });
  rmSync(files.json, { force: true });
}
