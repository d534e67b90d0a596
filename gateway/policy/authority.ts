/**
 * The policy decision point: may this participant make this call directly, only through
 * a proposal, or not at all?
 *
 * Every path by which a call can reach a participant asks here and nowhere else: a
 * request with or without a JSON-RPC id, a `tools/call` to `system:gateway`, a
 * proposal, the bar an approver or a MEW fulfiller must clear, arguments an approver
 * edited, and grants. The tool rules themselves are policy/rules.ts's `decide`; this module
 * supplies what they are applied to — the participant's compiled rules (whether or not it
 * is connected, since a granter need not be), the tool's annotations, the argument
 * quota, and the grants that still stand.
 *
 * A grant is worth what its granter may do at the time of use: a tool call counts as
 * granted only if some granter of a matching grant may itself make the call directly,
 * following loans back to a participant whose own policy allows it. A loan cycle with no
 * such root grants nothing, and a `deny` of the granter's own takes effect at once. The
 * capabilities an invited participant was given are the same kind of loan, from its
 * inviter: an invite cannot make a puppet that calls what its maker may not.
 * Past 500 lines because it is one concern: the one decision (rules, grants, loans, guards, caps),
 * and its explanation, which asks the same path so the two cannot disagree.
 */
import { type Capability, compileCapabilities, compileGlob, covers, type Matcher } from "./capabilities.js";
import type { SpaceConfig } from "../config/config.js";
import { deriveRulePositions } from "../config/rule-positions.js";
import { ErrorCodes, type ErrorCode } from "../wire/envelope.js";
import { GrantBook } from "./grants.js";
import {
  allowCapabilities,
  type CallFacts,
  CompiledPolicy,
  type ConditionTrace,
  type Decision,
  decideWhy,
  type Reasoned,
  specificTool,
} from "./rules.js";
import type { Registry } from "../tools/registry.js";
import { summary } from "../tools/inspect.js";
import type { PinState } from "../tools/pins.js";
import { expandRuleGlob, Groups } from "./groups.js";
import { conditionHolds } from "./scope.js";
import { quorumBypass, requiredApprovals } from "./quorum.js";
import { isRecord } from "../wire/values.js";
import { explainGuards, type GuardVerdict, guarded, Guards } from "./guards.js";
import { type CapBreach, Caps, capped, explainCaps } from "./caps.js";

/** What policy says of one approval (`Authority.approval`). */
export interface ApprovalVerdict {
  /** The proposer's verdict on its call with the arguments that will run (not asked for an approver's side only). */
  proposer: Verdict | undefined;
  /** The approver's verdict, were it to make that call itself. */
  approver: Verdict;
  /** A cap that holds such a call for a person: only a human may approve it. */
  capHolds: CapBreach | undefined;
  /** A cap such a call breaks this minute, counted for this approver: no approval lifts it. */
  capRefuses: CapBreach | undefined;
}

/** The outcome for one call: go ahead, go through a proposal, or a refusal to send back. */
export type Verdict = (
  | {
      decision:
        | "direct"
        | "proposal" /** a proposal only because the gateway flagged the tool (`tool_checks: ask`): whoever may call it otherwise may approve it */;
      flagged?: true;
      /** What a guard found: held for a person, or redacted (`guard.redacted`) on the way out. */ guard?: GuardVerdict;
      /** A cap (caps.ts) this call would break: it waits for a person. */ cap?: CapBreach;
    }
  | { decision: "denied"; code: ErrorCode; message: string; extra?: Record<string, unknown> }
) & {
  /** For a tools/call: the tool policy's reason (which rule or grant, which condition), what explain shows. */
  reason?: Reasoned;
};

/** How much a decision lets through: an invited participant gets the lesser of its own and its inviter's. */
const RANK: Record<Decision, number> = { denied: 0, proposal: 1, direct: 2 };

/** What explain answers (`mewgate policy explain`, `GET /api/spaces/<space>/policy/explain`). */
export interface Explanation {
  caller: string;
  tool: string;
  decision: Verdict["decision"];
  code?: ErrorCode;
  message?: string;
  flagged?: boolean;
  why: string;
  step?: string;
  /** The rule that decided, and where it is in space.yaml. */
  rule?: { kind: string; key: string; tool: string; when?: string; file?: string; line?: number; column?: number };
  /** The deciding rule's condition and what it said. */
  condition?: ConditionTrace;
  /** The grant (an "always" approval, or a loan) that made the call direct, and who gave it. */
  grant?: { id: string; from: string };
  /** Every condition asked on the way, in order. */
  conditions: ConditionTrace[];
  /** Who could approve a proposal of the call (each member of a named `@group`). */
  approvers: string[];
  /** How many distinct approvers a proposal of the call needs (`approvals:`), when it would be one. */
  approvals?: number;
  /** The guards that read this call (by name), and what they found in these arguments (masked) and do (guards.ts). */
  guards?: NonNullable<ReturnType<typeof explainGuards>>["view"];
  /** The caps that count this call (by name), and the one it would break this minute (caps.ts). */
  caps?: NonNullable<ReturnType<typeof explainCaps>>["view"];
}

interface Rules {
  policy: CompiledPolicy;
  configured: Capability[];
  configuredMatch: Matcher;
}

export class Authority {
  private readonly rules = new Map<string, Rules>();
  private readonly skips = new Map<string, { globs: readonly string[]; match: (tool: string) => boolean }>();
  /** Who is in which group (policy/groups.ts): space.yaml's, and what is learnt at run time. */
  readonly groups: Groups;
  /**
   * The grants this decision point decides with (grants.ts). It is theirs to keep, as a grant
   * stands only while its granter holds what space.yaml gives it, which is asked of this.
   */
  readonly grants: GrantBook = new GrantBook((id) => this.configured(id));
  /** space.yaml's `guards:` compiled (guards.ts): every tools/call's arguments read here, its result by the router. */
  guards: Guards;
  /** space.yaml's `caps:` and their counts this minute (caps.ts): asked here, counted by the router. */
  readonly caps: Caps;

  constructor(
    private readonly config: SpaceConfig,
    private readonly registry: Registry,
  ) {
    this.groups = new Groups(config);
    this.guards = new Guards(config, this.groups);
    this.caps = new Caps(config, this.groups, registry);
  }

  /**
   * Which rules are in force: it moves whenever they change (a reload, a participant invited or
   * removed). A decision taken under one revision and carried out after a wait (an approval
   * that waited for a passkey, proposals/decisions.ts) asks whether it still is the one.
   */
  get rulesRevision(): number {
    return this.revision;
  }
  private revision = 0;

  /** Drops everything compiled from the rules: the space's config was reloaded (space/reload.ts). Add here any cache of config this class grows. */
  reset(): void {
    this.revision++;
    this.rules.clear();
    this.skips.clear();
    this.guards = new Guards(this.config, this.groups);
    this.caps.reset();
  }

  /** Drops what was compiled from a participant's rules (it was invited or removed at runtime). */
  forget(id: string): void {
    this.revision++;
    this.rules.delete(id);
  }

  /** A participant's capabilities from space.yaml: configured, plus its compiled `allow` globs. */
  configured(id: string): readonly Capability[] {
    return this.rulesOf(id)?.configured ?? [];
  }

  /**
   * Why `lender` may not lend `capabilities` (by a grant or an invite), if it may not: it
   * must hold each one, and its own tool policy must let it call directly each tool one of
   * them names. A capability that covers many tools is held to the lender's policy tool by
   * tool at use (`decideFrom`).
   */
  lendable(lender: string, held: readonly Capability[], capabilities: readonly Capability[]): Verdict | undefined {
    const notHeld = capabilities.filter((c) => !covers(held, c));
    if (notHeld.length)
      return {
        decision: "denied",
        code: ErrorCodes.grantExceedsHeld,
        message: "you can only lend capabilities you hold yourself",
        extra: { not_held: notHeld },
      };
    const beyond = capabilities.filter((c) => {
      const t = specificTool(c);
      return t !== undefined && this.tool(lender, t.owner, t.tool) !== "direct";
    });
    if (beyond.length)
      return {
        decision: "denied",
        code: ErrorCodes.grantExceedsPolicy,
        message: "your own tool policy does not let you call this directly, so you cannot lend it",
        extra: { beyond_policy: beyond },
      };
    return undefined;
  }

  /**
   * The tool policy's decision for `caller` calling `owner/tool`. `confirming`: the bar for
   * approving a call, which a change of the tool's definition does not raise — approving it
   * is how a person confirms the new definition.
   */
  tool(caller: string, owner: string, tool: string, confirming = false): Decision {
    return this.checked(caller, owner, tool, undefined, confirming).decision;
  }

  /**
   * The tool policy, then `policy.tool_checks` for a tool whose texts the gateway flagged
   * (inspect.ts): `ask` makes a direct call a proposal, `deny` refuses every call. `args`:
   * the call's arguments, for rules with conditions; undefined when not known.
   */
  private checked(caller: string, owner: string, tool: string, args: unknown, confirming = false): Verdict {
    const reason = this.decideFrom(caller, owner, tool, new Set(), confirming, args);
    const d = reason.decision;
    const mode = this.config.policy.tool_checks;
    const findings = d === "denied" || mode === "warn" ? undefined : this.registry.get(owner, tool)?.findings;
    const name = `${owner}/${tool}`;
    if (findings?.length && mode === "deny") {
      return {
        decision: "denied",
        code: ErrorCodes.toolFlagged,
        message: `the gateway flagged ${name} (${summary(findings)}); this space refuses flagged tools (policy.tool_checks: deny)`,
        extra: { tool: name, findings },
        reason,
      };
    }
    if (findings?.length && d === "direct") return { decision: "proposal", flagged: true, reason };
    if (d === "denied")
      return {
        decision: "denied",
        code: ErrorCodes.denied,
        message: `the space's policy denies you ${name}`,
        extra: { tool: name },
        reason,
      };
    return { decision: d, reason };
  }

  /**
   * Why lending `capabilities` to `recipient` would let it skip a quorum (`approvals: N`), if it
   * would (policy/quorum.ts): a grant of a tool it needs N > 1 approvers for is refused.
   */
  quorumBypass(recipient: string, capabilities: readonly Capability[]): string | undefined {
    return quorumBypass(
      this.config,
      recipient,
      capabilities,
      this.registry.list().map((t) => t.name),
    );
  }

  /** The groups `id` is in: the space's `groups` that name it, and its own `groups` list. */
  groupsOf(id: string): string[] {
    // The one place membership is worked out: space.yaml's groups and those given at run time (groups.ts).
    return this.groups.of(id);
  }

  /**
   * The pin of `owner/tool` when its definition changes count (tools/pins.ts): undefined for
   * a tool not in the catalogue, or one its owner's `pin` setting leaves out.
   */
  pin(owner: string, tool: string): PinState | undefined {
    const setting = this.config.participants[owner]?.pin;
    if (setting === false) return undefined;
    if (typeof setting === "object" && this.skipMatcher(owner, setting.skip)(tool)) return undefined;
    return this.registry.pins.state(owner, tool);
  }

  /** An owner's `pin: {skip}` globs, compiled once, not on every call of its tools. */
  private skipMatcher(owner: string, globs: readonly string[]): (tool: string) => boolean {
    let m = this.skips.get(owner);
    if (!m || m.globs !== globs) {
      const compiled = globs.map((g) => compileGlob(g));
      m = { globs, match: (tool) => compiled.some((c) => c(tool)) };
      this.skips.set(owner, m);
    }
    return m.match;
  }

  /** The digests to record in a grant of `capabilities`: each tool it names exactly, as defined now. */
  pinsFor(capabilities: readonly Capability[]): Record<string, string> | undefined {
    const out: Record<string, string> = {};
    for (const c of capabilities) {
      const t = specificTool(c);
      const digest = t && this.registry.pins.state(t.owner, t.tool)?.digest;
      if (t && digest) out[`${t.owner}/${t.tool}`] = digest;
    }
    return Object.keys(out).length ? out : undefined;
  }

  /**
   * Whether grant `g` still lets `owner/tool` be called, given the tool's pin: a grant that
   * recorded the tool's digest holds while that is the definition; one that did not (a glob,
   * or made before digests were kept) holds while the definition is confirmed, or was
   * already in place when the grant was made.
   */
  private grantHolds(
    g: { ts: string; pins?: Record<string, string> | undefined },
    owner: string,
    tool: string,
    pin: PinState | undefined,
  ): boolean {
    if (!pin) return true;
    const digest = g.pins?.[`${owner}/${tool}`];
    if (digest !== undefined) return digest === pin.digest;
    return pin.confirmed || Date.parse(g.ts) >= pin.since;
  }

  /**
   * The verdict for `caller` sending `method` with `params` to `target`: tools/call by
   * the tool policy, anything else by `allows` (the caller's capability matcher), and
   * every call's arguments against the space's size quota.
   */
  call(
    caller: string,
    allows: Matcher,
    target: string,
    method: string,
    params: Record<string, unknown> | undefined,
    confirming = false,
  ): Verdict {
    const oversize = this.oversize(params);
    if (oversize) return oversize;
    if (method === "tools/call") {
      const name = params?.["name"];
      if (typeof name !== "string")
        return { decision: "denied", code: ErrorCodes.invalidPayload, message: "tools/call: params.name must be a string" };
      // A call always has arguments for the rules' conditions: none given is an empty mapping.
      const args = params?.["arguments"] ?? {};
      // The rules and grants, then the guards over the arguments, then the caps: each may only tighten what came before.
      const ruled = this.checked(caller, target, name, args, confirming);
      const v = guarded(this.guards, ruled, caller, target, name, args, confirming);
      return capped(this.caps, v, caller, target, name, confirming);
    }
    if (allows({ kind: "mcp/request", to: [target], payload: { method, params } })) return { decision: "direct" };
    return {
      decision: "denied",
      code: ErrorCodes.capabilityViolation,
      message: `your capabilities do not allow ${method} to "${target}"`,
      extra: { attempted_kind: "mcp/request", method },
    };
  }

  /**
   * One approval, asked once: everything policy says of `approver` approving `proposer`'s call
   * of `method` on `owner` with `params` (the arguments that will run). The proposer's own
   * verdict now (its rules with these arguments; for a method other than tools/call, its
   * capability, when `proposer.allows` is given, else nothing to ask); the approver's, as if it
   * made the call itself; and the caps that hold such a call for a person, or refuse it this
   * minute whoever approves (caps.ts). The approval's check (proposals/approval.ts) reads it
   * whole, so no rule is asked twice about one approval.
   */
  approval(
    proposer: { id: string; allows?: Matcher | undefined },
    approver: { id: string; allows: Matcher },
    owner: string,
    method: string,
    params: Record<string, unknown>,
    /** Only the approver's side: a card's list of who may decide asks this of every candidate, and runs nothing. */
    approverOnly = false,
  ): ApprovalVerdict {
    const tool = method === "tools/call" && typeof params["name"] === "string" ? params["name"] : undefined;
    const own: Verdict | undefined = approverOnly
      ? undefined
      : tool !== undefined || proposer.allows
        ? this.call(proposer.id, proposer.allows ?? (() => false), owner, method, params, true)
        : { decision: "direct" };
    return {
      proposer: own,
      approver: this.call(approver.id, approver.allows, owner, method, params, true),
      capHolds: tool === undefined ? undefined : this.caps.over(proposer.id, owner, tool, { only: "hold" }),
      capRefuses: tool === undefined ? undefined : this.caps.over(proposer.id, owner, tool, { approver: approver.id, only: "refuse" }),
    };
  }

  /**
   * The verdict for a callback (calls.ts `CALLBACK_METHODS`): a request a participant sends
   * back to the caller of a call it is serving. The caller asked for it by calling, and it
   * answers it itself (a human declines a form, an agent its model's turn), so no
   * capability is needed; the argument quota holds as for every call.
   */
  callback(params: Record<string, unknown> | undefined): Verdict {
    return this.oversize(params) ?? { decision: "direct" };
  }

  private oversize(params: Record<string, unknown> | undefined): Verdict | undefined {
    // Never more than fits a frame with room to spare: a held proposal must fit in an answer.
    const max = Math.min(this.config.quotas.argument_bytes, Math.floor(this.config.gateway.limits.max_payload_bytes * 0.75));
    const size = params === undefined ? 0 : Buffer.byteLength(JSON.stringify(params));
    if (size <= max) return undefined;
    return {
      decision: "denied",
      code: ErrorCodes.quotaExceeded,
      message: `the call's params are ${size} bytes; the space allows ${max} (quotas.argument_bytes)`,
      extra: { quota: "argument_bytes", limit: max },
    };
  }

  /** Why `caller` calling `owner/tool` gets the decision it gets, in words for a person. */
  why(caller: string, owner: string, tool: string, args?: unknown): string {
    const why = this.decideFrom(caller, owner, tool, new Set(), false, args).why;
    const mode = this.config.policy.tool_checks;
    return mode !== "warn" && this.registry.get(owner, tool)?.findings?.length
      ? `${why}; and the gateway flagged the tool (policy.tool_checks: ${mode})`
      : why;
  }

  /** `args`: the call's arguments, when known, for rules' conditions; a grant with a condition (policy/scope.ts) counts only for arguments that meet it. */
  private decideFrom(caller: string, owner: string, tool: string, seen: Set<string>, confirming = false, args?: unknown): Reasoned {
    const rules = this.rulesOf(caller);
    if (!rules) return { decision: "denied", why: "not a participant" };
    seen.add(caller);
    // An invited participant has no policy of its own: it may do no more than its inviter,
    // and its capabilities are a loan, worth a direct call only where the inviter may make one.
    const inviter = this.config.participants[caller]?.invitedBy;
    const lent =
      inviter === undefined
        ? undefined
        : seen.has(inviter)
          ? ({ decision: "denied", why: "its invitation goes round in a circle" } as const)
          : this.decideFrom(inviter, owner, tool, seen, confirming, args);
    const annotations = this.registry.get(owner, tool)?.annotations;
    // Built only when a rule's condition asks (rules.ts reads it lazily through the getter).
    const kind = this.config.participants[caller]?.kind ?? "service";
    const facts: CallFacts | undefined =
      args === undefined
        ? undefined
        : {
            args,
            caller: () => ({ id: caller, kind, groups: this.groupsOf(caller) }),
            annotations: annotations as Record<string, unknown> | undefined,
          };
    // A person calling is a person deciding, now: only what was allowed for others (agents,
    // services, by rule, grant or annotation) waits for a person to see the change.
    const pin = confirming || this.config.participants[caller]?.kind === "human" ? undefined : this.pin(owner, tool);
    let grantSuspended = false;
    let grantUsed: { id: string; from: string } | undefined;
    const own = decideWhy({
      policy: rules.policy,
      configured: lent === undefined ? rules.configuredMatch : (shape) => lent.decision === "direct" && rules.configuredMatch(shape),
      // Depth-first over grants with one `seen` set per question: a participant already
      // asked about cannot help (it is either being proved right now, which is circular,
      // or was found unable), so each is asked at most once.
      // A call under a quorum (`approvals: N` > 1) is never made direct by a grant: one person's
      // grant would stand in for N (policy/quorum.ts); however it was made, it does not count.
      granted: (shape) =>
        requiredApprovals(this.config, caller, owner, tool) <= 1 &&
        this.grants.to(caller).some((g) => {
          if (!g.matches(shape)) return false;
          if (g.condition !== undefined && !conditionHolds(g.condition, isRecord(args) ? args : undefined)) return false;
          if (!this.grantHolds(g, owner, tool, pin)) {
            grantSuspended = true;
            return false;
          }
          const holds = !seen.has(g.from) && this.decideFrom(g.from, owner, tool, seen, confirming, args).decision === "direct";
          if (holds) grantUsed = { id: g.id, from: g.from };
          return holds;
        }),
      owner,
      tool,
      annotations,
      facts,
      autoApproved: this.config.participants[owner]?.mcp?.autoApprove?.includes(tool),
      fallback: this.config.policy.fallback,
      unconfirmed: pin !== undefined && !pin.confirmed,
      // Read after `granted` has been asked, which is what sets it.
      get grantSuspended() {
        return grantSuspended;
      },
    });
    if (own.step === "grant" && grantUsed) own.grant = grantUsed;
    if (lent === undefined || RANK[lent.decision] >= RANK[own.decision]) return own;
    return { ...lent, why: `it was invited by ${inviter}, and for ${inviter}: ${lent.why}` };
  }

  /**
   * Why `caller` calling `owner/tool` with `args` gets what it gets, and who could approve it:
   * asked through `call`, the very path every call takes, so the two cannot disagree.
   */
  explain(caller: string, owner: string, tool: string, args: Record<string, unknown> = {}): Explanation {
    const params = { name: tool, arguments: args };
    const allows = this.rulesOf(caller)?.configuredMatch ?? (() => false);
    const verdict = this.call(caller, allows, owner, "tools/call", params);
    const reason = verdict.reason ?? { decision: verdict.decision, why: verdict.decision === "denied" ? verdict.message : "" };
    const m = reason.match;
    const guards = explainGuards(this.guards, caller, owner, tool, verdict);
    const caps = explainCaps(this.caps, caller, owner, tool, verdict);
    const said = [reason.why, guards?.said, caps?.said].filter(Boolean).join("; ");
    // Held by a guard or a cap: only a person may approve it (proposals/deciders.ts).
    const people = verdict.decision === "proposal" && (verdict.guard?.action === "hold" || verdict.cap !== undefined);
    return {
      caller,
      tool: `${owner}/${tool}`,
      decision: verdict.decision,
      ...(verdict.decision === "denied" ? { code: verdict.code, message: verdict.message } : {}),
      ...(verdict.decision === "proposal" && verdict.flagged ? { flagged: true } : {}),
      why: said,
      ...(reason.step ? { step: reason.step } : {}),
      ...(m
        ? {
            rule: {
              kind: m.rule.rule,
              key: `participants.${caller}.tools.${m.rule.key}`,
              tool: m.rule.glob,
              ...(m.rule.when !== undefined ? { when: m.rule.when } : {}),
              ...(m.rule.at ? { file: m.rule.at.file, line: m.rule.at.line, column: m.rule.at.column } : {}),
            },
          }
        : {}),
      ...(m?.condition ? { condition: m.condition } : {}),
      ...(reason.grant ? { grant: reason.grant } : {}),
      conditions: reason.conditions ?? [],
      approvers:
        verdict.decision !== "proposal"
          ? []
          : this.approvers(caller, owner, params).filter((id) => !people || this.config.participants[id]?.kind === "human"),
      ...(verdict.decision === "proposal" ? { approvals: requiredApprovals(this.config, caller, owner, tool) } : {}),
      ...(guards ? { guards: guards.view } : {}),
      ...(caps ? { caps: caps.view } : {}),
    };
  }

  /**
   * Who could approve `caller`'s proposal of this call: not the caller, one of its
   * `approvers` if it names them (an `@group` names each of its members, groups.ts, as at a
   * decision), and able to make the call itself (proposals/deciders.ts's bar).
   */
  approvers(caller: string, owner: string, params: Record<string, unknown>): string[] {
    const named = this.config.participants[caller]?.approvers;
    return Object.keys(this.config.participants).filter((id) => {
      if (id === caller || (named && !this.groups.names(named, id))) return false;
      const v = this.call(id, this.rulesOf(id)?.configuredMatch ?? (() => false), owner, "tools/call", params, true);
      return v.decision === "direct" || (v.decision === "proposal" && v.flagged === true);
    });
  }

  private rulesOf(id: string): Rules | undefined {
    let r = this.rules.get(id);
    if (r) return r;
    const p = this.config.participants[id];
    if (!p) return undefined;
    const tools = withGroups(p.tools, this.config.groups);
    const configured = [...p.capabilities, ...allowCapabilities(tools)];
    r = { policy: new CompiledPolicy(tools), configured, configuredMatch: compileCapabilities(configured) };
    this.rules.set(id, r);
    return r;
  }
}

/**
 * A tool policy whose `@group/tool` globs are spelled out, one per member of the group
 * (policy/groups.ts); the same object when it names no group, and either way each rule
 * keeps its place in the file (config/rule-positions.ts), for explain and the checks.
 */
function withGroups<T extends Record<string, unknown> | undefined>(
  tools: T,
  groups: Readonly<Record<string, readonly string[]>> | undefined,
): T {
  if (tools === undefined || !groups) return tools;
  const named = (r: unknown) => (typeof r === "string" ? r : r && typeof r === "object" ? (r as { tool?: unknown }).tool : undefined);
  const lists = Object.values(tools).filter(Array.isArray) as unknown[][];
  if (!lists.some((list) => list.some((r) => String(named(r) ?? "").startsWith("@")))) return tools;
  const out: Record<string, unknown> = { ...tools };
  const from: Record<string, string> = {};
  for (const [rule, list] of Object.entries(tools)) {
    if (!Array.isArray(list)) continue;
    const spelt: unknown[] = [];
    list.forEach((r: unknown, i) => {
      const tool = named(r);
      // A rule object (`{tool, ...}`) keeps everything but its tool glob.
      const made =
        typeof tool !== "string"
          ? [r]
          : typeof r === "string"
            ? expandRuleGlob(r, groups)
            : expandRuleGlob(tool, groups).map((t) => ({ ...(r as object), tool: t }));
      for (const m of made) from[`${rule}[${spelt.push(m) - 1}]`] = `${rule}[${i}]`;
    });
    out[rule] = spelt;
  }
  deriveRulePositions(tools, out, from);
  return out as T;
}
