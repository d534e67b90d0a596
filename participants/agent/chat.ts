/**
 * The agent's chat side: the one chat conversation, kept within `context_tokens`; every
 * chat it can see added as context; the triggers (triggers.ts) queued and answered one turn
 * at a time, with the reply sent to the sender. The rules are in participant.ts's opening
 * comment.
 *
 * participant.ts routes the chats here and drives pause, restart and
 * stop through the few methods at the end; what it needs of the agent comes as `ChatHost`.
 */
import type { Logger } from "pino";
import type { AgentConfig } from "../../gateway/index.js";
import type { Envelope } from "../../gateway/index.js";
import type { OutboundEnvelope, ParticipantClient } from "../client.js";
import { addUsage, emptySpend, roundCost, type Spend } from "./contract.js";
import { Conversation } from "./context.js";
import type { ProviderHealth } from "./health.js";
import { runTurn, type CallTool, type TurnContext, type TurnResult } from "./loop.js";
import type { Message, ModelOptions, Provider } from "./providers/types.js";
import type { Reasoning } from "./reasoning.js";
import type { Inbox } from "./takeover.js";
import { HopTracker, mentioned, mentionPattern } from "./triggers.js";
import { isRecord } from "../../gateway/index.js";

const MAX_QUEUE = 16;

/** What the chat side needs of the agent. */
export interface ChatHost {
  readonly id: string;
  readonly config: AgentConfig;
  readonly client: ParticipantClient;
  readonly provider: Provider;
  readonly modelOptions: Omit<ModelOptions, "signal">;
  readonly log: Logger | undefined;
  /** Most chats in a row between machines before the agent stops answering. */
  readonly maxHops: number;
  readonly stopped: boolean;
  readonly paused: boolean;
  readonly health: ProviderHealth;
  /** Who holds a person's conversation (takeover.ts). */
  holder(human: string): string | undefined;
  /** The inbox of a person whose conversation this agent holds (serve.ts). */
  inbox(human: string): Inbox | undefined;
  budget(): number;
  toolsReady(): Promise<void>;
  turnContext(): TurnContext;
  callTool(deadline?: number, spend?: Spend, announce?: (text: string) => void, human?: string): CallTool;
  startReasoning(correlation: string, message: string): Reasoning | undefined;
  send(env: OutboundEnvelope): string | undefined;
}

interface Trigger {
  env: Envelope;
  text: string;
  hops: number;
}

function plural(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? "" : "s"}`;
}

export class ChatTurns {
  private readonly mention: RegExp;
  // The chat conversation and what waits for it.
  private conv: Conversation;
  private readonly pendingContext: Message[] = [];
  private queue: Trigger[] = [];
  private turnRunning = false;
  private chatAbort: AbortController | undefined;
  private readonly hops = new HopTracker();
  /** Turns started by non-human chats since the last human chat. */
  private machineStreak = 0;
  private seeded = false;

  constructor(private readonly host: ChatHost) {
    this.conv = new Conversation({ budgetTokens: host.budget() });
    this.mention = mentionPattern(host.id);
  }

  /** The chat conversation (replaced by `reset`). */
  get conversation(): Conversation {
    return this.conv;
  }

  /** A turn is running. */
  get running(): boolean {
    return this.turnRunning;
  }

  /** Triggers waiting for the current turn to end. */
  get queued(): number {
    return this.queue.length;
  }

  /** The first welcome's chat history becomes the conversation's start. */
  seed(history: readonly Envelope[]): void {
    if (!this.seeded) {
      this.seeded = true;
      for (const env of history) if (env.kind === "chat") this.observeHistory(env);
    }
  }

  private isHuman(id: string): boolean {
    return this.host.client.participants.get(id)?.kind === "human";
  }

  onChat(env: Envelope): void {
    const text = isRecord(env.payload) && typeof env.payload["text"] === "string" ? env.payload["text"] : undefined;
    if (text === undefined || text.trim() === "") return;
    const human = this.isHuman(env.from);
    if (human) this.machineStreak = 0;
    const hops = this.hops.observe(env, human);
    // A person whose conversation someone holds talks to the holder (takeover.ts).
    const holder = human ? this.host.holder(env.from) : undefined;
    const inbox = holder === this.host.id ? this.host.inbox(env.from) : undefined;
    if (inbox && (env.to === undefined || env.to.length === 0 || env.to.includes(this.host.id))) return inbox.push(text);
    if (holder !== undefined && holder !== this.host.id && !env.to?.includes(this.host.id) && !this.mention.test(text))
      return this.addContext(env, text);
    if (!this.isTrigger(env, text, human)) return this.addContext(env, text);

    const refuse = (why: string) => {
      this.host.log?.debug({ trigger: env.id, from: env.from }, why);
      this.addContext(env, text);
    };
    if (this.host.paused) return refuse("paused: kept as context only");
    if (!human && (hops + 1 > this.host.maxHops || this.machineStreak >= this.host.maxHops)) {
      return refuse(`not answering: ${this.host.maxHops} chats between machines in a row`);
    }
    if (!human) this.machineStreak++;
    this.queue.push({ env, text, hops });
    if (this.queue.length > MAX_QUEUE) {
      const dropped = this.queue.shift()!;
      this.host.log?.warn({ trigger: dropped.env.id }, "too many messages waiting; the oldest is kept as context only");
      this.addContext(dropped.env, dropped.text);
    }
    void this.pump();
  }

  /** See `triggers.ts` for the rules. */
  private isTrigger(env: Envelope, text: string, human: boolean): boolean {
    if (env.to?.includes(this.host.id)) return true;
    if (this.mention.test(text)) return true;
    if (env.to !== undefined && env.to.length > 0) return false;
    if (!human) return false;
    const others = [...this.host.client.participants.values()];
    if (others.filter((p) => p.kind === "human").length !== 1) return false;
    // With other agents present, only the primary takes what is addressed to nobody.
    if (!this.host.config.primary && others.some((p) => p.kind === "agent")) return false;
    return mentioned(text, this.host.client.participants.keys()).length === 0;
  }

  private contextLine(env: Envelope, text: string): string {
    const to = (env.to ?? []).filter((t) => t !== this.host.id);
    const addressedToMe = env.to?.includes(this.host.id) ?? false;
    if (env.to && env.to.length > 0 && !addressedToMe) return `${env.from} (to ${to.join(", ")}): ${text}`;
    return `${env.from}: ${text}`;
  }

  private addContext(env: Envelope, text: string): void {
    this.pendingContext.push({ role: "user", text: this.contextLine(env, text) });
    if (!this.turnRunning) this.flushContext();
  }

  private observeHistory(env: Envelope): void {
    const text = isRecord(env.payload) && typeof env.payload["text"] === "string" ? env.payload["text"] : undefined;
    if (!text) return;
    if (env.from === this.host.id) this.pendingContext.push({ role: "assistant", text, toolCalls: [] });
    else this.pendingContext.push({ role: "user", text: this.contextLine(env, text) });
    this.flushContext();
  }

  flushContext(): void {
    if (this.pendingContext.length > 0) this.conv.append(...this.pendingContext.splice(0));
  }

  // --- chat turns ---------------------------------------------------------------------

  async pump(): Promise<void> {
    if (this.turnRunning) return;
    this.turnRunning = true;
    try {
      while (!this.host.stopped && !this.host.paused && this.queue.length > 0) {
        const trigger = this.queue.shift()!;
        try {
          await this.chatTurn(trigger);
        } catch (err) {
          this.host.log?.error({ err }, "a chat turn failed unexpectedly");
        }
      }
    } finally {
      this.turnRunning = false;
      if (!this.host.stopped) this.flushContext();
    }
  }

  private async chatTurn(trigger: Trigger): Promise<void> {
    const { env } = trigger;
    this.flushContext();
    this.conv.append({ role: "user", text: `${env.from}: ${trigger.text}` });
    if (this.host.health.providerDown()) {
      // Say so at once, and when it will try again, rather than leave the sender waiting.
      const until = this.host.health.down!.until;
      const seconds = Math.max(1, Math.ceil((until - Date.now()) / 1000));
      this.host.log?.debug({ trigger: env.id }, "the model provider is cooling down after a failure; said so");
      this.say(
        env,
        trigger.hops + 1,
        `My model provider is unavailable (${this.host.health.down!.error.message}). I will try again at ${new Date(until).toISOString().slice(11, 19)} UTC, in ${seconds} s; ask me then.`,
        "plain",
      );
      return;
    }
    await this.host.toolsReady();
    if (this.host.stopped || this.host.paused) return;
    const controller = new AbortController();
    this.chatAbort = controller;
    const reasoning = this.host.startReasoning(env.id, `Working on ${env.from}'s message`);
    const started = Date.now();
    // What this request costs, with what it delegated: the person sees the total with the reply.
    const spend = emptySpend();
    const announce = (text: string) => this.say(env, trigger.hops + 1, text, "plain");
    let turn: TurnResult;
    try {
      turn = await runTurn({
        provider: this.host.provider,
        conversation: this.conv,
        context: () => this.host.turnContext(),
        callTool: this.host.callTool(undefined, spend, announce, this.isHuman(env.from) ? env.from : undefined),
        options: this.host.modelOptions,
        maxIterations: this.host.config.max_iterations,
        signal: controller.signal,
        onEvent: reasoning?.onEvent,
      });
    } finally {
      this.chatAbort = undefined;
    }
    this.host.health.turns++;
    this.host.health.account(turn, started);
    addUsage(spend, turn.usage, this.host.modelOptions.model, this.host.config.prices ?? {});
    reasoning?.conclude(turn);
    const usage = {
      input_tokens: spend.input_tokens,
      output_tokens: spend.output_tokens,
      ...(spend.cost_usd === undefined ? {} : { cost_usd: roundCost(spend.cost_usd) }),
    };
    const reply = (text: string, format: "markdown" | "plain" = "markdown") => this.say(env, trigger.hops + 1, text, format, usage);
    switch (turn.status) {
      case "done":
        // An empty answer is a deliberate silence (e.g. nothing to add to another agent).
        if (turn.text.trim()) reply(turn.text);
        return;
      case "max_iterations":
        reply(
          `${turn.text.trim() ? `${turn.text.trim()}\n\n` : ""}(I stopped after ${plural(turn.iterations, "model call")}, the most I make for one message, before finishing. Ask me to continue if you want me to go on.)`,
        );
        return;
      case "error":
        this.host.health.providerFailed(turn.error!, (text) => reply(text, "plain"));
        return;
      case "aborted":
        return;
    }
  }

  private say(trigger: Envelope, hops: number, text: string, format: "markdown" | "plain", usage?: Record<string, unknown>): void {
    const id = this.host.send({
      kind: "chat",
      to: [trigger.from],
      correlation_id: [trigger.id],
      payload: { text, format, ...(usage ? { usage } : {}) },
    });
    if (id) this.hops.set(id, hops);
  }

  // --- what pause, restart and stop do to the chat side ------------------------------------

  /** A pause: waiting triggers become context only. */
  queuedToContext(): void {
    for (const t of this.queue.splice(0)) this.addContext(t.env, t.text);
  }

  /** `participant/clear`: how many messages went. */
  clear(): number {
    return this.conv.clear() + this.pendingContext.splice(0).length;
  }

  /** Aborts the running turn, if any. */
  abort(reason: string): void {
    this.chatAbort?.abort(reason);
  }

  /** Drops the waiting triggers. */
  dropQueue(): void {
    this.queue = [];
  }

  /** `participant/restart`: a fresh conversation, nothing waiting, the hop counts forgotten. */
  reset(): void {
    this.queue = [];
    this.pendingContext.length = 0;
    this.conv = new Conversation({ budgetTokens: this.host.budget() });
    this.hops.clear();
    this.machineStreak = 0;
  }
}
