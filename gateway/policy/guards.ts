/**
 * Guards: what the decision point reads in a call's arguments before it runs and in its result
 * before the caller gets it (space.yaml `guards:`, config/guards.ts), with the detectors of
 * content/scan.ts — the same that risk, `clean()` and the learner read (content/signals.ts).
 *
 * Each guard that applies to a call (its `tools` glob matches `participant/tool`, its `callers`
 * name the caller) reads the value for what it detects, and each finding carries its action:
 *   hold    arguments: the call waits for a person (authority.ts makes it a proposal; the card
 *           shows the findings, masked); results: nobody is left to hold them for once the call
 *           ran, so they are redacted instead, and the redaction recorded;
 *   deny    arguments: the call is refused; results: the caller gets an error in their place;
 *   redact  the values found are replaced (`[redacted: a GitHub token]`) before the call goes
 *           out or the result comes back, and the redaction is recorded.
 * The strongest action of all findings wins (deny, then hold, then redact). A value a guard could
 * not read whole (past the scan's bounds) counts as a finding of that guard; as it cannot be
 * redacted, a redact there denies.
 */
import type { SpaceConfig } from "../config/config.js";
import { type ErrorCode, ErrorCodes } from "../wire/error-codes.js";
import type { GuardConfig } from "../config/guards.js";
import { compileGlob } from "./capabilities.js";
import { expandRuleGlob, type Groups } from "./groups.js";
import { hostAllowlist } from "./content/hosts.js";
import type { PersonalKind } from "./content/personal.js";
import { describe, type Finding, type Found, redact, type ScanOptions, scanAll } from "./content/scan.js";

export type GuardAction = GuardConfig["action"];
export type GuardOn = "arguments" | "results";

/** A finding as the audit, the card and explain show it: masked, with the guard and its action. */
export interface GuardFinding extends Finding {
  guard: string;
  action: GuardAction;
  /** In words: `message holds a GitHub token (ghp_…(40))`. */
  text: string;
}

/** What the guards make of one value. */
export interface GuardVerdict {
  action: GuardAction;
  findings: GuardFinding[];
  /** The value with what the redacting guards found replaced (what is sent on, or given back). */
  redacted?: unknown;
  /** For `hold`: the value with everything found replaced, as others than the person deciding see it. */
  shown?: unknown;
}

const RANK: Record<GuardAction, number> = { redact: 1, hold: 2, deny: 3 };

interface Compiled {
  name: string;
  config: GuardConfig;
  tools: (name: string) => boolean;
  options: ScanOptions;
  /** Scans with the same options share one reading of a value. */
  key: string;
}

/** How the findings read in one line (`a GitHub token in message; an email address in to`). */
export function summary(findings: readonly Pick<GuardFinding, "what" | "field">[]): string {
  const parts = [...new Set(findings.map((f) => `${f.what} in ${f.field}`))];
  return parts.length > 3 ? `${parts.slice(0, 3).join("; ")}; and ${parts.length - 3} more` : parts.join("; ");
}

export class Guards {
  private readonly compiled: Compiled[];
  /** Verdicts on arguments by their object: the decision and the routing of one call read them once. */
  private readonly memo = new WeakMap<object, Map<string, GuardVerdict | null>>();

  constructor(
    config: Pick<SpaceConfig, "guards" | "groups">,
    private readonly groups: Groups,
  ) {
    this.compiled = config.guards.map((g, i) => {
      const globs = g.tools.flatMap((t) => expandRuleGlob(t, config.groups)).map((t) => compileGlob(t));
      const personal = g.detect.includes("personal") ? new Set<PersonalKind>(g.personal ?? ["email", "phone", "card"]) : undefined;
      const options: ScanOptions = {
        secrets: g.detect.includes("secrets"),
        ...(personal ? { personal } : {}),
        ...(g.detect.includes("egress") ? { allowed: hostAllowlist(g.hosts ?? []) } : {}),
      };
      return {
        name: g.name ?? `guards[${i}]`,
        config: g,
        tools: (n: string) => globs.some((t) => t(n)),
        options,
        key: JSON.stringify([g.detect, [...(personal ?? [])].sort(), g.hosts ?? null]),
      };
    });
  }

  /** Whether the space declares any guard. */
  get any(): boolean {
    return this.compiled.length > 0;
  }

  /** The guards that apply to `caller` calling `owner/tool`, for what `on`. */
  applying(caller: string, owner: string, tool: string, on: GuardOn): Array<{ name: string; config: GuardConfig }> {
    return this.pick(caller, `${owner}/${tool}`, on).map((g) => ({ name: g.name, config: g.config }));
  }

  private pick(caller: string, name: string, on: GuardOn): Compiled[] {
    return this.compiled.filter(
      (g) => g.config.on.includes(on) && g.tools(name) && (g.config.callers.includes("*") || this.groups.names(g.config.callers, caller)),
    );
  }

  /** What the guards make of `value` (a call's arguments, or its result), or undefined when none finds anything. */
  screen(caller: string, owner: string, tool: string, value: unknown, on: GuardOn): GuardVerdict | undefined {
    if (this.compiled.length === 0) return undefined;
    const key = `${on}\u0000${caller}\u0000${owner}/${tool}`;
    const memo = typeof value === "object" && value !== null ? this.memo.get(value) : undefined;
    if (memo?.has(key)) return memo.get(key) ?? undefined;
    const verdict = this.read(caller, `${owner}/${tool}`, value, on);
    if (typeof value === "object" && value !== null) {
      let m = memo;
      if (!m) {
        m = new Map();
        this.memo.set(value, m);
      }
      m.set(key, verdict ?? null);
    }
    return verdict;
  }

  private read(caller: string, name: string, value: unknown, on: GuardOn): GuardVerdict | undefined {
    const guards = this.pick(caller, name, on);
    if (guards.length === 0) return undefined;
    const findings: GuardFinding[] = [];
    const found: Found[] = [];
    let action: GuardAction | undefined;
    // One walk of the value for all the guards; guards with the same options share a reading.
    const keys: string[] = [];
    const options: ScanOptions[] = [];
    for (const g of guards)
      if (!keys.includes(g.key)) {
        keys.push(g.key);
        options.push(g.options);
      }
    const read = scanAll(value, options);
    for (const g of guards) {
      const s = read[keys.indexOf(g.key)]!;
      // Nobody is left to hold a result for: the call ran; it is redacted instead.
      const act: GuardAction = on === "results" && g.config.action === "hold" ? "redact" : g.config.action;
      const hits: Found[] = [...s.found];
      if (s.unread !== undefined)
        hits.push({ detector: g.config.detect[0]!, what: "a value past what can be read", field: "(value)", masked: s.unread, spots: [] });
      for (const f of hits) {
        const { spots: _spots, ...shown } = f;
        void _spots;
        findings.push({ ...shown, guard: g.name, action: act, text: describe(f) });
        found.push(f);
        if (action === undefined || RANK[act] > RANK[action]) action = act;
      }
    }
    if (action === undefined) return undefined;
    // What a redacting guard found is replaced whatever else holds the call: after a person
    // approves a held call, the redaction still applies on its way out.
    const toRedact = found.filter((_, i) => findings[i]!.action === "redact");
    const shown = action === "hold" ? redact(value, found) : undefined;
    const base: GuardVerdict = shown === undefined ? { action, findings } : { action, findings, shown };
    if (toRedact.length === 0) return base;
    const redacted = redact(value, toRedact);
    // What cannot be placed cannot be replaced: refused rather than passed on.
    if (redacted === undefined) return { action: "deny", findings };
    return { ...base, redacted };
  }
}

/** The part of a verdict (authority.ts `Verdict`) the guards read and write. */
type VerdictLike =
  | { decision: "direct" | "proposal"; flagged?: true; guard?: GuardVerdict; reason?: unknown }
  | { decision: "denied"; code: ErrorCode; message: string; extra?: Record<string, unknown>; reason?: unknown };

/**
 * The guards' say on a call the rules let through, after every rule and grant, so no rule,
 * grant or learned suggestion lets through what a guard holds: `deny` refuses it; `hold` makes
 * it a proposal for a person (not when `confirming`: the approver is that person, and asking
 * again would hold it forever); `redact` lets it go as decided, with the redacted arguments
 * for the router to send (calls/guarded.ts).
 */
export function guarded<V extends VerdictLike>(
  guards: Guards,
  verdict: V,
  caller: string,
  owner: string,
  tool: string,
  args: unknown,
  confirming: boolean,
): V {
  if (verdict.decision === "denied" || !guards.any) return verdict;
  const guard = guards.screen(caller, owner, tool, args, "arguments");
  if (!guard) return verdict;
  if (guard.action === "deny")
    return {
      decision: "denied",
      code: ErrorCodes.guardDenied,
      message: `a guard of the space denies this call to ${owner}/${tool}: ${summary(guard.findings)}`,
      extra: { tool: `${owner}/${tool}`, findings: guard.findings },
      ...(verdict.reason ? { reason: verdict.reason } : {}),
    } as unknown as V;
  if (guard.action === "hold" && !confirming) return { ...verdict, decision: "proposal", guard };
  return { ...verdict, guard };
}

/** The findings a verdict carries from the guards: those of a hold or redaction, or of a guard's denial. */
export function findingsOf(verdict: VerdictLike): GuardFinding[] | undefined {
  if (verdict.decision !== "denied") return verdict.guard?.findings;
  return verdict.code === ErrorCodes.guardDenied ? (verdict.extra?.["findings"] as GuardFinding[] | undefined) : undefined;
}

/** What explain says of the guards: those that apply to the call (by name), what they found in its arguments and what they do. */
export function explainGuards(
  guards: Guards,
  caller: string,
  owner: string,
  tool: string,
  verdict: VerdictLike,
): { view: { applying: string[]; action?: GuardAction; findings?: GuardFinding[] }; said: string } | undefined {
  const applying = [
    ...new Set(
      [...guards.applying(caller, owner, tool, "arguments"), ...guards.applying(caller, owner, tool, "results")].map((g) => g.name),
    ),
  ];
  if (!applying.length) return undefined;
  const findings = findingsOf(verdict);
  if (!findings?.length) return { view: { applying }, said: "" };
  const action: GuardAction =
    verdict.decision === "denied" ? "deny" : verdict.decision === "proposal" && verdict.guard ? verdict.guard.action : "redact";
  const did = action === "deny" ? "denies it" : action === "hold" ? "holds it for a person" : "redacts what it found before the call";
  return { view: { applying, action, findings }, said: `and a guard ${did}: ${summary(findings)}` };
}
