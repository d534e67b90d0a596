/**
 * The audit trail's vocabulary: an entry (who did what to which call, and why), the record
 * that carries it in the store, the filter a reader asks with, and the states a proposal
 * passes through (which most entries name). Below everything that writes or reads the trail:
 * the proposal book, a direct call's record, the guards, the tool catalogue, learning.
 */
import { randomFillSync } from "node:crypto";
import type { DefinitionChange } from "../tools/pins.js";

export type ProposalState =
  | "pending"
  | "approved"
  | "routed"
  | "answered"
  | "rejected"
  | "withdrawn"
  | "expired"
  | "failed"
  | "interrupted";

export interface AuditEntry {
  ts: string;
  /** `tool_changed`: a tool's definition differs from the one pinned for it (tools/pins.ts); `proposal` is then empty. */
  /** `reloaded`: the space took a new space.yaml (space/reload.ts); `changes` says what changed, `proposer` who asked. `approval`: one of several a proposal needs. */
  /** `approval_dropped`: an approval that no longer counts (`by`, and why in `text`); `escalated`: a stage of `policy.escalate` fired (`stage`, `approvers`); `rule_accepted`: a person accepted a suggested rule (policy/learn/); `arguments` holds the rule, `changes` its dry run; `repaired`: `state repair` cut the journal (`changes`); `called`: a call routed without a proposal (`scope` says what allowed it). */
  event:
    | ProposalState
    | "proposed"
    | "tool_changed"
    | "approval"
    | "reloaded"
    | "approval_dropped"
    | "escalated"
    | "rule_accepted"
    | "repaired"
    | "called"
    | "guarded";
  proposal: string;
  proposer: string;
  owner: string;
  tool?: string | undefined;
  method: string;
  arguments?: unknown;
  /**
   * For a proposal that ended undecided (withdrawn, expired): the SHA-256 of its arguments
   * (canonical JSON) instead of a second copy of them — they are in its `proposed` record.
   */
  arguments_digest?: string | undefined;
  /** Whether the approver changed the arguments (`arguments` are then the edited ones). */
  edited?: boolean | undefined;
  by?: string | undefined;
  scope?: string | undefined;
  reason?: string | undefined;
  /** A rejecter's words to the proposer. */
  text?: string | undefined;
  outcome?: string | undefined;
  /** For `tool_changed`: the digests before and after, and what changed in words. */
  digest?: string | undefined;
  previous?: string | undefined;
  changes?: string[] | undefined;
  /** For `guarded`: what the space's guards found (masked) and did (policy/guards.ts); `scope` says where (arguments or result). */
  findings?:
    | Array<{ guard: string; action: string; detector: string; what: string; field: string; masked: string; encoding?: string }>
    | undefined;
  /** For `tool_changed`: how many times the tool has changed since the gateway first saw it. */
  count?: number | undefined;
  /** For `escalated`: the stage's index, and who may decide from then on (groups resolved to their members). */
  stage?: number | undefined;
  approvers?: string[] | undefined;
  /** The opaque id of the decision (receipts.ts): the same in the receipt, the span and every entry of that decision. */
  decision?: string | undefined;
  /** For `approved`: the signed receipt (receipts.ts). */
  receipt?: string | undefined;
}

export type AuditRecord = { type: "audit"; entry: AuditEntry };

export interface AuditQuery {
  participant?: string | undefined;
  tool?: string | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
}

/** The audit record of a tool's definition changing: its owner announced it, nobody decided it. */
export function toolChangeAudit(c: DefinitionChange): AuditRecord {
  return {
    type: "audit",
    entry: {
      ts: c.ts,
      event: "tool_changed",
      proposal: "",
      proposer: c.participant,
      owner: c.participant,
      tool: c.tool,
      method: "tools/list",
      digest: c.to,
      previous: c.from,
      changes: c.changes,
      count: c.count,
    },
  };
}

/** Whether an audit entry matches the filter: a participant in any role, a tool (`owner/tool` or bare name), a time range. */
export function auditMatches(e: AuditEntry, q: AuditQuery): boolean {
  if (q.participant && e.proposer !== q.participant && e.by !== q.participant && e.owner !== q.participant) return false;
  if (q.tool && `${e.owner}/${e.tool}` !== q.tool && e.tool !== q.tool) return false;
  const t = Date.parse(e.ts);
  if (q.since && t < q.since.getTime()) return false;
  if (q.until && t > q.until.getTime()) return false;
  return true;
}

/**
 * A fresh opaque decision id: the same in the audit entries, the span and the receipt of one
 * decision. 16 random bytes, taken from a pool filled 256 ids at a time: `randomBytes(16)` on
 * its own cost a direct call ~6 µs in the kernel and OpenSSL (as `randomUUID` pools too).
 */
export function newDecisionId(): string {
  if (idPoolAt >= idPool.length) {
    randomFillSync(idPool);
    idPoolAt = 0;
  }
  const id = idPool.toString("base64url", idPoolAt, idPoolAt + 16);
  idPoolAt += 16;
  return `dec_${id}`;
}
const idPool = Buffer.alloc(16 * 256);
let idPoolAt = idPool.length;
