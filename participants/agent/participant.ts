/**
 * The LLM agent as a participant: joins a space through the SDK, answers chats with its
 * model, calls the space's tools through the gateway, obeys `participant/*` control
 * messages, and may offer itself to the others as a tool (`<id>/ask`).
 *
 * ```ts
 * const agent = await startAgent({ id: "helper", config, client: { url, space: "lab", token } });
 * // … later
 * await agent.stop();
 * ```
 *
 * Conversation rules (see `triggers.ts` for who starts a turn):
 * - One chat conversation, kept within `context_tokens`. Every chat the agent can see is
 *   added to it as a user message `"sender: text"` (`"sender (to x, y): text"` when it was
 *   addressed to others), but only triggers start turns. Chats that arrive while a turn
 *   runs are added after that turn, so a turn's tool calls and results stay together.
 * - Triggers are answered one at a time, in order (at most 16 wait; beyond that the
 *   oldest waiting one becomes context only). The reply is a `chat` to the sender,
 *   correlated to the trigger.
 * - While paused no turn starts: new triggers, and those waiting when the pause came, are
 *   kept as context only; they are not answered after `resume`. A turn already running
 *   finishes. Delegated calls are refused while paused.
 * - When the model provider fails for lack of a key or reachability (or keeps rate
 *   limiting / erroring on the server side), the agent says so once, to whoever asked, and
 *   then does not call the provider again for `providerCooldownMs` (default 60 s): triggers
 *   in that window stay context only. The first trigger after it tries again.
 * - Delegation (`agent.offer`): each call runs the loop in a fresh conversation of its own,
 *   concurrently with chat turns, and answers before the gateway's call timeout with
 *   `structuredContent: {status, answer}`.
 * - Control messages are honoured when addressed to the agent; the gateway has already
 *   checked that the sender may send them. Each is answered to its sender, correlated to
 *   it: `pause` (`timeout_seconds` resumes by itself, announced by a status with
 *   `resumed: "timeout"`), `resume`, `request-status`, `forget` (`direction`, `entries`;
 *   default: the older half), `clear` and `restart` (clear, abort running work, reset
 *   counters and the provider cool-down) with `participant/status`; `compact` (the oldest
 *   half summarized by the model) with `participant/compact-done`; `shutdown` with
 *   `chat/acknowledge`, after which the agent leaves (`closed` settles with `shutdown`).
 */
import type { Logger } from "pino";
import type { AgentConfig } from "../../gateway/config.js";
import { GATEWAY_ID, type Envelope } from "../../gateway/envelope.js";
import { ParticipantClient, type ClientOptions, type OutboundEnvelope, type WelcomeInfo } from "../client.js";
import { AskServer } from "./serve.js";
import { HeldConversations } from "./takeover.js";
import { addUsage, emptySpend, roundCost } from "./contract.js";
import { resolveProvider } from "./configure.js";
import { Conversation, type Summarize } from "./context.js";
import { runTurn, type TurnResult } from "./loop.js";
import type { RetryOptions } from "./providers/http.js";
import { ProviderError, type Message, type ModelOptions, type Provider } from "./providers/types.js";
import { HopTracker, mentioned, mentionPattern } from "./triggers.js";
import { ProviderHealth } from "./health.js";
import { SpaceView } from "./space-view.js";
import { ToolCaller } from "./tool-calls.js";
import { startReasoning, type Reasoning } from "./reasoning.js";

export interface AgentOptions {
  /** The participant id; must be the one the token (or in-process transport) gives. */
  id: string;
  /** The `agent:` block of space.yaml (defaults applied by the config loader). */
  config: AgentConfig;
  /** Shown in the agent's own prompt ("Your role: …") and in its offered tool's description. */
  description?: string | undefined;
  /** How to join (WebSocket with a token, or an in-process transport), or a client to use. The agent closes it when it stops. */
  client: ClientOptions | ParticipantClient;
  /** Where API keys are looked up. Default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
  logger?: Logger | undefined;
  /** Relative `script` paths are resolved against this (the config loader already makes them absolute). */
  baseDir?: string | undefined;
  /** Use this model instead of the one `config` describes (embedding, tests, benchmarks). */
  provider?: Provider | undefined;
  /** Retries of the HTTP providers (429, 5xx, network). */
  retry?: RetryOptions | undefined;
  /** After a provider failure, how long triggers do not call it again. Default 60 000. */
  providerCooldownMs?: number | undefined;
  /** Most chats in a row between machines before the agent stops answering (see `triggers.ts`). Default 3. */
  maxHops?: number | undefined;
  /** The gateway's call timeout when a caller gives none (space.yaml `calls.timeout_ms`). Default 30 000. */
  callTimeoutMs?: number | undefined;
}

export type AgentState = "idle" | "busy" | "paused" | "stopped";
export type AgentStopReason = "stopped" | "shutdown" | "connection";

export interface AgentStatus {
  id: string;
  state: AgentState;
  paused: boolean;
  /** Triggers waiting for the current turn to end. */
  queued: number;
  provider: string;
  model: string;
  /** Estimated tokens of the chat conversation. */
  tokens: number;
  max_tokens: number;
  messages_in_context: number;
  /** Chat turns run since start (or restart). */
  turns: number;
  /** Delegated calls answered since start, and running now. */
  delegations: number;
  active_delegations: number;
  /** Asks waiting for their turn (`offer.max_concurrent`). */
  queued_asks: number;
  /** Tokens the provider reported, summed over every model call. */
  input_tokens_total: number;
  output_tokens_total: number;
  /** Duration of the last model turn, tool calls included. */
  latency_ms?: number;
  /** Set while the provider is in its cool-down after a failure. */
  provider_unavailable_until?: string;
  last_error?: string;
}

export interface AgentHandle {
  readonly client: ParticipantClient;
  /** Leaves the space: running turns are aborted, the client is closed. */
  stop(): Promise<void>;
  status(): AgentStatus;
  /** Settles when the agent has stopped, saying why (`shutdown` after `participant/shutdown`). */
  readonly closed: Promise<AgentStopReason>;
}

/** The offered tool's arguments. */
const DEFAULT_COOLDOWN_MS = 60_000;
const DEFAULT_MAX_HOPS = 3;
const DEFAULT_CALL_TIMEOUT_MS = 30_000;
const MAX_QUEUE = 16;

interface Trigger {
  env: Envelope;
  text: string;
  hops: number;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function plural(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? "" : "s"}`;
}

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Joins the space and starts answering. Rejects only when the client cannot connect (bad token, unknown space, …). */
export async function startAgent(opts: AgentOptions): Promise<AgentHandle> {
  const log = opts.logger?.child({ participant: opts.id, component: "agent" });
  let provider: Provider;
  let modelOptions: Omit<ModelOptions, "signal">;
  if (opts.provider) {
    provider = opts.provider;
    modelOptions = { model: opts.config.model ?? opts.provider.name };
    if (opts.config.temperature !== undefined) modelOptions.temperature = opts.config.temperature;
    if (opts.config.max_tokens !== undefined) modelOptions.maxTokens = opts.config.max_tokens;
  } else {
    const resolved = await resolveProvider(opts.id, opts.config, { env: opts.env, baseDir: opts.baseDir, retry: opts.retry });
    provider = resolved.provider;
    modelOptions = resolved.options;
    if (resolved.problem) log?.warn(resolved.problem);
    else log?.info({ provider: resolved.kind, model: modelOptions.model }, "agent model");
  }

  const client =
    opts.client instanceof ParticipantClient ? opts.client : new ParticipantClient({ ...opts.client, logger: opts.client.logger ?? opts.logger });
  const agent = new Agent(opts, client, provider, modelOptions, log);
  try {
    agent.attach();
    if (client.status === "open" && client.welcome) agent.onWelcome(client.welcome, true);
    else await client.connect();
    if (client.id !== opts.id) throw new Error(`agent "${opts.id}": the connection belongs to participant "${client.id}"`);
  } catch (err) {
    await agent.stop("connection");
    throw err;
  }
  return {
    client,
    stop: () => agent.stop("stopped").then(() => undefined),
    status: () => agent.status(),
    closed: agent.closed,
  };
}

class Agent {
  readonly closed: Promise<AgentStopReason>;
  private resolveClosed!: (reason: AgentStopReason) => void;
  private readonly id: string;
  private readonly config: AgentConfig;
  private readonly maxHops: number;
  private readonly callTimeoutMs: number;
  private readonly mention: RegExp;
  private readonly unsubscribe: (() => void)[] = [];

  // The chat conversation and what waits for it.
  private conversation: Conversation;
  private readonly pendingContext: Message[] = [];
  private queue: Trigger[] = [];
  private running = false;
  private chatAbort: AbortController | undefined;
  private readonly hops = new HopTracker();
  /** Turns started by non-human chats since the last human chat. */
  private machineStreak = 0;
  private seeded = false;

  /** The space as the prompt shows it (space-view.ts). */
  private readonly view: SpaceView;

  /** The calls of the space's tools, and who approved our proposals (tool-calls.ts). */
  private readonly calls: ToolCaller;

  // Control state.
  private paused = false;
  private pauseTimer: NodeJS.Timeout | undefined;
  private compacting = false;
  private stopped = false;
  /** Who holds each person's conversation (takeover.ts). */
  private readonly held = new HeldConversations();
  /** The ask tool, callbacks, and the conversations taken over (serve.ts). */
  private readonly serving: AskServer;

  /** Provider health and accounting (health.ts). */
  private readonly health: ProviderHealth;

  constructor(
    private readonly opts: AgentOptions,
    private readonly client: ParticipantClient,
    private readonly provider: Provider,
    private readonly modelOptions: Omit<ModelOptions, "signal">,
    private readonly log: Logger | undefined,
  ) {
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
    this.id = opts.id;
    this.config = opts.config;
    this.health = new ProviderHealth(opts.providerCooldownMs ?? DEFAULT_COOLDOWN_MS, log);
    this.maxHops = opts.maxHops ?? DEFAULT_MAX_HOPS;
    this.callTimeoutMs = opts.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.view = this.viewHost();
    this.calls = new ToolCaller({ client: this.client, tool: (name) => this.view.tool(name) });
    this.serving = this.serveHost();
    this.conversation = new Conversation({ budgetTokens: this.budget() });
    this.mention = mentionPattern(this.id);
  }

  /** The space view (space-view.ts), with what it may reach of this agent. */
  private viewHost(): SpaceView {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const agent = this;
    return new SpaceView({
      id: this.id,
      description: this.opts.description,
      config: this.config,
      client: this.client,
      log: this.log,
      get stopped() {
        return agent.stopped;
      },
    });
  }

  /** The serving side (serve.ts), with what it may reach of this agent. */
  private serveHost(): AskServer {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const agent = this;
    return new AskServer({
      id: this.id,
      description: this.opts.description,
      config: this.config,
      client: this.client,
      provider: this.provider,
      modelOptions: this.modelOptions,
      log: this.log,
      callTimeoutMs: this.callTimeoutMs,
      get stopped() {
        return agent.stopped;
      },
      get paused() {
        return agent.paused;
      },
      get down() {
        return agent.health.down;
      },
      providerDown: () => this.health.providerDown(),
      providerFailed: (e, tell) => this.health.providerFailed(e, tell),
      budget: () => this.budget(),
      toolsReady: () => this.view.toolsReady(),
      turnContext: () => this.view.turnContext(),
      callTool: (deadline, spend, announce, human) => this.calls.callTool(deadline, spend, announce, human),
      account: (turn, started) => this.health.account(turn, started),
      startReasoning: (correlation, message) => this.startReasoning(correlation, message),
      send: (env) => this.send(env),
      setLatency: (ms) => {
        this.health.latencyMs = ms;
      },
      addTokens: (u) => {
        this.health.inputTokens += u?.input ?? 0;
        this.health.outputTokens += u?.output ?? 0;
      },
    });
  }

  private budget(): number {
    return this.config.context_tokens ?? 32_000;
  }

  // --- wiring ---------------------------------------------------------------------------

  attach(): void {
    const c = this.client;
    this.unsubscribe.push(
      c.on("welcome", (info) => this.onWelcome(info, false)),
      c.on("presence", () => this.view.presenceChanged()),
      c.on("envelope", (env) => this.onEnvelope(env)),
      c.on("close", (e) => {
        if (!e.reconnecting) void this.stop("connection");
      }),
      c.onNotification((n) => {
        if (n.method === "notifications/tools/list_changed" && n.from === GATEWAY_ID) this.view.relist();
      }),
    );
    // Also without an offer: a server the agent calls may ask it for a completion (callbacks.ts).
    this.unsubscribe.push(c.onRequest((req) => this.serving.onCall(req)));
  }

  onWelcome(info: WelcomeInfo, alreadyOpen: boolean): void {
    this.view.setTools(info.tools);
    this.held.reset(info.envelope);
    // Conversations this agent held before it restarted go on (serve.ts).
    this.serving.resumeHeld(info.envelope, info.history);
    this.view.welcome(info);
    if (info.refreshed && !alreadyOpen) return;
    // Agents are not asked for their tools on join; they announce them.
    if (this.serving.offerName !== undefined) this.client.announceTools();
    if (!this.seeded) {
      this.seeded = true;
      for (const env of info.history) if (env.kind === "chat") this.observeHistory(env);
    }
  }

  // --- what arrives -----------------------------------------------------------------------

  private onEnvelope(env: Envelope): void {
    if (this.stopped || env.from === this.id) return;
    const addressed = env.to?.includes(this.id) ?? false;
    switch (env.kind) {
      case "space/conversation":
        if (env.from === GATEWAY_ID) this.held.apply(env);
        return;
      case "space/disable":
      case "space/enable":
        this.view.switched(env);
        return;
      case "chat":
        return this.onChat(env);
      case "mcp/approve":
        return this.calls.noteApproval(env);
      case "mcp/request":
        // A MEW fulfilment of one of my proposals counts as its approval.
        if (env.from !== GATEWAY_ID) this.calls.noteApproval(env);
        return;
    }
    if (addressed && env.kind.startsWith("participant/")) this.onControl(env);
  }

  private isHuman(id: string): boolean {
    return this.client.participants.get(id)?.kind === "human";
  }

  private onChat(env: Envelope): void {
    const text = isRecord(env.payload) && typeof env.payload["text"] === "string" ? env.payload["text"] : undefined;
    if (text === undefined || text.trim() === "") return;
    const human = this.isHuman(env.from);
    if (human) this.machineStreak = 0;
    const hops = this.hops.observe(env, human);
    // A person whose conversation someone holds talks to the holder (takeover.ts).
    const holder = human ? this.held.holder(env.from) : undefined;
    const inbox = holder === this.id ? this.serving.inbox(env.from) : undefined;
    if (inbox && (env.to === undefined || env.to.length === 0 || env.to.includes(this.id))) return inbox.push(text);
    if (holder !== undefined && holder !== this.id && !env.to?.includes(this.id) && !this.mention.test(text)) return this.addContext(env, text);
    if (!this.isTrigger(env, text, human)) return this.addContext(env, text);

    const refuse = (why: string) => {
      this.log?.debug({ trigger: env.id, from: env.from }, why);
      this.addContext(env, text);
    };
    if (this.paused) return refuse("paused: kept as context only");
    if (!human && (hops + 1 > this.maxHops || this.machineStreak >= this.maxHops)) {
      return refuse(`not answering: ${this.maxHops} chats between machines in a row`);
    }
    if (!human) this.machineStreak++;
    this.queue.push({ env, text, hops });
    if (this.queue.length > MAX_QUEUE) {
      const dropped = this.queue.shift()!;
      this.log?.warn({ trigger: dropped.env.id }, "too many messages waiting; the oldest is kept as context only");
      this.addContext(dropped.env, dropped.text);
    }
    void this.pump();
  }

  /** See `triggers.ts` for the rules. */
  private isTrigger(env: Envelope, text: string, human: boolean): boolean {
    if (env.to?.includes(this.id)) return true;
    if (this.mention.test(text)) return true;
    if (env.to !== undefined && env.to.length > 0) return false;
    if (!human) return false;
    const others = [...this.client.participants.values()];
    if (others.filter((p) => p.kind === "human").length !== 1) return false;
    // With other agents present, only the primary takes what is addressed to nobody.
    if (!this.config.primary && others.some((p) => p.kind === "agent")) return false;
    return mentioned(text, this.client.participants.keys()).length === 0;
  }

  private contextLine(env: Envelope, text: string): string {
    const to = (env.to ?? []).filter((t) => t !== this.id);
    const addressedToMe = env.to?.includes(this.id) ?? false;
    if (env.to && env.to.length > 0 && !addressedToMe) return `${env.from} (to ${to.join(", ")}): ${text}`;
    return `${env.from}: ${text}`;
  }

  private addContext(env: Envelope, text: string): void {
    this.pendingContext.push({ role: "user", text: this.contextLine(env, text) });
    if (!this.running) this.flushContext();
  }

  private observeHistory(env: Envelope): void {
    const text = isRecord(env.payload) && typeof env.payload["text"] === "string" ? env.payload["text"] : undefined;
    if (!text) return;
    if (env.from === this.id) this.pendingContext.push({ role: "assistant", text, toolCalls: [] });
    else this.pendingContext.push({ role: "user", text: this.contextLine(env, text) });
    this.flushContext();
  }

  private flushContext(): void {
    if (this.pendingContext.length > 0) this.conversation.append(...this.pendingContext.splice(0));
  }

  // --- chat turns ---------------------------------------------------------------------

  private async pump(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (!this.stopped && !this.paused && this.queue.length > 0) {
        const trigger = this.queue.shift()!;
        try {
          await this.chatTurn(trigger);
        } catch (err) {
          this.log?.error({ err }, "a chat turn failed unexpectedly");
        }
      }
    } finally {
      this.running = false;
      if (!this.stopped) this.flushContext();
    }
  }

  private async chatTurn(trigger: Trigger): Promise<void> {
    const { env } = trigger;
    this.flushContext();
    this.conversation.append({ role: "user", text: `${env.from}: ${trigger.text}` });
    if (this.health.providerDown()) {
      // Say so at once, and when it will try again, rather than leave the sender waiting.
      const until = this.health.down!.until;
      const seconds = Math.max(1, Math.ceil((until - Date.now()) / 1000));
      this.log?.debug({ trigger: env.id }, "the model provider is cooling down after a failure; said so");
      this.say(env, trigger.hops + 1, `My model provider is unavailable (${this.health.down!.error.message}). I will try again at ${new Date(until).toISOString().slice(11, 19)} UTC, in ${seconds} s; ask me then.`, "plain");
      return;
    }
    await this.view.toolsReady();
    if (this.stopped || this.paused) return;
    const controller = new AbortController();
    this.chatAbort = controller;
    const reasoning = this.startReasoning(env.id, `Working on ${env.from}'s message`);
    const started = Date.now();
    // What this request costs, with what it delegated: the person sees the total with the reply.
    const spend = emptySpend();
    const announce = (text: string) => this.say(env, trigger.hops + 1, text, "plain");
    let turn: TurnResult;
    try {
      turn = await runTurn({
        provider: this.provider,
        conversation: this.conversation,
        context: () => this.view.turnContext(),
        callTool: this.calls.callTool(undefined, spend, announce, this.isHuman(env.from) ? env.from : undefined),
        options: this.modelOptions,
        maxIterations: this.config.max_iterations,
        signal: controller.signal,
        onEvent: reasoning?.onEvent,
      });
    } finally {
      this.chatAbort = undefined;
    }
    this.health.turns++;
    this.health.account(turn, started);
    addUsage(spend, turn.usage, this.modelOptions.model, this.config.prices ?? {});
    reasoning?.conclude(turn);
    const usage = { input_tokens: spend.input_tokens, output_tokens: spend.output_tokens, ...(spend.cost_usd === undefined ? {} : { cost_usd: roundCost(spend.cost_usd) }) };
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
        this.health.providerFailed(turn.error!, (text) => reply(text, "plain"));
        return;
      case "aborted":
        return;
    }
  }

  private say(trigger: Envelope, hops: number, text: string, format: "markdown" | "plain", usage?: Record<string, unknown>): void {
    const id = this.send({ kind: "chat", to: [trigger.from], correlation_id: [trigger.id], payload: { text, format, ...(usage ? { usage } : {}) } });
    if (id) this.hops.set(id, hops);
  }

  // --- reasoning transparency -----------------------------------------------------------

  private startReasoning(correlation: string, message: string): Reasoning | undefined {
    if (!this.config.reasoning) return undefined;
    return startReasoning({ send: (env) => this.send(env), toolName: (name) => this.view.toolName(name) }, correlation, message);
  }

  // --- control ---------------------------------------------------------------------------

  private onControl(env: Envelope): void {
    const payload = isRecord(env.payload) ? env.payload : {};
    switch (env.kind) {
      case "participant/pause": {
        this.paused = true;
        clearTimeout(this.pauseTimer);
        // Waiting triggers become context: a pause may be long, and stale questions should not all be answered at resume.
        for (const t of this.queue.splice(0)) this.addContext(t.env, t.text);
        const seconds = payload["timeout_seconds"];
        if (typeof seconds === "number" && seconds > 0 && Number.isFinite(seconds)) {
          this.pauseTimer = setTimeout(() => {
            this.resume();
            this.reportStatus(env, { resumed: "timeout" });
          }, Math.min(seconds * 1000, 2_147_483_647));
          this.pauseTimer.unref();
        }
        this.log?.info({ by: env.from, timeout_seconds: seconds }, "paused");
        return this.reportStatus(env);
      }
      case "participant/resume":
        this.resume();
        this.log?.info({ by: env.from }, "resumed");
        return this.reportStatus(env);
      case "participant/request-status":
        return this.reportStatus(env);
      case "participant/forget": {
        const direction = payload["direction"] === "newest" ? "newest" : "oldest";
        const requested = payload["entries"];
        const entries =
          typeof requested === "number" && Number.isFinite(requested) && requested > 0 ? Math.floor(requested) : Math.ceil(this.conversation.messagesInContext / 2);
        const forgotten = this.conversation.forget(direction, entries);
        return this.reportStatus(env, { forgotten });
      }
      case "participant/clear": {
        const cleared = this.conversation.clear() + this.pendingContext.splice(0).length;
        return this.reportStatus(env, { cleared });
      }
      case "participant/compact":
        void this.compact(env);
        return;
      case "participant/restart":
        this.restart();
        this.log?.info({ by: env.from }, "restarted");
        return this.reportStatus(env, { restarted: true });
      case "participant/shutdown":
        this.log?.info({ by: env.from }, "shutdown requested");
        this.send({ kind: "chat/acknowledge", to: [env.from], correlation_id: [env.id], payload: { status: "shutdown" } });
        void this.stop("shutdown");
        return;
      default:
        // participant/status and the like from others: nothing to do.
        return;
    }
  }

  private resume(): void {
    clearTimeout(this.pauseTimer);
    this.pauseTimer = undefined;
    this.paused = false;
    void this.pump();
  }

  private restart(): void {
    this.chatAbort?.abort("restart");
    this.serving.abortAll("restart");
    this.queue = [];
    this.pendingContext.length = 0;
    this.conversation = new Conversation({ budgetTokens: this.budget() });
    this.hops.clear();
    this.machineStreak = 0;
    this.health.reset();
    this.serving.done = 0;
    clearTimeout(this.pauseTimer);
    this.paused = false;
  }

  private async compact(env: Envelope): Promise<void> {
    const reply = (extra: Record<string, unknown>) =>
      this.send({ kind: "participant/compact-done", to: [env.from], correlation_id: [env.id], payload: { ...this.statusPayload(), ...extra } });
    if (this.compacting) return void reply({ error: "a compaction is already running" });
    if (this.health.providerDown()) return void reply({ error: `the model is unavailable: ${this.health.down!.error.message}` });
    this.compacting = true;
    try {
      const before = this.conversation.tokens;
      const replaced = await this.conversation.compact(this.summarize);
      reply({ replaced, tokens_before: before });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (err instanceof ProviderError) this.health.providerFailed(err, undefined);
      reply({ error: message });
    } finally {
      this.compacting = false;
    }
  }

  private readonly summarize: Summarize = async (messages) => {
    const transcript = messages
      .map((m) => {
        switch (m.role) {
          case "user":
            return m.text;
          case "assistant": {
            const calls = m.toolCalls.map((c) => this.view.toolName(c.name));
            return `${this.id}: ${m.text}${calls.length ? ` [called ${calls.join(", ")}]` : ""}`;
          }
          case "tool":
            return `[tool result${m.isError ? ", error" : ""}] ${clip(m.content, 2000)}`;
        }
      })
      .join("\n");
    const response = await this.provider.complete({
      system: `You condense conversation transcripts for ${this.id}, an AI agent, so it can keep working with less context.`,
      messages: [
        {
          role: "user",
          text: `Summarize this earlier part of the conversation in a few short paragraphs. Keep who asked what, decisions, results of tool calls, rejections and open tasks. Write the summary only.\n\n${transcript}`,
        },
      ],
      tools: [],
      options: this.modelOptions,
    });
    return response.text.trim() || "(nothing worth keeping)";
  };

  private statusPayload(): Record<string, unknown> {
    const { id: _id, ...rest } = this.status();
    return rest;
  }

  private reportStatus(env: Envelope, extra: Record<string, unknown> = {}): void {
    this.send({ kind: "participant/status", to: [env.from], correlation_id: [env.id], payload: { ...this.statusPayload(), ...extra } });
  }

  status(): AgentStatus {
    const stats = this.conversation.stats();
    const state: AgentState = this.stopped ? "stopped" : this.paused ? "paused" : this.running || this.serving.active > 0 ? "busy" : "idle";
    const s: AgentStatus = {
      id: this.id,
      state,
      paused: this.paused,
      queued: this.queue.length,
      provider: this.provider.name,
      model: this.modelOptions.model,
      ...stats,
      turns: this.health.turns,
      delegations: this.serving.done,
      active_delegations: this.serving.active,
      queued_asks: this.serving.queued,
      input_tokens_total: this.health.inputTokens,
      output_tokens_total: this.health.outputTokens,
    };
    const { down } = this.health;
    if (this.health.latencyMs !== undefined) s.latency_ms = this.health.latencyMs;
    if (down && Date.now() < down.until) s.provider_unavailable_until = new Date(down.until).toISOString();
    if (this.health.lastError !== undefined) s.last_error = this.health.lastError;
    return s;
  }

  // --- sending and stopping ----------------------------------------------------------------

  private send(env: OutboundEnvelope): string | undefined {
    if (this.stopped) return undefined;
    try {
      return this.client.send(env);
    } catch (err) {
      this.log?.warn({ kind: env.kind, err: (err as Error).message }, "could not send");
      return undefined;
    }
  }

  async stop(reason: AgentStopReason): Promise<AgentStopReason> {
    if (this.stopped) return this.closed;
    this.stopped = true;
    clearTimeout(this.pauseTimer);
    this.chatAbort?.abort(reason);
    this.serving.abortAll(reason);
    this.queue = [];
    for (const off of this.unsubscribe.splice(0)) off();
    this.log?.info({ reason }, "agent stopped");
    try {
      await this.client.close(reason === "shutdown" ? "shutdown requested" : "agent stopped");
    } finally {
      this.resolveClosed(reason);
    }
    return this.closed;
  }
}

/** A delegated call's result: text for models, `structuredContent` for programs. */
