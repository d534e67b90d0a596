/**
 * An interactive ask held as a conversation: the agent asks the gateway to let it hold the
 * person's conversation (`space/takeover`), talks with them through takeover.ts's loop until
 * the model calls complete, and the end of that conversation becomes the ask's answer in the
 * contract's shape (contract.ts). serve.ts decides when an ask is held and keeps the inboxes.
 */
import type { AgentConfig } from "../../gateway/index.js";
import { isRecord } from "../../gateway/index.js";
import type { IncomingRequest, OutboundEnvelope, ParticipantClient } from "../client.js";
import type { Conversation } from "./context.js";
import { addUsage, askResult, readAnswer, type Spend } from "./contract.js";
import { runTurn, type CallTool, type TurnContext, type TurnResult } from "./loop.js";
import type { ModelOptions, Provider, ProviderError } from "./providers/types.js";
import { COMPLETE_NOTE, converse, type Inbox } from "./takeover.js";
import type { Logger } from "pino";

/** What holding a conversation needs of the agent (serve.ts's ServeHost gives it). */
export interface HeldAskHost {
  readonly id: string;
  readonly config: AgentConfig;
  readonly client: ParticipantClient;
  readonly provider: Provider;
  readonly modelOptions: Omit<ModelOptions, "signal">;
  readonly log: Logger | undefined;
  providerFailed(error: ProviderError, tell: ((text: string) => void) | undefined): void;
  toolsReady(): Promise<void>;
  turnContext(): TurnContext;
  callTool(deadline?: number, spend?: Spend, announce?: (text: string) => void, human?: string): CallTool;
  account(turn: TurnResult, started: number): void;
  send(env: OutboundEnvelope): string | undefined;
}

/** One held ask: who handed it, for whom, its context, inbox, budget and the metadata of its answer. */
export interface HeldAsk {
  from: string;
  human: string;
  conversation: Conversation;
  inbox: Inbox;
  signal: AbortSignal;
  spend: Spend;
  metadata: () => Record<string, unknown>;
  waitFirst: boolean;
}

/** Asks the gateway to let this agent hold `human`'s conversation for `req`; true once it does. */
export function requestTakeover(host: HeldAskHost, req: IncomingRequest, human: string): Promise<boolean> {
  return new Promise((resolve) => {
    let id: string | undefined;
    const done = (ok: boolean, why?: string) => {
      off();
      clearTimeout(timer);
      if (!ok) host.log?.info({ human, why }, "could not take the conversation over; working on the task without it");
      resolve(ok);
    };
    const off = host.client.on("envelope", (env) => {
      if (id === undefined || !env.correlation_id?.includes(id)) return;
      if (env.kind === "space/conversation" && isRecord(env.payload) && env.payload["holder"] === host.id) done(true);
      else if (env.kind === "system/error") done(false, isRecord(env.payload) ? String(env.payload["message"]) : "refused");
    });
    const timer = setTimeout(() => done(false, "no answer from the gateway"), 5000);
    id = host.send({ kind: "space/takeover", payload: { human, call: req.envelope.id } });
    if (!id) done(false, "not connected");
  });
}

/** Holds the conversation until the model calls complete; `onAnswered` when it ended without throwing. The ask's result. */
export async function holdConversation(host: HeldAskHost, ask: HeldAsk, onAnswered: () => void): Promise<unknown> {
  const { from, human, conversation, inbox, signal, spend, metadata, waitFirst } = ask;
  const note = `\n\n## This task\n${from} handed you a task for ${human}.${COMPLETE_NOTE}`;
  await host.toolsReady();
  const end = await converse({
    client: host.client,
    human,
    conversation,
    inbox,
    signal,
    waitFirst,
    context: () => {
      const c = host.turnContext();
      return { system: c.system + note, tools: c.tools };
    },
    // Handing on is said to the person, in plain words.
    callTool: host.callTool(
      undefined,
      spend,
      (text) => void host.send({ kind: "chat", to: [human], payload: { text, format: "plain" } }),
      human,
    ),
    turn: async (o) => {
      const started = Date.now();
      const t = await runTurn({
        provider: host.provider,
        conversation,
        context: o.context,
        callTool: o.callTool,
        options: host.modelOptions,
        maxIterations: host.config.max_iterations,
        signal: o.signal,
      });
      host.account(t, started);
      addUsage(spend, t.usage, host.modelOptions.model, host.config.prices ?? {});
      return t;
    },
    say: (text) => void host.send({ kind: "chat", to: [human], payload: { text, format: "markdown" } }),
  });
  onAnswered();
  if (end.how === "complete") {
    const read = readAnswer(end.result);
    return askResult({
      status: read.warnings.length ? "partial" : "success",
      answer: read.answer || end.result,
      confidence: read.confidence,
      warnings: read.warnings,
      metadata: metadata(),
    });
  }
  if (end.why === "aborted")
    return askResult({
      status: "error",
      error_code: "CANCELLED",
      answer: `${host.id} stopped: the conversation with ${human} was ended.`,
      metadata: metadata(),
    });
  if (end.why === "error") {
    if (end.last?.error) host.providerFailed(end.last.error, undefined);
    return askResult({
      status: "error",
      error_code: "MODEL_ERROR",
      answer: `${host.id} could not go on: ${end.last?.error?.message ?? "error"}`,
      metadata: metadata(),
    });
  }
  return askResult({
    status: "partial",
    answer: end.last?.text.trim() || "(no answer)",
    confidence: "low",
    warnings: [`${host.id} stopped before finishing the conversation with ${human}`],
    metadata: metadata(),
  });
}
