/**
 * A call held for a person: an `mcp/proposal` (or a tools/call through system:gateway that
 * policy says needs approval) checked — a target, not denied outright, not to a switched-off
 * participant, no call cycle, within the pending quotas — then written, marked with what a
 * card must show (a changed definition, a guard's findings, a cap, how many approvals it needs)
 * and delivered to those who may see it.
 */
import {
  type Envelope,
  ErrorCodes,
  GATEWAY_ID,
  type InboundEnvelope,
  ProposalPayloadSchema,
  describeIssue,
  stamp,
  isoTime,
} from "../wire/envelope.js";
import { clip, disabledRefusal, type SpaceHost } from "../ports/host.js";
import type { CallRouter } from "../calls/routing.js";
import type { Calls } from "../calls/calls.js";
import type { Registry } from "../tools/registry.js";
import { DEFINITION_CHANGED } from "../policy/rules.js";
import { DEFINITION_CHANGED_KEY, GUARDS_KEY, CAP_KEY, OPEN_OWNER, type ProposalBook } from "./book.js";
import type { Member } from "../ports/member.js";
import { requiredApprovals } from "../policy/quorum.js";

/** What holding a proposal uses of the space. */
export type ProposingHost = Pick<SpaceHost, "authority" | "config" | "deliver" | "fail" | "record" | "sendTo" | "storeFailed">;

export class Proposing {
  constructor(
    private readonly space: ProposingHost,
    private readonly proposals: ProposalBook,
    private readonly calls: Calls,
    private readonly registry: Registry,
    private readonly router: Pick<CallRouter, "authorize" | "unknownTool">,
  ) {}

  onProposal(member: Member, inbound: InboundEnvelope): Promise<void> | void {
    const parsed = ProposalPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/proposal: ${describeIssue(parsed.error)}`, inbound.id);
    let { method, params = {} } = parsed.data;
    const intent = parsed.data.intent;
    let to = inbound.to ?? [];
    if (to.length === 1 && to[0] === GATEWAY_ID && method === "tools/call") {
      const entry = typeof params["name"] === "string" ? this.registry.resolve(params["name"]) : undefined;
      if (!entry) {
        const why = this.router.unknownTool(String(params["name"]));
        return this.space.fail(member, why.code, why.message, inbound.id);
      }
      to = [entry.participant];
      params = { ...params, name: entry.tool };
    }
    // MEW lets a proposal name no one: whoever fulfils it picks the target (§3.2). The
    // gateway holds it for the one participant that offers the tool, if there is one, so
    // approval and policy work as for any other; otherwise it is held open, and policy is
    // applied when a fulfilment names the target (onFulfil).
    if (to.length === 0 && method === "tools/call" && typeof params["name"] === "string") {
      const owners = this.registry.ownersOf(params["name"]);
      const off = owners.length === 0 ? this.registry.ownersOf(params["name"], true) : [];
      if (owners.length === 1) to = owners;
      else if (off.length > 0) {
        const why = disabledRefusal(off.join(", "));
        return this.space.fail(member, why.code, why.message, inbound.id);
      } else {
        const env = stamp({ ...inbound, to: undefined, payload: { method, params } }, member.id);
        delete env.to;
        return this.hold(member, env, method, params, env.id, { sentId: inbound.id, owner: OPEN_OWNER });
      }
    }
    if (to.length !== 1 || to[0] === GATEWAY_ID) {
      return this.space.fail(
        member,
        ErrorCodes.invalidEnvelope,
        "an mcp/proposal names exactly one participant that would serve it (to: [id])",
        inbound.id,
      );
    }
    // A proposal asks for what policy would let the proposer have with approval: one that
    // is denied outright, or over the argument quota, is refused before anyone sees it.
    const verdict = this.router.authorize(member, to[0]!, method, params);
    if (verdict.decision === "denied" && (method === "tools/call" || verdict.code !== ErrorCodes.capabilityViolation)) {
      return this.space.fail(member, verdict.code, verdict.message, inbound.id, verdict.extra);
    }
    // Nobody could approve a call to a switched-off participant into running: refused now.
    if (method === "tools/call" && this.registry.isDisabled(to[0]!)) {
      const off = disabledRefusal(to[0]!);
      return this.space.fail(member, off.code, off.message, inbound.id);
    }
    // A proposal that could never be routed (a call back into its own chain) is refused now.
    const chain = this.calls.chainFor(member.id, inbound.correlation_id);
    if (chain.includes(to[0]!))
      return this.space.fail(member, ErrorCodes.cycleDetected, `call cycle: ${[...chain, to[0]!].join(" → ")}`, inbound.id, {
        chain: [...chain, to[0]!],
      });
    const env = stamp({ ...inbound, to, payload: { method, params, ...(intent !== undefined ? { intent } : {}) } }, member.id);
    return this.hold(member, env, method, params, env.id, { sentId: inbound.id });
  }
  /**
   * Holds a proposal. `tellProposer`: the gateway made it from a tools/call, so the caller
   * learns that its call now waits for approval. `sentId`: the id of the envelope the
   * proposer sent, if it gave one, which a refusal correlates to (`env.id` is made up when it gave none).
   */
  async hold(
    member: Member,
    env: Envelope,
    method: string,
    params: Record<string, unknown>,
    rpcId: string | number,
    opts: { tellProposer?: boolean; sentId: string | undefined; owner?: string },
  ): Promise<void> {
    const sentId = opts.sentId;
    if (this.proposals.get(env.id) || this.proposals.isBusy(env.id) || this.proposals.endedAs(env.id) || this.calls.get(env.id)) {
      return this.space.fail(member, ErrorCodes.duplicateId, `id "${clip(env.id)}" is already in use`, sentId);
    }
    const bytes = Buffer.byteLength(JSON.stringify(env));
    const over = this.overQuota(member.id, bytes);
    if (over) return this.space.fail(member, ErrorCodes.quotaExceeded, over.message, sentId, { quota: over.quota, limit: over.limit });
    const owner = opts.owner ?? env.to![0]!;
    const now = Date.now();
    const tool = method === "tools/call" ? (params["name"] as string) : undefined;
    const digest = tool === undefined || owner === OPEN_OWNER ? undefined : this.registry.pins.state(owner, tool)?.digest;
    // A tool changed since it was confirmed: the card shows what changed (tools/pins.ts).
    const changed =
      tool !== undefined && owner !== OPEN_OWNER && this.space.authority.pin(owner, tool)?.confirmed === false
        ? this.registry.pins.unconfirmed(owner, tool)
        : undefined;
    if (changed && typeof env.payload === "object" && env.payload !== null) {
      env.payload = {
        ...(env.payload as Record<string, unknown>),
        [DEFINITION_CHANGED_KEY]: {
          tool: `${owner}/${tool}`,
          message: DEFINITION_CHANGED,
          previous: changed.from,
          digest: changed.to,
          changes: changed.changes,
        },
      };
    }
    // What the space's guards found in the arguments goes on the card, masked (policy/guards.ts);
    // everyone but the proposer sees the arguments with it replaced.
    const guard =
      tool === undefined || owner === OPEN_OWNER
        ? undefined
        : this.space.authority.guards.screen(member.id, owner, tool, params["arguments"] ?? {}, "arguments");
    let shown: Envelope | undefined;
    // A cap reached holds it for a person too: the card says which (policy/caps.ts).
    const cap = tool === undefined || owner === OPEN_OWNER ? undefined : this.space.authority.caps.over(member.id, owner, tool);
    if (cap?.action === "hold" && typeof env.payload === "object" && env.payload !== null)
      env.payload = { ...(env.payload as Record<string, unknown>), [CAP_KEY]: cap };
    if (guard && typeof env.payload === "object" && env.payload !== null) {
      env.payload = { ...(env.payload as Record<string, unknown>), [GUARDS_KEY]: { action: guard.action, findings: guard.findings } };
      const masked = guard.shown ?? guard.redacted;
      if (masked !== undefined)
        shown = { ...env, payload: { ...(env.payload as Record<string, unknown>), params: { ...params, arguments: masked } } };
    }
    // The two-person rule is fixed when the proposal is held (proposals/approvals.ts).
    const required = requiredApprovals(this.space.config, member.id, owner, tool);
    if (required > 1 && env.payload && typeof env.payload === "object") {
      env.payload = { ...(env.payload as Record<string, unknown>), "mewgate/approvals": { required, by: [] } };
    }
    const plan = this.proposals.planAdd({
      id: env.id,
      proposer: member.id,
      owner,
      method,
      params,
      tool,
      digest,
      rpcId,
      chain: this.calls.chainFor(member.id, env.correlation_id),
      state: "pending",
      createdAt: isoTime(now),
      expiresAt: now + this.space.config.policy.proposal_ttl_ms,
      envelope: env,
      bytes,
      ...(required > 1 ? { required, approvals: [] } : {}),
    });
    try {
      await this.space.record(plan);
    } catch (err) {
      return this.space.storeFailed(member, err, sentId, "your proposal was not held");
    }
    member.log.info({ proposal: env.id, owner, method }, "proposal held");
    if (shown) {
      // The proposer has its own arguments; the others get them masked (the book keeps what runs).
      if (opts.tellProposer) this.space.sendTo(member, env);
      this.space.deliver(shown, member);
    } else this.space.deliver(env, opts.tellProposer ? undefined : member);
  }
  /**
   * Every pending proposal is held in memory, written to disk and shown to every approver,
   * so each participant, and the space as a whole, may have only so many, of only so many
   * bytes, pending at once. The first quota a proposal of `bytes` would break, if any.
   */
  private overQuota(proposer: string, bytes: number): { quota: string; limit: number; message: string } | undefined {
    const q = this.space.config.quotas;
    const mine = this.proposals.pendingOf(proposer);
    const all = this.proposals.pendingTotal();
    const checks: Array<[string, number, number, string]> = [
      [
        "pending_proposals",
        mine.count + 1,
        q.pending_proposals,
        `${q.pending_proposals} proposals of yours are already pending; wait for decisions or withdraw some`,
      ],
      [
        "pending_bytes",
        mine.bytes + bytes,
        q.pending_bytes,
        `your pending proposals would hold ${mine.bytes + bytes} bytes; you may have ${q.pending_bytes} pending`,
      ],
      [
        "space_pending_proposals",
        all.count + 1,
        q.space_pending_proposals,
        `the space already holds ${all.count} pending proposals, its limit; try again once some are decided`,
      ],
      [
        "space_pending_bytes",
        all.bytes + bytes,
        q.space_pending_bytes,
        `the space's pending proposals would hold ${all.bytes + bytes} bytes, over its ${q.space_pending_bytes}`,
      ],
    ];
    const broken = checks.find(([, value, limit]) => value > limit);
    return broken && { quota: broken[0], limit: broken[2], message: `${broken[3]} (quotas.${broken[0]})` };
  }
}
