/**
 * Anthropic messages: `POST {baseUrl}/v1/messages`.
 *
 * The format differs from chat completions in ways the translation has to respect:
 * the system prompt is a top-level field; tool results are `tool_result` blocks inside a
 * *user* message; roles must alternate, so consecutive messages of one role are merged
 * (tool results first, as the API requires, then any text); text blocks may not be empty;
 * the first message must be the user's; and `max_tokens` is mandatory.
 */
import * as z from "zod";
import { postJson, trimBaseUrl, type RetryOptions } from "./http.js";
import {
  ProviderError,
  type Message,
  type ModelRequest,
  type ModelResponse,
  type Provider,
  type StopReason,
  type ToolCall,
} from "./types.js";
import { isRecord } from "../../../gateway/index.js";

export const ANTHROPIC_VERSION = "2023-06-01";
/** Used when the request gives no `maxTokens`: the API requires a value. */
export const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096;

export interface AnthropicProviderOptions {
  /** Default `https://api.anthropic.com`. */
  baseUrl?: string | undefined;
  apiKey?: string | undefined;
  /** Named in the missing-key message; default `ANTHROPIC_API_KEY`. */
  apiKeyEnv?: string | undefined;
  headers?: Record<string, string> | undefined;
  retry?: RetryOptions | undefined;
  name?: string | undefined;
}

type Block =
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }
  | { type: "tool_result"; tool_use_id: string; content: string; is_error?: boolean };

export interface AnthropicMessage {
  role: "user" | "assistant";
  content: Block[];
}

const MessageResponseSchema = z.looseObject({
  content: z.array(
    z.looseObject({
      type: z.string(),
      text: z.string().optional(),
      id: z.string().optional(),
      name: z.string().optional(),
      input: z.unknown().optional(),
    }),
  ),
  stop_reason: z.string().nullish(),
  usage: z
    .looseObject({
      input_tokens: z.number().optional(),
      output_tokens: z.number().optional(),
      cache_creation_input_tokens: z.number().nullish(),
      cache_read_input_tokens: z.number().nullish(),
    })
    .nullish(),
});

export class AnthropicProvider implements Provider {
  readonly name: string;
  private readonly url: string;
  private readonly opts: AnthropicProviderOptions;

  constructor(opts: AnthropicProviderOptions = {}) {
    this.opts = opts;
    this.name = opts.name ?? "anthropic";
    this.url = `${trimBaseUrl(opts.baseUrl ?? "https://api.anthropic.com")}/v1/messages`;
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { apiKey } = this.opts;
    if (!apiKey) {
      throw new ProviderError(
        "missing_api_key",
        `${this.name}: no API key for ${this.url}: set ${this.opts.apiKeyEnv ?? "ANTHROPIC_API_KEY"}`,
        {
          provider: this.name,
        },
      );
    }
    const raw = await postJson({
      provider: this.name,
      url: this.url,
      headers: { ...this.opts.headers, "x-api-key": apiKey, "anthropic-version": ANTHROPIC_VERSION },
      body: this.requestBody(request),
      secret: apiKey,
      signal: request.options.signal,
      retry: this.opts.retry,
    });
    return parseMessageResponse(raw, this.name);
  }

  requestBody(request: ModelRequest): Record<string, unknown> {
    const { options } = request;
    const body: Record<string, unknown> = {
      model: options.model,
      max_tokens: options.maxTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS,
      messages: toAnthropicMessages(request.messages),
    };
    if (request.system) body["system"] = request.system;
    if (request.tools.length > 0) {
      body["tools"] = request.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
    }
    if (options.temperature !== undefined) body["temperature"] = options.temperature;
    return body;
  }
}

export function toAnthropicMessages(messages: readonly Message[]): AnthropicMessage[] {
  const out: AnthropicMessage[] = [];
  const push = (role: AnthropicMessage["role"], blocks: Block[]) => {
    if (blocks.length === 0) return;
    const last = out[out.length - 1];
    if (last && last.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  };
  for (const m of messages) {
    switch (m.role) {
      case "user":
        push("user", m.text ? [{ type: "text", text: m.text }] : []);
        break;
      case "assistant": {
        const blocks: Block[] = m.text ? [{ type: "text", text: m.text }] : [];
        for (const c of m.toolCalls) blocks.push({ type: "tool_use", id: c.id, name: c.name, input: c.arguments });
        push("assistant", blocks);
        break;
      }
      case "tool":
        push("user", [
          // An empty tool_result content is allowed, but an empty string reads as "nothing happened"; say so.
          { type: "tool_result", tool_use_id: m.callId, content: m.content || "(no output)", ...(m.isError ? { is_error: true } : {}) },
        ]);
        break;
    }
  }
  for (const msg of out) {
    if (msg.role === "user") {
      // tool_result blocks must lead a user message; a stable partition keeps the rest in order.
      msg.content = [...msg.content.filter((b) => b.type === "tool_result"), ...msg.content.filter((b) => b.type !== "tool_result")];
    }
  }
  // The conversation must open with the user; after old turns were dropped it may not.
  if (out[0]?.role !== "user") out.unshift({ role: "user", content: [{ type: "text", text: "(earlier conversation omitted)" }] });
  return out;
}

export function parseMessageResponse(raw: unknown, provider = "anthropic"): ModelResponse {
  const parsed = MessageResponseSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
    throw new ProviderError("bad_response", `${provider}: unexpected response shape: ${where}${issue?.message ?? "invalid"}`, {
      provider,
      status: 200,
    });
  }
  const texts: string[] = [];
  const toolCalls: ToolCall[] = [];
  parsed.data.content.forEach((block, i) => {
    if (block.type === "text" && block.text) texts.push(block.text);
    if (block.type === "tool_use") {
      const call: ToolCall = { id: block.id || `toolu_${i}`, name: block.name ?? "", arguments: {} };
      const input = block.input ?? {};
      if (isRecord(input)) call.arguments = input as Record<string, unknown>;
      else call.invalidArguments = "tool input must be a JSON object";
      toolCalls.push(call);
    }
    // thinking and other block kinds are not part of the reply.
  });
  const usage = parsed.data.usage;
  return {
    text: texts.join("\n"),
    toolCalls,
    stopReason: toolCalls.length > 0 ? "tool_use" : stopReason(parsed.data.stop_reason),
    ...(usage && (usage.input_tokens !== undefined || usage.output_tokens !== undefined)
      ? {
          usage: {
            input: (usage.input_tokens ?? 0) + (usage.cache_creation_input_tokens ?? 0) + (usage.cache_read_input_tokens ?? 0),
            output: usage.output_tokens ?? 0,
          },
        }
      : {}),
  };
}

function stopReason(reason: string | null | undefined): StopReason {
  switch (reason) {
    case "end_turn":
    case "stop_sequence":
      return "end_turn";
    case "tool_use":
      return "tool_use";
    case "max_tokens":
      return "max_tokens";
    default:
      return "other";
  }
}
