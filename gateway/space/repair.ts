/**
 * `mewgate state repair` for a space: the store cuts the journal at its first unreadable
 * frame (store/index.ts `repairStore`); this says what the cut must not do.
 *
 * A proposal whose `proposed` record was kept but whose later records were cut could come
 * back as it was before them: a two-approval call that was approved and ran would be
 * pending "1 of 2" again, and one more approval would run it a second time. So every
 * proposal the kept part leaves live (pending, interrupted, approved, routed) and that the
 * dropped bytes name is ended as `failed`, with a reason that says a repair dropped what
 * became of it: it is shown, never run again. The dropped part may be unreadable, so it is
 * searched for the proposal's id as bytes, not parsed.
 *
 * The repair itself is written to the audit trail (`event: "repaired"`, chained like every
 * record): where the journal was cut, how many bytes went aside and where, and which
 * proposals were ended. `audit verify` lists it.
 */
import { repairStore } from "../store/index.js";
import { awaiting, type Proposal } from "../proposals/book.js";
import type { AuditRecord, ProposalState } from "../audit/entry.js";
import type { StateRecord } from "./ledger.js";

/** Most proposal ids a repair names in its audit record; past it, the count. */
const MAX_NAMED = 200;

export interface SpaceRepair {
  kept: number;
  movedTo?: string | undefined;
  offset?: number | undefined;
  /** Proposals the repair ended instead of letting them come back as they were. */
  ended: string[];
}

const LIVE = (s: ProposalState): boolean => awaiting(s) || s === "approved" || s === "routed";

export function repairSpaceState(dir: string, now = new Date()): SpaceRepair {
  let ended: string[] = [];
  const r = repairStore<StateRecord>(dir, {
    isHistory: (rec) => rec.type === "audit",
    after(kept, dropped, cut) {
      const live = new Map<string, Proposal>();
      for (const rec of kept) {
        if (rec.type === "proposed") live.set(rec.proposal.id, { ...rec.proposal });
        else if (rec.type === "state") {
          const p = live.get(rec.id);
          if (p) p.state = rec.patch.state;
        } else if (rec.type === "ended") for (const [id] of rec.ended) live.delete(id);
      }
      ended = [...live.values()].filter((p) => LIVE(p.state) && dropped.includes(Buffer.from(p.id, "utf8"))).map((p) => p.id);
      const ts = now.toISOString();
      const reason = "its later records were lost in a state repair: it may have been decided or run, so it is not offered again";
      const out: StateRecord[] = ended.map((id): StateRecord => ({ type: "state", id, ts, patch: { state: "failed", reason } }));
      const named = ended.slice(0, MAX_NAMED);
      const changes = [
        `journal cut at byte ${cut.offset}; ${dropped.length} byte(s) moved to ${cut.movedTo}`,
        ended.length === 0
          ? "no live proposal was named in the dropped part"
          : `ended as failed, not revived: ${named.join(", ")}${ended.length > named.length ? ` and ${ended.length - named.length} more` : ""}`,
      ];
      const audit: AuditRecord = {
        type: "audit",
        entry: { ts, event: "repaired", proposal: "", proposer: "operator", owner: "", method: "", changes },
      };
      return [...out, audit];
    },
  });
  return { kept: r.kept, movedTo: r.movedTo, offset: r.offset, ended };
}
