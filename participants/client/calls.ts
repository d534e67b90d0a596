/**
 * The participant client's outgoing calls and proposals: `request()` / `propose()` and their
 * Pending map keyed by envelope id, each with its timer, the call chain they
 * join, and how every answer settles them — a JSON-RPC response, a correlated
 * `system/error`, `mcp/reject`, `mcp/withdraw`, the local deadline, an abort, a disconnect.
 * The dispatch hands it the envelopes that concern calls; serving holds a call's clock
 * while its target asks us something back.
 */
import { randomUUID } from "node:crypto";
import type * as z from "zod";
import { GATEWAY_ID, type Envelope } from "../../gateway/index.js";
import { ParticipantError } from "../errors.js";
import { parseMcpResponse, RejectPayloadSchema, WithdrawPayloadSchema, type RpcId } from "../wire.js";
import type { Connection } from "./connection.js";
import type { ApproveOptions, CallOptions, OutboundEnvelope, PendingCall, TypedCallOptions } from "./types.js";
import { isRecord } from "../../gateway/index.js";

/** One call of mine awaiting its answer. */
export interface Pending {
  id: string;
  kind: "request" | "proposal";
  target: string;
  rpcId: number | undefined;
  progressToken: RpcId | undefined;
  callTimeoutMs: number;
  /** The caller gave `timeoutMs`: one deadline for the whole call, never re-armed. */
  explicit: boolean;
  timer: NodeJS.Timeout | undefined;
  /** Callbacks of this call being served here now (its target asks us something): its clock stands still. */
  held: number;
  proposed: boolean;
  /** The gateway acknowledged an approval of it (`mcp/approve`): kept across a reconnect until the next welcome says how it stands. */
  approved: boolean;
  resolve: (value: unknown) => void;
  reject: (error: ParticipantError) => void;
  schema: z.ZodType | undefined;
  onProposal: ((proposal: Envelope) => void) | undefined;
  onProgress: CallOptions["onProgress"];
  cleanup: (() => void) | undefined;
}

export interface CallsOptions {
  requestTimeoutMs: number;
  proposalTimeoutMs: number;
  /** The request being served in the current async context, if any: new calls join its chain. */
  servedHere: () => string | undefined;
}

/** My calls in flight on one client. */
export class Calls {
  private nextRpcId = 1;
  private readonly pending = new Map<string, Pending>();
  private readonly requestTimeoutMs: number;
  private readonly proposalTimeoutMs: number;
  private readonly servedHere: () => string | undefined;

  constructor(
    private readonly conn: Connection,
    opts: CallsOptions,
  ) {
    this.requestTimeoutMs = opts.requestTimeoutMs;
    this.proposalTimeoutMs = opts.proposalTimeoutMs;
    this.servedHere = opts.servedHere;
  }

  /** Sends an `mcp/request` and tracks it; see `ParticipantClient.request`. */
  request<S extends z.ZodType>(target: string, method: string, params: unknown, opts: TypedCallOptions<S>): PendingCall<z.output<S>>;
  request(target: string, method: string, params?: unknown, opts?: CallOptions): PendingCall<unknown>;
  request(target: string, method: string, params?: unknown, opts: CallOptions & { schema?: z.ZodType } = {}): PendingCall<unknown> {
    const rpcId = this.nextRpcId++;
    let p = params;
    const meta: Record<string, unknown> = {};
    if (opts.timeoutMs !== undefined) meta["mewgate/timeout_ms"] = opts.timeoutMs;
    let progressToken: RpcId | undefined;
    if (opts.onProgress) {
      const existing = isRecord(p) && isRecord(p["_meta"]) ? p["_meta"]["progressToken"] : undefined;
      progressToken = typeof existing === "string" || typeof existing === "number" ? existing : rpcId;
      meta["progressToken"] = progressToken;
    }
    if (Object.keys(meta).length > 0 && (p === undefined || isRecord(p))) {
      const base = (p ?? {}) as Record<string, unknown>;
      p = { ...base, _meta: { ...(isRecord(base["_meta"]) ? base["_meta"] : {}), ...meta } };
    }
    const payload = { jsonrpc: "2.0", id: rpcId, method, ...(p === undefined ? {} : { params: p }) };
    // The gateway may hold a tools/call it is asked to forward as a proposal and tells the
    // caller nothing until it is decided (it answers for sure: the call timeout or the
    // proposal's expiry), so the local safety net must outlast a human decision.
    const mayBeHeld = target === GATEWAY_ID && method === "tools/call";
    const callTimeoutMs = opts.timeoutMs ?? (mayBeHeld ? this.proposalTimeoutMs : this.requestTimeoutMs);
    return this.track(
      { kind: "request", target, rpcId, progressToken, callTimeoutMs, explicit: opts.timeoutMs !== undefined },
      { kind: "mcp/request", to: [target], payload, context: opts.context },
      opts,
    );
  }

  /** Sends an `mcp/proposal` and tracks it; see `ParticipantClient.propose`. */
  propose<S extends z.ZodType>(target: string, method: string, params: unknown, opts: TypedCallOptions<S>): PendingCall<z.output<S>>;
  propose(target: string, method: string, params?: unknown, opts?: CallOptions): PendingCall<unknown>;
  propose(target: string, method: string, params?: unknown, opts: CallOptions & { schema?: z.ZodType } = {}): PendingCall<unknown> {
    return this.track(
      {
        kind: "proposal",
        target,
        rpcId: undefined,
        progressToken: undefined,
        callTimeoutMs: opts.timeoutMs ?? this.proposalTimeoutMs,
        explicit: opts.timeoutMs !== undefined,
      },
      { kind: "mcp/proposal", to: [target], payload: { method, ...(params === undefined ? {} : { params }) }, context: opts.context },
      opts,
    );
  }

  /** Withdraws one of my proposals and fails its pending `propose()`; returns the envelope id. */
  withdraw(proposalId: string, reason?: string): string {
    const id = this.conn.send({ kind: "mcp/withdraw", correlation_id: [proposalId], payload: reason === undefined ? {} : { reason } });
    const p = this.pending.get(proposalId);
    if (p) this.fail(p, new ParticipantError("withdrawn", `proposal withdrawn${reason ? `: ${reason}` : ""}`, { reason }));
    return id;
  }

  /** Sends an `mcp/approve`; see `ParticipantClient.approve`. */
  approve(proposalId: string, opts: ApproveOptions = {}): string {
    const payload: Record<string, unknown> = { scope: opts.scope ?? "once" };
    if (opts.arguments !== undefined) payload["arguments"] = opts.arguments;
    if (opts.reason !== undefined) payload["reason"] = opts.reason;
    if (opts.limit !== undefined) payload["limit"] = opts.limit;
    return this.conn.send({ kind: "mcp/approve", correlation_id: [proposalId], payload });
  }

  /** Sends an `mcp/reject`; see `ParticipantClient.reject`. */
  reject(proposalId: string, reason: string, text?: string): string {
    return this.conn.send({
      kind: "mcp/reject",
      correlation_id: [proposalId],
      payload: text === undefined ? { reason } : { reason, text },
    });
  }

  // --- answers, from the dispatch ---------------------------------------------------------

  /** An `mcp/response`: settles the call it answers. */
  answered(env: Envelope): void {
    const p = this.pendingFor(env);
    if (!p) return;
    const parsed = parseMcpResponse(env.payload);
    if (!parsed.success) {
      this.fail(
        p,
        new ParticipantError("invalid_response", `"${env.from}" answered with something that is not JSON-RPC`, {
          envelope: env,
          data: env.payload,
        }),
      );
      return;
    }
    const { error, result } = parsed.data;
    if (error) {
      const reason = isRecord(error.data) && typeof error.data["reason"] === "string" ? error.data["reason"] : undefined;
      this.fail(
        p,
        new ParticipantError(reason ?? "rpc_error", error.message, { rpcCode: error.code, data: error.data, reason, envelope: env }),
      );
      return;
    }
    this.succeed(p, result, env);
  }

  /** An `mcp/proposal` with the id of a request of mine: the gateway holds it for approval. */
  proposed(env: Envelope): void {
    const p = this.pending.get(env.id);
    if (p && p.kind === "request") {
      // Our request is now held for approval: wait as long as a decision may take.
      p.proposed = true;
      if (!p.explicit) this.arm(p, this.proposalTimeoutMs);
      try {
        p.onProposal?.(env);
      } catch (err) {
        this.conn.log?.warn({ err }, "onProposal callback threw");
      }
    }
  }

  /** An `mcp/approve`: the call is now routed and the ordinary call timeout applies again. */
  approved(env: Envelope): void {
    const p = this.pendingFor(env);
    if (!p) return;
    p.approved = true;
    if (!p.explicit) this.arm(p, this.requestTimeoutMs);
  }

  /** Calls whose approval was acknowledged: a lost connection does not end them before the next welcome (`resumed`). */
  approvedIds(): Set<string> {
    return new Set([...this.pending.values()].filter((p) => p.approved).map((p) => p.id));
  }

  /**
   * The first welcome of a new connection: each approved call kept across the reconnect
   * ends as the welcome says. Listed as interrupted (the gateway stopped after the approval),
   * it fails with `interrupted`: it may or may not have run, and it waits for a person to
   * approve it again. Not listed, with the list `complete`, its outcome went to a connection
   * that is gone: it fails with `disconnected`. Otherwise (the list continues on another page)
   * it waits for the gateway's own `interrupted` answer, or its deadline.
   */
  resumed(listed: readonly Envelope[], complete: boolean): void {
    for (const p of [...this.pending.values()]) {
      if (!p.approved) continue;
      const env = listed.find((e) => e.id === p.id);
      const mark = env && isRecord(env.payload) ? env.payload["mewgate/interrupted"] : undefined;
      if (isRecord(mark)) {
        const message =
          typeof mark["message"] === "string" ? mark["message"] : "the gateway stopped after it was approved; it may or may not have run";
        this.fail(
          p,
          new ParticipantError("interrupted", `${message}; it waits for someone to approve it again or reject it`, {
            reason: "interrupted",
            data: mark,
            envelope: env,
          }),
        );
      } else if (complete) {
        this.fail(p, new ParticipantError("disconnected", "the connection closed after the call was approved; it may or may not have run"));
      }
    }
  }

  /** An `mcp/reject` (a person's, or the gateway's on expiry) fails the proposal it decides. */
  rejected(env: Envelope): void {
    const p = this.pendingFor(env);
    if (!p) return;
    const parsed = RejectPayloadSchema.safeParse(env.payload);
    const { reason, text } = parsed.success ? parsed.data : {};
    const expired = reason === "timeout";
    const by = env.from === GATEWAY_ID ? "the gateway" : `"${env.from}"`;
    const message = expired
      ? "the proposal expired before anyone decided"
      : `rejected by ${by}${reason ? `: ${reason}` : ""}${text ? ` (${text})` : ""}`;
    this.fail(p, new ParticipantError(expired ? "expired" : "rejected", message, { reason, text, envelope: env }));
  }

  /** An `mcp/withdraw` fails the proposal it withdraws. */
  withdrawn(env: Envelope): void {
    const p = this.pendingFor(env);
    if (!p) return;
    const parsed = WithdrawPayloadSchema.safeParse(env.payload);
    const reason = parsed.success ? parsed.data.reason : undefined;
    this.fail(p, new ParticipantError("withdrawn", `proposal withdrawn${reason ? `: ${reason}` : ""}`, { reason, envelope: env }));
  }

  /** A correlated `system/error` fails the call it names; false when it names none of mine. */
  failCorrelated(env: Envelope, error: ParticipantError): boolean {
    const p = this.pendingFor(env);
    if (!p) return false;
    this.fail(p, error);
    return true;
  }

  /** `notifications/progress` for one of my calls, by correlation or by progress token. */
  progress(env: Envelope, params: unknown): void {
    let p = this.pendingFor(env);
    if (!p && isRecord(params)) {
      const token = params["progressToken"];
      for (const q of this.pending.values()) {
        if (q.progressToken !== undefined && q.progressToken === token && (q.target === env.from || q.target === GATEWAY_ID)) p = q;
      }
    }
    if (!p?.onProgress || !isRecord(params)) return;
    try {
      p.onProgress(params);
    } catch (err) {
      this.conn.log?.warn({ err }, "progress callback threw");
    }
  }

  // --- held clocks and the end of a connection --------------------------------------------

  /**
   * Serving `env`, a callback of calls of mine (their target asks us something about
   * them): their clocks stand still until we answer. Returns the calls held.
   */
  hold(env: Envelope): Pending[] {
    const holds: Pending[] = [];
    for (const id of env.correlation_id ?? []) {
      const p = this.pending.get(id);
      // Through the gateway or straight to the target; either way only while we serve the callback.
      if (!p || (p.target !== env.from && p.target !== GATEWAY_ID)) continue;
      p.held++;
      clearTimeout(p.timer);
      holds.push(p);
    }
    return holds;
  }

  /** The callback that held `p` was answered or ended: its clock runs again. */
  release(p: Pending): void {
    p.held = Math.max(0, p.held - 1);
    if (this.pending.get(p.id) === p) this.arm(p, p.callTimeoutMs);
  }

  /** Fails every pending call with `disconnected`, except those in `keep`. */
  failAll(why: string, keep: ReadonlySet<string>): void {
    for (const p of [...this.pending.values()]) if (!keep.has(p.id)) this.fail(p, new ParticipantError("disconnected", why));
  }

  private track(
    init: Pick<Pending, "kind" | "target" | "rpcId" | "progressToken" | "callTimeoutMs" | "explicit">,
    envelope: OutboundEnvelope,
    opts: CallOptions & { schema?: z.ZodType },
  ): PendingCall<unknown> {
    const id = randomUUID();
    let pending!: Pending;
    const promise = new Promise<unknown>((resolve, reject) => {
      // Field by field: on Node 20 each property after a spread costs about a microsecond.
      pending = {
        kind: init.kind,
        target: init.target,
        rpcId: init.rpcId,
        progressToken: init.progressToken,
        callTimeoutMs: init.callTimeoutMs,
        explicit: init.explicit,
        id,
        timer: undefined,
        held: 0,
        proposed: init.kind === "proposal",
        approved: false,
        resolve,
        reject,
        schema: opts.schema,
        onProposal: opts.onProposal,
        onProgress: opts.onProgress,
        cleanup: undefined,
      };
    });
    const call = Object.assign(promise, { id }) as PendingCall<unknown>;
    if (opts.signal?.aborted) {
      pending.reject(new ParticipantError("cancelled", "aborted before it was sent", { cause: opts.signal.reason }));
      return call;
    }
    try {
      this.conn.send({
        kind: envelope.kind,
        to: envelope.to,
        payload: envelope.payload,
        context: envelope.context,
        id,
        correlation_id: this.correlation(opts),
      });
    } catch (err) {
      pending.reject(err instanceof ParticipantError ? err : new ParticipantError("disconnected", (err as Error).message, { cause: err }));
      return call;
    }
    this.pending.set(id, pending);
    this.arm(pending, pending.callTimeoutMs);
    if (opts.signal) {
      const signal = opts.signal;
      const onAbort = () => {
        this.stop(pending, "cancelled");
        this.fail(pending, new ParticipantError("cancelled", "the caller aborted the call", { cause: signal.reason }));
      };
      signal.addEventListener("abort", onAbort, { once: true });
      pending.cleanup = () => signal.removeEventListener("abort", onAbort);
    }
    return call;
  }

  /** `correlation_id` for a new call: the request being served in this async context (the chain), plus any given. */
  private correlation(opts: CallOptions): string[] | undefined {
    const ids = [...(opts.correlationId ?? [])];
    if (opts.chain !== false) {
      const served = this.servedHere();
      if (served !== undefined && !ids.includes(served)) ids.unshift(served);
    }
    return ids.length > 0 ? ids : undefined;
  }

  private arm(p: Pending, ms: number): void {
    clearTimeout(p.timer);
    if (p.held > 0) return;
    p.timer = setTimeout(() => {
      if (this.pending.get(p.id) !== p) return;
      this.stop(p, "timeout");
      this.fail(p, new ParticipantError("timeout", `no answer from "${p.target}" within ${ms} ms`));
    }, ms);
  }

  /** Tells the other side we stopped waiting (best effort): cancel a request, withdraw a proposal. */
  private stop(p: Pending, reason: string): void {
    if (!this.conn.welcomed) return;
    try {
      if (p.proposed) {
        this.conn.send({ kind: "mcp/withdraw", correlation_id: [p.id], payload: { reason } });
      } else if (p.rpcId !== undefined) {
        this.conn.notify(p.target, "notifications/cancelled", { requestId: p.rpcId, reason }, { correlationId: [p.id] });
      }
    } catch (err) {
      this.conn.log?.debug({ err: (err as Error).message }, "could not tell the target we stopped waiting");
    }
  }

  private settle(p: Pending): boolean {
    if (this.pending.get(p.id) !== p) return false;
    this.pending.delete(p.id);
    clearTimeout(p.timer);
    p.cleanup?.();
    return true;
  }

  private fail(p: Pending, error: ParticipantError): void {
    if (this.settle(p)) p.reject(error);
  }

  private succeed(p: Pending, result: unknown, env: Envelope): void {
    if (!p.schema) {
      if (this.settle(p)) p.resolve(result);
      return;
    }
    const parsed = p.schema.safeParse(result);
    if (parsed.success) {
      if (this.settle(p)) p.resolve(parsed.data);
    } else {
      this.fail(
        p,
        new ParticipantError(
          "invalid_response",
          `the result of "${p.target}" does not have the expected shape: ${parsed.error.issues[0]?.message ?? "invalid"}`,
          { envelope: env, data: result },
        ),
      );
    }
  }

  /** The pending call an envelope answers: the first of its `correlation_id`s that is one of ours. */
  private pendingFor(env: Envelope): Pending | undefined {
    for (const id of env.correlation_id ?? []) {
      const p = this.pending.get(id);
      if (p) return p;
    }
    return undefined;
  }
}
