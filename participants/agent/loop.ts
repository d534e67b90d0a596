/**
 * One agent turn: ask the model, run every tool call it makes (in parallel), feed the
 * results back, and repeat until the model answers without tools or the iteration bound
 * is reached.
 *
 * Everything outside is injected: the provider, the conversation, and `callTool`, which
 * the agent participant wires to the gateway (direct call or proposal, as policy says).
 * `callTool` reports failures as values (`ToolFailure`), so a rejection or a timeout
 * reaches the model as an error result it can reason about; a `callTool` that throws is
 * treated the same way, and never ends the turn.
 */
import { estimateRequestTokens, type Conversation } from "./context.js";
import {
  ProviderError,
  type AssistantMessage,
  type ModelOptions,
  type ModelRequest,
  type ModelResponse,
  type Provider,
  type ToolCall,
  type ToolResultMessage,
  type Usage,
} from "./providers/types.js";
import type { ToolSet } from "./tools.js";
import { randomUUID } from "node:crypto";
import type { TurnMark } from "../../gateway/index.js";

export interface ToolSuccess {
  type: "result";
  /** What the tool returned, as text for the model. */
  content: string;
  /** The tool ran and reported a failure (MCP `isError`). */
  isError?: boolean;
  /** Set when the call went through a proposal. */
  approvedBy?: string;
}

export type ToolFailureCode =
  | "rejected" // a proposal was rejected
  | "timeout" // no answer, or no decision, in time
  | "denied" // policy forbids the call
  | "unknown_tool"
  | "invalid_arguments"
  | "cancelled"
  | "responded" // a person answered the proposal instead of deciding it; it was withdrawn
  | "unavailable" // the owner left, the circuit is open, …
  | "failed"; // anything else

export interface ToolFailure {
  type: "error";
  code: ToolFailureCode;
  message: string;
  /** For a rejection: the reason code the approver gave (`unsafe`, `timeout`, …). */
  reason?: string;
  /** Who decided (rejections). */
  by?: string;
}

export type ToolOutcome = ToolSuccess | ToolFailure;

/** Runs `participant/tool`; resolves with a failure rather than throwing. `intent`: the model's own text from the reply that asked for the call, if it wrote any (shown to whoever approves it). */
export type CallTool = (
  name: string,
  args: Record<string, unknown>,
  ctx: { callId: string; signal: AbortSignal; intent?: string | undefined; turn?: TurnMark | undefined },
) => Promise<ToolOutcome>;

export interface TurnContext {
  system: string;
  tools: ToolSet;
}

export type LoopEvent =
  | { type: "model"; iteration: number; response: ModelResponse }
  | { type: "tool_call"; callId: string; name: string | undefined; functionName: string; arguments: Record<string, unknown> }
  | { type: "tool_result"; callId: string; name: string | undefined; outcome: ToolOutcome };

export interface RunTurnOptions {
  provider: Provider;
  conversation: Conversation;
  /** The prompt and tools; a function is asked again before every model call, so changes apply mid-turn. */
  context: TurnContext | (() => TurnContext);
  callTool: CallTool;
  options: Omit<ModelOptions, "signal">;
  /** Model calls per turn. Default 8. */
  maxIterations?: number;
  /** Longer tool results are cut, with a note, so one result cannot flood the context. Default 16 000. */
  maxToolResultChars?: number;
  signal?: AbortSignal;
  onEvent?: (event: LoopEvent) => void;
}

export type TurnStatus = "done" | "max_iterations" | "aborted" | "error";

export interface TurnResult {
  status: TurnStatus;
  /** The text of the last model reply that had any ("" if none). */
  text: string;
  /** Model calls made. */
  iterations: number;
  /** Tool calls made, over all iterations. */
  toolCalls: number;
  /** Summed over the model calls that reported usage. */
  usage: Usage;
  /** For `error` (and `aborted` when the provider call was the one aborted). */
  error?: ProviderError;
}

export const DEFAULT_MAX_ITERATIONS = 8;
export const DEFAULT_MAX_TOOL_RESULT_CHARS = 16_000;

/**
 * Runs one turn on `conversation`, which should already hold the message that triggered
 * it. The assistant messages and tool results are appended as they happen.
 */
export async function runTurn(opts: RunTurnOptions): Promise<TurnResult> {
  const maxIterations = Math.max(1, opts.maxIterations ?? DEFAULT_MAX_ITERATIONS);
  const maxChars = opts.maxToolResultChars ?? DEFAULT_MAX_TOOL_RESULT_CHARS;
  const signal = opts.signal ?? new AbortController().signal;
  const result: TurnResult = { status: "done", text: "", iterations: 0, toolCalls: 0, usage: { input: 0, output: 0 } };

  while (result.iterations < maxIterations) {
    if (signal.aborted) return { ...result, status: "aborted" };
    const ctx = typeof opts.context === "function" ? opts.context() : opts.context;
    const request: ModelRequest = {
      system: ctx.system,
      messages: opts.conversation.messages,
      tools: ctx.tools.definitions,
      options: { ...opts.options, signal },
    };
    let response: ModelResponse;
    try {
      response = await opts.provider.complete(request);
    } catch (err) {
      const error =
        err instanceof ProviderError
          ? err
          : new ProviderError("bad_response", `${opts.provider.name}: ${(err as Error)?.message ?? String(err)}`, {
              provider: opts.provider.name,
              cause: err,
            });
      return { ...result, status: error.code === "aborted" || signal.aborted ? "aborted" : "error", error };
    }
    result.iterations++;
    if (response.usage) {
      result.usage.input += response.usage.input;
      result.usage.output += response.usage.output;
      opts.conversation.calibrate(response.usage.input, estimateRequestTokens(request));
    }
    if (response.text) result.text = response.text;
    opts.onEvent?.({ type: "model", iteration: result.iterations, response });

    const assistant: AssistantMessage = { role: "assistant", text: response.text, toolCalls: response.toolCalls };
    if (response.toolCalls.length === 0) {
      opts.conversation.append(assistant);
      return result;
    }

    result.toolCalls += response.toolCalls.length;
    // Calls asked for in one reply are one turn: a person sees them together (gateway/wire/turn.ts).
    const turnId = response.toolCalls.length > 1 ? randomUUID() : undefined;
    const results = await Promise.all(
      response.toolCalls.map((call, index) =>
        execute(
          call,
          ctx.tools,
          opts,
          signal,
          maxChars,
          response.text,
          turnId === undefined ? undefined : { id: turnId, index, count: response.toolCalls.length },
        ),
      ),
    );
    // Appended together, once every result is in: a call is never in context without its result.
    opts.conversation.append(assistant, ...results);
    if (signal.aborted) return { ...result, status: "aborted" };
  }
  return { ...result, status: "max_iterations" };
}

async function execute(
  call: ToolCall,
  tools: ToolSet,
  opts: RunTurnOptions,
  signal: AbortSignal,
  maxChars: number,
  intent: string | undefined,
  turn?: TurnMark,
): Promise<ToolResultMessage> {
  const name = tools.names.toolName(call.name);
  opts.onEvent?.({ type: "tool_call", callId: call.id, name, functionName: call.name, arguments: call.arguments });
  let outcome: ToolOutcome;
  if (name === undefined) {
    outcome = {
      type: "error",
      code: "unknown_tool",
      message: `no tool is offered as function "${call.name}"; use one of the functions you were given`,
    };
  } else if (call.invalidArguments !== undefined) {
    outcome = {
      type: "error",
      code: "invalid_arguments",
      message: `${call.invalidArguments}; the call was not made. Send the arguments as a JSON object.`,
    };
  } else {
    try {
      outcome = await opts.callTool(name, call.arguments, {
        callId: call.id,
        signal,
        ...(intent?.trim() ? { intent } : {}),
        ...(turn ? { turn } : {}),
      });
    } catch (err) {
      outcome = { type: "error", code: "failed", message: (err as Error)?.message ?? String(err) };
    }
  }
  opts.onEvent?.({ type: "tool_result", callId: call.id, name, outcome });
  const content = formatOutcome(outcome);
  return {
    role: "tool",
    callId: call.id,
    name: call.name,
    content: content.length > maxChars ? `${content.slice(0, maxChars)}\n[… ${content.length - maxChars} more characters cut]` : content,
    isError: outcome.type === "error" || outcome.isError === true,
  };
}

/** What the model reads for an outcome; failures say what happened and what to do about it. */
export function formatOutcome(outcome: ToolOutcome): string {
  if (outcome.type === "result") {
    return outcome.approvedBy ? `(Proposal approved by ${outcome.approvedBy}.)\n${outcome.content}` : outcome.content;
  }
  const by = outcome.by ? ` by ${outcome.by}` : "";
  const reason = outcome.reason ? ` (reason: ${outcome.reason})` : "";
  switch (outcome.code) {
    case "rejected":
      return `Rejected${by}${reason}: ${outcome.message}. The call was not made. Adapt instead of repeating the same call.`;
    case "timeout":
      return `Timed out: ${outcome.message}. The call may or may not have taken effect.`;
    case "responded":
      return `${outcome.by ?? "A person"} answered your proposal instead of approving it: "${outcome.message}". Your proposal was withdrawn and the call was not made. Do what the answer asks: propose the call again, changed as asked, or reply.`;
    default:
      return `${outcome.code}: ${outcome.message}`;
  }
}
