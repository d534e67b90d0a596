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
 */
import { type Capability, compileCapabilities, compileGlob, covers, type Matcher } from "./capabilities.js";
import type { SpaceConfig } from "../config/config.js";
import { ErrorCodes, type ErrorCode } from "../wire/envelope.js";
import type { GrantBook } from "./grants.js";
import { allowCapabilities, CompiledPolicy, type Decision, decideWhy, specificTool } from "./rules.js";
import type { Registry } from "../ports/registry.js";
import { summary } from "./inspect.js";
import type { PinState } from "../ports/pins.js";

/** The outcome for one call: go ahead, go through a proposal, or a refusal to send back. */
export type Verdict = { decision: "direct" | "proposal"; /** a proposal only because the gateway flagged the tool (`tool_checks: ask`): whoever may call it otherwise may approve it */ flagged?: true } | { decision: "denied"; code: ErrorCode; message: string; extra?: Record<string, unknown> };

/** How much a decision lets through: an invited participant gets the lesser of its own and its inviter's. */
const RANK: Record<Decision, number> = { denied: 0, proposal: 1, direct: 2 };

interface Rules {
  policy: CompiledPolicy;
  configured: Capability[];
  configuredMatch: Matcher;
}

export class Authority {
  private readonly rules = new Map<string, Rules>();
  private readonly skips = new Map<string, { globs: readonly string[]; match: (tool: string) => boolean }>();

  constructor(
    private readonly config: SpaceConfig,
    private readonly grants: GrantBook,
    private readonly registry: Registry,
  ) {}

  /** Drops everything compiled from the rules: the space's config was reloaded (space/reload.ts). Add here any cache of config this class grows. */
  reset(): void {
    this.rules.clear();
    this.skips.clear();
  }

  /** Drops what was compiled from a participant's rules (it was invited or removed at runtime). */
  forget(id: string): void {
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
    if (notHeld.length) return { decision: "denied", code: ErrorCodes.grantExceedsHeld, message: "you can only lend capabilities you hold yourself", extra: { not_held: notHeld } };
    const beyond = capabilities.filter((c) => {
      const t = specificTool(c);
      return t !== undefined && this.tool(lender, t.owner, t.tool) !== "direct";
    });
    if (beyond.length) return { decision: "denied", code: ErrorCodes.grantExceedsPolicy, message: "your own tool policy does not let you call this directly, so you cannot lend it", extra: { beyond_policy: beyond } };
    return undefined;
  }

  /**
   * The tool policy's decision for `caller` calling `owner/tool`. `confirming`: the bar for
   * approving a call, which a change of the tool's definition does not raise — approving it
   * is how a person confirms the new definition.
   */
  tool(caller: string, owner: string, tool: string, confirming = false): Decision {
    return this.checked(caller, owner, tool, confirming).decision;
  }

  /**
   * The tool policy, then `policy.tool_checks` for a tool whose texts the gateway flagged
   * (inspect.ts): `ask` makes a direct call a proposal, `deny` refuses every call.
   */
  private checked(caller: string, owner: string, tool: string, confirming = false): Verdict {
    const d = this.decideFrom(caller, owner, tool, new Set(), confirming).decision;
    const mode = this.config.policy.tool_checks;
    const findings = d === "denied" || mode === "warn" ? undefined : this.registry.get(owner, tool)?.findings;
    const name = `${owner}/${tool}`;
    if (findings?.length && mode === "deny") {
      return { decision: "denied", code: ErrorCodes.toolFlagged, message: `the gateway flagged ${name} (${summary(findings)}); this space refuses flagged tools (policy.tool_checks: deny)`, extra: { tool: name, findings } };
    }
    if (findings?.length && d === "direct") return { decision: "proposal", flagged: true };
    if (d === "denied") return { decision: "denied", code: ErrorCodes.denied, message: `the space's policy denies you ${name}`, extra: { tool: name } };
    return { decision: d };
  }

  /**
   * The pin of `owner/tool` when its definition changes count (ports/pins.ts): undefined for
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
  private grantHolds(g: { ts: string; pins?: Record<string, string> | undefined }, owner: string, tool: string, pin: PinState | undefined): boolean {
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
  call(caller: string, allows: Matcher, target: string, method: string, params: Record<string, unknown> | undefined, confirming = false): Verdict {
    const oversize = this.oversize(params);
    if (oversize) return oversize;
    if (method === "tools/call") {
      const name = params?.["name"];
      if (typeof name !== "string") return { decision: "denied", code: ErrorCodes.invalidPayload, message: "tools/call: params.name must be a string" };
      return this.checked(caller, target, name, confirming);
    }
    if (allows({ kind: "mcp/request", to: [target], payload: { method, params } })) return { decision: "direct" };
    return { decision: "denied", code: ErrorCodes.capabilityViolation, message: `your capabilities do not allow ${method} to "${target}"`, extra: { attempted_kind: "mcp/request", method } };
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
    return { decision: "denied", code: ErrorCodes.quotaExceeded, message: `the call's params are ${size} bytes; the space allows ${max} (quotas.argument_bytes)`, extra: { quota: "argument_bytes", limit: max } };
  }

  /** Why `caller` calling `owner/tool` gets the decision it gets, in words for a person. */
  why(caller: string, owner: string, tool: string): string {
    const why = this.decideFrom(caller, owner, tool, new Set()).why;
    const mode = this.config.policy.tool_checks;
    return mode !== "warn" && this.registry.get(owner, tool)?.findings?.length ? `${why}; and the gateway flagged the tool (policy.tool_checks: ${mode})` : why;
  }

  private decideFrom(caller: string, owner: string, tool: string, seen: Set<string>, confirming = false): { decision: Decision; why: string } {
    const rules = this.rulesOf(caller);
    if (!rules) return { decision: "denied", why: "not a participant" };
    seen.add(caller);
    // An invited participant has no policy of its own: it may do no more than its inviter,
    // and its capabilities are a loan, worth a direct call only where the inviter may make one.
    const inviter = this.config.participants[caller]?.invitedBy;
    const lent = inviter === undefined ? undefined : seen.has(inviter) ? ({ decision: "denied", why: "its invitation goes round in a circle" } as const) : this.decideFrom(inviter, owner, tool, seen, confirming);
    // A person calling is a person deciding, now: only what was allowed for others (agents,
    // services, by rule, grant or annotation) waits for a person to see the change.
    const pin = confirming || this.config.participants[caller]?.kind === "human" ? undefined : this.pin(owner, tool);
    let grantSuspended = false;
    const own = decideWhy({
      policy: rules.policy,
      configured: lent === undefined ? rules.configuredMatch : (shape) => lent.decision === "direct" && rules.configuredMatch(shape),
      // Depth-first over grants with one `seen` set per question: a participant already
      // asked about cannot help (it is either being proved right now, which is circular,
      // or was found unable), so each is asked at most once.
      granted: (shape) =>
        this.grants.to(caller).some((g) => {
          if (!g.matches(shape)) return false;
          if (!this.grantHolds(g, owner, tool, pin)) return !(grantSuspended = true);
          return !seen.has(g.from) && this.decideFrom(g.from, owner, tool, seen, confirming).decision === "direct";
        }),
      owner,
      tool,
      annotations: this.registry.get(owner, tool)?.annotations,
      autoApproved: this.config.participants[owner]?.mcp?.autoApprove?.includes(tool),
      fallback: this.config.policy.fallback,
      unconfirmed: pin !== undefined && !pin.confirmed,
      // Read after `granted` has been asked, which is what sets it.
      get grantSuspended() {
        return grantSuspended;
      },
    });
    if (lent === undefined || RANK[lent.decision] >= RANK[own.decision]) return own;
    return { decision: lent.decision, why: `it was invited by ${inviter}, and for ${inviter}: ${lent.why}` };
  }

  private rulesOf(id: string): Rules | undefined {
    let r = this.rules.get(id);
    if (r) return r;
    const p = this.config.participants[id];
    if (!p) return undefined;
    const configured = [...p.capabilities, ...allowCapabilities(p.tools)];
    r = { policy: new CompiledPolicy(p.tools), configured, configuredMatch: compileCapabilities(configured) };
    this.rules.set(id, r);
    return r;
  }
}
