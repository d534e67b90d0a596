/**
 * One model turn behind one interface.
 *
 * The agent loop speaks only these types; each provider translates them to its wire
 * format and back. Messages are provider-neutral: a user turn is text, an assistant turn
 * is text plus tool calls, and every tool call gets exactly one tool result (matched by
 * `callId`). Function names here are already encoded (see `../names.ts`): providers never
 * see a `participant/tool` name.
 */

/** A JSON Schema object, passed through to the model unchanged. */
export type JsonSchema = Record<string, unknown>;

export interface ToolDefinition {
  /** The encoded function name, `^[a-zA-Z0-9_-]{1,64}$`. */
  name: string;
  description: string;
  /** JSON Schema of the arguments; always `type: "object"` at the top. */
  parameters: JsonSchema;
}

export interface ToolCall {
  /** The provider's call id; tool results refer to it. */
  id: string;
  /** The encoded function name the model chose. */
  name: string;
  /** Parsed arguments; `{}` when they could not be parsed (see `invalidArguments`). */
  arguments: Record<string, unknown>;
  /**
   * Set when the model sent arguments that are not a JSON object. The call must not be
   * executed; the loop answers it with an error result so the model can correct itself.
   */
  invalidArguments?: string;
  /** The arguments exactly as the model sent them, when they were a string. */
  rawArguments?: string;
}

export interface UserMessage {
  role: "user";
  text: string;
}

export interface AssistantMessage {
  role: "assistant";
  /** May be empty when the turn only calls tools. */
  text: string;
  toolCalls: ToolCall[];
}

export interface ToolResultMessage {
  role: "tool";
  callId: string;
  /** The encoded function name of the call this answers (some wire formats want it). */
  name: string;
  content: string;
  isError: boolean;
}

export type Message = UserMessage | AssistantMessage | ToolResultMessage;

export type StopReason = "end_turn" | "tool_use" | "max_tokens" | "other";

export interface Usage {
  input: number;
  output: number;
}

export interface ModelOptions {
  model: string;
  temperature?: number;
  /** Upper bound on output tokens. Anthropic requires one; a default applies there. */
  maxTokens?: number;
  signal?: AbortSignal;
}

export interface ModelRequest {
  system: string;
  messages: readonly Message[];
  tools: readonly ToolDefinition[];
  options: ModelOptions;
}

export interface ModelResponse {
  text: string;
  toolCalls: ToolCall[];
  stopReason: StopReason;
  /** What the provider counted; absent when the server did not say. */
  usage?: Usage;
}

export interface Provider {
  /** Short name used in messages and logs: `openai`, `anthropic`, `scripted`. */
  readonly name: string;
  complete(request: ModelRequest): Promise<ModelResponse>;
}

export type ProviderErrorCode = "missing_api_key" | "unreachable" | "http_error" | "rate_limited" | "bad_response" | "aborted";

/**
 * A local error (never sent as is): `code` is stable for callers and tests, `message` is
 * one line a person can act on. Messages never contain the API key.
 */
export class ProviderError extends Error {
  override readonly name = "ProviderError";
  readonly code: ProviderErrorCode;
  readonly provider: string;
  /** HTTP status of the last response, when there was one. */
  readonly status: number | undefined;
  /** How many HTTP attempts were made (0 when none was). */
  readonly attempts: number;

  constructor(code: ProviderErrorCode, message: string, detail: { provider: string; status?: number; attempts?: number; cause?: unknown }) {
    super(message, detail.cause === undefined ? undefined : { cause: detail.cause });
    this.code = code;
    this.provider = detail.provider;
    this.status = detail.status;
    this.attempts = detail.attempts ?? 0;
  }
}
