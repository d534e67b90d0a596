/**
 * What an agent serves to the space: its `<id>/ask` tool (delegation, with the contract of
 * contract.ts and, when interactive, the held conversation of held-ask.ts), and the callbacks of
 * callbacks.ts (a sampling request answered with its model, a form passed up).
 *
 * participant.ts keeps the chat side; this class reaches the agent's
 * model, tools and accounting only through `ServeHost`.
 */
import type { Envelope } from "../../gateway/index.js";
import type { IncomingRequest } from "../client.js";
import { RpcError, RpcErrorCodes } from "../errors.js";
import { answerSampling, passElicitationUp } from "./callbacks.js";
import { Conversation } from "./context.js";
import {
  addUsage,
  ANSWER_NOTE,
  ASK_INPUT_SCHEMA,
  ASK_OUTPUT_SCHEMA,
  AskArgumentsSchema,
  askResult,
  AskQueue,
  emptySpend,
  handoffText,
  readAnswer,
  roundCost,
  type Spend,
} from "./contract.js";
import { runTurn, type LoopEvent, type TurnResult } from "./loop.js";
import { ProviderError, type Usage } from "./providers/types.js";
import { Inbox } from "./takeover.js";
import { holdConversation, requestTakeover, type HeldAskHost } from "./held-ask.js";
import { isRecord } from "../../gateway/index.js";

/** What the serving side needs of the agent: what a held ask needs (held-ask.ts), and more. */
export interface ServeHost extends HeldAskHost {
  readonly description: string | undefined;
  readonly callTimeoutMs: number;
  readonly stopped: boolean;
  readonly paused: boolean;
  /** The provider's cool-down, if it is in one. */
  readonly down: { until: number; error: ProviderError } | undefined;
  providerDown(): boolean;
  budget(): number;
  startReasoning(correlation: string, message: string): { onEvent: (e: LoopEvent) => void; conclude: (t: TurnResult) => void } | undefined;
  setLatency(ms: number): void;
  addTokens(usage: Usage | undefined): void;
}

export class AskServer {
  /** The tool's name (`<id>/<name>`), when the agent offers itself. */
  readonly offerName: string | undefined;
  /** Asks waiting their turn, HIGH priority first (contract.ts). */
  private readonly asks: AskQueue;
  /** Asks being worked on, to abort on restart or shutdown. */
  private readonly delegations = new Set<AbortController>();
  /** Envelope ids of the calls of our tool being served now → their callers (a form about one goes to its caller). */
  private readonly servingCalls = new Map<string, string>();
  /** The people whose conversation this agent holds, and their messages waiting (takeover.ts). */
  private readonly inboxes = new Map<string, Inbox>();
  /** Asks answered since the start (or the last restart). */
  done = 0;

  constructor(private readonly host: ServeHost) {
    const offer = host.config.offer;
    this.offerName = offer && offer.enabled !== false ? (offer.name ?? "ask") : undefined;
    this.asks = new AskQueue(offer?.max_concurrent ?? 4);
  }

  get active(): number {
    return this.delegations.size;
  }

  get queued(): number {
    return this.asks.queued;
  }

  /** The inbox of a person whose conversation this agent holds. */
  inbox(human: string): Inbox | undefined {
    return this.inboxes.get(human);
  }

  /**
   * After this agent restarted: the conversations the gateway says it still holds are taken
   * up again — the call adopted (client.adopt), the context rebuilt from the welcome's
   * history since the takeover — and the person's next message continues them.
   */
  resumeHeld(welcome: Envelope, history: readonly Envelope[]): void {
    if (!this.host.config.offer?.interactive || !isRecord(welcome.payload)) return;
    const list = welcome.payload["conversations"];
    for (const c of Array.isArray(list) ? list : []) {
      if (!isRecord(c) || c["holder"] !== this.host.id || typeof c["human"] !== "string" || !Array.isArray(c["stack"])) continue;
      const top = c["stack"][c["stack"].length - 1];
      if (
        !isRecord(top) ||
        typeof top["call"] !== "string" ||
        typeof top["caller"] !== "string" ||
        (typeof top["rpc_id"] !== "string" && typeof top["rpc_id"] !== "number")
      )
        continue;
      if (this.servingCalls.has(top["call"])) continue;
      void this.resume(
        c["human"],
        top["call"],
        top["caller"],
        top["rpc_id"],
        typeof top["since"] === "string" ? top["since"] : "",
        history,
      );
    }
  }

  private async resume(
    human: string,
    call: string,
    from: string,
    rpcId: string | number,
    since: string,
    history: readonly Envelope[],
  ): Promise<void> {
    const handle = this.host.client.adopt(call, from, rpcId);
    this.servingCalls.set(call, from);
    const controller = new AbortController();
    const onAbort = () => controller.abort(handle.signal.reason);
    handle.signal.addEventListener("abort", onAbort, { once: true });
    this.delegations.add(controller);
    this.host.log?.info({ human, call }, "taking a held conversation up again after a restart");
    const conversation = new Conversation({ budgetTokens: this.host.budget() });
    conversation.append({
      role: "user",
      text: `${from}: a task for ${human}. You were holding ${human}'s conversation and restarted; what was said since you took it over follows.`,
    });
    const after = Date.parse(since) || 0;
    let waiting = false;
    for (const env of [...history].sort((a, b) => Date.parse(a.ts) - Date.parse(b.ts))) {
      const text =
        env.kind === "chat" && isRecord(env.payload) && typeof env.payload["text"] === "string" ? env.payload["text"] : undefined;
      if (text === undefined || Date.parse(env.ts) < after) continue;
      if (env.from === human && (!env.to?.length || env.to.includes(this.host.id))) {
        conversation.append({ role: "user", text: `${human}: ${text}` });
        waiting = false;
      } else if (env.from === this.host.id && env.to?.includes(human)) {
        conversation.append({ role: "assistant", text, toolCalls: [] });
        waiting = true;
      }
    }
    const spend = emptySpend();
    const started = Date.now();
    const metadata = () => ({
      processing_time_ms: Date.now() - started,
      input_tokens: spend.input_tokens,
      output_tokens: spend.output_tokens,
      model: this.host.modelOptions.model,
    });
    try {
      // Its last word was a question to the person: wait for the answer before the model goes on.
      handle.answer(await this.converseWith(from, human, conversation, controller.signal, spend, metadata, waiting));
    } catch (err) {
      handle.fail(err);
    } finally {
      handle.signal.removeEventListener("abort", onAbort);
      this.delegations.delete(controller);
      this.servingCalls.delete(call);
    }
  }

  abortAll(reason: string): void {
    for (const c of this.delegations) c.abort(reason);
  }

  offerTool(): Record<string, unknown> {
    const who = this.host.description?.trim() ? ` (${this.host.description.trim()})` : "";
    return {
      name: this.offerName,
      description:
        this.host.config.offer?.description ??
        `Ask ${this.host.id}${who} to work on a task with its own tools and return its final answer. The result carries a status: success, partial, error or timeout.`,
      inputSchema: ASK_INPUT_SCHEMA,
      outputSchema: ASK_OUTPUT_SCHEMA,
      ...(this.host.config.offer?.interactive ? { _meta: { "mewgate/interactive": true } } : {}),
    };
  }

  async onCall(req: IncomingRequest): Promise<unknown> {
    switch (req.method) {
      case "tools/list":
        return { tools: this.offerName === undefined ? [] : [this.offerTool()] };
      case "tools/call":
        if (this.offerName === undefined) throw new RpcError(RpcErrorCodes.methodNotFound, `${this.host.id} offers no tools`);
        return this.delegate(req);
      case "ping":
        return {};
      case "sampling/createMessage":
        if (this.host.config.sampling === false)
          throw new RpcError(RpcErrorCodes.methodNotFound, `${this.host.id} lends its model to no tool server (agent.sampling: false)`);
        return this.sample(req);
      case "elicitation/create":
        return passElicitationUp(this.host.client, this.host.id, this.servingCalls, req);
      default:
        throw new RpcError(
          RpcErrorCodes.methodNotFound,
          `${this.host.id} serves tools/list, tools/call and sampling/createMessage, not ${req.method}`,
        );
    }
  }

  private async delegate(req: IncomingRequest): Promise<unknown> {
    const params = isRecord(req.params) ? req.params : {};
    if (params["name"] !== this.offerName) {
      throw new RpcError(
        RpcErrorCodes.invalidParams,
        `unknown tool "${String(params["name"])}": ${this.host.id} offers "${this.offerName}"`,
      );
    }
    const args = AskArgumentsSchema.safeParse(params["arguments"] ?? {});
    if (!args.success) {
      const issue = args.error.issues[0];
      return askResult({
        status: "error",
        error_code: "INVALID_ARGUMENTS",
        answer: `invalid arguments: ${issue?.path.join(".") || "arguments"}: ${issue?.message ?? "invalid"}`,
      });
    }
    if (this.host.stopped) return askResult({ status: "error", error_code: "AGENT_STOPPING", answer: `${this.host.id} is shutting down` });
    if (this.host.paused)
      return askResult({ status: "error", error_code: "AGENT_PAUSED", answer: `${this.host.id} is paused; try again later` });
    if (this.host.providerDown())
      return askResult({
        status: "error",
        error_code: "MODEL_UNAVAILABLE",
        answer: `${this.host.id}'s model is unavailable: ${this.host.down!.error.message}`,
      });

    // Answer before the caller gives up — the gateway's deadline or the caller's own
    // timeout_ms, whichever is first — keeping a margin for the way back.
    const meta = isRecord(params["_meta"]) ? params["_meta"] : {};
    const requested = meta["mewgate/timeout_ms"];
    const gatewayMs = typeof requested === "number" && requested > 0 ? requested : this.host.callTimeoutMs;
    const timeoutMs = Math.min(gatewayMs, args.data.timeout_ms ?? gatewayMs);
    const budgetMs = Math.max(1, timeoutMs - Math.min(1000, Math.ceil(timeoutMs / 10)));
    const received = Date.now();
    const deadline = received + budgetMs;

    const conversation = new Conversation({ budgetTokens: this.host.budget() });
    const { message, context, priority } = args.data;
    conversation.append({ role: "user", text: `${req.from}: ${message}${handoffText(req.from, context)}` });
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort("timeout");
    }, budgetMs);
    const onAbort = () => controller.abort(req.signal.reason);
    req.signal.addEventListener("abort", onAbort, { once: true });
    const spend = emptySpend();
    const metadata = () => ({
      processing_time_ms: Date.now() - received,
      input_tokens: spend.input_tokens,
      output_tokens: spend.output_tokens,
      ...(spend.cost_usd === undefined ? {} : { cost_usd: roundCost(spend.cost_usd) }),
      model: this.host.modelOptions.model,
    });
    let release: (() => void) | undefined;
    try {
      // A busy agent takes HIGH before NORMAL before LOW.
      release = await this.asks.enter(priority, controller.signal).catch(() => undefined);
      if (!release) {
        return timedOut
          ? askResult({ status: "timeout", answer: `${this.host.id} was busy and could not start in time.`, metadata: metadata() })
          : askResult({
              status: "error",
              error_code: "CANCELLED",
              answer: `${this.host.id} did not start: the call was cancelled.`,
              metadata: metadata(),
            });
      }
      this.delegations.add(controller);
      this.servingCalls.set(req.envelope.id, req.from);
      // Asked for a person, an interactive agent takes their conversation over (takeover.ts).
      const forHuman = meta["mewgate/human"];
      if (this.host.config.offer?.interactive && typeof forHuman === "string" && (await this.takeOver(req, forHuman))) {
        // From here the gateway's idle clock bounds the work, not the call's deadline.
        clearTimeout(timer);
        return await this.converseWith(req.from, forHuman, conversation, controller.signal, spend, metadata);
      }
      const note = `\n\n## This task\nYou are answering a call of your tool ${this.host.id}/${this.offerName} from ${req.from}. Your final reply is returned to ${req.from} as the tool's result, not posted in chat: make it the complete answer. ${ANSWER_NOTE}`;
      await this.host.toolsReady();
      const reasoning = this.host.startReasoning(req.envelope.id, `Working on ${req.from}'s call of ${this.offerName}`);
      const started = Date.now();
      const turn = await runTurn({
        provider: this.host.provider,
        conversation,
        context: () => {
          const c = this.host.turnContext();
          return { system: c.system + note, tools: c.tools };
        },
        callTool: this.host.callTool(deadline, spend),
        options: this.host.modelOptions,
        maxIterations: this.host.config.max_iterations,
        signal: controller.signal,
        onEvent: reasoning?.onEvent,
      });
      this.host.account(turn, started);
      addUsage(spend, turn.usage, this.host.modelOptions.model, this.host.config.prices ?? {});
      reasoning?.conclude(turn);
      this.done++;
      const read = readAnswer(turn.text);
      switch (turn.status) {
        case "done":
          return askResult({
            status: read.warnings.length > 0 ? "partial" : "success",
            answer: read.answer || "(no answer)",
            confidence: read.confidence,
            warnings: read.warnings,
            metadata: metadata(),
          });
        case "max_iterations":
          return askResult({
            status: "partial",
            answer: read.answer || "(no answer yet)",
            confidence: read.confidence ?? "low",
            warnings: [...read.warnings, `${this.host.id} stopped after ${plural(turn.iterations, "model call")} before finishing`],
            metadata: metadata(),
          });
        case "aborted":
          if (timedOut)
            return askResult({
              status: "timeout",
              answer: read.answer
                ? `${read.answer}\n\n(${this.host.id} ran out of time before finishing.)`
                : `${this.host.id} could not finish in time.`,
              metadata: metadata(),
            });
          return askResult({
            status: "error",
            error_code: "CANCELLED",
            answer: `${this.host.id} stopped working on this (${String(controller.signal.reason ?? "aborted")}).`,
            metadata: metadata(),
          });
        case "error":
          this.host.providerFailed(turn.error!, undefined);
          return askResult({
            status: "error",
            error_code: "MODEL_ERROR",
            answer: `${this.host.id} could not answer: ${turn.error!.message}`,
            metadata: metadata(),
          });
      }
    } finally {
      release?.();
      clearTimeout(timer);
      req.signal.removeEventListener("abort", onAbort);
      this.delegations.delete(controller);
      this.servingCalls.delete(req.envelope.id);
    }
  }

  /** Asks the gateway to let this agent hold `human`'s conversation for `req`; true once it does. */
  private takeOver(req: IncomingRequest, human: string): Promise<boolean> {
    return requestTakeover(this.host, req, human);
  }

  /** Holds `human`'s conversation until the model calls complete (held-ask.ts); the result answers the ask. */
  private async converseWith(
    from: string,
    human: string,
    conversation: Conversation,
    signal: AbortSignal,
    spend: Spend,
    metadata: () => Record<string, unknown>,
    waitFirst = false,
  ): Promise<unknown> {
    const inbox = new Inbox();
    this.inboxes.set(human, inbox);
    try {
      return await holdConversation(this.host, { from, human, conversation, inbox, signal, spend, metadata, waitFirst }, () => this.done++);
    } finally {
      this.inboxes.delete(human);
    }
  }

  /** A completion for a server the agent called (callbacks.ts), counted like any other use of the model. */
  private async sample(req: IncomingRequest): Promise<Record<string, unknown>> {
    if (this.host.stopped || this.host.paused)
      throw new RpcError(RpcErrorCodes.internalError, `${this.host.id} is ${this.host.stopped ? "shutting down" : "paused"}`);
    if (this.host.providerDown())
      throw new RpcError(RpcErrorCodes.internalError, `${this.host.id}'s model is unavailable: ${this.host.down!.error.message}`);
    const started = Date.now();
    try {
      const result = await answerSampling(
        {
          provider: this.host.provider,
          options: this.host.modelOptions,
          maxTokens: this.host.config.max_tokens,
          onUsage: (u) => this.host.addTokens(u),
        },
        req,
      );
      const ms = Date.now() - started;
      this.host.setLatency(ms);
      this.host.log?.info({ for: req.from, ms }, "answered a sampling request");
      return result;
    } catch (err) {
      if (err instanceof ProviderError) {
        this.host.providerFailed(err, undefined);
        throw new RpcError(RpcErrorCodes.internalError, `${this.host.id} could not answer: ${err.message}`);
      }
      throw err;
    }
  }
}

/** How long a caller waits on an interactive ask: the gateway's idle clock ends it sooner when nobody talks. */
export const INTERACTIVE_WAIT_MS = 24 * 3_600_000;

function plural(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? "" : "s"}`;
}
