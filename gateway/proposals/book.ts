/**
 * Proposals held by the gateway: the state machine and the audit entry of each change (their
 * vocabulary is audit/entry.ts). Past 500 lines because each change is a record, its fold on
 * restart and its audit entry, kept together.
 * Which transition an envelope asks for, and whether its sender may make it, is decided
 * in propose.ts, deciders.ts, decisions.ts and ends.ts; calls/router.ts moves a routed proposal on when its call ends.
 *
 *   pending → approved → routed → answered
 *   pending → rejected | withdrawn | expired
 *   approved | routed → failed        (the call could not be made or did not come back)
 *   approved | routed → interrupted   (the gateway stopped before the call's outcome was written)
 *   interrupted → approved | rejected | withdrawn | expired
 *
 * `interrupted` waits for a person again, like `pending`: the call may or may not have
 * reached the tool, so only a new decision (an `mcp/approve` by someone who may approve
 * it, never the proposer) routes it again. Both are "awaiting": counted in the pending
 * quotas, listed in welcomes and proposals/list, and due to expire. An interrupted
 * proposal gets a fresh TTL from the moment it is marked, since nobody could decide
 * while the gateway was down.
 *
 * A change is made in two steps, so that nothing moves before it is durable: `plan*`
 * checks it and returns the records to write and a function that applies it in memory;
 * the space's ledger (ledger.ts) writes the records of one or more plans as one atomic
 * transaction and applies them only once they are on disk. A failed write leaves the
 * book exactly as it was. While a proposal's change is being written it is `busy`, and
 * nobody else may plan another change of it.
 *
 * On start the ledger folds the store's records back in (`restore`); pending proposals
 * come back with their remaining time (interrupted ones too), and ones that were approved or
 * in flight when the gateway died are returned so the caller marks them interrupted, since
 * their call's fate is unknown.
 */
import { createHash } from "node:crypto";
import { canonical } from "../store/chain.js";
import type { Plan } from "../store/plan.js";
import { EDITED_KEY, now } from "../wire/envelope.js";
import { CallResults, type CallOutcome } from "../calls/outcomes.js";
import { type Answer, Unheard, type UnheardEnd } from "./unheard.js";
import { isRecord } from "../wire/values.js";
import type { AuditEntry, AuditRecord, ProposalState } from "../audit/entry.js";

const NEXT: Record<ProposalState, readonly ProposalState[]> = {
  pending: ["approved", "rejected", "withdrawn", "expired"],
  approved: ["routed", "failed", "interrupted"],
  routed: ["answered", "failed", "interrupted"],
  interrupted: ["approved", "rejected", "withdrawn", "expired"],
  answered: [],
  rejected: [],
  withdrawn: [],
  expired: [],
  failed: [],
};

/**
 * The owner of a proposal held open: it named no participant, and no one participant
 * offers its tool, so whoever fulfils it names the target (MEW §3.2), which becomes its owner.
 */
export const OPEN_OWNER = "";

export interface Proposal {
  id: string;
  proposer: string;
  /** The participant that would serve the call; OPEN_OWNER until a fulfilment names one. */
  owner: string;
  method: string;
  params: Record<string, unknown>;
  /** For tools/call: the tool's name at its owner. */
  tool?: string | undefined;
  /** The JSON-RPC id to use when the call is routed (the caller's, when the gateway made the proposal from a tools/call). */
  rpcId: string | number;
  /** Call chain of the proposer when it proposed, so governance holds across approval. */
  chain: string[];
  state: ProposalState;
  createdAt: string;
  expiresAt: number;
  decidedBy?: string | undefined;
  scope?: "once" | "always" | undefined;
  reason?: string | undefined;
  text?: string | undefined;
  /** Arguments after an approver's edits, when they differ. Read through `whatRuns` / `runningArguments`, never directly. */
  editedArguments?: Record<string, unknown> | undefined;
  /** Who edited the arguments, and when (with `editedArguments`). */
  editedBy?: string | undefined;
  editedAt?: string | undefined;
  /** What became of the call (calls/outcomes.ts): set when an approved proposal is answered or fails. */
  outcome?: CallOutcome | undefined;
  /** The original proposal envelope, for welcomes. */
  envelope: unknown;
  /** Size of the envelope as JSON, counted against the pending quotas. */
  bytes?: number | undefined;
  /** For tools/call: the digest of the tool's definition when it was proposed (tools/pins.ts), which approving confirms. */
  digest?: string | undefined;
  /** How many distinct approvers it needs (proposals/approvals.ts); 1 when absent. */
  required?: number | undefined;
  /** The approvals given so far, when it needs more than one: each recorded as it comes. */
  approvals?: Approval[] | undefined;
  /** Indexes of the `policy.escalate` stages already fired for it (proposals/escalation.ts). */
  escalated?: number[] | undefined;
  /** Approvals that no longer count: their approver was removed, or may no longer decide, after a reload (proposals/standing.ts). */
  droppedApprovals?: Array<{ by: string; why: string; ts: string }> | undefined;
  /** It ended while its proposer was away: how that end is kept for it (unheard.ts). */
  unheard?: UnheardEnd | undefined;
  /** The opaque id of the decision that ended its wait (receipts.ts): shared by its audit entries, its receipt and its span. */
  decision?: string | undefined;
}

/** One approver's "yes" on a proposal that needs more than one (proposals/approvals.ts). */
export interface Approval {
  by: string;
  ts: string;
  /** The first approver's edited arguments, which every later approval approves as they are. */
  arguments?: Record<string, unknown> | undefined;
  reason?: string | undefined;
}

type Patch = Partial<Proposal> & { state: ProposalState };

/**
 * What will run if `p` is approved now: the arguments (an approver's edits, else those
 * proposed), and, when edited, who edited them and when. The one source every card, link,
 * notice, approver's check, fulfilment comparison and policy re-check reads.
 */
export interface WhatRuns {
  arguments: Record<string, unknown>;
  edited?: { by: string | undefined; at: string | undefined } | undefined;
}

export function whatRuns(p: Proposal): WhatRuns {
  if (p.editedArguments !== undefined) return { arguments: p.editedArguments, edited: { by: p.editedBy, at: p.editedAt } };
  const a = p.params["arguments"];
  return { arguments: isRecord(a) ? (a as Record<string, unknown>) : {} };
}

/** The arguments that will run if `p` is approved now (`whatRuns(p).arguments`). */
export function runningArguments(p: Proposal): Record<string, unknown> {
  return whatRuns(p).arguments;
}

/** `p`'s params as they will be sent: the proposed params with the arguments that will run. */
export function runningParams(p: Proposal): Record<string, unknown> {
  return p.method === "tools/call" ? { ...p.params, arguments: runningArguments(p) } : p.params;
}

/** Whether a proposal in `state` waits for a person's decision: pending, or interrupted and waiting to be decided again. */
export function awaiting(state: ProposalState): boolean {
  return state === "pending" || state === "interrupted";
}

/** The payload key of a proposal whose tool changed since it was confirmed: what changed, in words (tools/pins.ts). */
/** Where a held proposal carries what the space's guards found in its arguments (masked) and their action (policy/guards.ts). */
export const GUARDS_KEY = "mewgate/guards";
/** Where a proposal held because a cap of the space was reached carries which (policy/caps.ts). */
export const CAP_KEY = "mewgate/cap";

/** The findings, in words and masked, of a guard that holds a proposal for a person (its payload's GUARDS_KEY), if one does. */
export function heldFindings(payload: Record<string, unknown> | undefined): string[] | undefined {
  const mark = payload?.[GUARDS_KEY] as { findings?: Array<{ action?: unknown; text?: unknown }> } | undefined;
  const held = Array.isArray(mark?.findings)
    ? mark.findings.filter((f) => f?.action === "hold" && typeof f.text === "string").map((f) => String(f.text))
    : [];
  return held.length ? held : undefined;
}
export const DEFINITION_CHANGED_KEY = "mewgate/definition_changed";

/** What a person is told of an interrupted proposal, wherever it is shown. */
export const INTERRUPTED_TEXT = "the gateway stopped after it was approved; it may or may not have run";

/**
 * The proposal's envelope as welcomes and lists show it: an interrupted one carries
 * `payload["mewgate/interrupted"]` (who approved it, with which arguments, and why it waits
 * again), so any reader can tell it from a fresh one.
 */
export function shownEnvelope(p: Proposal): unknown {
  if (typeof p.envelope !== "object" || p.envelope === null) return p.envelope;
  const need = p.required ?? 1;
  const env = p.envelope as { payload?: Record<string, unknown> };
  const runs = whatRuns(p);
  // A proposal that needs several approvers carries how far it got ("1 of 2", and who).
  const progress =
    need > 1 && awaiting(p.state)
      ? {
          "mewgate/approvals": {
            required: need,
            by: [...new Set((p.approvals ?? []).map((a) => a.by))],
            ...(runs.edited ? { arguments: runs.arguments } : {}),
            ...(p.droppedApprovals?.length ? { dropped: p.droppedApprovals } : {}),
          },
        }
      : {};
  // Edited arguments are what an approval now runs: every reader shows these, with who edited them.
  const edited =
    runs.edited && awaiting(p.state)
      ? {
          [EDITED_KEY]: {
            arguments: runs.arguments,
            ...(runs.edited.by !== undefined ? { by: runs.edited.by } : {}),
            ...(runs.edited.at !== undefined ? { at: runs.edited.at } : {}),
          },
        }
      : {};
  if (p.state !== "interrupted")
    return need > 1 || runs.edited ? { ...env, payload: { ...env.payload, ...progress, ...edited } } : p.envelope;
  const mark = {
    reason: p.reason ?? "gateway_restarted",
    message: INTERRUPTED_TEXT,
    approved_by: p.decidedBy,
    ...(runs.edited ? { arguments: runs.arguments } : {}),
  };
  return { ...env, payload: { ...env.payload, ...progress, ...edited, "mewgate/interrupted": mark } };
}

/**
 * The record that stores `p`. Its envelope's `payload.params` is, as held, the very object
 * that is `p.params` (propose.ts): written out twice, every proposal's arguments would take
 * twice the room in the journal and twice the time in each compaction's snapshot. So they are
 * written once, in `params`, and put back into the envelope when the record is read.
 */
function proposedRecord(p: Proposal): ProposalRecord {
  const env = p.envelope;
  if (!isRecord(env) || !isRecord(env["payload"]) || env["payload"]["params"] !== p.params) return { type: "proposed", proposal: p };
  const { params: _shared, ...payload } = env["payload"];
  return { type: "proposed", proposal: { ...p, envelope: { ...env, payload } }, paramsShared: true };
}

/** `p` read from a record that wrote its envelope's params once (`proposedRecord`): the envelope given them back. */
function withSharedParams(p: Proposal): Proposal {
  const env = p.envelope;
  if (isRecord(env) && isRecord(env["payload"])) env["payload"] = { ...env["payload"], params: p.params };
  return p;
}

export type ProposalRecord =
  /** `paramsShared`: the envelope's `payload.params` was the proposal's `params`, written once, there (`proposedRecord`). */
  | { type: "proposed"; proposal: Proposal; paramsShared?: true }
  | { type: "state"; id: string; ts: string; patch: Patch }
  /** One approval of a proposal that needs more than one; it stays as it was otherwise. */
  | { type: "approval"; id: string; approval: Approval }
  /** Approvals that no longer count (proposals/standing.ts); with none left, the first approver's edits go too. */
  | { type: "approvals_dropped"; id: string; dropped: Array<{ by: string; why: string; ts: string }> }
  /** An escalation stage fired (proposals/escalation.ts): who may decide widened, and the webhooks were told. */
  | { type: "escalated"; id: string; stage: number; ts: string }
  /** Ids of ended proposals, so a late decision still hears "already rejected" after a compaction. */
  | { type: "ended"; ended: Array<[string, ProposalState]> };

/** How many ended proposals are remembered, so a late decision gets "already rejected" rather than "unknown". */
const ENDED_MEMORY = 10_000;

export class ProposalBook {
  private readonly open = new Map<string, Proposal>();
  private readonly ended = new Map<string, ProposalState>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly totals = new Map<string, { count: number; bytes: number }>();
  private readonly total = { count: 0, bytes: 0 };
  /** Proposals whose next change is being written, and ids of proposals being added. */
  private readonly busy = new Set<string>();
  /** The last approved calls' results as text, for the Decided list (memory only). */
  readonly results = new CallResults();
  /** Ends of proposals whose proposer was away, kept for it to ask for (unheard.ts). */
  readonly unheard = new Unheard<Proposal>();
  /** Whether a participant is connected to hear what becomes of its proposals; the space sets it. */
  hears: (participant: string) => boolean = () => true;

  /**
   * Told when a pending proposal's time is up; the listener records its expiry. Decisions,
   * built after this book (it decides over it), subscribes.
   */
  readonly due = new Set<(p: Proposal) => void>();
  /** Told of every change applied (for notifications, metrics and escalation timers; not while restoring). */
  readonly changed = new Set<(p: Proposal, event: ProposalState | "proposed", from: ProposalState | undefined) => void>();

  /** `expires`: whether a proposal's time running out ends it (false: `policy.expires_action: keep`). */
  constructor(private readonly expires: boolean) {}

  private onChanged(p: Proposal, event: ProposalState | "proposed", from: ProposalState | undefined): void {
    for (const hear of this.changed) hear(p, event, from);
  }

  // --- restore ---------------------------------------------------------------------

  /** Folds one stored record in (on start, before anything is armed). */
  applyRecord(r: ProposalRecord): void {
    if (r.type === "proposed") this.open.set(r.proposal.id, r.paramsShared ? withSharedParams(r.proposal) : r.proposal);
    else if (r.type === "ended") for (const [id, state] of r.ended) this.remember(id, state);
    else if (r.type === "escalated") {
      const p = this.open.get(r.id);
      if (p && !p.escalated?.includes(r.stage)) p.escalated = [...(p.escalated ?? []), r.stage];
    } else if (r.type === "approvals_dropped") {
      const p = this.open.get(r.id);
      if (p) dropApprovals(p, r.dropped);
    } else if (r.type === "approval") {
      const p = this.open.get(r.id);
      if (p) {
        p.approvals = [...(p.approvals ?? []), r.approval];
        if (r.approval.arguments !== undefined)
          Object.assign(p, { editedArguments: r.approval.arguments, editedBy: r.approval.by, editedAt: r.approval.ts });
      }
    } else {
      const p = this.open.get(r.id);
      if (p) Object.assign(p, r.patch);
    }
  }

  /**
   * After the fold: ended proposals are remembered, pending ones armed again. Returns
   * those that were approved or in flight, which the caller marks failed.
   */
  restored(): Proposal[] {
    const inFlight: Proposal[] = [];
    for (const p of [...this.open.values()]) {
      if (NEXT[p.state].length === 0) {
        this.open.delete(p.id);
        this.remember(p.id, p.state);
        this.unheard.keep(p);
      } else if (awaiting(p.state)) {
        this.count(p, 1);
        this.arm(p);
      } else inFlight.push(p);
    }
    return inFlight;
  }

  /** The records that rebuild the book now: what a compaction writes. */
  snapshot(): ProposalRecord[] {
    const records: ProposalRecord[] = [...this.open.values()].map(proposedRecord);
    if (this.ended.size) records.push({ type: "ended", ended: [...this.ended] });
    for (const p of this.unheard.live()) records.push(proposedRecord(p));
    return records;
  }

  // --- queries -----------------------------------------------------------------------

  get(id: string): Proposal | undefined {
    return this.open.get(id);
  }

  /** The final state of a proposal that has ended, if it is remembered. */
  endedAs(id: string): ProposalState | undefined {
    return this.ended.get(id);
  }

  /** Whether a change of `id` (or its creation) is being written right now. */
  isBusy(id: string): boolean {
    return this.busy.has(id);
  }

  /** Proposals that have not ended: awaiting a decision, or approved and in flight. */
  unended(): Proposal[] {
    return [...this.open.values()];
  }

  /** Proposals awaiting a person's decision, oldest first: pending ones, and interrupted ones waiting to be decided again. */
  pending(): Proposal[] {
    return [...this.open.values()].filter((p) => awaiting(p.state));
  }

  /** How many of `proposer`'s proposals are pending, and their bytes (those being added included). */
  pendingOf(proposer: string): { count: number; bytes: number } {
    return this.totals.get(proposer) ?? { count: 0, bytes: 0 };
  }

  /** How many proposals are pending in the space, and their bytes. */
  pendingTotal(): { count: number; bytes: number } {
    return this.total;
  }

  // --- changes -----------------------------------------------------------------------

  /**
   * A new pending proposal. Its place in the quotas is taken at once, so that proposals
   * racing to the disk cannot together pass a quota that each passes alone.
   */
  planAdd(p: Proposal): Plan<ProposalRecord | AuditRecord> {
    this.busy.add(p.id);
    this.count(p, 1);
    return {
      records: [proposedRecord(p), audit(p, "proposed")],
      apply: () => {
        this.open.set(p.id, p);
        this.arm(p);
        this.onChanged(p, "proposed", undefined);
      },
      done: () => this.busy.delete(p.id),
      undo: () => this.count(p, -1),
    };
  }

  /**
   * Moves a proposal on. Throws on a transition the state machine does not allow, or on
   * a proposal that is busy: callers check `state` and `isBusy` first and answer with a
   * clear error. An end its proposer is not connected to hear is kept for it (unheard.ts),
   * with `answer`, the call's, if it ran. An approval's signed `receipt` is written once, in
   * its audit entry (where `GET …/receipt` reads it), not kept on the proposal.
   */
  planTransition(p: Proposal, patch: Patch, answer?: Answer, receipt?: string): Plan<ProposalRecord | AuditRecord> {
    if (!NEXT[p.state].includes(patch.state)) throw new Error(`proposal ${p.id}: ${p.state} → ${patch.state} is not a transition`);
    if (this.busy.has(p.id)) throw new Error(`proposal ${p.id} is busy`);
    if (NEXT[patch.state].length === 0 && !this.hears(p.proposer)) patch = { ...patch, unheard: this.unheard.mark(p, answer) };
    this.busy.add(p.id);
    return {
      records: [{ type: "state", id: p.id, ts: now(), patch }, audit(p, patch.state, receipt, patch)],
      apply: () => this.move(p, patch),
      done: () => this.busy.delete(p.id),
    };
  }

  /**
   * One approval of a proposal that needs more than one: written (with its audit entry)
   * before it counts. The proposal stays in its state.
   */
  planApproval(p: Proposal, approval: Approval): Plan<ProposalRecord | AuditRecord> {
    if (!awaiting(p.state)) throw new Error(`proposal ${p.id} is ${p.state}, not awaiting a decision`);
    if (this.busy.has(p.id)) throw new Error(`proposal ${p.id} is busy`);
    this.busy.add(p.id);
    const entry = audit(p, "approval", undefined, {
      decidedBy: approval.by,
      reason: approval.reason,
      editedArguments: approval.arguments ?? p.editedArguments,
    });
    return {
      records: [{ type: "approval", id: p.id, approval }, entry],
      apply: () => {
        p.approvals = [...(p.approvals ?? []), approval];
        if (approval.arguments !== undefined)
          Object.assign(p, { editedArguments: approval.arguments, editedBy: approval.by, editedAt: approval.ts });
      },
      done: () => this.busy.delete(p.id),
    };
  }

  /**
   * Approvals of `p` that no longer count (proposals/standing.ts), each with its audit entry:
   * written before the card or the count changes. The proposal stays in its state.
   */
  planDropApprovals(p: Proposal, dropped: Array<{ by: string; why: string }>): Plan<ProposalRecord | AuditRecord> {
    if (!awaiting(p.state)) throw new Error(`proposal ${p.id} is ${p.state}, not awaiting a decision`);
    if (this.busy.has(p.id)) throw new Error(`proposal ${p.id} is busy`);
    this.busy.add(p.id);
    const ts = now();
    const stamped = dropped.map((d) => ({ ...d, ts }));
    const entries = stamped.map((d): AuditRecord => {
      const a = audit(p, "approval_dropped", undefined, { decidedBy: d.by, reason: "approver_removed", text: d.why });
      return { ...a, entry: { ...a.entry, arguments: undefined, edited: undefined, scope: undefined } };
    });
    return {
      records: [{ type: "approvals_dropped", id: p.id, dropped: stamped }, ...entries],
      apply: () => dropApprovals(p, stamped),
      done: () => this.busy.delete(p.id),
    };
  }

  /** An escalation stage fired for `p` (proposals/escalation.ts): a fact, written (with its audit entry) before anyone is told. */
  planEscalated(p: Proposal, stage: number, approvers: string[] = []): Plan<ProposalRecord | AuditRecord> {
    if (this.busy.has(p.id)) throw new Error(`proposal ${p.id} is busy`);
    this.busy.add(p.id);
    const a = audit(p, "escalated");
    const entry: AuditRecord = {
      type: "audit",
      entry: {
        ...a.entry,
        arguments: undefined,
        edited: undefined,
        by: undefined,
        scope: undefined,
        reason: undefined,
        text: undefined,
        outcome: undefined,
        stage,
        approvers,
      },
    };
    return {
      records: [{ type: "escalated", id: p.id, stage, ts: now() }, entry],
      apply: () => {
        if (!p.escalated?.includes(stage)) p.escalated = [...(p.escalated ?? []), stage];
      },
      done: () => this.busy.delete(p.id),
    };
  }

  /** Applies a change in memory; only through a plan, once its records are durable. */
  private move(p: Proposal, patch: Patch): void {
    const from = p.state;
    if (awaiting(from) && !awaiting(patch.state)) this.count(p, -1);
    if (!awaiting(from) && awaiting(patch.state)) this.count(p, 1);
    Object.assign(p, patch);
    if (awaiting(p.state)) this.arm(p);
    else this.disarm(p.id);
    if (NEXT[p.state].length === 0) {
      this.open.delete(p.id);
      this.remember(p.id, p.state);
      this.unheard.keep(p);
    }
    this.onChanged(p, p.state, from);
  }

  close(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
  }

  /** Keeps the pending counts as proposals come and go, so quotas cost nothing to check. */
  private count(p: Proposal, sign: 1 | -1): void {
    p.bytes ??= Buffer.byteLength(JSON.stringify(p.envelope));
    const bytes = p.bytes * sign;
    const mine = this.totals.get(p.proposer) ?? { count: 0, bytes: 0 };
    mine.count += sign;
    mine.bytes += bytes;
    if (mine.count > 0) this.totals.set(p.proposer, mine);
    else this.totals.delete(p.proposer);
    this.total.count += sign;
    this.total.bytes += bytes;
  }

  private remember(id: string, state: ProposalState): void {
    this.ended.set(id, state);
    if (this.ended.size > ENDED_MEMORY) this.ended.delete(this.ended.keys().next().value!);
  }

  /** Arms (or re-arms, after a failed attempt to record it) an awaiting proposal's expiry. */
  arm(p: Proposal, afterMs = Math.max(0, p.expiresAt - Date.now())): void {
    if (!this.expires) return;
    clearTimeout(this.timers.get(p.id));
    const timer = setTimeout(() => {
      this.timers.delete(p.id);
      if (awaiting(p.state) && this.open.get(p.id) === p) for (const onDue of this.due) onDue(p);
    }, afterMs);
    timer.unref();
    this.timers.set(p.id, timer);
  }

  private disarm(id: string): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }
}

/** Takes dropped approvals out of `p`; with none left, the edits the first of them made go too (nobody who still counts approved them). */
function dropApprovals(p: Proposal, dropped: Array<{ by: string; why: string; ts: string }>): void {
  const gone = new Set(dropped.map((d) => d.by));
  p.approvals = (p.approvals ?? []).filter((a) => !gone.has(a.by));
  p.droppedApprovals = [...(p.droppedApprovals ?? []), ...dropped];
  if (p.approvals.length === 0) Object.assign(p, { editedArguments: undefined, editedBy: undefined, editedAt: undefined });
}

/**
 * The audit entry of `p` as it is once `patch` applies (a transition's, or what one approval
 * changes): read through the patch, so no copy of the whole proposal is made for it. A member
 * the patch names wins even when it is undefined, as it would once applied.
 */
function audit(p: Proposal, event: AuditEntry["event"], receipt?: string, patch?: Partial<Proposal>): AuditRecord {
  const at = <K extends keyof Proposal>(k: K): Proposal[K] => (patch !== undefined && k in patch ? patch[k] : p[k]) as Proposal[K];
  const edited = at("editedArguments");
  const args = edited ?? at("params")["arguments"];
  // Nobody decided these: the arguments are those proposed, recorded once, so a propose/withdraw loop cannot double the trail.
  const once = (event === "withdrawn" || event === "expired") && edited === undefined && args !== undefined;
  return {
    type: "audit",
    entry: {
      ts: now(),
      event,
      proposal: at("id"),
      proposer: at("proposer"),
      owner: at("owner"),
      tool: at("tool"),
      method: at("method"),
      arguments: once ? undefined : args,
      arguments_digest: once ? createHash("sha256").update(canonical(args)).digest("hex") : undefined,
      edited: edited !== undefined ? true : undefined,
      // An interruption is nobody's decision; the approval before it names its approver.
      by: event === "proposed" || event === "interrupted" ? undefined : at("decidedBy"),
      scope: at("scope"),
      reason: at("reason"),
      text: at("text"),
      outcome: at("outcome"),
      decision: event === "proposed" || event === "approval" || event === "escalated" ? undefined : at("decision"),
      receipt,
    },
  };
}
