/**
 * MCP traffic through a space: requests and responses between participants, tracked as
 * calls; the gateway's own `system:gateway` endpoint (tools/list, tools/call, ping); and
 * the tool catalogue, fetched from each participant that offers tools.
 *
 * This is the part of the governance that every MCP envelope passes through, split out of
 * space.ts so that the space keeps members, routing, visibility and presence. The space's
 * pipeline validates an envelope and dispatches on its kind; from there this module
 * decides, and talks back only through `SpaceHost` (deliver, sendTo, fail). The state it
 * works on lives next door: in-flight calls in calls.ts, the catalogue in registry.ts,
 * proposals in proposals.ts.
 *
 * Requests and proposals turn into each other: a request correlated to a pending proposal
 * is a MEW fulfilment (an approval), and a tools/call to the gateway that needs approval
 * becomes a proposal. Both are handed to decisions.ts, which in turn routes approved calls
 * through `route` here. The space links the two once, when it builds them.
 */
import { randomUUID } from "node:crypto";
import { type Call, Calls } from "./calls.js";
import {
  type Envelope,
  ErrorCodes,
  GATEWAY_ID,
  type InboundEnvelope,
  McpRequestPayloadSchema,
  type McpRequestPayload,
  McpResponsePayloadSchema,
  PROTOCOL,
  RpcErrors,
  describeIssue,
  now,
  stamp,
  systemEnvelope,
} from "./envelope.js";
import type { Decisions } from "./decisions.js";
import { clip, type SpaceHost } from "./host.js";
import { type Decision, decide } from "./policy.js";
import type { ProposalBook } from "./proposals.js";
import { McpToolSchema, type McpTool, type Registry, ToolsListResultSchema, MAX_TOOLS_PER_PARTICIPANT } from "./registry.js";
import type { Member } from "./space.js";

/** Most pages of `tools/list` the gateway follows for one participant. */
const MAX_TOOL_PAGES = 100;

export class McpRouter {
  readonly calls: Calls;
  /**
   * Where requests that are really proposal decisions go. Set by the space right after
   * both are built: decisions route through this router, so neither can take the other in
   * its constructor.
   */
  decisions!: Decisions;
  /** Bumped per tools/list refresh of a participant, so a stale answer is ignored. */
  private readonly toolFetches = new Map<string, number>();

  constructor(
    private readonly space: SpaceHost,
    readonly registry: Registry,
    private readonly proposals: ProposalBook,
  ) {
    this.calls = new Calls(space.config.calls, (call) => this.callTimedOut(call));
  }

  // --- requests and responses between participants ----------------------------------

  /**
   * Every `mcp/request`. Its check depends on its payload, so it is made here rather than
   * before the space's switch: tools/call by the tool policy, the rest by capability; a
   * request to the gateway by the gateway's own rules, and a fulfilment by the bar for
   * deciding on its proposal.
   */
  onRequest(member: Member, inbound: InboundEnvelope): void {
    const parsed = McpRequestPayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/request: ${describeIssue(parsed.error)}`, inbound.id);
    const payload = parsed.data;
    const to = inbound.to ?? [];
    if (to.includes(GATEWAY_ID)) {
      if (to.length > 1) return this.space.fail(member, ErrorCodes.invalidEnvelope, `a request to ${GATEWAY_ID} must not name other recipients`, inbound.id);
      return this.onGatewayRequest(member, inbound, payload);
    }
    if (payload.id === undefined) {
      // A notification: nothing to track.
      if (!member.allows(inbound)) return this.space.capabilityViolation(member, inbound);
      if (payload.method === "notifications/cancelled") this.callerCancelled(member, inbound.correlation_id);
      this.space.deliver(stamp(inbound, member.id), member);
      if (payload.method === "notifications/tools/list_changed") this.refreshTools(member.id);
      return;
    }
    const fulfilled = inbound.correlation_id?.map((id) => this.proposals.get(id)).find((p) => p !== undefined);
    if (fulfilled) return this.decisions.onFulfil(member, inbound, payload, fulfilled);
    if (to.length !== 1) {
      return this.space.fail(member, ErrorCodes.invalidEnvelope, "an mcp/request with an id goes to exactly one participant (to: [id])", inbound.id);
    }
    const target = to[0]!;
    if (payload.method === "tools/call") {
      const tool = payload.params?.["name"];
      if (typeof tool !== "string") return this.space.fail(member, ErrorCodes.invalidPayload, "tools/call: params.name must be a string", inbound.id);
      const decision = this.decideTool(member, target, tool);
      if (decision !== "direct") return this.refuseTool(member, decision, `${target}/${tool}`, inbound.id);
    } else if (!member.allows(inbound)) {
      return this.space.capabilityViolation(member, inbound);
    }
    this.route(member, stamp(inbound, member.id), payload);
  }

  /** Governance, tracking, delivery: for every request that goes to a participant. */
  route(caller: Member, env: Envelope, payload: McpRequestPayload, extra: Pick<Call, "proposalId" | "fulfiller"> = {}): boolean {
    const target = env.to![0]!;
    if (this.space.member(target) === undefined) {
      this.space.fail(caller, ErrorCodes.targetOffline, `"${target}" is not connected`, env.id);
      return false;
    }
    if (this.calls.get(env.id)) {
      this.space.fail(caller, ErrorCodes.duplicateId, `a call with id "${clip(env.id)}" is already pending`, env.id);
      return false;
    }
    const proposal = extra.proposalId ? this.proposals.get(extra.proposalId) : undefined;
    const chain = proposal ? proposal.chain : this.calls.chainFor(env.from, env.correlation_id);
    const refusal = this.calls.refuse(env.from, target, chain);
    if (refusal) {
      this.space.fail(caller, refusal.code, refusal.message, env.id, { chain: [...chain, target] });
      return false;
    }
    const meta = payload.params?.["_meta"] as Record<string, unknown> | undefined;
    this.calls.open(
      { id: env.id, caller: env.from, target, rpcId: payload.id!, method: payload.method, chain, ...extra },
      this.calls.timeoutFor(meta?.["mewgate/timeout_ms"]),
    );
    this.space.deliver(env, caller);
    return true;
  }

  onResponse(member: Member, inbound: InboundEnvelope): void {
    const parsed = McpResponsePayloadSchema.safeParse(inbound.payload);
    if (!parsed.success) return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/response: ${describeIssue(parsed.error)}`, inbound.id);
    const call = inbound.correlation_id?.map((id) => this.calls.get(id)).find((c) => c !== undefined);
    if (!call) {
      return this.space.fail(member, ErrorCodes.noPendingCall, "no pending call matches this response's correlation_id (it may have timed out or been answered)", inbound.id);
    }
    if (call.target !== member.id) {
      member.log.warn({ call: call.id, target: call.target }, "forged response refused");
      return this.space.fail(member, ErrorCodes.forgedResponse, `only "${call.target}" may answer call "${clip(call.id)}"`, inbound.id);
    }
    const ok = parsed.data.error === undefined;
    this.calls.close(call, ok);
    if (call.internal) return call.internal(parsed.data);
    const env = stamp(inbound, member.id);
    // The response goes to whoever waits on the call, whatever `to` the responder wrote.
    env.to = [call.caller];
    if (call.proposalId) {
      env.correlation_id = [call.id, call.proposalId];
      if (call.fulfiller) {
        env.to.push(call.fulfiller.id);
        env.correlation_id.push(call.fulfiller.envelopeId);
      }
      const p = this.proposals.get(call.proposalId);
      if (p?.state === "routed") this.proposals.transition(p, { state: "answered", outcome: ok ? "ok" : "error" });
    }
    this.space.deliver(env, member);
  }

  /**
   * A participant left (STYLE #6): every call pending on it fails now with an error
   * response; calls it made are cancelled at their targets. Its tools are dropped by
   * `forgetTools`, after the space has announced the leave.
   */
  settle(left: string): void {
    const { onTarget, byCaller } = this.calls.involving(left);
    for (const call of onTarget) {
      this.calls.close(call, false);
      this.failCall(call, RpcErrors.targetLeft, "target_left", `"${left}" left the space before answering`);
    }
    for (const call of byCaller) {
      this.calls.close(call, undefined);
      this.cancelAtTarget(call, "the caller left the space");
    }
  }

  /** Stops tracking every call; the space is shutting down. */
  close(): void {
    this.calls.clear();
  }

  /** The caller gave up on a call: stop tracking it, and do not count it against the target's breaker. */
  private callerCancelled(member: Member, correlation: string[] | undefined): void {
    for (const id of correlation ?? []) {
      const call = this.calls.get(id);
      if (!call || call.caller !== member.id) continue;
      this.calls.close(call, undefined);
      const p = call.proposalId ? this.proposals.get(call.proposalId) : undefined;
      if (p?.state === "routed") this.proposals.transition(p, { state: "failed", reason: "cancelled" });
    }
  }

  private callTimedOut(call: Call): void {
    if (call.internal) return call.internal(undefined, "timeout");
    this.failCall(call, RpcErrors.timeout, "timeout", `"${call.target}" did not answer ${call.method} in time`);
    this.cancelAtTarget(call, "timed out");
  }

  /** Answers a call's waiters with a JSON-RPC error from the gateway. */
  private failCall(call: Call, code: number, reason: string, message: string): void {
    if (call.internal) return call.internal(undefined, reason);
    const to = [call.caller];
    const correlation = [call.id];
    if (call.proposalId) {
      correlation.push(call.proposalId);
      const p = this.proposals.get(call.proposalId);
      if (p && (p.state === "routed" || p.state === "approved")) this.proposals.transition(p, { state: "failed", reason });
    }
    if (call.fulfiller) {
      to.push(call.fulfiller.id);
      correlation.push(call.fulfiller.envelopeId);
    }
    const payload = { jsonrpc: "2.0", id: call.rpcId, error: { code, message, data: { reason, target: call.target } } };
    this.space.deliver(systemEnvelope("mcp/response", payload, { to, correlation_id: correlation }));
  }

  private cancelAtTarget(call: Call, reason: string): void {
    const target = this.space.member(call.target);
    if (!target) return;
    const payload = { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: call.rpcId, reason } };
    this.space.sendTo(target, systemEnvelope("mcp/request", payload, { to: [call.target], correlation_id: [call.id] }));
  }

  // --- the gateway as an MCP endpoint: the registry ------------------------------------

  private onGatewayRequest(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload): void {
    const correlation = inbound.id === undefined ? {} : { correlation_id: [inbound.id] };
    const reply = (body: Record<string, unknown>) =>
      this.space.sendTo(member, systemEnvelope("mcp/response", { jsonrpc: "2.0", id: payload.id ?? null, ...body }, { to: [member.id], ...correlation }));
    switch (payload.method) {
      case "notifications/tools/list_changed":
        return this.refreshTools(member.id);
      case "tools/list":
        return reply({ result: { tools: this.toolsFor(member) } });
      case "ping":
        return reply({ result: {} });
      case "tools/call":
        break;
      default:
        if (payload.id === undefined) return;
        return reply({ error: { code: RpcErrors.methodNotFound, message: `${GATEWAY_ID} does not serve ${payload.method}; it serves tools/list and tools/call` } });
    }
    const name = payload.params?.["name"];
    if (typeof name !== "string") return this.space.fail(member, ErrorCodes.invalidPayload, "tools/call: params.name must be a string like \"fs/read_file\"", inbound.id);
    if (payload.id === undefined || inbound.id === undefined) {
      return this.space.fail(member, ErrorCodes.invalidPayload, "tools/call through the gateway needs an envelope id and a JSON-RPC id", inbound.id);
    }
    const entry = this.registry.resolve(name);
    if (!entry) return this.space.fail(member, ErrorCodes.unknownTool, `no tool "${clip(name)}" in space "${this.space.id}"`, inbound.id);
    const params = { ...payload.params, name: entry.tool };
    const decision = this.decideTool(member, entry.participant, entry.tool);
    if (decision === "denied") return this.refuseTool(member, decision, name, inbound.id);
    if (decision === "direct") {
      const env = stamp({ ...inbound, to: [entry.participant], payload: { ...payload, params } }, member.id);
      this.route(member, env, { ...payload, params });
      return;
    }
    // Needs approval: the gateway proposes it on the caller's behalf, under the request's id,
    // so the caller simply keeps waiting for the response to its request.
    const proposalEnv = stamp({ ...inbound, kind: "mcp/proposal", to: [entry.participant], payload: { method: "tools/call", params } }, member.id);
    this.decisions.hold(member, proposalEnv, "tools/call", params, payload.id, { tellProposer: true });
  }

  /** Asks a participant for its tools (every page) and stores them. */
  refreshTools(id: string): void {
    const member = this.space.member(id);
    if (!member) return;
    const generation = (this.toolFetches.get(id) ?? 0) + 1;
    this.toolFetches.set(id, generation);
    const tools: McpTool[] = [];
    const page = (cursor: string | undefined, n: number): void => {
      this.gatewayRequest(member, "tools/list", cursor ? { cursor } : {}, (response, reason) => {
        if (this.toolFetches.get(id) !== generation || this.space.member(id) !== member) return;
        if (!response || response.error !== undefined) {
          member.log.warn({ reason: reason ?? response?.error }, "tools/list failed; keeping its previous tools");
          return;
        }
        const result = ToolsListResultSchema.safeParse(response.result);
        if (!result.success) {
          member.log.warn({ issue: describeIssue(result.error) }, "tools/list answered with a malformed result");
          return;
        }
        for (const t of result.data.tools) {
          const tool = McpToolSchema.safeParse(t);
          if (tool.success) tools.push(tool.data);
          else member.log.warn({ issue: describeIssue(tool.error) }, "skipping a malformed tool");
        }
        const next = result.data.nextCursor;
        if (next && n + 1 < MAX_TOOL_PAGES && tools.length < MAX_TOOLS_PER_PARTICIPANT) return page(next, n + 1);
        if (this.registry.set(id, tools.slice(0, MAX_TOOLS_PER_PARTICIPANT))) {
          member.log.info({ tools: tools.length }, "tools registered");
          this.toolsChanged();
        }
      });
    };
    page(undefined, 0);
  }

  /** A participant left: forget its tools, and tell everyone if it had any. */
  forgetTools(left: string): void {
    this.toolFetches.delete(left);
    if (this.registry.remove(left)) this.toolsChanged();
  }

  private gatewayRequest(target: Member, method: string, params: Record<string, unknown>, done: NonNullable<Call["internal"]>): void {
    const id = randomUUID();
    this.calls.open({ id, caller: GATEWAY_ID, target: target.id, rpcId: id, method, chain: [GATEWAY_ID], internal: done }, this.space.config.calls.timeout_ms);
    const env: Envelope = { protocol: PROTOCOL, id, ts: now(), from: GATEWAY_ID, to: [target.id], kind: "mcp/request", payload: { jsonrpc: "2.0", id, method, params } };
    this.space.sendTo(target, env);
  }

  /**
   * Tells everyone the catalogue changed — `addressed` members too, like presence, since an
   * MCP client behind one must hear of it. Welcomes carry the new catalogue from now on.
   */
  private toolsChanged(): void {
    this.space.deliver(systemEnvelope("mcp/request", { jsonrpc: "2.0", method: "notifications/tools/list_changed" }), undefined, true);
  }

  // --- tool policy, as it applies to one member ---------------------------------------

  /** The space's tools as `member` sees them: each with the policy that applies to it. */
  toolsFor(member: Member): Array<Record<string, unknown>> {
    return this.registry.list().map((t) => ({ ...t, policy: this.decideTool(member, t.participant, t.tool) }));
  }

  /** The tool policy's decision (policy.ts) for `member` calling `owner/tool`, with the tool's annotations. */
  decideTool(member: Member, owner: string, tool: string): Decision {
    return decide({
      policy: member.policy,
      granted: member.granted,
      configured: member.configured,
      owner,
      tool,
      annotations: this.registry.get(owner, tool)?.annotations,
      fallback: this.space.config.policy.fallback,
    });
  }

  refuseTool(member: Member, decision: Exclude<Decision, "direct">, name: string, correlationId: string | undefined): void {
    if (decision === "denied") return this.space.fail(member, ErrorCodes.denied, `the space's policy denies you ${name}`, correlationId, { tool: name });
    this.space.fail(
      member,
      ErrorCodes.proposalRequired,
      `${name} needs approval: send it as an mcp/proposal (same method and params), or call it through ${GATEWAY_ID}, which proposes it for you`,
      correlationId,
      { tool: name },
    );
  }
}
