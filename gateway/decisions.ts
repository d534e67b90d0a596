/**
 * What happens to a proposal: held, approved (or fulfilled, MEW-style), rejected,
 * withdrawn, or expired — each decision in one place.
 *
 * proposals.ts is the state machine and its persistence; this module decides which
 * transition an envelope asks for and whether its sender may make it: only a participant
 * that could make the call itself, named in the proposer's `approvers` if set, and never
 * the proposer. It was split out of space.ts (members, routing, visibility, presence),
 * and acts on the space only through `SpaceHost`. An approved proposal becomes a call,
 * routed through mcp.ts on the proposer's behalf.
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
  ProposalPayloadSchema,
  RejectPayloadSchema,
  RpcErrors,
  WithdrawPayloadSchema,
  describeIssue,
  now,
  stamp,
  systemEnvelope,
} from "./envelope.js";
import { clip, type SpaceHost } from "./host.js";
import type { McpRouter } from "./mcp.js";
import { toolGrant } from "./policy.js";
import type { Proposal, ProposalBook } from "./proposals.js";
import type { Member } from "./space.js";

export class Decisions {
  constructor(
    private readonly space: SpaceHost,
    private readonly proposals: ProposalBook,
    private readonly mcp: McpRouter,
  ) {}

  onProposal(member: Member, inbound: InboundEnvelope): void {
    const parsed = ProposalPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/proposal: ${describeIssue(parsed.error)}`, inbound.id);
    let { method, params = {} } = parsed.data;
    let to = inbound.to ?? [];
    if (to.length === 1 && to[0] === GATEWAY_ID && method === "tools/call") {
      const entry = typeof params["name"] === "string" ? this.mcp.registry.resolve(params["name"]) : undefined;
      if (!entry) return this.space.fail(member, ErrorCodes.unknownTool, `no tool "${clip(String(params["name"]))}" in space "${this.space.id}"`, inbound.id);
      to = [entry.participant];
      params = { ...params, name: entry.tool };
    }
    if (to.length !== 1 || to[0] === GATEWAY_ID) {
      return this.space.fail(member, ErrorCodes.invalidEnvelope, "an mcp/proposal names exactly one participant that would serve it (to: [id])", inbound.id);
    }
    if (method === "tools/call" && typeof params["name"] !== "string") {
      return this.space.fail(member, ErrorCodes.invalidPayload, "tools/call: params.name must be a string", inbound.id);
    }
    if (method === "tools/call" && this.mcp.decideTool(member, to[0]!, params["name"] as string) === "denied") {
      return this.mcp.refuseTool(member, "denied", `${to[0]}/${String(params["name"])}`, inbound.id);
    }
    const env = stamp({ ...inbound, to, payload: { method, params } }, member.id);
    this.hold(member, env, method, params, env.id);
  }

  /**
   * Holds a proposal. `tellProposer`: the gateway made it from a tools/call, so the caller
   * learns that its call now waits for approval.
   */
  hold(member: Member, env: Envelope, method: string, params: Record<string, unknown>, rpcId: string | number, opts: { tellProposer?: boolean } = {}): void {
    if (this.proposals.get(env.id) || this.proposals.endedAs(env.id) || this.mcp.calls.get(env.id)) {
      return this.space.fail(member, ErrorCodes.duplicateId, `id "${clip(env.id)}" is already in use`, env.id);
    }
    // Every proposal costs fsyncs on the gateway's thread and a line in everyone's queue, so
    // one participant gets as many pending proposals as it may have pending calls.
    const max = this.space.config.calls.max_pending;
    if (this.proposals.pendingOf(member.id) >= max) {
      return this.space.fail(member, ErrorCodes.tooManyPending, `${max} proposals of yours are already pending; wait for decisions or withdraw some`, env.id);
    }
    const owner = env.to![0]!;
    const now = Date.now();
    this.proposals.add({
      id: env.id,
      proposer: member.id,
      owner,
      method,
      params,
      tool: method === "tools/call" ? (params["name"] as string) : undefined,
      rpcId,
      chain: this.mcp.calls.chainFor(member.id, env.correlation_id),
      state: "pending",
      createdAt: new Date(now).toISOString(),
      expiresAt: now + this.space.config.policy.proposal_ttl_ms,
      envelope: env,
    });
    member.log.info({ proposal: env.id, owner, method }, "proposal held");
    this.space.deliver(env, opts.tellProposer ? undefined : member);
  }

  /**
   * The proposal an `mcp/approve` / `mcp/reject` / `mcp/withdraw` names, if it is still
   * pending; otherwise the sender is told exactly why not.
   */
  private pendingProposal(member: Member, inbound: InboundEnvelope, verb: string): Proposal | undefined {
    const id = inbound.correlation_id?.[0];
    if (id === undefined) {
      this.space.fail(member, ErrorCodes.invalidEnvelope, `${verb}: correlation_id must name the proposal`, inbound.id);
      return undefined;
    }
    const p = this.proposals.get(id);
    if (p?.state === "pending") return p;
    const ended = p?.state ?? this.proposals.endedAs(id);
    if (ended) this.space.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(id)}" is already ${ended}`, inbound.id, { state: ended });
    else this.space.fail(member, ErrorCodes.unknownProposal, `no proposal "${clip(id)}" in space "${this.space.id}"`, inbound.id);
    return undefined;
  }

  /** Who may approve or reject: not the proposer, one of its `approvers` if set, and able to make the call itself. */
  private mayDecide(member: Member, p: Proposal, inboundId: string | undefined): boolean {
    if (member.id === p.proposer) {
      this.space.fail(member, ErrorCodes.selfApproval, "you cannot decide on your own proposal (withdraw it instead)", inboundId);
      return false;
    }
    const approvers = this.space.config.participants[p.proposer]?.approvers;
    if (approvers && !approvers.includes(member.id)) {
      this.space.fail(member, ErrorCodes.notAnApprover, `proposals of "${p.proposer}" are decided by ${approvers.join(", ")}`, inboundId);
      return false;
    }
    if (!this.mayCall(member, p)) {
      this.space.fail(member, ErrorCodes.approverLacksCapability, `you may not make this call yourself, so you cannot approve or reject it`, inboundId);
      return false;
    }
    return true;
  }

  /** Whether `member` may itself make the call a proposal asks for: the bar for deciding on it. */
  private mayCall(member: Member, p: Proposal): boolean {
    if (p.method === "tools/call" && p.tool !== undefined) return this.mcp.decideTool(member, p.owner, p.tool) === "direct";
    return member.allows({ kind: "mcp/request", to: [p.owner], payload: { method: p.method, params: p.params } });
  }

  onApprove(member: Member, inbound: InboundEnvelope): void {
    const parsed = ApprovePayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/approve: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/approve");
    if (!p || !this.mayDecide(member, p, inbound.id)) return;
    const { scope, arguments: edited, reason } = parsed.data;
    if (scope === "always" && (p.tool === undefined || /[*!]/.test(p.tool))) {
      return this.space.fail(member, ErrorCodes.invalidPayload, "scope \"always\" applies to a tools/call of a tool whose name has no * or !", inbound.id);
    }
    const env = stamp(inbound, member.id);
    env.to ??= [p.proposer];
    this.approve(member, p, { scope, edited, reason }, env);
  }

  /** A MEW fulfilment: a request correlated to a pending proposal counts as a one-time approval. */
  onFulfil(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload, p: Proposal): void {
    if (p.state !== "pending") return void this.space.fail(member, ErrorCodes.proposalNotPending, `proposal "${clip(p.id)}" is already ${p.state}`, inbound.id);
    if (!this.mayDecide(member, p, inbound.id)) return;
    const args = payload.params?.["arguments"];
    const edited = args && typeof args === "object" && !Array.isArray(args) ? (args as Record<string, unknown>) : undefined;
    const env = stamp(inbound, member.id);
    this.approve(member, p, { scope: "once", edited, reason: "fulfilled" }, undefined, { id: member.id, envelopeId: env.id });
  }

  private approve(
    approver: Member,
    p: Proposal,
    d: { scope: "once" | "always"; edited: Record<string, unknown> | undefined; reason: string | undefined },
    announce: Envelope | undefined,
    fulfiller?: { id: string; envelopeId: string },
  ): void {
    // Everything that could stop the call is checked before the decision is recorded, so a
    // refused approval leaves the proposal pending for a later try.
    if (this.space.member(p.owner) === undefined) return this.space.fail(approver, ErrorCodes.targetOffline, `"${p.owner}" is not connected; the proposal stays pending`, announce?.id);
    const refusal = this.mcp.calls.refuse(p.proposer, p.owner, p.chain);
    if (refusal) return this.space.fail(approver, refusal.code, `${refusal.message}; the proposal stays pending`, announce?.id);
    const args = d.edited ?? (p.params["arguments"] as Record<string, unknown> | undefined);
    this.proposals.transition(p, { state: "approved", decidedBy: approver.id, scope: d.scope, reason: d.reason, editedArguments: d.edited });
    approver.log.info({ proposal: p.id, proposer: p.proposer, scope: d.scope }, "proposal approved");
    if (announce) this.space.deliver(announce, approver);
    if (d.scope === "always" && p.tool !== undefined) {
      this.space.addGrant(approver.id, p.proposer, [toolGrant(p.owner, p.tool)], `always approve ${p.owner}/${p.tool} (proposal ${p.id})`);
    }
    const params = args === undefined ? p.params : { ...p.params, arguments: args };
    const payload: McpRequestPayload = { jsonrpc: "2.0", id: p.rpcId, method: p.method, params };
    const env: Envelope = { protocol: PROTOCOL, id: randomUUID(), ts: now(), from: p.proposer, to: [p.owner], kind: "mcp/request", correlation_id: [p.id], payload };
    this.proposals.transition(p, { state: "routed" });
    // Routed on the proposer's behalf: the proposer, not the approver, is the caller.
    if (!this.mcp.route(this.space.member(p.proposer) ?? approver, env, payload, { proposalId: p.id, fulfiller })) {
      this.proposals.transition(p, { state: "failed", reason: "not_routed" });
      const error = { code: RpcErrors.failed, message: "the approved call could not be routed", data: { reason: "not_routed", target: p.owner } };
      this.space.deliver(systemEnvelope("mcp/response", { jsonrpc: "2.0", id: p.rpcId, error }, { to: [p.proposer], correlation_id: [p.id] }));
    }
  }

  onReject(member: Member, inbound: InboundEnvelope): void {
    const parsed = RejectPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/reject: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/reject");
    if (!p || !this.mayDecide(member, p, inbound.id)) return;
    this.proposals.transition(p, { state: "rejected", decidedBy: member.id, reason: parsed.data.reason, text: parsed.data.text });
    member.log.info({ proposal: p.id, proposer: p.proposer, reason: parsed.data.reason }, "proposal rejected");
    const env = stamp(inbound, member.id);
    env.to ??= [p.proposer];
    this.space.deliver(env, member);
  }

  onWithdraw(member: Member, inbound: InboundEnvelope): void {
    const parsed = WithdrawPayloadSchema.safeParse(inbound.payload ?? {});
    if (!parsed.success) return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/withdraw: ${describeIssue(parsed.error)}`, inbound.id);
    const p = this.pendingProposal(member, inbound, "mcp/withdraw");
    if (!p) return;
    if (p.proposer !== member.id) return this.space.fail(member, ErrorCodes.notProposer, `only "${p.proposer}" may withdraw this proposal`, inbound.id);
    this.proposals.transition(p, { state: "withdrawn", decidedBy: member.id, reason: parsed.data.reason ?? "no_longer_needed" });
    this.space.deliver(stamp(inbound, member.id), member);
  }

  /** The proposal book's timer moved `p` to expired: tell the proposer. */
  onExpired(p: Proposal): void {
    const seconds = Math.round(this.space.config.policy.proposal_ttl_ms / 1000);
    this.space.log.info({ proposal: p.id, proposer: p.proposer }, "proposal expired");
    const payload = { reason: "timeout", text: `no decision within ${seconds}s; the proposal expired` };
    this.space.deliver(systemEnvelope("mcp/reject", payload, { to: [p.proposer], correlation_id: [p.id] }));
  }
}
