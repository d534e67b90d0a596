/**
 * Recorded calls decided again under a space.yaml: what the one decision point
 * (policy/authority.ts) would say to each, with no grants (a grant is a person's word on one
 * tool, not the file's) and the tools as the live registry knows them (for their hints).
 *
 * A dry run compares two such replays, the file as it is and as it would be, call by call:
 * every call whose decision (direct, a proposal, denied) or needed approvals would change,
 * with what people decided of it. Replayed oldest first, the calls count against the caps as
 * they did (`replay`): a dry run that adds a cap lists the calls it would have refused or held.
 */
import type { SpaceConfig } from "../../config/config.js";
import { requiredApprovals } from "../quorum.js";
import { Registry } from "../../tools/registry.js";
import { Authority } from "../authority.js";
import { compileCapabilities, type Matcher } from "../capabilities.js";
import type { PastCall, PeopleSaid } from "./history.js";
import { findingsOf, summary } from "../guards.js";
import type { CapBreach } from "../caps.js";
import { ErrorCodes } from "../../wire/error-codes.js";
import { PERSONAL_KINDS } from "../content/personal.js";
import { redact, type ScanOptions, scan } from "../content/scan.js";

export type Decided = "direct" | "proposal" | "denied";

/** What a policy decides of one call. */
export interface Outcome {
  decision: Decided;
  /** How many distinct approvals a proposal needs. */
  approvals: number;
  /** The rule that decided (`allow[2]`), if a rule did. */
  rule?: string | undefined;
  /** What a guard did with the call (`hold: a GitHub token in message`), if one found something. */
  guard?: string | undefined;
  /** What a cap did with the call (`refuse: per-agent: bot has made 60 of 60 calls this minute`), when replayed in order (`replay`). */
  cap?: string | undefined;
}

/** A tool's annotations, as its server declared them. */
export interface KnownTool {
  participant: string;
  tool: string;
  annotations?: Record<string, unknown> | undefined;
}

/** Decides calls under one space.yaml, offline. */
export class Replayer {
  private readonly authority: Authority;
  private readonly allows = new Map<string, Matcher>();

  constructor(
    readonly config: SpaceConfig,
    tools: readonly KnownTool[] = [],
  ) {
    const registry = new Registry();
    const byOwner = new Map<string, KnownTool[]>();
    for (const t of tools) byOwner.set(t.participant, [...(byOwner.get(t.participant) ?? []), t]);
    for (const [owner, list] of byOwner)
      registry.set(
        owner,
        list.map((t) => ({ name: t.tool, inputSchema: { type: "object" }, ...(t.annotations ? { annotations: t.annotations } : {}) })),
      );
    const authority = new Authority(config, registry);
    this.authority = authority;
  }

  /** What this space.yaml decides of `call` (undefined: its proposer is not in the file). */
  decide(call: Pick<PastCall, "proposer" | "owner" | "tool" | "args">): Outcome | undefined {
    if (!this.config.participants[call.proposer]) return undefined;
    let allows = this.allows.get(call.proposer);
    if (!allows) {
      allows = compileCapabilities(this.authority.configured(call.proposer));
      this.allows.set(call.proposer, allows);
    }
    return this.outcome(
      call,
      this.authority.call(call.proposer, allows, call.owner, "tools/call", { name: call.tool, arguments: call.args }),
    );
  }

  /**
   * `decide`, for calls given oldest first, with the space's caps counting them as they would
   * have been counted (policy/caps.ts): each call in the minute it was made, a direct one as it
   * ran, a proposal when a person approved it (for that person). Only a dry run replays;
   * `decide` alone counts nothing, so no cap is ever reached.
   */
  replay(call: PastCall): Outcome | undefined {
    const caps = this.authority.caps;
    const at = Date.parse(call.ts);
    if (!caps.any || !Number.isFinite(at)) return this.decide(call);
    caps.now = () => at;
    const o = this.decide(call);
    const approved = call.said === "approved" || call.said === "edited";
    if (o?.decision === "direct" || (o?.decision === "proposal" && approved))
      caps.plan(call.proposer, call.owner, call.tool, o.decision === "proposal" ? call.by : undefined)?.apply();
    return o;
  }

  private outcome(call: Pick<PastCall, "proposer" | "owner" | "tool">, v: ReturnType<Authority["call"]>): Outcome {
    const rule = v.reason?.match?.rule.key;
    const cap = v.decision === "denied" ? (v.code === ErrorCodes.capExceeded ? (v.extra?.["cap"] as CapBreach) : undefined) : v.cap;
    // A guard's part in it (policy/guards.ts): what it did, in words, masked.
    const found = findingsOf(v);
    return {
      ...(found?.length
        ? {
            guard: `${v.decision === "denied" ? "deny" : v.decision === "proposal" && v.guard ? v.guard.action : "redact"}: ${summary(found)}`,
          }
        : {}),
      ...(cap ? { cap: `${cap.action}: ${cap.text}` } : {}),
      decision: v.decision,
      approvals: v.decision === "proposal" ? requiredApprovals(this.config, call.proposer, call.owner, call.tool) : 0,
      rule,
    };
  }
}

/** One call whose outcome would change. */
export interface Change {
  call: PastCall;
  before: Outcome | undefined;
  after: Outcome | undefined;
  /** `proposal → direct`, `direct → denied`, `approvals 2 → 1`. */
  how: string;
}

export interface DryRun {
  /** Recorded calls replayed. */
  replayed: number;
  /** Every call whose outcome would change, oldest first. */
  changes: Change[];
  /** How many changes of each kind (`proposal → direct`: 12), and of those what people had decided. */
  summary: Record<string, Record<PeopleSaid | "total", number>>;
}

function label(o: Outcome | undefined): string {
  return o === undefined ? "unknown participant" : o.decision;
}

/** Every recorded call whose outcome differs between `before` and `after`. */
export function dryRun(before: Replayer, after: Replayer, calls: readonly PastCall[]): DryRun {
  const changes: Change[] = [];
  const summary: DryRun["summary"] = {};
  for (const call of calls) {
    const a = before.replay(call);
    const b = after.replay(call);
    let how: string | undefined;
    if (label(a) !== label(b)) how = `${label(a)} → ${label(b)}`;
    else if (a && b && a.decision === "proposal" && a.approvals !== b.approvals) how = `approvals ${a.approvals} → ${b.approvals}`;
    if (how === undefined) continue;
    changes.push({ call, before: a, after: b, how });
    summary[how] ??= { total: 0, approved: 0, rejected: 0, edited: 0, undecided: 0 };
    const s = summary[how]!;
    s.total++;
    s[call.said]++;
  }
  return { replayed: calls.length, changes, summary };
}

/** Whether a change lets through more than before: out of a deny, out of a proposal, or with fewer approvals. */
export function loosens(c: Change): boolean {
  const rank = (o: Outcome | undefined) => (o === undefined ? 0 : o.decision === "denied" ? 0 : o.decision === "proposal" ? 1 : 2);
  if (rank(c.after) > rank(c.before)) return true;
  return c.before?.decision === "proposal" && c.after?.decision === "proposal" && c.after.approvals < c.before.approvals;
}

const EVERYTHING: ScanOptions = { secrets: true, personal: new Set(PERSONAL_KINDS) };
/** `args` with every secret and piece of personal data replaced, for a listing. */
function masked(args: Record<string, unknown>): unknown {
  const read = scan(args, EVERYTHING);
  if (read.found.length === 0 && read.unread === undefined) return args;
  return (read.unread === undefined && redact(args, read.found)) || { "mewgate/not_shown": "arguments too large or deep to mask" };
}

/** How many changed calls a dry run lists (its counts are always whole). */
export const MAX_CHANGES_LISTED = 1000;

/** A dry run as the API and the CLI show it: counts whole, calls listed up to MAX_CHANGES_LISTED. */
export function dryRunView(
  current: SpaceConfig,
  next: SpaceConfig,
  calls: readonly PastCall[],
  tools: readonly KnownTool[],
): Record<string, unknown> {
  const run = dryRun(new Replayer(current, tools), new Replayer(next, tools), calls);
  return {
    replayed: run.replayed,
    changed: run.changes.length,
    summary: run.summary,
    changes: run.changes.slice(0, MAX_CHANGES_LISTED).map((c) => ({
      id: c.call.id,
      ts: c.call.ts,
      proposer: c.call.proposer,
      tool: `${c.call.owner}/${c.call.tool}`,
      // Listed for a person, secrets and personal data masked as the guards would (content/scan.ts).
      args: masked(c.call.args),
      said: c.call.said,
      ...(c.call.direct ? { direct: true } : {}),
      ...(c.call.by ? { by: c.call.by } : {}),
      how: c.how,
      before: c.before,
      after: c.after,
    })),
  };
}
