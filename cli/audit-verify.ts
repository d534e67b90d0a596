/**
 * `mewgate audit verify`: checks the audit trail's chain of digests (gateway/store/chain.ts)
 * from the oldest record kept to the newest, and reports the first break — the record's
 * number, file and byte, and what differs — with a non-zero exit. A torn tail (a crash in
 * the middle of a write) is said as such and is no break. Reads only; a gateway may run.
 */
import { isHistoryRecord } from "../gateway/space/ledger.js";
import { verifyHistory } from "../gateway/store/verify.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { loadSpace, spaceFile } from "./space.js";

export function runAuditVerify(opts: { config?: string | undefined; stateDir?: string | undefined; json?: boolean | undefined }, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const stateDir = opts.stateDir && !opts.config ? opts.stateDir : (await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env })).stateDir;
    const r = verifyHistory(stateDir, isHistoryRecord);
    if (opts.json) {
      io.stdout.write(`${JSON.stringify(r)}\n`);
      return r.ok ? 0 : 1;
    }
    const notes: string[] = [];
    if (r.unchained) notes.push(`${r.unchained} older record(s) from before digests were kept, not checked`);
    if (r.checkpoints) notes.push(`retention dropped ${r.dropped} record(s) at ${r.checkpoints} checkpoint(s), the chain checked across each`);
    if (r.torn) notes.push(`${r.torn.file} ends in a torn frame at byte ${r.torn.offset} (${r.torn.reason}): a crash mid-write, never acknowledged; the gateway cuts it off when it starts`);
    if (r.ok) {
      io.stdout.write(`audit trail intact: ${r.records} record(s) in ${stateDir}${r.head ? `, head ${r.head.slice(0, 16)}` : ""}\n`);
      for (const n of notes) io.stdout.write(`  ${n}\n`);
      return 0;
    }
    const b = r.break!;
    io.stdout.write(`audit trail BROKEN at record #${b.index} (${b.file}, frame at byte ${b.offset}): ${b.reason}\n`);
    if (b.record) io.stdout.write(`  record: ${JSON.stringify(b.record)}\n`);
    if (b.expected !== undefined) io.stdout.write(`  expected ${b.expected || "(start)"}\n  found    ${b.found || "(start)"}\n`);
    io.stdout.write(`  ${r.records - (b.record ? 1 : 0)} record(s) before it check out\n`);
    for (const n of notes) io.stdout.write(`  ${n}\n`);
    return 1;
  });
}
