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
 *
 * The `Agent` here holds the parts and wires them, each given only what it needs: the chat
 * turns (chat.ts), the control messages (control.ts), the ask tool and callbacks
 * (serve.ts), the space's tools and prompt (space-view.ts), the calls of those tools
 * (tool-calls.ts), the provider's health and counters (health.ts), reasoning reports
 * (reasoning.ts).
 */
import type { Logger } from "pino";
import type { AgentConfig } from "../../gateway/index.js";
import { GATEWAY_ID, type Envelope } from "../../gateway/index.js";
import { ParticipantClient, type ClientOptions, type OutboundEnvelope, type WelcomeInfo } from "../client.js";
import { AskServer } from "./serve.js";
import { HeldConversations } from "./takeover.js";
import { resolveProvider } from "./configure.js";
import type { RetryOptions } from "./providers/http.js";
import type { ModelOptions, Provider } from "./providers/types.js";
import { ProviderHealth } from "./health.js";
import { SpaceView } from "./space-view.js";
import { ChatTurns } from "./chat.js";
import { Controls } from "./control.js";
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
    opts.client instanceof ParticipantClient
      ? opts.client
      : new ParticipantClient({ ...opts.client, logger: opts.client.logger ?? opts.logger });
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
  private readonly unsubscribe: (() => void)[] = [];

  /** The chat conversation and the triggers waiting for it (chat.ts). */
  private readonly chat: ChatTurns;

  /** The space as the prompt shows it (space-view.ts). */
  private readonly view: SpaceView;

  /** The calls of the space's tools, and who approved our proposals (tool-calls.ts). */
  private readonly calls: ToolCaller;

  /** The `participant/*` control messages and the pause they set (control.ts). */
  private readonly controls: Controls;
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
    this.chat = this.chatHost();
    this.controls = this.controlHost();
  }

  /** The space view (space-view.ts), with what it may reach of this agent. */
  private viewHost(): SpaceView {
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

  /** The controls (control.ts), with what they act on. */
  private controlHost(): Controls {
    return new Controls({
      id: this.id,
      provider: this.provider,
      modelOptions: this.modelOptions,
      log: this.log,
      chat: this.chat,
      health: this.health,
      serving: this.serving,
      toolName: (name) => this.view.toolName(name),
      send: (env) => this.send(env),
      statusPayload: () => this.statusPayload(),
      stop: (reason) => this.stop(reason),
    });
  }

  /** The chat side (chat.ts), with what it may reach of this agent. */
  private chatHost(): ChatTurns {
    const agent = this;
    return new ChatTurns({
      id: this.id,
      config: this.config,
      client: this.client,
      provider: this.provider,
      modelOptions: this.modelOptions,
      log: this.log,
      maxHops: this.maxHops,
      get stopped() {
        return agent.stopped;
      },
      get paused() {
        return agent.controls.paused;
      },
      health: this.health,
      holder: (human) => this.held.holder(human),
      inbox: (human) => this.serving.inbox(human),
      budget: () => this.budget(),
      toolsReady: () => this.view.toolsReady(),
      turnContext: () => this.view.turnContext(),
      callTool: (deadline, spend, announce, human) => this.calls.callTool(deadline, spend, announce, human),
      startReasoning: (correlation, message) => this.startReasoning(correlation, message),
      send: (env) => this.send(env),
    });
  }

  /** The serving side (serve.ts), with what it may reach of this agent. */
  private serveHost(): AskServer {
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
        return agent.controls.paused;
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
    this.chat.seed(info.history);
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
        // A person's answer to one of my waiting proposals goes to that call, not to a new turn.
        if (addressed && this.calls.noteResponse(env)) return;
        return this.chat.onChat(env);
      case "mcp/approve":
        return this.calls.noteApproval(env);
      case "mcp/request":
        // A MEW fulfilment of one of my proposals counts as its approval.
        if (env.from !== GATEWAY_ID) this.calls.noteApproval(env);
        return;
    }
    if (addressed && env.kind.startsWith("participant/")) this.controls.onControl(env);
  }

  // --- reasoning transparency -----------------------------------------------------------

  private startReasoning(correlation: string, message: string): Reasoning | undefined {
    if (!this.config.reasoning) return undefined;
    return startReasoning({ send: (env) => this.send(env), toolName: (name) => this.view.toolName(name) }, correlation, message);
  }

  // --- status ---------------------------------------------------------------------------

  private statusPayload(): Record<string, unknown> {
    const { id: _id, ...rest } = this.status();
    return rest;
  }

  status(): AgentStatus {
    const stats = this.chat.conversation.stats();
    const state: AgentState = this.stopped
      ? "stopped"
      : this.controls.paused
        ? "paused"
        : this.chat.running || this.serving.active > 0
          ? "busy"
          : "idle";
    const s: AgentStatus = {
      id: this.id,
      state,
      paused: this.controls.paused,
      queued: this.chat.queued,
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
    this.controls.stop();
    this.chat.abort(reason);
    this.serving.abortAll(reason);
    this.chat.dropQueue();
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
