/**
 * What happens to a proposal: held, approved (or fulfilled, MEW-style), rejected,
 * withdrawn, or expired — each decision in one place.
 *
 * proposals/book.ts is the state machine and its persistence; this module decides which
 * transition an envelope asks for and whether its sender may make it: only a participant
 * that could make the call itself, named in the proposer's `approvers` if set, and never
 * the proposer. It was split out of space.ts (members, routing, visibility, presence),
 * and acts on the space only through `SpaceHost`. An approved proposal becomes a call,
 * routed through calls/router.ts on the proposer's behalf; the call table and the catalogue
 * are built before this module and handed to it, and it never reaches through the router.
 * Past 500 lines because it is one concern: every input of one state machine (propose,
 * approve, fulfil, reject, withdraw, expire), each beside the checks it shares with the others.
 */
import { randomUUID } from "node:crypto";
import {
  ApprovePayloadSchema,
  type Envelope,
  type ErrorCode,
  ErrorCodes,
  GATEWAY_ID,
  type InboundEnvelope,
  type McpRequestPayload,
  PROTOCOL,
  ProposalPayloadSchema,
  RejectPayloadSchema,
  RpcErrors,
  WithdrawPayloadSchema,
  describeIssue,
  now,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import { type CallRouter, clip, disabledRefusal, type GrantDesk, type ProposalDesk, type SpaceHost } from "../ports/host.js";
import type { Calls } from "../calls/calls.js";
import type { Registry } from "../tools/registry.js";
import { DEFINITION_CHANGED, toolGrant } from "../policy/rules.js";
import type { Plan } from "../store/plan.js";
import {
  awaiting,
  DEFINITION_CHANGED_KEY,
  GUARDS_KEY,
  CAP_KEY,
  INTERRUPTED_TEXT,
  OPEN_OWNER,
  type Proposal,
  type ProposalBook,
  runningArguments,
  runningParams,
} from "./book.js";
import type { Member } from "../ports/member.js";
import { approveOneOf, approversNow, sameArguments } from "./approvals.js";
import { requiredApprovals } from "../policy/quorum.js";
import { cannotRun, editOf } from "./runs.js";
import { respondMark } from "./respond.js";
import { dropFallenApprovals, fulfilmentStanding } from "./still-count.js";
import { conditionFor, describeCondition, type GrantCondition } from "../policy/scope.js";
import { Escalations } from "./escalation.js";
import type { RunsEnded } from "./runs-ended.js";
import { type ReviewerDesk, reviewerRefusal, reviews } from "./reviewer-bound.js";
import { argumentsDigest, type DeciderKind, newDecisionId, policyDigest, type ReceiptKeys } from "./receipts.js";
import type { PasskeyBar, PasskeyProof } from "./passkey-bar.js";
import { isRecord } from "../wire/values.js";

export class Decisions implements ProposalDesk {
  /** `policy.escalate`'s timers (escalation.ts); the space arms them as proposals change. */
  readonly escalations: Escalations;

  constructor(
    private readonly space: Pick<
      SpaceHost,
      | "authority"
      | "config"
      | "deliver"
      | "fail"
      | "id"
      | "log"
      | "member"
      | "metrics"
      | "note"
      | "record"
      | "sendTo"
      | "storeFailed"
      | "verdictOf"
    >,
    private readonly proposals: ProposalBook,
    /** The call table and the catalogue, built before this (the decision point is the space's `authority`). */
    private readonly calls: Calls,
    private readonly registry: Registry,
    /** Where an approved call is routed (calls/router.ts). */
    private readonly router: Pick<CallRouter, "authorize" | "tryRoute" | "unknownTool" | "catalogueChanged">,
    private readonly runs: RunsEnded,
    /** Where an "always" approval's grant is made (agents/lending.ts). */
    private readonly grants: GrantDesk,
    /** Tells the webhooks a proposal escalated (notify.ts), with the stage's approvers. */
    notify: (p: Proposal, approvers: readonly string[]) => void = () => {},
    /** What bounds a reviewer (reviewer-bound.ts): the recorded calls its risk is read over. */
    private readonly reviewers?: ReviewerDesk,
    /** Signs each approval's receipt (receipts.ts); without it approvals carry none. */
    private readonly receipts?: ReceiptKeys,
    /** Which approvals need the approver's passkey, and checks it (passkey-bar.ts). */
    readonly passkeys?: PasskeyBar,
  ) {
    this.escalations = new Escalations(space, proposals, notify);
    // The book is built first and tells this of its proposals' clocks and changes.
    proposals.due.add((p) => void this.onDue(p));
    proposals.changed.add((p) => this.escalations.arm(p));
  }

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
      createdAt: new Date(now).toISOString(),
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

  /**
   * The proposal an `mcp/approve` / `mcp/reject` / `mcp/withdraw` names, if it still awaits
   * a decision (pending, or interrupted: approved before the gateway stopped, waiting to be
   * decided again); otherwise the sender is told exactly why not.
   */
  private pendingProposal(member: Member, inbound: InboundEnvelope, verb: string): Proposal | undefined {
    const id = inbound.correlation_id?.[0];
    if (id === undefined) {
      this.space.fail(member, ErrorCodes.invalidEnvelope, `${verb}: correlation_id must name the proposal`, inbound.id);
      return undefined;
    }
    const p = this.proposals.get(id);
    if (p && awaiting(p.state) && this.proposals.isBusy(id)) {
      this.space.fail(member, ErrorCodes.proposalNotPending, `a decision on proposal "${clip(id)}" is being recorded`, inbound.id, {
        state: "deciding",
      });
      return undefined;
    }
    if (p && awaiting(p.state)) return p;
    const ended = p?.state ?? this.proposals.endedAs(id);
    if (ended)
      this.space.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(id)}" is already ${ended}`, inbound.id, { state: ended });
    else this.space.fail(member, ErrorCodes.unknownProposal, `no proposal "${clip(id)}" in space "${this.space.id}"`, inbound.id);
    return undefined;
  }

  /** Whether `member` may decide `p` (`whyNotDecide`); if not, it is told why. */
  private mayDecide(member: Member, p: Proposal, inboundId: string | undefined, approving = false): boolean {
    const why = this.whyNotDecide(member, p, approving);
    if (why) this.space.fail(member, why.code, why.message, inboundId);
    return why === undefined;
  }

  /**
   * Who may approve or reject: not the proposer, one of its `approvers` if set, and able to
   * make the call itself, with the arguments that will run. `approving`: nor may anyone approve
   * a call to a participant switched off since it was proposed (the proposal stays as it is);
   * asked before the approver's capability, which may rest on the tool's annotations, hidden
   * while it is off. Also the bar for a Respond to count as an answer (`respondMark`).
   */
  whyNotDecide(member: Member, p: Proposal, approving = false): { code: ErrorCode; message: string } | undefined {
    if (member.id === p.proposer)
      return { code: ErrorCodes.selfApproval, message: "you cannot decide on your own proposal (withdraw it instead)" };
    // Switched off, it offers nothing to the space, its word on others' calls included.
    if (this.registry.isDisabled(member.id))
      return { code: disabledRefusal(member.id).code, message: "you are switched off in this space, so you may not decide proposals" };
    // A guard or a cap held it for a person: an agent or a service does not stand in (policy/guards.ts, caps.ts).
    const marks = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
    // A cap that holds, reached since it was proposed, holds it as well when it is approved.
    const capHeld =
      approving && p.tool !== undefined && p.owner !== OPEN_OWNER
        ? this.space.authority.caps.over(p.proposer, p.owner, p.tool, { only: "hold" })
        : undefined;
    const held =
      (marks?.[GUARDS_KEY] as { action?: string } | undefined)?.action === "hold" ||
      marks?.[CAP_KEY] !== undefined ||
      capHeld !== undefined;
    if (held && this.space.config.participants[member.id]?.kind !== "human")
      return {
        code: ErrorCodes.guardHeld,
        message: "a guard or a cap of the space holds this call for a person; only a human participant may decide it",
      };
    // A cap that refuses is not lifted by an approval: the proposal waits for the next minute
    // (the router asks again as the call leaves, calls/guarded.ts `capRefusal`).
    const refused =
      approving && p.tool !== undefined && p.owner !== OPEN_OWNER
        ? this.space.authority.caps.over(p.proposer, p.owner, p.tool, { approver: member.id, only: "refuse" })
        : undefined;
    if (refused)
      return {
        code: ErrorCodes.capExceeded,
        message: `a cap of the space is reached (${refused.text}); the proposal stays pending: approve it again next minute`,
      };
    // A reviewer of the proposer is bounded by what it is, not by the approvers list or its own
    // capabilities: it never rejects, and its approval is held to its bound (`reviewerBar`).
    if (this.reviewers && reviews(this.reviewers, member.id, p)) {
      if (!approving) return reviewerRefusal(this.reviewers, member.id, p, { approving: false });
      if (p.method === "tools/call" && this.registry.isDisabled(p.owner)) {
        const off = disabledRefusal(p.owner);
        return { code: off.code, message: `${off.message}; the proposal stays ${p.state}` };
      }
      return undefined;
    }
    // The proposer's approvers (ids and @groups: space.yaml's, and those the identity provider
    // put members in), widened by escalation stages reached (approvals.ts).
    const approvers = approversNow(this.space.config, p);
    if (approvers && !this.space.authority.groups.names(approvers, member.id)) {
      return { code: ErrorCodes.notAnApprover, message: `proposals of "${p.proposer}" are decided by ${approvers.join(", ")}` };
    }
    // Nobody can tell whether a rejecter could make an open proposal's call before a target
    // is named: rejecting runs nothing, so the approvers' list is the bar. Fulfilling names one.
    if (p.owner === OPEN_OWNER && !approving) return undefined;
    if (approving && p.method === "tools/call" && this.registry.isDisabled(p.owner)) {
      const off = disabledRefusal(p.owner);
      return { code: off.code, message: `${off.message}; the proposal stays ${p.state}` };
    }
    const verdict = this.router.authorize(member, p.owner, p.method, runningParams(p), true);
    if (verdict.decision === "direct" || (verdict.decision === "proposal" && verdict.flagged === true)) return undefined;
    return {
      code: ErrorCodes.approverLacksCapability,
      message: `you may not make this call yourself (with the arguments that will run), so you cannot approve or reject it`,
    };
  }

  /**
   * Why `member` may not approve `p` once, as it stands, with the arguments that will run:
   * `whyNotDecide`, then a reviewer's bound (reviewer-bound.ts). The bar "who may decide"
   * lists are drawn from (operator/deciders.ts), so a card names only those the gateway would heed.
   */
  whyNotApprove(member: Member, p: Proposal): { code: ErrorCode; message: string } | undefined {
    const why = this.whyNotDecide(member, p, true);
    if (why || !this.reviewers) return why;
    return reviewerRefusal(this.reviewers, member.id, p, { approving: true, scope: "once", args: runningArguments(p) });
  }

  /** A chat correlated to a proposal, marked as a Respond only if `member` may decide it (respond.ts). */
  respondMark(member: Member, chat: Envelope): Envelope {
    return respondMark(
      chat,
      member.id,
      (id) => this.proposals.get(id),
      (p) => this.whyNotDecide(member, p) === undefined,
    );
  }

  /** A reviewer's approval within its bound, or it is told why not (reviewer-bound.ts); anyone else passes. */
  private reviewerBar(member: Member, p: Proposal, act: Parameters<typeof reviewerRefusal>[3], inboundId: string | undefined): boolean {
    const why = this.reviewers && reviewerRefusal(this.reviewers, member.id, p, act);
    if (why) this.space.fail(member, why.code, why.message, inboundId);
    return why === undefined;
  }

  /** The approver's bar for the call with `args` instead of the proposed arguments. */
  private mayCallWith(member: Member, p: Proposal, args: Record<string, unknown>, inboundId: string | undefined): boolean {
    const verdict = this.router.authorize(member, p.owner, p.method, { ...p.params, arguments: args }, true);
    if (verdict.decision === "direct" || (verdict.decision === "proposal" && verdict.flagged === true)) return true;
    if (verdict.decision === "denied") this.space.fail(member, verdict.code, verdict.message, inboundId, verdict.extra);
    else
      this.space.fail(
        member,
        ErrorCodes.approverLacksCapability,
        "you may not make this call yourself, so you cannot approve or reject it",
        inboundId,
      );
    return false;
  }

  onApprove(member: Member, inbound: InboundEnvelope): Promise<void> | void {
    const parsed = ApprovePayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/approve: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/approve");
    if (!p) return;
    if (p.owner === OPEN_OWNER) {
      const how = `proposal "${clip(p.id)}" names no participant to serve it: fulfil it with an mcp/request to the one that should (to: [id], correlation_id: ["${clip(p.id)}"]), or reject it`;
      return this.space.fail(member, ErrorCodes.invalidEnvelope, how, inbound.id);
    }
    if (!this.mayDecide(member, p, inbound.id, true)) return;
    const { scope, reason } = parsed.data;
    // Approving without arguments approves what runs (book.ts `whatRuns`, an interrupted one's edits included).
    const { running, edited, confirmed } = editOf(p, parsed.data.arguments);
    if (scope === "always" && (p.tool === undefined || /[*!]/.test(p.tool))) {
      return this.space.fail(
        member,
        ErrorCodes.invalidPayload,
        'scope "always" applies to a tools/call of a tool whose name has no * or !',
        inbound.id,
      );
    }
    // A passkey confirms one call (passkey-bar.ts): a grant would let later calls run with none.
    if (scope === "always" && this.passkeys?.needs(p))
      return this.space.fail(
        member,
        ErrorCodes.invalidPayload,
        `approving this call needs your passkey, for this call alone: approve it once (scope "once") at ${this.passkeys.where(p)}`,
        inbound.id,
        { reason: "passkey_once", url: this.passkeys.where(p) },
      );
    if (scope === "always") {
      const over = this.grants.quota(member.id);
      if (over)
        return this.space.fail(member, ErrorCodes.quotaExceeded, `${over}; approve once instead, or revoke a grant`, inbound.id, {
          quota: "grants",
        });
    }
    // Edited arguments are a new call: they must fit the tool, and the approver must be able to make it directly.
    const cannot = cannotRun(this.space.authority, this.registry, p, p.owner, edited ?? running, edited !== undefined);
    if (cannot) return this.space.fail(member, cannot.code, cannot.message, inbound.id, cannot.extra);
    const limited = parsed.data.limit !== undefined && parsed.data.limit !== "tool";
    if (!this.reviewerBar(member, p, { approving: true, scope, edited: edited !== undefined, limited, args: running }, inbound.id)) return;
    if (edited !== undefined && !this.mayCallWith(member, p, edited, inbound.id)) return;
    // A scoped "always" holds only for the approved arguments, or a path under theirs (policy/scope.ts).
    let condition: GrantCondition | undefined;
    if (parsed.data.limit !== undefined && parsed.data.limit !== "tool") {
      if (scope !== "always") return this.space.fail(member, ErrorCodes.invalidPayload, 'limit applies to scope "always" only', inbound.id);
      const made = conditionFor(parsed.data.limit, edited ?? running);
      if (made.error !== undefined)
        return this.space.fail(member, ErrorCodes.invalidPayload, `cannot limit the grant: ${made.error}`, inbound.id);
      condition = made.condition;
    }
    const go = (passkey?: PasskeyProof): Promise<void> | void => {
      const env = stamp(inbound, member.id);
      env.to ??= [p.proposer];
      if ((p.required ?? 1) > 1 && awaiting(p.state)) {
        return approveOneOf(
          this.space,
          this.proposals,
          member,
          p,
          { scope, edited, confirmed, reason },
          inbound.id,
          (last) => this.approve(member, p, { scope: "once", edited: last, reason, passkey }, inbound.id, env),
          (q) => dropFallenApprovals(this.space, this.proposals, q),
        );
      }
      return this.approve(member, p, { scope, edited, reason, condition, passkey }, inbound.id, env);
    };
    // A call policy says needs the approver's passkey: its assertion over this very call first (passkey-bar.ts).
    const bar = this.passkeys;
    if (bar?.needs(p)) {
      const state = p.state;
      return bar.check(p, member.id, parsed.data.passkey, edited ?? running).then(
        (proof) => {
          if (p.state !== state || this.proposals.isBusy(p.id) || this.proposals.get(p.id) !== p)
            return this.space.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(p.id)}" was decided meanwhile`, inbound.id);
          return go(proof);
        },
        (err: unknown) =>
          this.space.fail(
            member,
            ErrorCodes.passkeyRequired,
            `${(err as Error).message}; a person confirms this approval with their passkey at ${bar.where(p)}`,
            inbound.id,
            { reason: "passkey_required", url: bar.where(p) },
          ),
      );
    }
    return go();
  }

  /**
   * A MEW fulfilment: a request correlated to a pending proposal counts as a one-time
   * approval. For a proposal held open (it named no target, and the gateway knows no one
   * tool owner), the fulfilment names the target, and the proposer's policy for that
   * target is applied now.
   */
  async onFulfil(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload, p: Proposal): Promise<void> {
    if (!awaiting(p.state))
      return void this.space.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(p.id)}" is already ${p.state}`, inbound.id);
    if (this.proposals.isBusy(p.id))
      return void this.space.fail(
        member,
        ErrorCodes.proposalNotPending,
        `a decision on proposal "${clip(p.id)}" is being recorded`,
        inbound.id,
      );
    // The fulfiller carries out the proposal, not a call of its own choosing.
    const to = inbound.to ?? [];
    const name = payload.params?.["name"];
    const open = p.owner === OPEN_OWNER;
    const target = to.length === 1 && to[0] !== GATEWAY_ID ? to[0]! : undefined;
    if (payload.method !== p.method || (p.tool !== undefined && name !== p.tool) || target === undefined || (!open && target !== p.owner)) {
      const asked = open
        ? `${p.tool ?? p.method} on the one participant it names in to: [id]`
        : p.tool === undefined
          ? `${p.method} to "${p.owner}"`
          : `${p.owner}/${p.tool}`;
      return void this.space.fail(
        member,
        ErrorCodes.fulfilmentMismatch,
        `a fulfilment of proposal "${clip(p.id)}" must call ${asked}, which it proposes`,
        inbound.id,
      );
    }
    const q = open ? { ...p, owner: target } : p;
    if (open) {
      const proposer = this.space.member(p.proposer);
      if (!proposer)
        return void this.space.fail(
          member,
          ErrorCodes.targetOffline,
          `"${p.proposer}", who proposed it, is not connected, so its policy for "${clip(target)}" cannot be checked; the proposal stays ${p.state}`,
          inbound.id,
        );
      // What the proposer could have with approval, at this target: the same bar as a targeted proposal's.
      const verdict = this.router.authorize(proposer, target, p.method, p.params);
      if (verdict.decision === "denied")
        return void this.space.fail(
          member,
          verdict.code,
          `${verdict.message} (policy of "${p.proposer}", who proposed it)`,
          inbound.id,
          verdict.extra,
        );
    }
    if (!this.mayDecide(member, q, inbound.id, true)) return;
    // A fulfilment carries no passkey: a call that needs one is approved with it (mcp/approve), then runs.
    if (this.passkeys?.needs(q))
      return void this.space.fail(
        member,
        ErrorCodes.passkeyRequired,
        `approving this call needs a person's passkey; it cannot be fulfilled: approve it at ${this.passkeys.where(q)}`,
        inbound.id,
        { reason: "passkey_required", url: this.passkeys.where(q) },
      );
    const args = payload.params?.["arguments"];
    // Only a difference from what runs is an edit (the proposed arguments after an edit are one).
    const given = isRecord(args) ? args : undefined;
    const { running, edited } = editOf(p, given);
    const cannot = cannotRun(this.space.authority, this.registry, p, target, edited ?? running, edited !== undefined);
    if (cannot) return void this.space.fail(member, cannot.code, cannot.message, inbound.id, cannot.extra);
    if (!this.reviewerBar(member, q, { approving: true, scope: "once", edited: edited !== undefined, args: running }, inbound.id)) return;
    if (edited !== undefined && !this.mayCallWith(member, q, edited, inbound.id)) return;
    // A fulfilment routes the call: it is the last approval a proposal needs, or none.
    const blocked = await fulfilmentStanding(this.space, this.proposals, member.id, p, edited, given !== undefined);
    if (blocked) return void this.space.fail(member, blocked.code, blocked.message, inbound.id, blocked.extra);
    const env = stamp(inbound, member.id);
    // The routed request is the fulfiller's own (its envelope id and JSON-RPC id), so the
    // target answers it as any request: its id must not name a call already pending.
    if (this.calls.get(env.id))
      return void this.space.fail(member, ErrorCodes.duplicateId, `a call with id "${clip(env.id)}" is already pending`, inbound.id);
    const fulfilment = { id: member.id, envelopeId: env.id, rpcId: payload.id ?? env.id, target };
    return this.approve(member, p, { scope: "once", edited, reason: "fulfilled" }, inbound.id, undefined, fulfilment);
  }

  /**
   * Records an approval (or a fulfilment), then routes the call. A refusal before the record
   * goes to the approver, correlated to `sentId`, the id of what it sent (if it gave one);
   * one after it goes into the proposal's outcome.
   */
  private async approve(
    approver: Member,
    p: Proposal,
    d: {
      scope: "once" | "always";
      edited: Record<string, unknown> | undefined;
      reason: string | undefined;
      condition?: GrantCondition | undefined;
      /** The approver's passkey confirmation (passkey-bar.ts), recorded in the receipt. */
      passkey?: PasskeyProof | undefined;
    },
    sentId: string | undefined,
    announce: Envelope | undefined,
    fulfiller?: { id: string; envelopeId: string; rpcId: string | number; target: string },
  ): Promise<void> {
    // An open proposal's target is the one its fulfilment named; it is recorded with the approval.
    const owner = fulfiller?.target ?? p.owner;
    // Everything that could stop the call is checked before the decision is recorded, so a
    // refused approval leaves the proposal pending (or interrupted) for a later try.
    // (A participant switched off is refused with who may decide, mayDecide.)
    const stays = `the proposal stays ${p.state}`;
    if (this.space.member(owner) === undefined)
      return this.space.fail(approver, ErrorCodes.targetOffline, `"${owner}" is not connected; ${stays}`, sentId);
    const refusal = this.calls.refuse(fulfiller?.id ?? p.proposer, owner, p.chain);
    if (refusal) return this.space.fail(approver, refusal.code, `${refusal.message}; ${stays}`, sentId);
    // The tool changed again after it was proposed: the card showed another definition.
    const pinned = p.tool === undefined || p.digest === undefined ? undefined : this.space.authority.pin(p.owner, p.tool);
    if (pinned && pinned.digest !== p.digest) {
      const message = `the definition of ${p.owner}/${p.tool} changed after this was proposed, so approving it would run what nobody was shown; ${stays} (reject it, and it can be proposed again)`;
      return this.space.fail(approver, ErrorCodes.toolChanged, message, sentId, { previous: p.digest, digest: pinned.digest });
    }
    // What runs (this approval's edits, else book.ts `whatRuns`), checked against the proposer's rules again.
    const args =
      p.method === "tools/call"
        ? (d.edited ?? runningArguments(p))
        : (d.edited ?? (p.params["arguments"] as Record<string, unknown> | undefined));
    const cannot = cannotRun(this.space.authority, this.registry, p, owner, args ?? {}, false);
    if (cannot) return this.space.fail(approver, cannot.code, cannot.message, sentId, cannot.extra);
    const edit =
      d.edited === undefined || (p.editedArguments !== undefined && sameArguments(d.edited, p.editedArguments))
        ? { editedArguments: p.editedArguments, editedBy: p.editedBy, editedAt: p.editedAt }
        : { editedArguments: d.edited, editedBy: approver.id, editedAt: now() };
    // The receipt is signed before the approval is written, so its audit entry carries it.
    const decision = newDecisionId();
    let receipt: string | undefined;
    if (this.receipts) {
      const state = p.state;
      try {
        receipt = await this.receipts.sign({ ...this.receiptClaims(approver.id, p, owner, args ?? {}, decision), passkey: d.passkey });
      } catch (err) {
        this.space.log.error({ proposal: p.id, err: String(err) }, "could not sign an approval receipt");
        return this.space.fail(approver, ErrorCodes.storeFailed, `the approval's receipt could not be signed; ${stays}`, sentId);
      }
      // Someone else may have decided it while the receipt was signed.
      if (p.state !== state || this.proposals.isBusy(p.id) || this.proposals.get(p.id) !== p)
        return this.space.fail(approver, ErrorCodes.proposalNotPending, `proposal "${clip(p.id)}" was decided meanwhile`, sentId, {
          state: this.proposals.isBusy(p.id) ? "deciding" : p.state,
        });
    }
    // The decision and the grant an "always" makes are one transaction: both or neither.
    const target = owner === p.owner ? {} : { owner };
    const several =
      (p.required ?? 1) > 1 && awaiting(p.state) ? { approvals: [...(p.approvals ?? []), { by: approver.id, ts: now() }] } : {};
    const plans: Plan[] = [
      this.proposals.planTransition(p, {
        state: "approved",
        decidedBy: approver.id,
        scope: d.scope,
        reason: d.reason,
        ...edit,
        ...target,
        ...several,
        decision,
        ...(receipt !== undefined ? { receipt } : {}),
      }),
    ];
    if (d.scope === "always" && p.tool !== undefined) {
      // On the definition the approver was shown: a change since suspends it again.
      const pins = p.digest === undefined ? undefined : { [`${p.owner}/${p.tool}`]: p.digest };
      const limited = d.condition ? `, ${describeCondition(d.condition)}` : "";
      plans.push(
        this.grants.plan(
          approver.id,
          p.proposer,
          [toolGrant(p.owner, p.tool)],
          `always approve ${p.owner}/${p.tool}${limited} (proposal ${p.id})`,
          undefined,
          pins,
          d.condition,
        ),
      );
    }
    try {
      await this.space.record(...plans);
    } catch (err) {
      return this.space.storeFailed(approver, err, sentId, `the approval was not recorded; ${stays}`);
    }
    approver.log.info({ proposal: p.id, proposer: p.proposer, scope: d.scope }, "proposal approved");
    // A person approved a call of this definition: rules and annotations let it be called
    // directly again, if it is still the tool's definition (tools/pins.ts).
    if (p.tool !== undefined && p.digest !== undefined && this.registry.pins.confirm(p.owner, p.tool, p.digest)) {
      approver.log.info({ tool: `${p.owner}/${p.tool}`, digest: p.digest }, "tool definition confirmed");
      this.router.catalogueChanged();
    }
    if (announce) this.space.deliver(announce, approver);
    const params = args === undefined ? p.params : { ...p.params, arguments: args };
    // Approved, the call is the proposer's, routed on its behalf under a new id. Fulfilled
    // (§3.2.1), it is the fulfiller's own request — its envelope id, its JSON-RPC id — so
    // the target answers it as any request, and the proposer gets a copy of the answer.
    const payload: McpRequestPayload = { jsonrpc: "2.0", id: fulfiller?.rpcId ?? p.rpcId, method: p.method, params };
    const env: Envelope = {
      protocol: PROTOCOL,
      id: fulfiller?.envelopeId ?? randomUUID(),
      ts: now(),
      from: fulfiller?.id ?? p.proposer,
      to: [owner],
      kind: "mcp/request",
      correlation_id: [p.id],
      payload,
    };
    // The approval is durable; what follows is bookkeeping nobody waits on (after a crash
    // an approved or routed proposal comes back interrupted, waiting for a person to decide
    // again, whatever came after), so it is noted, not awaited.
    this.space.note(this.proposals.planTransition(p, { state: "routed" }));
    // Things may have changed while the approval was written (the owner left, was switched
    // off): the why goes into the outcome, correlated to the proposal and to what the
    // fulfiller sent, never as an error naming the routed request's id, which neither of
    // them ever saw.
    const caller = fulfiller ? approver : (this.space.member(p.proposer) ?? approver);
    const answered = fulfiller && { id: fulfiller.id, envelopeId: fulfiller.envelopeId, proposer: p.proposer, proposerRpcId: p.rpcId };
    const refused = this.router.tryRoute(caller, env, payload, { proposalId: p.id, fulfiller: answered, receipt });
    if (refused) {
      this.space.metrics.call("not_routed");
      void this.runs.callEnded({ proposalId: p.id }, { how: "failed", reason: "not_routed", message: refused.message });
      const error = {
        code: RpcErrors.failed,
        message: `the approved call could not be routed: ${refused.message}`,
        data: { reason: "not_routed", code: refused.code, target: owner },
      };
      this.space.deliver(
        systemEnvelope("mcp/response", { jsonrpc: "2.0", id: p.rpcId, error }, { to: [p.proposer], correlation_id: [p.id] }),
      );
      if (fulfiller) {
        const to = sentId !== undefined ? { correlation_id: [sentId, p.id] } : { correlation_id: [p.id] };
        this.space.deliver(systemEnvelope("mcp/response", { jsonrpc: "2.0", id: fulfiller.rpcId, error }, { to: [fulfiller.id], ...to }));
      }
    }
  }

  /** What kind of decider `id` is for `p`: a reviewer of its proposer, else a person or an agent by its kind. */
  deciderKind(id: string, p: Proposal): DeciderKind {
    if (this.reviewers && reviews(this.reviewers, id, p)) return "reviewer";
    return this.space.config.participants[id]?.kind === "human" ? "person" : "agent";
  }

  /** What the receipt of `approver`'s approval of `p` binds (receipts.ts). */
  private receiptClaims(approver: string, p: Proposal, owner: string, args: Record<string, unknown>, decision: string) {
    const approvers = [...new Set([...(p.approvals ?? []).map((a) => a.by), approver])];
    return {
      space: this.space.id,
      proposal: p.id,
      decision,
      proposer: p.proposer,
      owner,
      tool: p.tool === undefined ? p.method : `${owner}/${p.tool}`,
      method: p.method,
      approvers,
      decider: this.deciderKind(approver, p),
      args: argumentsDigest(args),
      definition: p.digest ?? "",
      policy: policyDigest(this.space.config),
      proposed_at: p.createdAt,
      decided_at: now(),
    };
  }

  async onReject(member: Member, inbound: InboundEnvelope): Promise<void> {
    const parsed = RejectPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/reject: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/reject");
    if (!p || !this.mayDecide(member, p, inbound.id)) return;
    try {
      await this.space.record(
        this.proposals.planTransition(p, {
          state: "rejected",
          decidedBy: member.id,
          reason: parsed.data.reason,
          text: parsed.data.text,
          decision: newDecisionId(),
        }),
      );
    } catch (err) {
      return this.space.storeFailed(member, err, inbound.id, `the rejection was not recorded; the proposal stays ${p.state}`);
    }
    member.log.info({ proposal: p.id, proposer: p.proposer, reason: parsed.data.reason }, "proposal rejected");
    const env = stamp(inbound, member.id);
    env.to ??= [p.proposer];
    this.space.deliver(env, member);
  }

  async onWithdraw(member: Member, inbound: InboundEnvelope): Promise<void> {
    const parsed = WithdrawPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/withdraw: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/withdraw");
    if (!p) return;
    if (p.proposer !== member.id)
      return this.space.fail(member, ErrorCodes.notProposer, `only "${p.proposer}" may withdraw this proposal`, inbound.id);
    try {
      await this.space.record(
        this.proposals.planTransition(p, {
          state: "withdrawn",
          decidedBy: member.id,
          reason: parsed.data.reason ?? "no_longer_needed",
          decision: newDecisionId(),
        }),
      );
    } catch (err) {
      return this.space.storeFailed(member, err, inbound.id, `the withdrawal was not recorded; the proposal stays ${p.state}`);
    }
    this.space.deliver(stamp(inbound, member.id), member);
  }

  /** The proposer gave up on a proposal some other way (it cancelled the call behind it): everyone hears it withdrawn. */
  async withdrawn(member: Member, p: Proposal, reason: string): Promise<void> {
    if (!awaiting(p.state) || this.proposals.isBusy(p.id)) return;
    try {
      await this.space.record(
        this.proposals.planTransition(p, { state: "withdrawn", decidedBy: member.id, reason, decision: newDecisionId() }),
      );
    } catch (err) {
      return this.space.storeFailed(member, err, p.id, "the withdrawal was not recorded; the proposal stays pending");
    }
    this.space.deliver(systemEnvelope("mcp/withdraw", { reason }, { to: [p.proposer, p.owner], correlation_id: [p.id] }));
  }

  /**
   * A pending (or interrupted) proposal's time is up: record its expiry, then tell the
   * proposer. If a decision is being written, or the write fails, try again shortly; until
   * then it stays as it was, and nothing is lost either way.
   */
  async onDue(p: Proposal): Promise<void> {
    if (this.proposals.isBusy(p.id)) return this.proposals.arm(p, 1000);
    try {
      await this.space.record(this.proposals.planTransition(p, { state: "expired", reason: "timeout", decision: newDecisionId() }));
    } catch (err) {
      this.space.log.error({ proposal: p.id, err: String(err) }, "could not record an expiry; trying again in 5 s");
      return this.proposals.arm(p, 5000);
    }
    const seconds = Math.round(this.space.config.policy.proposal_ttl_ms / 1000);
    this.space.log.info({ proposal: p.id, proposer: p.proposer }, "proposal expired");
    const payload = { reason: "timeout", text: `no decision within ${seconds}s; the proposal expired` };
    this.space.deliver(systemEnvelope("mcp/reject", payload, { to: [p.proposer], correlation_id: [p.id] }));
  }

  /**
   * `member` joined (or came back): each of its proposals that is interrupted ends its call
   * with a JSON-RPC error of reason `interrupted`, correlated to the proposal as its answer
   * would be, so a proposer still waiting — or a MEW client matching correlation_id[0] —
   * learns the call may or may not have run. The proposal still waits for a person: a new
   * approval routes it again and its answer comes the same way.
   */
  tellInterrupted(member: Member): void {
    for (const p of this.proposals.pending()) {
      if (p.state !== "interrupted" || p.proposer !== member.id) continue;
      const data = { reason: "interrupted", proposal: p.id, state: p.state, approved_by: p.decidedBy, target: p.owner };
      const error = { code: RpcErrors.failed, message: `${INTERRUPTED_TEXT}; it waits for someone to approve it again or reject it`, data };
      this.space.sendTo(
        member,
        systemEnvelope("mcp/response", { jsonrpc: "2.0", id: p.rpcId, error }, { to: [p.proposer], correlation_id: [p.id] }),
      );
    }
  }
}
