/**
 * `mewgate audit verify`: checks the audit trail's chain of digests (gateway/store/chain.ts)
 * from the oldest record kept to the newest, and reports the first break — the record's
 * number, file and byte, and what differs — with a non-zero exit. A torn tail (a crash in
 * the middle of a write) is said as such and is no break. Reads only; a gateway may run.
 *
 * The chain catches a record changed, removed, inserted or reordered, but not whole records
 * cut off the end: what is left still links. `mewgate audit head` prints the head digest and
 * the record count, for a cron job to keep outside the state directory; `audit verify
 * --head <digest>` (or `--pinned <file>`, a file holding that output) then fails unless the
 * chain still passes through that head. State repairs (gateway/space/repair.ts) are listed.
 */
import { selfCommand } from "./invocation.js";
import { readFileSync } from "node:fs";
import { isHistoryRecord, readAudit } from "../gateway/index.js";
import { verifyHistory } from "../gateway/index.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { CliError, loadSpace, spaceFile } from "./space.js";

interface VerifyOptions {
  config?: string | undefined;
  stateDir?: string | undefined;
  json?: boolean | undefined;
  head?: string | undefined;
  pinned?: string | undefined;
}

async function stateDirOf(opts: VerifyOptions, io: Io): Promise<string> {
  return opts.stateDir && !opts.config
    ? opts.stateDir
    : (await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env })).stateDir;
}

/** The first break of the chain in `stateDir`, in words, or undefined when it holds (for `mewgate audit`). */
export function chainBreak(stateDir: string): string | undefined {
  const r = verifyHistory(stateDir, isHistoryRecord);
  return r.ok
    ? undefined
    : `audit trail BROKEN at record #${r.break!.index} (${r.break!.file}, frame at byte ${r.break!.offset}): ${r.break!.reason}`;
}

/** The head to check against: `--head <digest>`, or the first digest in `--pinned <file>`. */
function pinnedHead(opts: VerifyOptions): string | undefined {
  if (opts.head !== undefined) {
    if (!/^([0-9a-f]{64})?$/.test(opts.head))
      throw new CliError(`--head "${opts.head.slice(0, 80)}": expected a 64-character hex digest (from ${selfCommand()} audit head)`);
    return opts.head;
  }
  if (opts.pinned === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(opts.pinned, "utf8");
  } catch (err) {
    throw new CliError(`--pinned ${opts.pinned}: ${(err as Error).message}`);
  }
  const m = /\b[0-9a-f]{64}\b/.exec(text);
  if (!m) throw new CliError(`--pinned ${opts.pinned}: no head digest in it (write it with: ${selfCommand()} audit head > ${opts.pinned})`);
  return m[0];
}

/** `mewgate audit head`: the digest the next record will link to, and how many records lead to it. */
export function runAuditHead(opts: VerifyOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const stateDir = await stateDirOf(opts, io);
    const r = verifyHistory(stateDir, isHistoryRecord);
    if (!r.ok) {
      io.stderr.write(`mewgate: ${chainBreak(stateDir)}; no head to pin\n`);
      return 1;
    }
    const at = new Date().toISOString();
    if (opts.json) io.stdout.write(`${JSON.stringify({ head: r.head ?? "", records: r.records, at })}\n`);
    else io.stdout.write(`${r.head ?? ""} ${r.records} ${at}\n`);
    return 0;
  });
}

export function runAuditVerify(opts: VerifyOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const pinned = pinnedHead(opts);
    const stateDir = await stateDirOf(opts, io);
    const r = verifyHistory(stateDir, isHistoryRecord, pinned === undefined ? {} : { pinned });
    const repairs = readAudit(stateDir).filter((e) => e.event === "repaired");
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ ...r, repairs })}\n`);
      return r.ok ? 0 : 1;
    }
    const notes: string[] = [];
    if (r.unchained) notes.push(`${r.unchained} older record(s) from before digests were kept, not checked`);
    if (r.checkpoints)
      notes.push(`retention dropped ${r.dropped} record(s) at ${r.checkpoints} checkpoint(s), the chain checked across each`);
    if (r.torn)
      notes.push(
        `${r.torn.file} ends in a torn frame at byte ${r.torn.offset} (${r.torn.reason}): a crash mid-write, never acknowledged; the gateway cuts it off when it starts`,
      );
    if (r.pinned?.found) notes.push(`the pinned head ${r.pinned.head.slice(0, 16)} is in the chain (after record #${r.pinned.after})`);
    for (const e of repairs) notes.push(`REPAIRED at ${e.ts}: ${(e.changes ?? []).join("; ")}`);
    if (r.ok) {
      io.stdout.write(
        `audit trail intact${repairs.length ? ` since ${repairs.length} repair(s)` : ""}: ${r.records} record(s) in ${stateDir}${r.head ? `, head ${r.head.slice(0, 16)}` : ""}\n`,
      );
      for (const n of notes) io.stdout.write(`  ${n}\n`);
      return 0;
    }
    const b = r.break!;
    io.stdout.write(
      `audit trail BROKEN at record #${b.index} (${b.file}${b.offset >= 0 ? `, frame at byte ${b.offset}` : ""}): ${b.reason}\n`,
    );
    if (b.record) io.stdout.write(`  record: ${JSON.stringify(b.record)}\n`);
    if (b.expected !== undefined) io.stdout.write(`  expected ${b.expected || "(start)"}\n  found    ${b.found || "(start)"}\n`);
    io.stdout.write(`  ${r.records - (b.record ? 1 : 0)} record(s) before it check out\n`);
    for (const n of notes) io.stdout.write(`  ${n}\n`);
    return 1;
  });
}
