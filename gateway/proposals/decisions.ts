/**
 * A proposal approved, and its call made: `mcp/approve` (once, or "always" with a grant, with
 * edited arguments, one of several a quorum needs, confirmed with a passkey where policy asks)
 * or a MEW fulfilment (a request correlated to the proposal, which names the target of one
 * held open). Who may do it is deciders.ts's; once written, the call is routed through
 * calls/router.ts on the proposer's behalf, with the approval's signed receipt. Holding a
 * proposal is propose.ts's, the other ends ends.ts's.
 */
import { randomUUID } from "node:crypto";
import {
  ApprovePayloadSchema,
  type Envelope,
  ErrorCodes,
  GATEWAY_ID,
  type InboundEnvelope,
  type McpRequestPayload,
  PROTOCOL,
  RpcErrors,
  describeIssue,
  now,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import { clip, type GrantDesk, type SpaceHost } from "../ports/host.js";
import type { CallRouter } from "../calls/routing.js";
import type { Calls } from "../calls/calls.js";
import type { Registry } from "../tools/registry.js";
import { toolGrant } from "../policy/rules.js";
import type { Plan } from "../store/plan.js";
import { awaiting, OPEN_OWNER, type Proposal, type ProposalBook, runningArguments } from "./book.js";
import type { Member } from "../ports/member.js";
import { approveOneOf, sameArguments } from "./approvals.js";
import { cannotRun, editOf } from "./runs.js";
import { dropFallenApprovals, fulfilmentStanding } from "./still-count.js";
import { conditionFor, describeCondition, type GrantCondition } from "../policy/scope.js";
import type { RunsEnded } from "./runs-ended.js";
import { argumentsDigest, policyDigest, type ReceiptKeys } from "./receipts.js";
import { newDecisionId } from "../audit/entry.js";
import type { PasskeyBar, PasskeyProof } from "./passkey-bar.js";
import { isRecord } from "../wire/values.js";
import type { Deciders } from "./deciders.js";

export class Decisions {
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
    /** Who may decide (deciders.ts). */
    private readonly deciders: Pick<Deciders, "pendingProposal" | "mayDecide" | "reviewerBar" | "mayCallWith" | "deciderKind">,
    /** Signs each approval's receipt (receipts.ts); without it approvals carry none. */
    private readonly receipts?: ReceiptKeys,
    /** Which approvals need the approver's passkey, and checks it (passkey-bar.ts). */
    readonly passkeys?: PasskeyBar,
  ) {}

  onApprove(member: Member, inbound: InboundEnvelope): Promise<void> | void {
    const parsed = ApprovePayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/approve: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.deciders.pendingProposal(member, inbound, "mcp/approve");
    if (!p) return;
    if (p.owner === OPEN_OWNER) {
      const how = `proposal "${clip(p.id)}" names no participant to serve it: fulfil it with an mcp/request to the one that should (to: [id], correlation_id: ["${clip(p.id)}"]), or reject it`;
      return this.space.fail(member, ErrorCodes.invalidEnvelope, how, inbound.id);
    }
    if (!this.deciders.mayDecide(member, p, inbound.id, true)) return;
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
    if (!this.deciders.reviewerBar(member, p, { approving: true, scope, edited: edited !== undefined, limited, args: running }, inbound.id))
      return;
    if (edited !== undefined && !this.deciders.mayCallWith(member, p, edited, inbound.id)) return;
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
    if (!this.deciders.mayDecide(member, q, inbound.id, true)) return;
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
    if (!this.deciders.reviewerBar(member, q, { approving: true, scope: "once", edited: edited !== undefined, args: running }, inbound.id))
      return;
    if (edited !== undefined && !this.deciders.mayCallWith(member, q, edited, inbound.id)) return;
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
    const approved = { chain: p.chain, decidedBy: p.decidedBy };
    const refused = this.router.tryRoute(caller, env, payload, { proposalId: p.id, fulfiller: answered, receipt, approved });
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
      decider: this.deciders.deciderKind(approver, p),
      args: argumentsDigest(args),
      definition: p.digest ?? "",
      policy: policyDigest(this.space.config),
      proposed_at: p.createdAt,
      decided_at: now(),
    };
  }
}
