/**
 * A proposal approved, and its call made: `mcp/approve` (once, or "always" with a grant, with
 * edited arguments, one of several a quorum needs, confirmed with a passkey where policy asks)
 * or a MEW fulfilment (a request correlated to the proposal, which names the target of one
 * held open). Each is checked first, changing nothing (approval.ts `checkApproval`, where the
 * decision point is asked once), and a refusal goes back for the pipeline to send; then a short
 * commit: the passkey and the receipt, the record, the note, the route through calls/router.ts
 * on the proposer's behalf. Holding a proposal is propose.ts's, the other ends ends.ts's.
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
import { clip, type GrantDesk, type Refusal, type SpaceHost } from "../ports/host.js";
import type { CallRouter } from "../calls/routing.js";
import type { Calls } from "../calls/calls.js";
import type { Registry } from "../tools/registry.js";
import { toolGrant } from "../policy/rules.js";
import type { Plan } from "../store/plan.js";
import { awaiting, OPEN_OWNER, type Proposal, type ProposalBook } from "./book.js";
import type { Member } from "../ports/member.js";
import { completesQuorum, fulfilmentBlocked, quorumRefusal, recordOneOf, sameArguments } from "./approvals.js";
import { dropFallenApprovals } from "./still-count.js";
import { editOf } from "./runs.js";
import { describeCondition } from "../policy/scope.js";
import type { RunsEnded } from "./runs-ended.js";
import { policyDigest, type ReceiptKeys } from "./receipts.js";
import { newDecisionId } from "../audit/entry.js";
import type { PasskeyBar, PasskeyProof } from "./passkey-bar.js";
import { isRecord } from "../wire/values.js";
import type { Deciders } from "./deciders.js";
import { type Approval, type ApprovalDesk, checkApproval, stillStands } from "./approval.js";

export class Decisions {
  /** What checking an approval reads (approval.ts). */
  private readonly desk: ApprovalDesk;

  constructor(
    private readonly space: Pick<
      SpaceHost,
      "authority" | "config" | "deliver" | "id" | "log" | "member" | "metrics" | "note" | "record" | "storeFailed" | "verdictOf"
    >,
    private readonly proposals: ProposalBook,
    /** The call table and the catalogue, built before this (the decision point is the space's `authority`). */
    private readonly calls: Calls,
    registry: Registry,
    /** Where an approved call is routed (calls/router.ts). */
    private readonly router: Pick<CallRouter, "tryRoute" | "catalogueChanged">,
    private readonly runs: RunsEnded,
    /** Where an "always" approval's grant is made (agents/lending.ts). */
    private readonly grants: GrantDesk,
    /** Who may decide (deciders.ts). */
    private readonly deciders: Pick<Deciders, "awaitingProposal" | "whyNotApprove" | "deciderKind">,
    /** Signs each approval's receipt (receipts.ts); without it approvals carry none. */
    private readonly receipts?: ReceiptKeys,
    /** Which approvals need the approver's passkey, and checks it (passkey-bar.ts). */
    readonly passkeys?: PasskeyBar,
  ) {
    this.desk = { space, calls, registry, deciders, grants, passkeys };
  }

  onApprove(member: Member, inbound: InboundEnvelope): Refusal | Promise<Refusal | undefined> {
    const parsed = ApprovePayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return { code: ErrorCodes.invalidPayload, message: `mcp/approve: ${describeIssue(parsed.error)}` };
    const p = this.deciders.awaitingProposal(inbound, "mcp/approve");
    if (!("id" in p)) return p;
    const approval = checkApproval(this.desk, member, p, parsed.data);
    if ("code" in approval) return approval;
    const announce = stamp(inbound, member.id);
    announce.to ??= [p.proposer];
    return this.commit(approval, inbound.id, parsed.data.passkey, announce);
  }
  /**
   * A MEW fulfilment: a request correlated to a pending proposal counts as a one-time
   * approval. For a proposal held open (it named no target, and the gateway knows no one
   * tool owner), the fulfilment names the target, and the proposer's policy for that
   * target is applied now.
   */
  onFulfil(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload, p: Proposal): Refusal | Promise<Refusal | undefined> {
    const busy = this.proposals.isBusy(p.id);
    if (!awaiting(p.state) || busy)
      return {
        code: ErrorCodes.proposalNotPending,
        message: busy ? `a decision on proposal "${clip(p.id)}" is being recorded` : `proposal "${clip(p.id)}" is already ${p.state}`,
      };
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
      return {
        code: ErrorCodes.fulfilmentMismatch,
        message: `a fulfilment of proposal "${clip(p.id)}" must call ${asked}, which it proposes`,
      };
    }
    const env = stamp(inbound, member.id);
    // The routed request is the fulfiller's own (its envelope id and JSON-RPC id), so the
    // target answers it as any request: its id must not name a call already pending.
    if (this.calls.get(env.id)) return { code: ErrorCodes.duplicateId, message: `a call with id "${clip(env.id)}" is already pending` };
    const args = payload.params?.["arguments"];
    // Only a difference from what runs is an edit (the proposed arguments after an edit are one).
    const given = isRecord(args) ? args : undefined;
    // A fulfilment routes the call: it is the last approval a proposal needs, or none.
    const blocked = fulfilmentBlocked(member.id, p, editOf(p, given).edited, given !== undefined);
    if (blocked) return blocked;
    const fulfiller = { id: member.id, envelopeId: env.id, rpcId: payload.id ?? env.id, target };
    const approval = checkApproval(this.desk, member, p, { scope: "once", reason: "fulfilled", arguments: given, fulfiller });
    if ("code" in approval) return approval;
    // A fulfilment carries no passkey: a call that needs one is approved with it (mcp/approve), then runs.
    if (approval.passkey) {
      const url = this.passkeys!.where(approval.p);
      return {
        code: ErrorCodes.passkeyRequired,
        message: `approving this call needs a person's passkey; it cannot be fulfilled: approve it at ${url}`,
        extra: { reason: "passkey_required", url },
      };
    }
    return this.commit(approval, inbound.id);
  }
  /**
   * Commits an approval `checkApproval` let through: the approver's passkey over this very call
   * where policy asks for one, the earlier approvals asked again when it completes a quorum,
   * then the record (with its signed receipt, and the grant an "always" makes), and the call
   * routed. A refusal before the record goes back to the approver, for the pipeline to send
   * correlated to `sentId`; one after it goes into the proposal's outcome.
   */
  private async commit(a: Approval, sentId: string | undefined, passkey?: unknown, announce?: Envelope): Promise<Refusal | undefined> {
    const { p, approver } = a;
    const state = p.state;
    const stays = `the proposal stays ${state}`;
    let proof: PasskeyProof | undefined;
    if (a.passkey) {
      const bar = this.passkeys!;
      try {
        proof = await bar.check(p, approver.id, passkey, a.digest);
      } catch (err) {
        const url = bar.where(p);
        const message = `${(err as Error).message}; a person confirms this approval with their passkey at ${url}`;
        return { code: ErrorCodes.passkeyRequired, message, extra: { reason: "passkey_required", url } };
      }
      const moved = this.moved(a, state);
      if (moved) return moved;
    }
    let counts = a.counts;
    if (counts === "last") {
      // The approval that would complete the quorum: the earlier ones must still count (still-count.ts).
      let dropped: number;
      try {
        dropped = await dropFallenApprovals(this.space, this.proposals, p);
      } catch (err) {
        this.space.storeFailed(approver, err, sentId, `approvals that no longer count could not be dropped; ${stays}`);
        return undefined;
      }
      if (dropped > 0) {
        const again = a.fulfiller ? fulfilmentBlocked(a.fulfiller.id, p, a.edited, a.confirmed) : quorumRefusal(approver.id, p, a);
        if (again) return again;
        // Too few remain: this approval is recorded as one of several, and the proposal waits.
        if (!completesQuorum(p)) counts = "one-of";
      }
    }
    if (counts === "one-of") {
      try {
        await recordOneOf(this.space, this.proposals, approver, p, a);
      } catch (err) {
        this.space.storeFailed(approver, err, sentId, `the approval was not recorded; ${stays}`);
      }
      return undefined;
    }
    // The receipt is signed before the approval is written, so its audit entry carries it.
    const decision = newDecisionId();
    let receipt: string | undefined;
    if (this.receipts) {
      try {
        receipt = await this.receipts.sign({ ...this.receiptClaims(a, decision), passkey: proof });
      } catch (err) {
        this.space.log.error({ proposal: p.id, err: String(err) }, "could not sign an approval receipt");
        return { code: ErrorCodes.storeFailed, message: `the approval's receipt could not be signed; ${stays}` };
      }
    }
    // Someone else may have decided it, or the target gone, while it waited.
    const moved = this.moved(a, state);
    if (moved) return moved;
    try {
      await this.space.record(...this.plans(a, counts === "last", decision, receipt));
    } catch (err) {
      this.space.storeFailed(approver, err, sentId, `the approval was not recorded; ${stays}`);
      return undefined;
    }
    approver.log.info({ proposal: p.id, proposer: p.proposer, scope: a.scope }, "proposal approved");
    // A person approved a call of this definition: rules and annotations let it be called
    // directly again, if it is still the tool's definition (tools/pins.ts).
    if (p.tool !== undefined && p.digest !== undefined && this.desk.registry.pins.confirm(p.owner, p.tool, p.digest)) {
      approver.log.info({ tool: `${p.owner}/${p.tool}`, digest: p.digest }, "tool definition confirmed");
      this.router.catalogueChanged();
    }
    if (announce) this.space.deliver(announce, approver);
    this.route(a, receipt, sentId);
    return undefined;
  }
  /** Why `a` no longer stands after a wait, if it does not: its proposal decided meanwhile, or what it rests on gone (approval.ts). */
  private moved(a: Approval, state: Proposal["state"]): Refusal | undefined {
    const { p } = a;
    const busy = this.proposals.isBusy(p.id);
    if (p.state !== state || busy || this.proposals.get(p.id) !== p)
      return {
        code: ErrorCodes.proposalNotPending,
        message: `proposal "${clip(p.id)}" was decided meanwhile`,
        extra: { state: busy ? "deciding" : p.state },
      };
    // The rules changed while it waited (a reload): what was checked may no longer hold, so nothing is written.
    if (this.space.authority.rulesRevision !== a.rules)
      return {
        code: ErrorCodes.policyChanged,
        message: `the space's rules changed while this approval was on its way; nothing was approved: approve proposal "${clip(p.id)}" again`,
        extra: { state: p.state },
      };
    return stillStands(this.desk, p, a.owner, a.fulfiller?.id);
  }
  /** What the approval writes, as one transaction: the decision, and the grant an "always" makes. */
  private plans(a: Approval, last: boolean, decision: string, receipt: string | undefined): Plan[] {
    const { p, approver } = a;
    const edit =
      a.edited === undefined || (p.editedArguments !== undefined && sameArguments(a.edited, p.editedArguments))
        ? { editedArguments: p.editedArguments, editedBy: p.editedBy, editedAt: p.editedAt }
        : { editedArguments: a.edited, editedBy: approver.id, editedAt: now() };
    const plans: Plan[] = [
      this.proposals.planTransition(
        p,
        {
          state: "approved",
          decidedBy: approver.id,
          scope: a.scope,
          reason: a.reason,
          ...edit,
          ...(a.owner === p.owner ? {} : { owner: a.owner }),
          ...(last ? { approvals: [...(p.approvals ?? []), { by: approver.id, ts: now() }] } : {}),
          decision,
        },
        undefined,
        receipt,
      ),
    ];
    if (a.scope === "always" && p.tool !== undefined) {
      // On the definition the approver was shown: a change since suspends it again.
      const pins = p.digest === undefined ? undefined : { [`${p.owner}/${p.tool}`]: p.digest };
      const limited = a.condition ? `, ${describeCondition(a.condition)}` : "";
      const why = `always approve ${p.owner}/${p.tool}${limited} (proposal ${p.id})`;
      plans.push(this.grants.plan(approver.id, p.proposer, [toolGrant(p.owner, p.tool)], why, undefined, pins, a.condition));
    }
    return plans;
  }
  /**
   * Routes the approved call. Approved, the call is the proposer's, routed on its behalf under
   * a new id. Fulfilled (§3.2.1), it is the fulfiller's own request (its envelope id, its
   * JSON-RPC id), so the target answers it as any request, and the proposer gets a copy of the answer.
   */
  private route(a: Approval, receipt: string | undefined, sentId: string | undefined): void {
    const { p, approver, fulfiller, owner } = a;
    const params = a.args === undefined ? p.params : { ...p.params, arguments: a.args };
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
    if (!refused) return;
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
  /** What the receipt of approval `a` binds (receipts.ts). */
  private receiptClaims(a: Approval, decision: string) {
    const { p, approver, owner } = a;
    const approvers = [...new Set([...(p.approvals ?? []).map((x) => x.by), approver.id])];
    return {
      space: this.space.id,
      proposal: p.id,
      decision,
      proposer: p.proposer,
      owner,
      tool: p.tool === undefined ? p.method : `${owner}/${p.tool}`,
      method: p.method,
      approvers,
      decider: this.deciders.deciderKind(approver.id, p),
      args: a.digest,
      definition: p.digest ?? "",
      policy: policyDigest(this.space.config),
      proposed_at: p.createdAt,
      decided_at: now(),
    };
  }
}
