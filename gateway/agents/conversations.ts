/**
 * Who holds a person's conversation: interactive delegation (after Ash's stack model).
 *
 * An agent asked to work on something for a person may take the conversation over: the
 * person then talks to it directly until it answers the call it was asked with, and the
 * answer goes back to the caller as the call's result. Takeovers nest — main → planner →
 * researcher — so each person has a stack of frames; the person's messages are for the
 * top one (agents read the stack from `space/conversation` and the welcome).
 *
 * A frame is tied to the call that asked for it: it is pushed by `space/takeover
 * {human, call}` from that call's target, and it is popped — with every frame above it —
 * when that call ends in any way (answered, failed, cancelled, its target or caller gone).
 * While a frame is on the stack the call's own clock stands still; instead the top frame
 * has an idle clock (`calls.takeover_idle_ms`), restarted by every chat between the person
 * and the holder, and when it runs out the whole stack unwinds. So does the person saying
 * "cancel" or "stop". Every push and pop is logged and announced.
 *
 * Frames are durable (the state store): a push is written before it is announced, a pop
 * noted. After a gateway restart the stacks come back with their calls, so the holder's
 * answer still reaches the caller once both have reconnected (the participant SDK keeps a
 * call held in a conversation across a reconnect).
 *
 * Who may take over: the agent's `agent.takeover` lists the people it may hold (or "*");
 * the call must come from the top of that person's stack, or — when nobody holds it yet —
 * from the person or the agent the person is talking with (the last to chat to them).
 */
import type { Logger } from "pino";
import type { Call, Calls } from "../calls/calls.js";
import type { SpaceConfig } from "../config/config.js";
import { type Envelope, ErrorCodes, type ErrorCode, type InboundEnvelope, systemEnvelope } from "../wire/envelope.js";
import { clip } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import type { Plan } from "../store/plan.js";

export interface Frame {
  agent: string;
  caller: string;
  call: string;
  since: string;
}

/** What the store keeps of a frame: enough to open its call again after a restart. */
export type FrameRecord =
  | ({ type: "frame"; human: string; rpcId: string | number; method: string; chain: string[] } & Frame)
  | { type: "unframe"; human: string; call: string };

export interface ConversationHost {
  readonly config: SpaceConfig;
  readonly log: Logger;
  /** The space's call table, built before the store is read. */
  readonly calls: Calls;
  record(...plans: Plan[]): Promise<void>;
  note(plan: Plan): void;
  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void;
  deliver(env: Envelope, sender?: Member, toEveryone?: boolean): void;
  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void;
}

const STOP_WORDS = new Set(["cancel", "stop"]);

export class Conversations {
  /**
   * Told when an unwound stack's bottom call must end: failed to its caller, cancelled at its
   * target and down its chain. The router, built after this (it asks `holds`), subscribes.
   */
  readonly aborting = new Set<(call: Call, reason: string, message: string) => void>();
  private readonly stacks = new Map<string, Frame[]>();
  private readonly idle = new Map<string, NodeJS.Timeout>();
  /** The agents each person is talking with: those they last addressed (or the primary, for a message to nobody), and whoever answered that message. */
  private readonly partners = new Map<string, Set<string>>();
  /** Each person's last message: only a reply to it makes its sender someone they talk with. */
  private readonly lastMessage = new Map<string, string>();

  /** The space's primary agent, if it has one: fixed by space.yaml, so looked up once, not per message. */
  private readonly primary: string | undefined;

  constructor(private readonly host: ConversationHost) {
    this.primary = Object.values(host.config.participants).find((p) => p.agent?.primary)?.id;
    host.calls.onEnd((call) => this.callEnded(call));
  }

  /** Restored frames' calls, to open once the router exists. */
  private restored: Extract<FrameRecord, { type: "frame" }>[] = [];

  /** Every person's stack that is not empty, for the welcome. */
  view(): Array<{ human: string; holder: string; stack: Array<Frame & { rpc_id?: string | number }> }> {
    return [...this.stacks].map(([human, frames]) => ({
      human,
      holder: frames[frames.length - 1]!.agent,
      stack: frames.map((f) => this.describe(f)),
    }));
  }

  /** A frame as announced: with its call's JSON-RPC id, so a holder that restarted can answer it. */
  private describe(f: Frame): Frame & { rpc_id?: string | number } {
    const rpcId = this.host.calls.get(f.call)?.rpcId;
    return { ...f, ...(rpcId === undefined ? {} : { rpc_id: rpcId }) };
  }

  /** Folds a stored record in, on start. */
  apply(r: FrameRecord): void {
    if (r.type === "frame") {
      const frames = this.stacks.get(r.human) ?? [];
      this.stacks.set(r.human, [...frames, { agent: r.agent, caller: r.caller, call: r.call, since: r.since }]);
      this.restored.push(r);
    } else {
      this.drop(r.human, r.call);
      this.restored = this.restored.filter((f) => f.call !== r.call);
    }
  }

  snapshot(): FrameRecord[] {
    const calls = new Map(this.restored.map((r) => [r.call, r]));
    const out: FrameRecord[] = [];
    for (const [human, frames] of this.stacks) {
      for (const f of frames) {
        const live = this.host.calls.get(f.call);
        const was = calls.get(f.call);
        const rpcId = live?.rpcId ?? was?.rpcId;
        if (rpcId === undefined) continue;
        out.push({
          type: "frame",
          human,
          ...f,
          rpcId,
          method: live?.method ?? was?.method ?? "tools/call",
          chain: live?.chain ?? was?.chain ?? [f.caller],
        });
      }
    }
    return out;
  }

  /**
   * After a restart: the restored frames' calls are pending again (their clocks held, as
   * before), and every stack gets a fresh idle clock.
   */
  resume(): void {
    const byCall = new Map<string, string>();
    for (const r of this.restored) {
      const parent = byCall.get(r.caller);
      const call = this.host.calls.open(
        { id: r.call, caller: r.caller, target: r.agent, rpcId: r.rpcId, method: r.method, chain: r.chain, parent },
        this.host.config.calls.timeout_ms,
      );
      this.host.calls.suspend(call);
      byCall.set(r.agent, r.call);
    }
    if (this.restored.length) this.host.log.info({ frames: this.restored.length }, "conversations restored");
    this.restored = [];
    for (const human of this.stacks.keys()) this.touch(human);
  }

  /** Whether `callId` is the call of some frame. */
  holds(callId: string): boolean {
    for (const frames of this.stacks.values()) if (frames.some((f) => f.call === callId)) return true;
    return false;
  }

  holder(human: string): string | undefined {
    const frames = this.stacks.get(human);
    return frames?.[frames.length - 1]?.agent;
  }

  /** A chat passing through: who is talking with whom, idle clocks, and "stop". */
  onChat(member: Member, env: Envelope): void {
    const to = env.to ?? [];
    if (member.config.kind === "agent") {
      // Chatting at someone is not talking with them: answering their last message is.
      for (const human of to) {
        const last = this.lastMessage.get(human);
        if (last !== undefined && env.correlation_id?.includes(last)) this.partners.get(human)?.add(member.id);
      }
    } else if (member.config.kind === "human") {
      const agents = to.filter((id) => this.host.config.participants[id]?.kind === "agent");
      this.partners.set(member.id, new Set(to.length ? agents : this.primary ? [this.primary] : []));
      if (env.id !== undefined) this.lastMessage.set(member.id, env.id);
    }
    const frames = member.config.kind === "human" ? this.stacks.get(member.id) : undefined;
    if (frames) {
      const text =
        typeof (env.payload as Record<string, unknown> | undefined)?.["text"] === "string"
          ? ((env.payload as Record<string, unknown>)["text"] as string)
          : "";
      if (STOP_WORDS.has(text.trim().toLowerCase())) return this.unwind(member.id, "stopped", `${member.id} said "${clip(text.trim())}"`);
      this.touch(member.id);
      return;
    }
    // The holder talking to the person keeps the conversation alive too.
    for (const human of to) if (this.holder(human) === member.id) this.touch(human);
  }

  /** `space/takeover {human, call}` from the target of `call`. */
  async onTakeover(member: Member, inbound: InboundEnvelope): Promise<void> {
    const payload = (inbound.payload ?? {}) as Record<string, unknown>;
    const human = payload["human"];
    const callId = payload["call"];
    const refuse = (message: string, code: ErrorCode = ErrorCodes.invalidPayload) =>
      this.host.fail(member, code, `space/takeover: ${message}`, inbound.id);
    if (typeof human !== "string" || this.host.config.participants[human]?.kind !== "human")
      return refuse(`"${clip(String(human))}" is not a person of this space`, ErrorCodes.unknownRecipient);
    const call = typeof callId === "string" ? this.host.calls.get(callId) : undefined;
    if (!call || call.target !== member.id) return refuse("name a pending call you are serving (payload.call)", ErrorCodes.noPendingCall);
    const allowed = this.host.config.participants[member.id]?.agent?.takeover ?? [];
    if (!allowed.includes(human) && !allowed.includes("*"))
      return refuse(`${member.id} may not take over ${human}'s conversation (agent.takeover in space.yaml)`, ErrorCodes.denied);
    const frames = this.stacks.get(human) ?? [];
    const top = frames[frames.length - 1];
    if (top ? call.caller !== top.agent : call.caller !== human && !this.partners.get(human)?.has(call.caller)) {
      return refuse(
        `only ${top ? top.agent : `${human} or the agent ${human} is talking with`} can hand ${human}'s conversation on`,
        ErrorCodes.denied,
      );
    }
    if (frames.some((f) => f.agent === member.id))
      return refuse(`${member.id} already holds a place in ${human}'s conversation`, ErrorCodes.cycleDetected);
    if (frames.length >= this.host.config.calls.max_call_depth)
      return refuse(`${human}'s conversation is already ${frames.length} deep`, ErrorCodes.depthExceeded);
    const frame: Frame = { agent: member.id, caller: call.caller, call: call.id, since: new Date().toISOString() };
    // Durable before anyone hears of it.
    const record: FrameRecord = { type: "frame", human, ...frame, rpcId: call.rpcId, method: call.method, chain: call.chain };
    try {
      await this.host.record({ records: [record], apply: () => this.stacks.set(human, [...(this.stacks.get(human) ?? []), frame]) });
    } catch (err) {
      return this.host.storeFailed(member, err, inbound.id, "the takeover was not recorded");
    }
    // The call may have ended while the frame was written: then there is nothing to hold.
    if (this.host.calls.get(call.id) !== call) return void this.drop(human, call.id);
    this.host.calls.suspend(call);
    this.host.log.info({ human, agent: member.id, caller: call.caller, depth: frames.length + 1 }, "conversation taken over");
    this.announce(human, `${member.id} took over from ${call.caller}`, inbound.id);
    this.touch(human);
  }

  /** A call ended: the frame it held, and every frame above it, are popped. */
  callEnded(call: Call): void {
    for (const [human, frames] of this.stacks) {
      if (!frames.some((f) => f.call === call.id)) continue;
      const popped = this.drop(human, call.id);
      const unframe: FrameRecord = { type: "unframe", human, call: call.id };
      this.host.note({ records: [unframe], apply: () => {} });
      const rest = this.stacks.get(human) ?? [];
      this.host.log.info({ human, popped: popped.map((f) => f.agent), depth: rest.length }, "conversation handed back");
      this.announce(human, `${popped[0]!.agent} handed back to ${popped[0]!.caller}`);
      if (rest.length) this.touch(human);
      else this.clearIdle(human);
    }
  }

  /** Takes the frame of `call` and every frame above it off `human`'s stack; returns them. */
  private drop(human: string, call: string): Frame[] {
    const frames = this.stacks.get(human) ?? [];
    const i = frames.findIndex((f) => f.call === call);
    if (i < 0) return [];
    const rest = frames.slice(0, i);
    if (rest.length) this.stacks.set(human, rest);
    else this.stacks.delete(human);
    return frames.slice(i);
  }

  /** Ends every frame of a person's stack: the bottom call is aborted, the rest go with it. */
  unwind(human: string, reason: string, message: string): void {
    const bottom = this.stacks.get(human)?.[0];
    const call = bottom ? this.host.calls.get(bottom.call) : undefined;
    this.host.log.info({ human, reason }, "conversation unwound");
    if (call) for (const abort of this.aborting) abort(call, reason, `the conversation with ${human} was unwound: ${message}`);
    // A call already gone leaves its frames to be cleaned here.
    if (this.stacks.has(human)) {
      this.stacks.delete(human);
      this.clearIdle(human);
      this.announce(human, message);
    }
  }

  close(): void {
    for (const t of this.idle.values()) clearTimeout(t);
    this.idle.clear();
  }

  private touch(human: string): void {
    this.clearIdle(human);
    const ms = this.host.config.calls.takeover_idle_ms;
    const t = setTimeout(() => this.unwind(human, "idle", `nobody spoke for ${Math.round(ms / 1000)} s`), ms);
    t.unref();
    this.idle.set(human, t);
  }

  private clearIdle(human: string): void {
    clearTimeout(this.idle.get(human));
    this.idle.delete(human);
  }

  private announce(human: string, what: string, correlation?: string): void {
    const frames = this.stacks.get(human) ?? [];
    const payload = { human, holder: frames[frames.length - 1]?.agent ?? null, stack: frames.map((f) => this.describe(f)), event: what };
    this.host.deliver(systemEnvelope("space/conversation", payload, correlation ? { correlation_id: [correlation] } : {}), undefined, true);
  }
}
