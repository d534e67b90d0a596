/**
 * OpenAI-compatible chat completions: `POST {baseUrl}/chat/completions`.
 *
 * One wire format for OpenAI, OpenRouter, Ollama, vLLM, llama.cpp and LM Studio. The
 * parser is lenient where servers are known to differ: tool-call `arguments` may arrive as
 * a JSON string (the spec) or as an object, a missing call id is filled in, and `content`
 * may be a string, null, or a list of text parts. Arguments that are not a JSON object
 * become `invalidArguments` on that one call, never an exception.
 */
import * as z from "zod";
import { postJson, trimBaseUrl, type RetryOptions } from "./http.js";
import { isRecord } from "../../../gateway/index.js";
import {
  ProviderError,
  type Message,
  type ModelRequest,
  type ModelResponse,
  type Provider,
  type StopReason,
  type ToolCall,
} from "./types.js";

export interface OpenAIProviderOptions {
  /** Default `https://api.openai.com/v1`. */
  baseUrl?: string | undefined;
  apiKey?: string | undefined;
  /** Where the key is expected to come from, named in the missing-key message. */
  apiKeyEnv?: string | undefined;
  /**
   * Refuse to call without a key. Default: required unless `baseUrl` is on this machine
   * (Ollama, llama.cpp and LM Studio run locally without one).
   */
  requireApiKey?: boolean | undefined;
  /** Extra headers, e.g. OpenRouter's `HTTP-Referer` / `X-Title`. */
  headers?: Record<string, string> | undefined;
  /** Newer OpenAI reasoning models only accept `max_completion_tokens`. Default `max_tokens`. */
  maxTokensField?: "max_tokens" | "max_completion_tokens" | undefined;
  retry?: RetryOptions | undefined;
  /** Name in messages; default `openai`. */
  name?: string | undefined;
}

const ContentSchema = z.union([z.string(), z.null(), z.array(z.looseObject({ type: z.string().optional(), text: z.string().optional() }))]);

const WireToolCallSchema = z.looseObject({
  id: z.string().nullish(),
  function: z.looseObject({
    name: z.string(),
    arguments: z.union([z.string(), z.record(z.string(), z.unknown()), z.null()]).optional(),
  }),
});

const ChatCompletionSchema = z.looseObject({
  choices: z
    .array(
      z.looseObject({
        message: z.looseObject({
          content: ContentSchema.optional(),
          tool_calls: z.array(WireToolCallSchema).nullish(),
        }),
        finish_reason: z.string().nullish(),
      }),
    )
    .min(1, "no choices in the response"),
  usage: z.looseObject({ prompt_tokens: z.number().optional(), completion_tokens: z.number().optional() }).nullish(),
});

export class OpenAIProvider implements Provider {
  readonly name: string;
  private readonly url: string;
  private readonly opts: OpenAIProviderOptions;

  constructor(opts: OpenAIProviderOptions = {}) {
    this.opts = opts;
    this.name = opts.name ?? "openai";
    this.url = `${trimBaseUrl(opts.baseUrl ?? "https://api.openai.com/v1")}/chat/completions`;
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const { apiKey } = this.opts;
    const required = this.opts.requireApiKey ?? !isLocalUrl(this.url);
    if (!apiKey && required) {
      const where = this.opts.apiKeyEnv ? `set ${this.opts.apiKeyEnv}` : "configure an API key";
      throw new ProviderError("missing_api_key", `${this.name}: no API key for ${this.url}: ${where}`, { provider: this.name });
    }
    const headers: Record<string, string> = { ...this.opts.headers };
    if (apiKey) headers["authorization"] = `Bearer ${apiKey}`;
    const raw = await postJson({
      provider: this.name,
      url: this.url,
      headers,
      body: this.requestBody(request),
      secret: apiKey,
      signal: request.options.signal,
      retry: this.opts.retry,
    });
    return parseChatCompletion(raw, this.name);
  }

  /** The JSON body for a request; exposed for tests and debugging. */
  requestBody(request: ModelRequest): Record<string, unknown> {
    const { options } = request;
    const body: Record<string, unknown> = {
      model: options.model,
      messages: toOpenAIMessages(request.system, request.messages),
    };
    // Several compatible servers reject an empty `tools` array, so leave it out.
    if (request.tools.length > 0) {
      body["tools"] = request.tools.map((t) => ({
        type: "function",
        function: { name: t.name, description: t.description, parameters: t.parameters },
      }));
    }
    if (options.temperature !== undefined) body["temperature"] = options.temperature;
    if (options.maxTokens !== undefined) body[this.opts.maxTokensField ?? "max_tokens"] = options.maxTokens;
    return body;
  }
}

export function toOpenAIMessages(system: string, messages: readonly Message[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  if (system) out.push({ role: "system", content: system });
  for (const m of messages) {
    switch (m.role) {
      case "user":
        out.push({ role: "user", content: m.text });
        break;
      case "assistant": {
        const msg: Record<string, unknown> = { role: "assistant", content: m.text || (m.toolCalls.length ? null : "") };
        if (m.toolCalls.length > 0) {
          msg["tool_calls"] = m.toolCalls.map((c) => ({
            id: c.id,
            type: "function",
            function: { name: c.name, arguments: c.rawArguments ?? JSON.stringify(c.arguments) },
          }));
        }
        out.push(msg);
        break;
      }
      case "tool":
        // The format has no error flag; say it in the content so the model cannot miss it.
        out.push({ role: "tool", tool_call_id: m.callId, content: m.isError ? `Error: ${m.content}` : m.content });
        break;
    }
  }
  return out;
}

export function parseChatCompletion(raw: unknown, provider = "openai"): ModelResponse {
  const parsed = ChatCompletionSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
    throw new ProviderError("bad_response", `${provider}: unexpected response shape: ${where}${issue?.message ?? "invalid"}`, {
      provider,
      status: 200,
    });
  }
  const choice = parsed.data.choices[0]!;
  const content = choice.message.content;
  const text = typeof content === "string" ? content : Array.isArray(content) ? content.map((p) => p.text ?? "").join("") : "";
  const toolCalls = (choice.message.tool_calls ?? []).map((c, i) => toToolCall(c.id, c.function.name, c.function.arguments, i));
  const usage = parsed.data.usage;
  return {
    text,
    toolCalls,
    stopReason: toolCalls.length > 0 ? "tool_use" : stopReason(choice.finish_reason),
    ...(usage && (usage.prompt_tokens !== undefined || usage.completion_tokens !== undefined)
      ? { usage: { input: usage.prompt_tokens ?? 0, output: usage.completion_tokens ?? 0 } }
      : {}),
  };
}

function toToolCall(id: string | null | undefined, name: string, args: unknown, index: number): ToolCall {
  const call: ToolCall = { id: id || `call_${index}`, name, arguments: {} };
  if (args === undefined || args === null) return call;
  if (typeof args !== "string") {
    call.arguments = args as Record<string, unknown>;
    return call;
  }
  call.rawArguments = args;
  // Some models send "" for a tool without parameters.
  if (args.trim() === "") return call;
  try {
    const value = JSON.parse(args) as unknown;
    if (isRecord(value)) call.arguments = value;
    else call.invalidArguments = `arguments must be a JSON object, got ${Array.isArray(value) ? "an array" : typeof value}`;
  } catch (err) {
    call.invalidArguments = `arguments are not valid JSON: ${(err as Error).message}`;
  }
  return call;
}

function stopReason(finish: string | null | undefined): StopReason {
  switch (finish) {
    case "stop":
      return "end_turn";
    case "tool_calls":
    case "function_call":
      return "tool_use";
    case "length":
      return "max_tokens";
    default:
      return "other";
  }
}

/** True for URLs on this machine, where local model servers need no key. */
export function isLocalUrl(url: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  return (
    host === "localhost" || host.endsWith(".localhost") || host === "[::1]" || host === "::1" || host === "0.0.0.0" || /^127\./.test(host)
  );
}
