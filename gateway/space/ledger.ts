/**
 * A space's durable state: proposals, decisions, grants and the audit trail, all through
 * one store (store/), so that a change is acknowledged only once it is on disk and a
 * failed write leaves the state exactly as before.
 *
 * A change is a `Plan` (proposals/book.ts and the space make them): the records to write, and
 * what to do in memory once they are written. `record` writes the records of one or more
 * plans as one transaction — an "always" approval and the grant it makes succeed or fail
 * together — and many transactions from many participants share one fsync (the store's
 * group commit). Only then are the plans applied, and only then does the caller tell
 * anyone.
 *
 * The audit trail is history, not state: it is written in the same transaction as the
 * change it describes, then moved to the store's archive when the journal is compacted,
 * where it is kept by age and size (quotas.audit_max_*). Start-up reads only live state.
 */
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import type { GrantBook, GrantRecord } from "../policy/grants.js";
import type { InviteRecord, Invites } from "../agents/invites.js";
import type { SwitchRecord, Switches } from "../agents/switches.js";
import type { Conversations, FrameRecord } from "../agents/conversations.js";
import type { PinRecord, Pins } from "../tools/pins.js";
import type { CapRecord, Caps } from "../policy/caps.js";
import type { Plan } from "../store/plan.js";
import type { ProposalBook, ProposalRecord } from "../proposals/book.js";
import { type AuditEntry, type AuditQuery, type AuditRecord, auditMatches, type ProposalState } from "../audit/entry.js";
import {
  type LegacyFile,
  type OpenReport,
  openStore,
  readHistory,
  type StateStore,
  type StoreHooks,
  type StoreOpener,
} from "../store/index.js";

export type StateRecord = ProposalRecord | GrantRecord | AuditRecord | InviteRecord | SwitchRecord | FrameRecord | PinRecord | CapRecord;
export type { Plan } from "../store/plan.js";

const DAY_MS = 86_400_000;
/**
 * Records written behind (`later`) that are handed to the store at once, whatever
 * `audit_flush_ms` says. Making, chaining and framing a batch of them runs on the event
 * loop in one go: 1,024 at a time stalled every participant ~1 ms each time and tripled
 * the round trip's p99 (`npm run bench -- rtt`); 32 keeps each stall under ~0.1 ms and still
 * writes one batch for dozens of calls.
 */
export const LATER_BATCH = 32;

/** States a proposal ends in (proposals/book.ts): an ended first-wave proposal is only remembered, not migrated. */
const ENDED = new Set<string>(["answered", "rejected", "withdrawn", "expired", "failed"]);

/**
 * The files the first wave kept state in; migrated on first start, then moved to
 * `legacy/`. In `proposals.jsonl` each proposal's lines are kept only while it is live.
 */
export const LEGACY: LegacyFile<StateRecord>[] = [
  {
    file: "proposals.jsonl",
    lifecycle: {
      id: (r) => (r.type === "proposed" ? r.proposal?.id : r.type === "state" ? r.id : undefined),
      ends: (r) => {
        const state = r.type === "proposed" ? r.proposal?.state : r.type === "state" ? r.patch?.state : undefined;
        return state !== undefined && ENDED.has(state) ? state : undefined;
      },
      // As many as the book remembers (ENDED_MEMORY), so a late decision still hears "already rejected".
      remember: 10_000,
      ended: (list) => [{ type: "ended", ended: list as Array<[string, ProposalState]> }],
    },
  },
  { file: "grants.jsonl" },
  { file: "audit.jsonl", wrap: (entry: unknown): StateRecord => ({ type: "audit", entry: entry as AuditEntry }) },
];

/** The books a space's store holds the state of, read back into them when it opens. */
export interface Books {
  proposals: ProposalBook;
  grants: GrantBook;
  invites: Invites;
  switches: Switches;
  conversations: Conversations;
  pins: Pins;
  /** This minute's counts against the space's caps (policy/caps.ts): kept here so a restart or a failover keeps them. */
  caps?: Caps;
}

/**
 * Built before the books it writes for (they are handed it to record their changes), and
 * opened once they exist: opening reads the store back into them, and may compact it from
 * them (a first start's migration). A write before it opens is refused, never lost.
 */
export class Ledger {
  private opened: { store: StateStore<StateRecord>; report: OpenReport } | undefined;
  /** Plans of `later`, in the order they came, waiting for their batch. */
  private pending: Array<() => Plan> = [];
  private timer: NodeJS.Timeout | undefined;

  /** `opener` replaces the journal in `gateway.state_dir` (a cluster keeps a space's state on its bus). */
  constructor(
    private readonly config: SpaceConfig,
    private readonly log: Logger,
    private readonly onWrite?: (seconds: number) => void,
    private readonly opener?: StoreOpener<StateRecord>,
  ) {}

  /** Opens the space's store and folds what it holds into the books. Throws a `StoreError` on a corrupt journal; opens once. */
  open(books: Books): OpenReport {
    if (this.opened) throw new Error("the state store is already open");
    const { config, log, onWrite } = this;
    const { proposals, grants, invites, switches, conversations, pins } = books;
    const hooks: StoreHooks<StateRecord> = {
      apply: (r) => {
        if (r.type === "grant" || r.type === "revoke") grants.apply(r);
        else if (r.type === "invite" || r.type === "kick") invites.apply(r);
        else if (r.type === "disable" || r.type === "enable") switches.apply(r);
        else if (r.type === "frame" || r.type === "unframe") conversations.apply(r);
        else if (r.type === "pin") pins.apply(r);
        else if (r.type === "cap") books.caps?.apply(r);
        else if (r.type !== "audit") proposals.applyRecord(r);
      },
      // Invited participants first: grants and proposals may name them.
      snapshot: () => [
        ...invites.snapshot(),
        ...switches.snapshot(),
        ...conversations.snapshot(),
        ...proposals.snapshot(),
        ...grants.all().map((g): StateRecord => ({ type: "grant", ...g })),
        ...pins.snapshot(),
        ...(books.caps?.snapshot() ?? []),
      ],
      isHistory: (r) => r.type === "audit",
    };
    const { store, report } =
      this.opener?.(hooks) ??
      openStore<StateRecord>(
        {
          dir: config.gateway.state_dir,
          history: { maxBytes: config.quotas.audit_max_bytes, maxAgeMs: config.quotas.audit_max_age_days * DAY_MS, owner: recordOwner },
          // History reaches the archive (and its retention) when the journal is compacted: a small budget compacts sooner.
          compactBytes: Math.min(16 * 1024 * 1024, Math.max(256 * 1024, Math.floor(config.quotas.audit_max_bytes / 4))),
          onWrite,
          log: {
            info: (o, msg) => log.info(o, msg),
            warn: (o, msg) => log.warn(o, msg),
            error: (o, msg) => log.error(o, msg),
          },
        },
        hooks,
        LEGACY,
      );
    this.opened = { store, report };
    return report;
  }

  /**
   * Writes the plans' records as one transaction, then applies them in order. Rejects
   * with the store's error, having applied nothing, when the write fails.
   */
  async record(...plans: Plan[]): Promise<void> {
    if (!this.opened) throw new Error("the state store is not open yet");
    // What was written behind goes first, in the same batch: a change acknowledged after a
    // call was routed never reaches the disk before that call's record.
    this.flushLater();
    try {
      await this.opened.store.commit(plans.flatMap((p) => p.records as StateRecord[]));
    } catch (err) {
      for (const p of plans) p.undo?.();
      throw err;
    } finally {
      for (const p of plans) p.done?.();
    }
    for (const p of plans) p.apply();
  }

  /**
   * Applies a plan now and writes it behind: for bookkeeping no decision waits on (a call's
   * outcome). Resolves once written or failed; never rejects.
   */
  note(plan: Plan): Promise<void> {
    plan.apply();
    plan.done?.();
    return this.record({ records: plan.records, apply: () => {} }).catch((err: unknown) => {
      this.log.error(
        { err: String(err) },
        "could not write a call's outcome; after a restart it comes back interrupted if its call was in flight",
      );
    });
  }

  /**
   * Writes a plan behind, coalesced: for the direct calls' `called` records
   * (calls/direct-audit.ts), one per call, which nobody waits on. The plan is made (and
   * applied) when its batch goes, off the call's path; `make` must capture what it needs
   * (the time, the arguments) when it is made. Plans are handed to the store together
   * `gateway.audit_flush_ms` after the first of them came, or once `LATER_BATCH` have
   * gathered, or with the next change written for any other reason (`record`), whichever
   * is first, as one transaction in the store's next batch (one write, one fdatasync), in
   * order and chained like any other record. So a record is on disk within
   * `audit_flush_ms` plus the time the disk takes for the batch before it and its own; a
   * crash later than that loses none of them. With `audit_flush_ms: 0` each goes at once.
   */
  later(make: () => Plan): void {
    if (!this.opened) {
      this.log.error("a record written behind came before the state store was open; it is lost");
      return;
    }
    this.pending.push(make);
    const ms = this.config.gateway.audit_flush_ms;
    if (ms === 0 || this.pending.length >= LATER_BATCH) this.flushLater();
    else this.timer ??= setTimeout(() => this.flushLater(), ms);
  }

  /** Makes what `later` gathered and hands it to the store as one transaction (it then waits for the store's next batch). */
  private flushLater(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.pending.length === 0 || !this.opened) return;
    const makes = this.pending;
    this.pending = [];
    const records: StateRecord[] = [];
    for (const make of makes) {
      try {
        const plan = make();
        plan.apply();
        plan.done?.();
        for (const r of plan.records) records.push(r as StateRecord);
      } catch (err) {
        // A bug in making one record costs that record, not the others of its batch.
        this.log.error({ err: String(err) }, "could not make the record of a call that went straight through");
      }
    }
    if (records.length === 0) return;
    this.opened.store.commit(records).catch((err: unknown) => {
      this.log.error({ err: String(err), records: records.length }, "could not write the records of calls that went straight through");
    });
  }

  /** Audit entries matching the filter, oldest first. */
  audit(q: AuditQuery = {}, limit = 10_000): AuditEntry[] {
    if (!this.opened) return [];
    return this.opened.store.history((r) => r.type === "audit" && auditMatches(r.entry, q), { limit }).map((r) => (r as AuditRecord).entry);
  }

  /** Writes what waits behind, then closes the store once everything queued is written. */
  close(): Promise<void> {
    this.flushLater();
    return this.opened ? this.opened.store.close() : Promise.resolve();
  }
}

/** Whose an audit record is, for retention per participant: who decided, else who proposed (or announced). */
function recordOwner(r: unknown): string | undefined {
  const e = (r as Partial<AuditRecord>).entry;
  return e ? (e.by ?? e.proposer) : undefined;
}

/** Which records `mewgate audit verify` checks: the audit trail and the cuts retention made in it. */
export const isHistoryRecord = (r: { type: string }): boolean => r.type === "audit" || r.type === "checkpoint";

/** Reads the audit trail from a state directory without a running gateway (for `mewgate audit`). */
export function readAudit(stateDir: string, q: AuditQuery = {}, limit = 10_000): AuditEntry[] {
  const isAudit = (r: StateRecord): r is AuditRecord => r.type === "audit";
  return readHistory<StateRecord>(stateDir, (r) => isAudit(r) && auditMatches(r.entry, q), { limit, isHistory: isAudit }).map(
    (r) => (r as AuditRecord).entry,
  );
}
