/**
 * The gateway as an MCP endpoint, `system:gateway`: what a participant asks the space
 * itself rather than another participant.
 *
 *   tools/list       the catalogue with the policy that applies to the caller, in pages
 *   tools/call       `participant/tool`, routed directly or proposed on the caller's behalf
 *   proposals/list   pending proposals the caller may see, in pages (large arguments elided)
 *   proposals/get    one pending proposal in full; to its proposer, one that ended while it was
 *                    away, with how it ended (proposals/unheard.ts)
 *   proposals/preview {id}  what the call would change, read as the caller (proposals/preview.ts)
 *   grants/list      the grants the caller may see (always-approvals among them)
 *   participants/list who is connected, in pages: presence on request (a large space sends summaries, config/limits.ts)
 *   ping
 *   notifications/cancelled          the caller gives up on one of its own calls
 *   notifications/tools/list_changed the caller's tools changed
 *
 * Answers are sized to fit one frame: the welcome carries only what fits and says where
 * the rest is, and the pages here are how a client fetches it.
 */
import type { Call } from "../calls/calls.js";
import { allowedDecision, directCallPlan } from "../calls/direct-audit.js";
import {
  type Envelope,
  ErrorCodes,
  GATEWAY_ID,
  Intent,
  INTENT_META_KEY,
  type InboundEnvelope,
  type McpRequestPayload,
  stamp,
  systemEnvelope,
} from "../wire/envelope.js";
import { clip, type SpaceHost } from "../ports/host.js";
import type { CallRouter } from "../calls/routing.js";
import type { ProposalDesk } from "./desk.js";
import { jsonBytes, readCursor, takePage } from "../wire/paging.js";
import { randomUUID } from "node:crypto";
import { type Proposal, shownEnvelope } from "../proposals/book.js";
import { runningView, unheardView } from "../proposals/unheard.js";
import type { Member } from "../ports/member.js";

/** JSON-RPC's "invalid params". */
const INVALID_PARAMS = -32602;
const METHOD_NOT_FOUND = -32601;

/** A proposal envelope bigger than this is listed with its arguments elided. */
export const PROPOSAL_INLINE_BYTES = 8 * 1024;

/** The byte budget of one answer: a frame, less room for the envelope around it. */
export function frameBudget(host: Pick<SpaceHost, "config">): number {
  // A floor, so a very small frame limit still leaves room to list something.
  return Math.max(2048, Math.floor(host.config.gateway.limits.max_payload_bytes * 0.9) - 4096);
}

/** Who may see a proposal: everyone with `all` visibility, else only its proposer and owner. */
export function maySee(member: Member, p: Proposal): boolean {
  return member.visibility === "all" || p.proposer === member.id || p.owner === member.id;
}

/**
 * A proposal's envelope as a list shows it: whole when small, otherwise with its
 * arguments replaced by a note of their size and how to fetch them.
 */
export function listed(p: Proposal): Envelope {
  const env = shownEnvelope(p) as Envelope;
  const size = jsonBytes(env);
  if (size <= PROPOSAL_INLINE_BYTES) return env;
  const payload = (env.payload ?? {}) as { method?: string; params?: Record<string, unknown> };
  const params = {
    ...payload.params,
    arguments: { "mewgate/elided": { bytes: size, fetch: { to: GATEWAY_ID, method: "proposals/get", params: { id: p.id } } } },
  };
  return { ...env, payload: { ...payload, params } };
}

/** A preview cut to fit one frame: its text shortened, and marked so. */
function fitted(preview: Record<string, unknown>, budget: number): Record<string, unknown> {
  const size = jsonBytes(preview);
  const text = preview["text"];
  if (size <= budget - 1024 || typeof text !== "string") return preview;
  // A character takes at most six bytes in JSON (an escaped control character): this many always fit.
  const keep = Math.max(0, Math.floor((budget - 8192) / 6));
  return { ...preview, text: text.slice(0, keep), truncated: true };
}

export class GatewayEndpoint {
  constructor(
    /** What it uses of the space (ports/host.ts). */
    private readonly space: Pick<SpaceHost, "config" | "fail" | "grantsView" | "later" | "metrics" | "sendBytes" | "sendTo" | "tracing">,
    private readonly router: CallRouter,
    /** A tools/call that needs approval is held as a proposal; a cancelled one is withdrawn. */
    private readonly decisions: Pick<ProposalDesk, "hold" | "withdrawn" | "pending">,
    /** A proposal's preview as `viewer` would see it (proposals/preview.ts): made as `viewer`, under its policy. */
    private readonly previews: { of(p: Proposal, viewer: string): Promise<object> },
    /**
     * For a proposer asking about its own proposal that no longer waits for a decision: its
     * end, kept while it was away (proposals/unheard.ts), or the proposal if its call runs now.
     */
    private readonly own?: {
      ended(id: unknown, proposer: string): Proposal | undefined;
      running(id: unknown, proposer: string): Proposal | undefined;
      /** The connected members other than `viewer`, described as a welcome describes them. */
      participants?(viewer: Member): Array<Record<string, unknown>>;
    },
  ) {}

  onRequest(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload): Promise<void> | void {
    const correlation = inbound.id === undefined ? {} : { correlation_id: [inbound.id] };
    // MEW clients correlate by envelope id and may leave the JSON-RPC id out.
    const rpcId = payload.id ?? inbound.id ?? null;
    const reply = (body: Record<string, unknown>) =>
      this.space.sendTo(
        member,
        systemEnvelope("mcp/response", { jsonrpc: "2.0", id: rpcId, ...body }, { to: [member.id], ...correlation }),
      );
    const params = payload.params ?? {};
    switch (payload.method) {
      case "notifications/tools/list_changed":
        return this.router.refreshTools(member.id);
      case "notifications/cancelled":
        return this.onCancelled(member, inbound, params);
      case "ping":
        return reply({ result: {} });
      case "tools/list": {
        const start = readCursor(params["cursor"]);
        if (start === null) return reply({ error: { code: INVALID_PARAMS, message: "tools/list: unknown cursor" } });
        // What other agents read of a tool goes through the one table (wire/text.ts): no hidden or bidi characters.
        // The page comes serialised (tool-listing.ts, made once per catalogue change) and is set into the answer as it is.
        const page = this.router.toolsPage(member, start ?? 0, frameBudget(this.space));
        const env = systemEnvelope(
          "mcp/response",
          { jsonrpc: "2.0", id: rpcId, result: { tools: RAW, ...(page.next ? { nextCursor: page.next } : {}) } },
          { to: [member.id], ...correlation },
        );
        return this.space.sendBytes(member, withRaw(JSON.stringify(env), page.parts));
      }
      case "participants/list": {
        const start = readCursor(params["cursor"]);
        if (start === null) return reply({ error: { code: INVALID_PARAMS, message: "participants/list: unknown cursor" } });
        const all = this.own?.participants?.(member) ?? [];
        const page = takePage(all, start ?? 0, frameBudget(this.space), jsonBytes);
        return reply({ result: { participants: page.items, total: all.length, ...(page.next ? { nextCursor: page.next } : {}) } });
      }
      case "proposals/list": {
        const start = readCursor(params["cursor"]);
        if (start === null) return reply({ error: { code: INVALID_PARAMS, message: "proposals/list: unknown cursor" } });
        const visible = this.decisions.pending().filter((p) => maySee(member, p));
        const page = takePage(visible.map(listed), start ?? 0, frameBudget(this.space), jsonBytes);
        return reply({ result: { proposals: page.items, total: visible.length, ...(page.next ? { nextCursor: page.next } : {}) } });
      }
      case "proposals/get": {
        const id = params["id"];
        const p = typeof id === "string" ? this.decisions.pending().find((x) => x.id === id) : undefined;
        // Its proposer asks about one that ended while it was away: how it ended, the answer with it;
        // or about one approved whose call runs now.
        const kept = p ? undefined : this.own?.ended(id, member.id);
        if (kept) return reply({ result: unheardView(kept, frameBudget(this.space)) });
        const running = p || kept ? undefined : this.own?.running(id, member.id);
        if (running) return reply({ result: runningView(running) });
        if (!p || !maySee(member, p))
          return reply({ error: { code: INVALID_PARAMS, message: `no pending proposal "${clip(String(id))}" that you may see` } });
        return reply({ result: { proposal: shownEnvelope(p) } });
      }
      case "proposals/preview": {
        const id = params["id"];
        const p = typeof id === "string" ? this.decisions.pending().find((x) => x.id === id) : undefined;
        if (!p || !maySee(member, p))
          return reply({ error: { code: INVALID_PARAMS, message: `no pending proposal "${clip(String(id))}" that you may see` } });
        return this.previews
          .of(p, member.id)
          .then((preview) => reply({ result: fitted(preview as Record<string, unknown>, frameBudget(this.space)) }));
      }
      case "grants/list": {
        // Grants say who may do what: a member that sees everything sees them all, others
        // the ones it made or holds.
        const grants = this.space
          .grantsView()
          .filter((g) => member.visibility === "all" || g["from"] === member.id || g["recipient"] === member.id);
        return reply({ result: { grants } });
      }
      case "tools/call":
        return this.onToolCall(member, inbound, payload, rpcId);
      default:
        if (payload.method.startsWith("notifications/")) return;
        return reply({
          error: {
            code: METHOD_NOT_FOUND,
            message: `${GATEWAY_ID} does not serve ${clip(payload.method)}; it serves tools/list, tools/call, proposals/list, proposals/get, proposals/preview, grants/list and ping`,
          },
        });
    }
  }

  private onToolCall(
    member: Member,
    inbound: InboundEnvelope,
    payload: McpRequestPayload,
    rpcId: string | number | null,
  ): Promise<void> | void {
    const name = payload.params?.["name"];
    if (typeof name !== "string")
      return this.space.fail(member, ErrorCodes.invalidPayload, 'tools/call: params.name must be a string like "fs/read_file"', inbound.id);
    if (inbound.id === undefined || rpcId === null) {
      return this.space.fail(member, ErrorCodes.invalidPayload, "tools/call through the gateway needs an envelope id", inbound.id);
    }
    const entry = this.router.registry.resolve(name);
    if (!entry) {
      const why = this.router.unknownTool(name);
      return this.space.fail(member, why.code, why.message, inbound.id);
    }
    // The caller's intent (why it wants the call) is for the person who may have to approve
    // it: lifted out of `_meta` into the proposal, never sent on to the tool.
    const lifted = liftIntent(payload.params ?? {});
    if (!lifted.ok)
      return this.space.fail(
        member,
        ErrorCodes.invalidPayload,
        `tools/call: params._meta["${INTENT_META_KEY}"]: ${lifted.message}`,
        inbound.id,
      );
    const params = { ...lifted.params, name: entry.tool };
    const call = { ...payload, id: rpcId, params };
    const verdict = this.router.authorize(member, entry.participant, "tools/call", params);
    if (verdict.decision === "denied") return this.space.fail(member, verdict.code, verdict.message, inbound.id, verdict.extra);
    if (verdict.decision === "direct") {
      const env = stamp({ ...inbound, to: [entry.participant], payload: call }, member.id);
      // Audited like a call sent to its owner directly (direct-audit.ts): every routed call is in the trail.
      if (this.router.route(member, env, call, inbound.id)) {
        // The decision is made now (its count, its span); its `called` entry is written behind, coalesced.
        const decision = allowedDecision(this.space, this.router.calls.get(env.id)?.trace, verdict.reason);
        const audited = {
          id: env.id,
          caller: member.id,
          target: entry.participant,
          method: "tools/call",
          // What went out: the guards may have redacted the arguments on the way (router.ts).
          params: (env.payload as McpRequestPayload).params,
          reason: verdict.reason,
          decision,
        };
        const at = Date.now();
        this.space.later(() => directCallPlan(audited, at));
      }
      return;
    }
    // A call that could never be routed is refused now, not held for someone to approve
    // into an error (found by the simulation, seed 31677: a worker proposing to call itself).
    const chain = this.router.calls.chainFor(member.id, inbound.correlation_id);
    if (chain.includes(entry.participant)) {
      return this.space.fail(member, ErrorCodes.cycleDetected, `call cycle: ${[...chain, entry.participant].join(" → ")}`, inbound.id, {
        chain: [...chain, entry.participant],
      });
    }
    // Needs approval: the gateway proposes it on the caller's behalf, under the request's id,
    // so the caller simply keeps waiting for the response to its request.
    const proposalEnv = stamp(
      {
        ...inbound,
        kind: "mcp/proposal",
        to: [entry.participant],
        payload: { method: "tools/call", params, ...(lifted.intent !== undefined ? { intent: lifted.intent } : {}) },
      },
      member.id,
    );
    return this.decisions.hold(member, proposalEnv, "tools/call", params, rpcId, { tellProposer: true, sentId: inbound.id });
  }

  /**
   * The caller gives up on calls it made through the gateway (or directly): each one it
   * names — by envelope id in `correlation_id` or by `requestId` — is cancelled at its
   * target and down its delegation chain, and a proposal still waiting for approval on
   * its behalf is withdrawn. Only the caller's own calls can be named, so nobody can
   * cancel another participant's call.
   */
  private async onCancelled(member: Member, inbound: InboundEnvelope, params: Record<string, unknown>): Promise<void> {
    const requestId = params["requestId"];
    const reason = typeof params["reason"] === "string" ? clip(params["reason"]) : "cancelled by the caller";
    const calls: Call[] = this.router.calls.ofCaller(member.id, inbound.correlation_id, requestId);
    for (const call of calls) this.router.cancel(call, reason, true);
    const waiting = this.decisions
      .pending()
      .filter(
        (p) => p.proposer === member.id && (inbound.correlation_id?.includes(p.id) || (requestId !== undefined && p.rpcId === requestId)),
      );
    for (const p of waiting) await this.decisions.withdrawn(member, p, "cancelled");
    if (calls.length === 0 && waiting.length === 0) {
      this.space.fail(
        member,
        ErrorCodes.notCaller,
        "this cancellation names no pending call or proposal of yours; only a call's caller may cancel it",
        inbound.id,
      );
    }
  }
}

/** `params` without `_meta["mewgate/intent"]`, and that intent, checked like a proposal's `payload.intent`. */
function liftIntent(
  params: Record<string, unknown>,
): { ok: true; params: Record<string, unknown>; intent: string | undefined } | { ok: false; message: string } {
  const meta = params["_meta"];
  if (typeof meta !== "object" || meta === null || Array.isArray(meta) || !(INTENT_META_KEY in meta))
    return { ok: true, params, intent: undefined };
  const { [INTENT_META_KEY]: raw, ...rest } = meta as Record<string, unknown>;
  const checked = Intent.safeParse(raw);
  if (!checked.success)
    return { ok: false, message: typeof raw === "string" ? (checked.error.issues[0]?.message ?? "invalid") : "must be a string" };
  const { _meta: _drop, ...others } = params;
  void _drop;
  return { ok: true, params: Object.keys(rest).length ? { ...others, _meta: rest } : others, intent: checked.data };
}

/**
 * Stands in an envelope for a part serialised before (`withRaw`). Random per process, so no
 * text a participant sends (an id, say) can hold it.
 */
const RAW = `mewgate-raw-${randomUUID()}`;
const RAW_JSON = JSON.stringify(RAW);

/** `json` (an envelope holding RAW once) as bytes, with RAW's place taken by a JSON array of `parts` (each already JSON). */
function withRaw(json: string, parts: Buffer[]): Buffer {
  const at = json.indexOf(RAW_JSON);
  if (at < 0 || json.indexOf(RAW_JSON, at + 1) >= 0) throw new Error("the placeholder of a serialised part is not there exactly once");
  return Buffer.concat([Buffer.from(`${json.slice(0, at)}[`), ...parts, Buffer.from(`]${json.slice(at + RAW_JSON.length)}`)]);
}
