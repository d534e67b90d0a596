/**
 * MCP traffic through a space: requests routed between participants and tracked as calls,
 * their answers, cancellation and timeouts; and the tool catalogue, fetched from each
 * participant that offers tools. The space's pipeline validates an envelope and dispatches
 * on its kind; this module decides and talks back only through `SpaceHost` (deliver, sendTo,
 * fail). In-flight calls live in calls.ts, the catalogue in registry.ts (kept by catalogue.ts).
 *
 * It knows nothing of decisions: requests/requests.ts hands an `mcp/request` that is really a decision
 * to proposals/decisions.ts, which routes approved calls through `tryRoute` here. Each call's
 * end is reported once (`callEnded`); proposals/ moves the proposal. The guards' redactions are
 * carried out on the way out and back (guarded.ts), and each call counted against the caps as it leaves.
 * Past 500 lines because it is one concern: the way out of every call and the way back of every answer.
 */
import { randomUUID } from "node:crypto";
import { CALLBACK_METHODS, type Call, type CallEnd, type Calls } from "./calls.js";
import type { CallTrace } from "../ports/tracing.js";
import { personFor, stampPerson, wantsPerson } from "./person.js";
import {
  type Envelope,
  ErrorCodes,
  GATEWAY_ID,
  type InboundEnvelope,
  type McpRequestPayload,
  parseMcpResponse,
  PROTOCOL,
  RpcErrors,
  describeIssue,
  now,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import { clip, disabledRefusal, type NotRouted, type RouterHost } from "../ports/host.js";
import type { CallRouter } from "./routing.js";
import type { Verdict } from "../policy/authority.js";
import type { Decision } from "../policy/rules.js";
import { answerOutcome } from "./outcomes.js";
import type { Registry } from "../tools/registry.js";
import type { Member } from "../ports/member.js";
import { Catalogue } from "./catalogue.js";
import { askedAgain, callersFault, isPrivate } from "./whose.js";
import { capRefusal, guardArguments, heldRefusal, screenResult } from "./guarded.js";
import { readable, ToolListing, type ToolsPage } from "./tool-listing.js";

export class McpRouter implements CallRouter {
  /** Each participant's tools, fetched and screened (catalogue.ts). */
  private readonly catalogue: Catalogue;
  private readonly listing = new ToolListing();

  constructor(
    private readonly space: RouterHost,
    /** The call table, built before the router (the store's conversations name calls in it). */
    readonly calls: Calls,
    readonly registry: Registry,
    /**
     * Told once of every routed call's end (proposals/runs-ended.ts moves the proposal it
     * carries); a promise when a proposal moved, which an answer waits for.
     */
    private readonly callEnded: (call: Call, end: CallEnd) => Promise<void> | undefined,
    /**
     * Whether a call is held in a person's conversation (agents/conversations.ts): its holder
     * may come back to answer it. An unwound conversation's call is aborted here.
     */
    private readonly conversations: {
      holds(callId: string): boolean;
      readonly aborting: Set<(call: Call, reason: string, message: string) => void>;
    },
  ) {
    calls.onTimeout((call) => this.callTimedOut(call));
    conversations.aborting.add((call, reason, message) => this.abort(call, reason, message));
    this.catalogue = new Catalogue(space, registry);
  }

  // --- requests and responses between participants ----------------------------------

  /** The policy decision point (authority.ts) for `member` calling `target`. */
  authorize(member: Member, target: string, method: string, params: Record<string, unknown> | undefined, confirming = false): Verdict {
    return this.space.authority.call(member.id, member.allows, target, method, params, confirming);
  }

  /** Answers a request that may not go ahead directly. */
  refuse(
    member: Member,
    verdict: Exclude<Verdict, { decision: "direct" }>,
    target: string,
    payload: McpRequestPayload,
    correlationId: string | undefined,
  ): void {
    if (verdict.decision === "denied") return this.space.fail(member, verdict.code, verdict.message, correlationId, verdict.extra);
    // Proposing it would not help: a switched-off participant serves no proposal either.
    if (this.registry.isDisabled(target)) {
      const off = disabledRefusal(target);
      return this.space.fail(member, off.code, off.message, correlationId);
    }
    const name = `${target}/${String(payload.params?.["name"])}`;
    // Held by a guard: the caller learns what was found (masked), and that a person must see it.
    const held = verdict.guard?.action === "hold" || verdict.cap ? heldRefusal(name, verdict) : undefined;
    if (held) return this.space.fail(member, ErrorCodes.proposalRequired, held.message, correlationId, held.extra);
    this.refuseTool(member, "proposal", name, correlationId);
  }

  /**
   * Why `participant/tool`, named through the gateway, is not in the catalogue: its owner is
   * switched off (the catalogue hides its tools, switches.ts), or there is no such tool.
   */
  unknownTool(name: string): NotRouted {
    const slash = name.indexOf("/");
    if (slash > 0 && this.registry.isDisabled(name.slice(0, slash))) return disabledRefusal(name.slice(0, slash));
    return { code: ErrorCodes.unknownTool, message: `no tool "${clip(name)}" in space "${this.space.id}"` };
  }

  /**
   * Governance, tracking, delivery: for every request a participant sends to another. A
   * refusal goes to the caller correlated to `sentId`, the id of the envelope it sent (if it
   * gave one): never to `env.id`, which the gateway makes up when the sender gave none.
   */
  route(
    caller: Member,
    env: Envelope,
    payload: McpRequestPayload,
    sentId: string | undefined,
    extra: Pick<Call, "proposalId" | "fulfiller" | "callbackFor" | "anonymous"> = {},
  ): boolean {
    const refused = this.tryRoute(caller, env, payload, extra);
    if (refused) this.space.fail(caller, refused.code, refused.message, sentId, refused.extra);
    return refused === undefined;
  }

  /**
   * `route` without telling anyone of a refusal: the reason comes back instead. For a call
   * the gateway makes on someone's behalf (an approved proposal, decisions.ts), whose
   * envelope id nobody sent, so the refusal belongs in the proposal's outcome.
   */
  tryRoute(
    caller: Member,
    env: Envelope,
    payload: McpRequestPayload,
    extra: Pick<Call, "proposalId" | "fulfiller" | "callbackFor" | "anonymous"> & {
      receipt?: string | undefined;
      /** For an approved proposal's call: its chain when proposed, and who approved it last. */
      approved?: { chain: string[]; decidedBy: string | undefined } | undefined;
    } = {},
  ): NotRouted | undefined {
    const target = env.to![0]!;
    // A person with only the web console open is there too, for what they can answer.
    if (this.space.member(target) === undefined && !(CALLBACK_METHODS.has(payload.method) && this.space.watching(target))) {
      return { code: ErrorCodes.targetOffline, message: `"${target}" is not connected` };
    }
    if (this.calls.get(env.id)) return { code: ErrorCodes.duplicateId, message: `a call with id "${clip(env.id)}" is already pending` };
    const proposal = extra.approved;
    // A switched-off participant serves nobody, whichever way the call came (switches.ts).
    if (payload.method === "tools/call" && this.registry.isDisabled(target)) return disabledRefusal(target);
    // A callback goes back along its call's chain: it joins that call, not a longer chain.
    const served = extra.callbackFor === undefined ? undefined : this.calls.get(extra.callbackFor);
    const parent = served ?? this.calls.serving(env.from, env.correlation_id);
    const chain = proposal ? proposal.chain : served ? served.chain : parent ? [...parent.chain, env.from] : [env.from];
    const refusal = this.calls.refuse(env.from, target, chain, served);
    if (refusal) return { code: refusal.code, message: refusal.message, extra: { chain: [...chain, target] } };
    // The person the call acts for is the gateway's word alone (person.ts): a participant's own stamp is dropped.
    const person = wantsPerson(this.space.config, target) ? personFor(this.space.config, env.from, proposal?.decidedBy) : undefined;
    const stamped = stampPerson(payload, person, extra.receipt);
    if (stamped !== payload) env.payload = payload = stamped;
    // The guards' redaction, whichever way the call came (guarded.ts; the decision point decided the rest).
    const tool = payload.method === "tools/call" && typeof payload.params?.["name"] === "string" ? payload.params["name"] : undefined;
    // An approved call meets the caps that refuse here, counted for its approver: a person's
    // approval lifts a hold, never a refusal (the decision point asked the rest, policy/caps.ts).
    const capped =
      proposal && tool !== undefined ? capRefusal(this.space.authority.caps, env.from, target, tool, proposal.decidedBy) : undefined;
    if (capped) return capped;
    const out = tool === undefined ? payload : guardArguments(this.space, env, payload, target, tool, extra.proposalId);
    if ("code" in out) return out;
    payload = out;
    // Counted against the space's caps as it leaves (policy/caps.ts), for the person who approved it if one did.
    const counted = tool === undefined ? undefined : this.space.authority.caps.plan(env.from, target, tool, proposal?.decidedBy);
    if (counted) void this.space.note(counted);
    const meta = payload.params?.["_meta"] as Record<string, unknown> | undefined;
    const traced = this.space.tracing.on ? this.trace(env, payload, extra.proposalId, parent) : undefined;
    this.calls.open(
      {
        id: env.id,
        caller: env.from,
        target,
        rpcId: payload.id!,
        method: payload.method,
        tool,
        chain,
        parent: parent?.id,
        params: CALLBACK_METHODS.has(payload.method) ? payload.params : undefined,
        proposalId: extra.proposalId,
        anonymous: extra.anonymous,
        fulfiller: extra.fulfiller,
        callbackFor: extra.callbackFor,
        trace: traced,
      },
      this.calls.timeoutFor(meta?.["mewgate/timeout_ms"]),
    );
    // A link only its person may follow (a sign-in) reaches that person alone, never by visibility.
    if (isPrivate(payload)) this.space.deliverOnly(env, target);
    else this.space.deliver(env, caller);
    return undefined;
  }

  /** The span of a call being routed (ports/tracing.ts), when the space exports traces; the request then carries its context. */
  private trace(
    env: Envelope,
    payload: McpRequestPayload,
    proposalId: string | undefined,
    parent: Call | undefined,
  ): CallTrace | undefined {
    const tool = payload.method === "tools/call" && typeof payload.params?.["name"] === "string" ? payload.params["name"] : undefined;
    const info = {
      space: this.space.id,
      method: payload.method,
      tool,
      caller: env.from,
      target: env.to![0]!,
      rpcId: payload.id!,
      proposal: proposalId,
    };
    const traced = this.space.tracing.route(info, payload.params, parent?.trace?.context);
    if (traced) env.payload = { ...payload, params: traced.params };
    return traced?.trace;
  }

  /** A routed call ended, however: its span ends and its duration is counted (`error`: why it failed, if it did). */
  private ended(call: Call, error: string | undefined): void {
    if (call.internal) return;
    this.space.metrics.operation(call.method, error, (Date.now() - call.openedAt) / 1000);
    call.trace?.end(error);
  }

  onResponse(member: Member, received: InboundEnvelope): Promise<void> | void {
    let inbound = received;
    const parsed = parseMcpResponse(inbound.payload);
    if (!parsed.success)
      return this.space.fail(member, ErrorCodes.invalidPayload, `mcp/response: ${describeIssue(parsed.error)}`, inbound.id);
    const call = inbound.correlation_id?.map((id) => this.calls.get(id)).find((c) => c !== undefined);
    if (!call) {
      return this.space.fail(
        member,
        ErrorCodes.noPendingCall,
        "no pending call matches this response's correlation_id (it may have timed out or been answered)",
        inbound.id,
      );
    }
    if (call.target !== member.id) {
      member.log.warn({ call: call.id, target: call.target }, "forged response refused");
      return this.space.fail(member, ErrorCodes.forgedResponse, `only "${call.target}" may answer call "${clip(call.id)}"`, inbound.id);
    }
    // The target answered (the breaker's question); a tool that reports its own failure
    // (`isError: true`) still answered, but the call did not succeed, and its record says so.
    const answered = parsed.data.error === undefined;
    const outcome = answerOutcome(parsed.data);
    // An error about the request itself (no such method, bad params, an unknown task id) is
    // the target answering, well: for the breaker it is an answer, so a caller sending bad
    // requests cannot open the breaker against the target for everyone.
    this.calls.close(call, answered || callersFault(parsed.data.error));
    if (!call.internal) this.space.metrics.call(outcome);
    this.ended(
      call,
      answered ? (outcome === "ok" ? undefined : "tool_error") : String((parsed.data.error as { code?: unknown }).code ?? "error"),
    );
    // The guards read the result before anyone gets it: the caller, a preview's viewer, the audit.
    const screened = screenResult(this.space, call, parsed.data);
    if (screened) [parsed.data, inbound] = [screened as typeof parsed.data, { ...inbound, payload: screened }];
    if (call.internal) return call.internal(parsed.data);
    const env = stamp(inbound, member.id);
    // An error in MEW's loose shape (a string code) reaches the caller as one it can read.
    const raw = (inbound.payload as { error?: { code?: unknown; message?: unknown } }).error;
    if (parsed.data.error && (typeof raw?.code !== "number" || typeof raw.message !== "string"))
      env.payload = { ...(inbound.payload as object), error: parsed.data.error };
    // The audit trail has the outcome by the time the proposer hears it.
    const moved = this.callEnded(call, { how: "answered", response: parsed.data });
    if (moved) return moved.then(() => this.answer(call, env, member));
    this.answer(call, env, member);
  }

  /**
   * Delivers the answer to `call` to whoever waits on it, whatever `to` its sender wrote,
   * each correlated the way it expects. A proposal's answer names the proposal first: a MEW
   * proposer matches correlation_id[0] against it. A fulfilment's answer goes to its
   * fulfiller naming the fulfilment first, as any response names its request (§3.2.1),
   * and a copy under the proposer's own JSON-RPC id goes to the proposer.
   */
  private answer(call: Call, env: Envelope, sender?: Member): void {
    const f = call.fulfiller;
    const anonymous = call.anonymous ? [] : [call.id];
    if (!call.proposalId) {
      env.to = [call.caller];
      if (env.correlation_id === undefined && anonymous.length) env.correlation_id = anonymous;
      return this.space.deliver(env, sender);
    }
    if (!f) {
      env.to = [call.caller];
      env.correlation_id = [call.proposalId, ...anonymous];
      return this.space.deliver(env, sender);
    }
    const proposer = this.space.member(f.proposer);
    const payload = typeof env.payload === "object" && env.payload !== null ? (env.payload as Record<string, unknown>) : {};
    if (proposer && f.proposer !== f.id) {
      this.space.sendTo(proposer, {
        ...env,
        id: randomUUID(),
        to: [f.proposer],
        correlation_id: [call.proposalId, f.envelopeId],
        payload: { ...payload, id: f.proposerRpcId },
      });
    }
    this.space.deliver({ ...env, to: [f.id], correlation_id: [f.envelopeId, call.proposalId] }, sender);
  }

  /**
   * `member` replaced its earlier connection (the others saw no leave or join): what was
   * asked of it and waits for its answer (a form, a sign-in card) was delivered to the
   * connection it left, so it is shown again on this one, which may answer it.
   */
  reoffer(member: Member): void {
    for (const call of this.calls.toTarget(member.id)) {
      if (!CALLBACK_METHODS.has(call.method) || call.method === "ping" || call.params === undefined || call.internal) continue;
      this.space.sendTo(member, askedAgain(call, member.id));
    }
  }

  /**
   * A participant left: every call pending on it fails now with an error
   * response; calls it made are cancelled at their targets. Its tools are dropped by
   * `forgetTools`, after the space has announced the leave.
   */
  settle(left: string): void {
    const { onTarget, byCaller } = this.calls.involving(left);
    for (const call of onTarget) {
      // A conversation's holder that drops out (a restart) may come back and answer: the
      // person's idle clock bounds the wait instead (conversations.ts).
      if (this.conversations.holds(call.id)) continue;
      this.calls.close(call, false);
      // The gateway answers with a JSON-RPC error: an `error` outcome (calls/outcomes.ts), its reason target_left.
      if (!call.internal) this.space.metrics.call("error");
      this.ended(call, "target_left");
      this.failCall(call, RpcErrors.targetLeft, "target_left", `"${left}" left the space before answering`);
    }
    for (const call of byCaller) this.cancel(call, "the caller left the space", true);
  }

  /**
   * Nobody can answer for `id` any more (its last web console closed, and it has no
   * connection): the requests that waited on it there fail at once rather than at their timeout.
   */
  unreachable(id: string): void {
    for (const call of this.calls.involving(id).onTarget) {
      if (!CALLBACK_METHODS.has(call.method) || this.conversations.holds(call.id)) continue;
      this.calls.close(call, undefined);
      this.ended(call, "target_left");
      this.failCall(call, RpcErrors.targetLeft, "target_left", `"${id}" closed the console without answering`);
    }
  }

  /**
   * Ends a call nobody gave up on, for the space's own reasons (a conversation unwound):
   * its caller gets an error response, its target and everything it started are cancelled.
   */
  abort(call: Call, reason: string, message: string): void {
    if (!this.calls.get(call.id)) return;
    this.failCall(call, RpcErrors.cancelled, reason, message);
    this.cancel(call, message, true);
  }

  /** Stops tracking every call; the space is shutting down. */
  close(): void {
    for (const call of this.calls.all()) this.ended(call, "gateway_stopped");
    this.calls.clear();
  }

  /**
   * Ends a call its caller gave up on (it cancelled, or left): stop tracking it without
   * counting it against the target's breaker, fail the proposal it carries out, tell the
   * target (unless the caller's own notification already went there), and cancel, the
   * same way, every call the target made while serving it — down the delegation chain.
   * Each call made on the way gets an error response, so every call ends exactly once.
   */
  cancel(call: Call, reason: string, notifyTarget: boolean): void {
    this.calls.close(call, undefined);
    this.space.metrics.call("cancelled");
    this.ended(call, "cancelled");
    void this.callEnded(call, { how: "failed", reason: "cancelled", message: reason });
    if (notifyTarget) this.cancelAtTarget(call, reason);
    // Bounded: each call is closed before its children are visited, so none is visited twice.
    for (const child of this.calls.children(call.id)) {
      this.failCall(child, RpcErrors.cancelled, "cancelled", `the call it served was cancelled (${reason})`);
      this.cancel(child, reason, true);
    }
  }

  private callTimedOut(call: Call): void {
    if (call.internal) return call.internal(undefined, "timeout");
    this.space.metrics.call("timeout");
    this.ended(call, "timeout");
    this.failCall(call, RpcErrors.timeout, "timeout", `"${call.target}" did not answer ${call.method} in time`);
    this.cancelAtTarget(call, "timed out");
  }

  /** Answers a call's waiters with a JSON-RPC error from the gateway. */
  private failCall(call: Call, code: number, reason: string, message: string): void {
    if (call.internal) return call.internal(undefined, reason);
    void this.callEnded(call, { how: "failed", reason, message });
    const payload = { jsonrpc: "2.0", id: call.rpcId, error: { code, message, data: { reason, target: call.target } } };
    // Never the made-up id of a request its caller sent without one (calls.ts `anonymous`).
    const correlation = call.anonymous ? [] : [call.id];
    this.answer(call, systemEnvelope("mcp/response", payload, correlation.length > 0 ? { correlation_id: correlation } : {}));
  }

  private cancelAtTarget(call: Call, reason: string): void {
    const target = this.space.member(call.target);
    if (!target) return;
    const payload = { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: call.rpcId, reason } };
    this.space.sendTo(target, systemEnvelope("mcp/request", payload, { to: [call.target], correlation_id: [call.id] }));
  }

  // --- the gateway as an MCP endpoint: the catalogue (catalogue.ts) -------------------

  /** Asks a participant for its tools (every page) and stores them. */
  refreshTools(id: string): void {
    const member = this.space.member(id);
    if (member) this.catalogue.refresh(member, (m, method, params, done) => this.gatewayRequest(m, method, params, done));
  }

  /** A participant left: forget its tools, and tell everyone if it had any. */
  forgetTools(left: string): void {
    this.catalogue.forget(left);
  }

  /**
   * A read made for a person rather than by a participant (a proposal's preview,
   * proposals/preview.ts): sent as `caller` to `target` alone, under the target's breaker
   * and the caller's pending bound, with its own timeout; the answer comes back to `done`,
   * never to a participant. The policy check is the asker's: this only routes. On timeout
   * the target is told to cancel. Undefined: sent.
   */
  callFor(
    caller: string,
    target: string,
    method: string,
    params: Record<string, unknown>,
    timeoutMs: number,
    done: NonNullable<Call["internal"]>,
  ): NotRouted | undefined {
    const member = this.space.member(target);
    if (!member) return { code: ErrorCodes.targetOffline, message: `"${clip(target)}" is not connected` };
    if (method === "tools/call" && this.registry.isDisabled(target)) return disabledRefusal(target);
    const refusal = this.calls.refuse(caller, target, [caller]);
    if (refusal) return { code: refusal.code, message: refusal.message };
    const id = randomUUID();
    const call = this.calls.open(
      {
        id,
        caller,
        target,
        rpcId: id,
        method,
        ...(method === "tools/call" && typeof params["name"] === "string" ? { tool: params["name"] } : {}),
        chain: [caller],
        internal: (response, reason) => {
          if (reason === "timeout") this.cancelAtTarget(call, "timed out");
          done(response, reason);
        },
      },
      timeoutMs,
    );
    this.space.sendTo(member, {
      protocol: PROTOCOL,
      id,
      ts: now(),
      from: caller,
      to: [target],
      kind: "mcp/request",
      payload: { jsonrpc: "2.0", id, method, params },
    });
    return undefined;
  }

  private gatewayRequest(target: Member, method: string, params: Record<string, unknown>, done: NonNullable<Call["internal"]>): void {
    const id = randomUUID();
    this.calls.open(
      { id, caller: GATEWAY_ID, target: target.id, rpcId: id, method, chain: [GATEWAY_ID], internal: done },
      this.space.config.calls.timeout_ms,
    );
    const env: Envelope = {
      protocol: PROTOCOL,
      id,
      ts: now(),
      from: GATEWAY_ID,
      to: [target.id],
      kind: "mcp/request",
      payload: { jsonrpc: "2.0", id, method, params },
    };
    this.space.sendTo(target, env);
  }

  /** The catalogue changed other than by a participant's tools/list (a participant was switched off or on). */
  catalogueChanged(): void {
    this.catalogue.changed();
  }

  // --- tool policy, as it applies to one member ---------------------------------------

  /** One page of `tools/list` for `member` (tool-listing.ts): the cleaned catalogue, serialised once per change, with each tool's policy for it. */
  toolsPage(member: Member, start: number, budget: number): ToolsPage {
    const authority = this.space.authority;
    return this.listing.page(this.registry.list(), start, budget, (t) => authority.tool(member.id, t.participant, t.tool));
  }

  /** The space's tools as `member` sees them: each with the policy that applies to it. */
  toolsFor(member: Member): Array<Record<string, unknown>> {
    const authority = this.space.authority;
    return this.registry.list().map((t) => ({ ...readable(t), policy: authority.tool(member.id, t.participant, t.tool) }));
  }

  refuseTool(member: Member, decision: Exclude<Decision, "direct">, name: string, correlationId: string | undefined): void {
    if (decision === "denied")
      return this.space.fail(member, ErrorCodes.denied, `the space's policy denies you ${name}`, correlationId, { tool: name });
    this.space.fail(
      member,
      ErrorCodes.proposalRequired,
      `${name} needs approval: send it as an mcp/proposal (same method and params), or call it through ${GATEWAY_ID}, which proposes it for you`,
      correlationId,
      { tool: name },
    );
  }
}
