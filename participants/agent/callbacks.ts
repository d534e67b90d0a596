/**
 * What an agent answers when an MCP server it called asks something back (a callback, see
 * gateway/calls.ts):
 *
 * - `sampling/createMessage`: one completion from the agent's own model, with the server's
 *   messages and system prompt and no tools — a server can borrow the model's words, never
 *   the agent's hands. Output is bounded by the agent's `max_tokens`.
 * - `elicitation/create`: an agent fills in no forms. When it is serving someone's call
 *   (a delegation) and the question is about that work, it passes it on to that caller,
 *   as a callback of its own, and returns the answer; otherwise it declines with a reason.
 */
import { ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import type { IncomingRequest, ParticipantClient } from "../client.js";
import { RpcError } from "../errors.js";
import type { Message, ModelOptions, Provider, Usage } from "./providers/types.js";
import { isRecord } from "../../gateway/index.js";

/** Output tokens a sampling request gets when neither it nor the agent's config bounds them lower. */
const MAX_SAMPLING_TOKENS = 4096;
/** Most messages and characters of a sampling request the agent passes to its model. */
const MAX_MESSAGES = 200;
const MAX_CHARS = 400_000;

export interface SamplingDeps {
  provider: Provider;
  options: Omit<ModelOptions, "signal">;
  /** The agent's own bound on output tokens, if it has one. */
  maxTokens: number | undefined;
  onUsage(usage: Usage | undefined): void;
}

export async function answerSampling(deps: SamplingDeps, req: IncomingRequest): Promise<Record<string, unknown>> {
  const params = isRecord(req.params) ? req.params : {};
  const raw = Array.isArray(params["messages"]) ? params["messages"] : undefined;
  if (!raw || raw.length === 0)
    throw new RpcError(ErrorCode.InvalidParams, "sampling/createMessage: params.messages must be a non-empty list");
  if (raw.length > MAX_MESSAGES) throw new RpcError(ErrorCode.InvalidParams, `sampling/createMessage: at most ${MAX_MESSAGES} messages`);
  const messages: Message[] = [];
  let chars = 0;
  for (const [i, m] of raw.entries()) {
    if (!isRecord(m) || (m["role"] !== "user" && m["role"] !== "assistant")) {
      throw new RpcError(ErrorCode.InvalidParams, `sampling/createMessage: messages[${i}] needs role "user" or "assistant"`);
    }
    const text = textOf(m["content"]);
    chars += text.length;
    messages.push(m["role"] === "user" ? { role: "user", text } : { role: "assistant", text, toolCalls: [] });
  }
  if (chars > MAX_CHARS)
    throw new RpcError(ErrorCode.InvalidParams, `sampling/createMessage: the messages hold ${chars} characters; at most ${MAX_CHARS}`);
  const asked = typeof params["maxTokens"] === "number" && params["maxTokens"] > 0 ? Math.floor(params["maxTokens"]) : MAX_SAMPLING_TOKENS;
  const maxTokens = Math.min(asked, deps.maxTokens ?? MAX_SAMPLING_TOKENS, MAX_SAMPLING_TOKENS);
  const temperature =
    typeof params["temperature"] === "number" && params["temperature"] >= 0 && params["temperature"] <= 2
      ? params["temperature"]
      : deps.options.temperature;
  const system = typeof params["systemPrompt"] === "string" ? params["systemPrompt"] : "";
  const response = await deps.provider.complete({
    system,
    messages,
    tools: [],
    options: { ...deps.options, maxTokens, ...(temperature === undefined ? {} : { temperature }), signal: req.signal },
  });
  deps.onUsage(response.usage);
  return {
    role: "assistant",
    content: { type: "text", text: response.text },
    model: deps.options.model,
    stopReason: response.stopReason === "max_tokens" ? "maxTokens" : "endTurn",
  };
}

/**
 * Passes a form on to the caller of the delegation it is about: `serving` maps the
 * envelope ids of calls the agent is serving to their callers.
 */
export async function passElicitationUp(
  client: ParticipantClient,
  agentId: string,
  serving: ReadonlyMap<string, string>,
  req: IncomingRequest,
): Promise<unknown> {
  const about = (req.envelope.correlation_id ?? []).find((id) => serving.has(id));
  if (about === undefined) {
    throw new RpcError(ErrorCode.InvalidRequest, `${agentId} is an agent and fills in no forms; it is serving nobody it could ask`);
  }
  const params = isRecord(req.params) ? req.params : {};
  const meta = isRecord(params["_meta"]) ? params["_meta"] : {};
  const timeoutMs = typeof meta["mewgate/timeout_ms"] === "number" ? meta["mewgate/timeout_ms"] : undefined;
  return client.request(serving.get(about)!, "elicitation/create", params, {
    correlationId: [about],
    chain: false,
    signal: req.signal,
    timeoutMs,
  });
}

/** The text of a sampling message's content: a block or a list of blocks; what is not text is named, not sent. */
function textOf(content: unknown): string {
  const blocks = Array.isArray(content) ? content : [content];
  return blocks
    .map((b) => {
      if (!isRecord(b)) return "";
      if (b["type"] === "text" && typeof b["text"] === "string") return b["text"];
      return `[${typeof b["type"] === "string" ? b["type"].slice(0, 40) : "content"} omitted]`;
    })
    .join("\n");
}
