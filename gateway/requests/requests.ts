/**
 * Every `mcp/request`, before it is a call: the handler above the router (router.ts) and the
 * decisions (proposals/decisions.ts), so that neither needs the other to be built. A request to
 * `system:gateway` goes to the gateway's endpoint (endpoint.ts); a notification is delivered
 * (a cancellation only where the call it names went); a request correlated to a pending
 * proposal is a MEW fulfilment, for the decisions; one correlated to an ended proposal is
 * refused; any other is checked by policy and routed.
 */
import type { ProposalBook } from "../proposals/book.js";
import { type Answer, clip, type SpaceHost } from "../ports/host.js";
import type { ProposalDesk } from "./desk.js";
import type { Member } from "../ports/member.js";
import {
  describeIssue,
  ErrorCodes,
  GATEWAY_ID,
  type InboundEnvelope,
  type McpRequestPayload,
  parseMcpRequest,
  stamp,
} from "../wire/envelope.js";
import { CALLBACK_METHODS } from "../calls/calls.js";
import { allowedDecision, directCallPlan } from "../calls/direct-audit.js";
import type { GatewayEndpoint } from "./endpoint.js";
import type { McpRouter } from "../calls/router.js";

export class Requests {
  constructor(
    /** What it uses of the space (ports/host.ts): the decision point, the way out, the ledger written behind. */
    private readonly space: Pick<SpaceHost, "authority" | "capabilityViolation" | "deliver" | "fail" | "later" | "metrics" | "tracing">,
    private readonly router: Pick<McpRouter, "calls" | "authorize" | "refuse" | "route" | "cancel" | "refreshTools">,
    private readonly decisions: Pick<ProposalDesk, "onFulfil">,
    private readonly endpoint: GatewayEndpoint,
    private readonly proposals: ProposalBook,
  ) {}

  /**
   * Every `mcp/request`. Its check depends on its payload, so it is made here rather than
   * before the space's switch: tools/call by the tool policy, the rest by capability; a
   * request to the gateway by the gateway's own rules, and a fulfilment by the bar for
   * deciding on its proposal.
   */
  onRequest(member: Member, inbound: InboundEnvelope): Answer {
    const parsed = parseMcpRequest(inbound.payload);
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/request: ${describeIssue(parsed.error)}`, inbound.id);
    let payload = parsed.data;
    const to = inbound.to ?? [];
    if (to.includes(GATEWAY_ID)) {
      if (to.length > 1)
        return this.space.fail(member, ErrorCodes.invalidEnvelope, `a request to ${GATEWAY_ID} must not name other recipients`, inbound.id);
      return this.endpoint.onRequest(member, inbound, payload);
    }
    if (payload.method.startsWith("notifications/")) return this.onNotification(member, inbound, payload);
    if (payload.id === undefined) {
      // Not a notification, so a request all the same: MEW clients leave the JSON-RPC id
      // out and correlate by envelope id. It takes the same road as any request — policy
      // first — with the envelope id as its JSON-RPC id, so the answer correlates both ways.
      if (inbound.id === undefined) {
        return this.space.fail(
          member,
          ErrorCodes.invalidEnvelope,
          `${clip(payload.method)} is a request: give the envelope an id (or the payload a JSON-RPC id)`,
        );
      }
      payload = { jsonrpc: payload.jsonrpc, id: inbound.id, method: payload.method, params: payload.params } satisfies Record<
        keyof McpRequestPayload,
        unknown
      >;
    }
    const fulfilled = inbound.correlation_id?.map((id) => this.proposals.get(id)).find((p) => p !== undefined);
    if (fulfilled) return this.decisions.onFulfil(member, inbound, payload, fulfilled);
    // Correlated to a proposal that has ended, a request would carry it out a second time.
    const ended = inbound.correlation_id?.find((id) => this.proposals.endedAs(id) !== undefined);
    if (ended !== undefined) {
      const state = this.proposals.endedAs(ended)!;
      return this.space.fail(
        member,
        ErrorCodes.proposalNotPending,
        `proposal "${clip(ended)}" is already ${state}; a request correlated to it would fulfil it again`,
        inbound.id,
        { state },
      );
    }
    if (to.length !== 1) {
      return this.space.fail(member, ErrorCodes.invalidEnvelope, "an mcp/request goes to exactly one participant (to: [id])", inbound.id);
    }
    const target = to[0]!;
    const served = CALLBACK_METHODS.has(payload.method)
      ? this.router.calls.callbackOf(member.id, target, inbound.correlation_id)
      : undefined;
    const verdict = served
      ? this.space.authority.callback(payload.params)
      : this.router.authorize(member, target, payload.method, payload.params);
    if (verdict.decision !== "direct") return this.router.refuse(member, verdict, target, payload, inbound.id);
    const anonymous = inbound.id === undefined ? ({ anonymous: true } as const) : {};
    const env = stamp({ ...inbound, payload }, member.id);
    const routed = this.router.route(member, env, payload, inbound.id, served ? { callbackFor: served.id, ...anonymous } : anonymous);
    // A direct tool call is audited with what allowed it (direct-audit.ts), written behind it, coalesced; its decision is made now.
    if (routed && !served && payload.method === "tools/call") {
      const decision = allowedDecision(this.space, this.router.calls.get(env.id)?.trace, verdict.reason);
      const call = {
        id: env.id,
        caller: member.id,
        target,
        method: payload.method,
        // What went out: the guards may have redacted the arguments on the way (router.ts).
        params: (env.payload as McpRequestPayload).params,
        reason: verdict.reason,
        decision,
      };
      const at = Date.now();
      this.space.later(() => directCallPlan(call, at));
    }
  }

  /**
   * A notification between participants. Nothing to track, but a cancellation must come
   * from the caller of the call it names, and goes only where that call went.
   */
  private onNotification(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload): void {
    if (!member.allows(inbound)) return this.space.capabilityViolation(member, inbound);
    if (payload.method === "notifications/cancelled") {
      const to = inbound.to ?? [];
      const calls = this.router.calls
        .ofCaller(member.id, inbound.correlation_id, payload.params?.["requestId"])
        .filter((c) => to.length === 0 || to.includes(c.target));
      if (calls.length === 0) {
        return this.space.fail(
          member,
          ErrorCodes.notCaller,
          "this cancellation names no pending call of yours; only a call's caller may cancel it",
          inbound.id,
        );
      }
      const env = stamp(inbound, member.id);
      env.to = [...new Set(calls.map((c) => c.target))];
      this.space.deliver(env, member);
      for (const call of calls) this.router.cancel(call, "cancelled by the caller", false);
      return;
    }
    this.space.deliver(stamp(inbound, member.id), member);
    if (payload.method === "notifications/tools/list_changed") this.router.refreshTools(member.id);
  }
}
