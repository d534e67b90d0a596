/**
 * In-flight MCP requests routed by the gateway: timeouts, call chains, circuit breakers.
 *
 * Every request with a JSON-RPC id is tracked here from routing until its response, keyed
 * by envelope id, with its timer. The router (calls/router.ts) asks `refuse` before
 * routing, `open`s the call, and `close`s it when a response arrives; a departing
 * participant settles all of its own at once (`involving`).
 */
import type { CallTrace } from "../ports/tracing.js";

/** Who a fulfilled proposal's answer also goes to (Call.fulfiller). */
export interface Fulfilment {
  id: string;
  envelopeId: string;
  proposer: string;
  proposerRpcId: string | number;
}

/**
 * How a routed call ended, as the router reports it once per call: answered by its target
 * (the response's payload), or failed with the gateway's reason and message (a timeout, the
 * target left, a cancellation). proposals/runs-ended.ts moves the proposal a call carries.
 */
export type CallEnd =
  | { how: "answered"; response: { result?: unknown; error?: unknown } }
  | { how: "failed"; reason: string; message: string };

export interface CallLimits {
  timeout_ms: number;
  max_timeout_ms: number;
  max_call_depth: number;
  max_pending: number;
  breaker_failures: number;
  breaker_cooldown_ms: number;
}

export interface Call {
  /** Envelope id of the routed request; responses correlate to it. */
  id: string;
  caller: string;
  target: string;
  rpcId: string | number;
  method: string;
  /** For a tools/call: the tool's name at its target, which the guards on its result go by (policy/guards.ts). */
  tool?: string | undefined;
  /** Participants waiting on this call, root caller first, this call's caller last. */
  chain: string[];
  /** The call its caller was serving when it made this one: cancelling that one cancels this. */
  parent?: string | undefined;
  timer: NodeJS.Timeout;
  /** Set when the call carries out an approved proposal. */
  proposalId?: string | undefined;
  /**
   * Set when the caller sent the request without an envelope id (a JSON-RPC id only): `id` is
   * then one the gateway made up, which the caller never saw, so the gateway's own answers to
   * it correlate by JSON-RPC id alone.
   */
  anonymous?: true | undefined;
  /**
   * A MEW fulfilment (spec §3.2.1): the fulfiller made this call, `id` is its envelope's and
   * `rpcId` its JSON-RPC id, so the target answers it as any request. The proposer, whose
   * proposal it carries out, gets its own copy of the answer under `proposerRpcId`.
   */
  fulfiller?: Fulfilment | undefined;
  /** For the gateway's own requests (tools/list): the response goes here, not to a participant. */
  internal?: ((response: { result?: unknown; error?: unknown } | undefined, reason?: string) => void) | undefined;
  /** Whether this call is the one probe let through a half-open breaker. */
  probe: boolean;
  openedAt: number;
  /** Kept for requests a person may answer from the web console (calls.ts `CALLBACK_METHODS`), which lists them. */
  params?: Record<string, unknown> | undefined;
  /** How long it may wait for its response, counted afresh whenever a callback it waits on ends. */
  timeoutMs: number;
  /** Set when this is a callback: a request from the target of that call back to its caller (sampling, elicitation, roots). */
  callbackFor?: string | undefined;
  /** Callbacks outstanding on this call or a call it waits on: its timer stands still meanwhile. */
  held: number;
  /** Callbacks this call has had so far, bounded by `MAX_CALLBACKS_PER_CALL`. */
  callbacks: number;
  /** Its span, when the space exports traces (ports/tracing.ts). */
  trace?: CallTrace | undefined;
}

/**
 * MCP requests a server may send its client while serving the client's request. Sent back
 * to the caller of a call being served (correlated to it), they are callbacks, not new
 * calls: the caller opened the door by calling.
 */
export const CALLBACK_METHODS: ReadonlySet<string> = new Set(["sampling/createMessage", "elicitation/create", "roots/list", "ping"]);
/** Most callbacks one call may make in its life: a server cannot keep its caller's model or human busy forever. */
export const MAX_CALLBACKS_PER_CALL = 64;

export type Refusal = { code: "cycle_detected" | "depth_exceeded" | "circuit_open" | "too_many_pending"; message: string };

/**
 * A target's circuit breaker. Closed while it has no entry; open from `openUntil` on for
 * the cool-down; half-open after it, when the next call is let through as the trial.
 */
interface Breaker {
  failures: number;
  openUntil: number;
  /**
   * The id of the trial call out now, if one is. Set by `open`, cleared by `close` however
   * that call ends (answered, failed, timed out, cancelled, its caller or target gone, the
   * gateway aborting it): `close` is the one way a call leaves `pending`, so a trial cannot
   * end without clearing it. An id rather than a flag, so that another call ending cannot clear it.
   */
  trial: string | undefined;
}

export class Calls {
  private readonly pending = new Map<string, Call>();
  private readonly perCaller = new Map<string, number>();
  private readonly breakers = new Map<string, Breaker>();

  /** Told of every call that ends, however it ends (conversations.ts pops what it held). */
  private readonly ended: Array<(call: Call) => void> = [];
  /** Told of a call whose time ran out, once it stopped being pending (router.ts answers it). */
  private readonly timedOut: Array<(call: Call) => void> = [];

  constructor(private readonly limits: CallLimits) {}

  /** `listener` hears of every call that ends, however it ends, once it stopped being pending. */
  onEnd(listener: (call: Call) => void): void {
    this.ended.push(listener);
  }

  /** `listener` hears of every call whose time ran out, once it stopped being pending. */
  onTimeout(listener: (call: Call) => void): void {
    this.timedOut.push(listener);
  }

  /** Stops a pending call's clock (and those of the calls it serves) until `resume`: something else bounds it meanwhile. */
  suspend(call: Call): void {
    if (this.pending.get(call.id) === call) this.hold(call, +1);
  }

  resume(call: Call): void {
    if (this.pending.get(call.id) === call) this.hold(call, -1);
  }

  get(id: string): Call | undefined {
    return this.pending.get(id);
  }

  get size(): number {
    return this.pending.size;
  }

  /** Every call pending now. */
  all(): IterableIterator<Call> {
    return this.pending.values();
  }

  /**
   * The chain a new request from `sender` joins: if its correlation_id names a call that
   * `sender` is serving, that call's chain plus `sender`; otherwise just `[sender]`.
   */
  chainFor(sender: string, correlation: readonly string[] | undefined): string[] {
    const serving = this.serving(sender, correlation);
    return serving ? [...serving.chain, sender] : [sender];
  }

  /** The call `sender` is serving that `correlation` names, if any: the parent of a new request. */
  serving(sender: string, correlation: readonly string[] | undefined): Call | undefined {
    for (const id of correlation ?? []) {
      const call = this.pending.get(id);
      if (call && call.target === sender) return call;
    }
    return undefined;
  }

  /**
   * The call a request from `sender` to `target` is a callback of: a pending call named in
   * `correlation` that `sender` is serving for `target`.
   */
  callbackOf(sender: string, target: string, correlation: readonly string[] | undefined): Call | undefined {
    for (const id of correlation ?? []) {
      const call = this.pending.get(id);
      if (call && call.target === sender && call.caller === target) return call;
    }
    return undefined;
  }

  /** Calls waiting on `target` to answer. */
  toTarget(target: string): Call[] {
    return [...this.pending.values()].filter((c) => c.target === target);
  }

  /** Calls made while serving `parent`. */
  children(parent: string): Call[] {
    const out: Call[] = [];
    for (const c of this.pending.values()) if (c.parent === parent) out.push(c);
    return out;
  }

  /** `caller`'s pending calls that a cancellation names: by envelope id in `correlation`, or by JSON-RPC `requestId`. */
  ofCaller(caller: string, correlation: readonly string[] | undefined, requestId: unknown): Call[] {
    const out = new Set<Call>();
    for (const id of correlation ?? []) {
      const call = this.pending.get(id);
      if (call?.caller === caller) out.add(call);
    }
    if (typeof requestId === "string" || typeof requestId === "number") {
      for (const c of this.pending.values()) if (c.caller === caller && c.rpcId === requestId) out.add(c);
    }
    return [...out];
  }

  /** Checks that run before a call is routed. `undefined` means go ahead. */
  refuse(caller: string, target: string, chain: readonly string[], callback?: Call): Refusal | undefined {
    if (callback) {
      // Back along the chain by design, so neither a cycle nor deeper; only bounded.
      if (callback.callbacks >= MAX_CALLBACKS_PER_CALL) {
        return {
          code: "too_many_pending",
          message: `call "${callback.id}" already made ${MAX_CALLBACKS_PER_CALL} requests back to its caller`,
        };
      }
    } else if (chain.includes(target)) {
      return { code: "cycle_detected", message: `call cycle: ${[...chain, target].join(" → ")}` };
    }
    if (!callback && chain.length > this.limits.max_call_depth) {
      return {
        code: "depth_exceeded",
        message: `call chain ${[...chain, target].join(" → ")} is deeper than ${this.limits.max_call_depth}`,
      };
    }
    if ((this.perCaller.get(caller) ?? 0) >= this.limits.max_pending) {
      return { code: "too_many_pending", message: `${this.limits.max_pending} calls already pending; wait for some to finish` };
    }
    const b = this.breakers.get(target);
    if (b && b.openUntil > 0) {
      const waitMs = b.openUntil - Date.now();
      if (waitMs > 0 || b.trial !== undefined) {
        const after = Math.max(0, Math.ceil(waitMs / 1000));
        return {
          code: "circuit_open",
          message: `"${target}" failed ${b.failures} times in a row; calls fail fast${b.trial !== undefined ? " while a probe call is out" : ` for ${after}s more`}`,
        };
      }
    }
    return undefined;
  }

  /** The timeout a caller gets: its own wish within [1 ms, max], else the space default. */
  timeoutFor(requested: unknown): number {
    if (typeof requested !== "number" || !Number.isFinite(requested) || requested <= 0) return this.limits.timeout_ms;
    return Math.min(Math.floor(requested), this.limits.max_timeout_ms);
  }

  open(call: Omit<Call, "timer" | "probe" | "timeoutMs" | "held" | "callbacks" | "openedAt">, timeoutMs: number): Call {
    const b = this.breakers.get(call.target);
    // The first call after the cool-down is the trial; the gateway's own requests (tools/list)
    // skip `refuse`, so one made while a trial is out is not a second trial.
    const probe = b !== undefined && b.openUntil > 0 && b.openUntil <= Date.now() && b.trial === undefined;
    if (probe) b!.trial = call.id;
    // Field by field, not `{ ...call, more }`: V8 (Node 20) takes a slow path for every
    // property added after a spread, about a microsecond each, and this runs for every call.
    // `satisfies` makes a field added to Call a compile error here until it is copied.
    const tracked = {
      id: call.id,
      caller: call.caller,
      target: call.target,
      rpcId: call.rpcId,
      method: call.method,
      tool: call.tool,
      chain: call.chain,
      parent: call.parent,
      timer: undefined as unknown as NodeJS.Timeout,
      proposalId: call.proposalId,
      anonymous: call.anonymous,
      fulfiller: call.fulfiller,
      internal: call.internal,
      probe,
      openedAt: Date.now(),
      params: call.params,
      timeoutMs,
      callbackFor: call.callbackFor,
      held: 0,
      callbacks: 0,
      trace: call.trace,
    } satisfies Record<keyof Call, unknown> as Call;
    this.arm(tracked);
    this.pending.set(call.id, tracked);
    this.perCaller.set(call.caller, (this.perCaller.get(call.caller) ?? 0) + 1);
    // A call waiting on its caller (a human filling a form) is not late: it and every call
    // waiting on it stand still until the callback ends.
    const served = call.callbackFor === undefined ? undefined : this.pending.get(call.callbackFor);
    if (served) {
      served.callbacks++;
      this.hold(served, +1);
    }
    return tracked;
  }

  private arm(call: Call): void {
    clearTimeout(call.timer);
    call.timer = setTimeout(() => {
      if (!this.pending.has(call.id)) return;
      this.close(call, false);
      for (const listener of this.timedOut) listener(call);
    }, call.timeoutMs);
    call.timer.unref();
  }

  /** Stops (`+1`) or restarts (`-1`, when nothing holds it any more) the timers of `call` and the calls it serves. */
  private hold(call: Call, delta: 1 | -1): void {
    // Bounded: parents are distinct pending calls, at most max_call_depth of them.
    for (
      let c: Call | undefined = call, n = 0;
      c && n <= this.limits.max_call_depth + 1;
      c = c.parent ? this.pending.get(c.parent) : undefined, n++
    ) {
      c.held = Math.max(0, c.held + delta);
      if (c.held > 0) clearTimeout(c.timer);
      else this.arm(c);
    }
  }

  /**
   * A response arrived, or the call ended otherwise: the one place a call stops being
   * pending, so the one place its target's breaker is settled. `ok` is what the call says
   * of its target: true (answered), false (an error answer, a timeout, the target left), or
   * `undefined` when it ended for reasons not the target's (its caller cancelled or left, the
   * gateway aborted it), which counts neither way.
   */
  close(call: Call, ok: boolean | undefined): void {
    if (!this.pending.delete(call.id)) return;
    clearTimeout(call.timer);
    const served = call.callbackFor === undefined ? undefined : this.pending.get(call.callbackFor);
    if (served) this.hold(served, -1);
    for (const listener of this.ended) listener(call);
    const n = (this.perCaller.get(call.caller) ?? 1) - 1;
    if (n > 0) this.perCaller.set(call.caller, n);
    else this.perCaller.delete(call.caller);
    this.settle(call, ok);
  }

  /** Every call pending on `target` (it left) or made by `caller` (it left). */
  involving(participant: string): { onTarget: Call[]; byCaller: Call[] } {
    const onTarget: Call[] = [];
    const byCaller: Call[] = [];
    for (const c of this.pending.values()) {
      if (c.target === participant) onTarget.push(c);
      else if (c.caller === participant) byCaller.push(c);
    }
    return { onTarget, byCaller };
  }

  clear(): void {
    for (const c of this.pending.values()) clearTimeout(c.timer);
    this.pending.clear();
    this.perCaller.clear();
    // No call is out any more, so no trial is either.
    for (const b of this.breakers.values()) b.trial = undefined;
  }

  /** Feeds the end of `call` to its target's breaker (see `close`). */
  private settle(call: Call, ok: boolean | undefined): void {
    let b = this.breakers.get(call.target);
    if (b?.trial === call.id) b.trial = undefined;
    // A trial that ended without a word from its target (cancelled by its caller, its caller
    // gone, aborted by the gateway) proved nothing either way: it is not a success, which
    // would close the breaker on a target that may still be down, nor a failure of the
    // target, which would hold a cool-down against it for someone else's cancellation.
    // The breaker stays half-open, so the next call is let through as the trial.
    if (ok === undefined) return;
    if (ok) {
      if (b) this.breakers.delete(call.target);
      return;
    }
    if (!b) {
      b = { failures: 0, openUntil: 0, trial: undefined };
      this.breakers.set(call.target, b);
    }
    b.failures++;
    // A failed trial opens the breaker again; so do enough failures in a row.
    if (call.probe || b.failures >= this.limits.breaker_failures) b.openUntil = Date.now() + this.limits.breaker_cooldown_ms;
  }
}
