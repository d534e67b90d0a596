/**
 * The model behind an agent, chosen from its space.yaml `agent:` block.
 *
 * `provider: auto` picks Anthropic when ANTHROPIC_API_KEY is set, else OpenAI when
 * OPENAI_API_KEY is set, else the scripted provider (which needs `script`). The key is
 * `api_key` (usually written `${SOME_ENV}`) or else the provider's usual variable.
 *
 * Nothing here throws for a configuration that cannot work (no key, no script, an
 * unreadable script): the agent still joins, and the problem is said once in the space
 * when someone asks it something, and in the log at start. An agent that crashed at start
 * would only be restarted by its supervisor to crash again.
 */
import path from "node:path";
import type { AgentConfig } from "../../gateway/index.js";
import { AnthropicProvider } from "./providers/anthropic.js";
import type { RetryOptions } from "./providers/http.js";
import { OpenAIProvider } from "./providers/openai.js";
import { ScriptedProvider } from "./providers/scripted.js";
import { ProviderError, type ModelOptions, type ModelRequest, type ModelResponse, type Provider } from "./providers/types.js";

/** Used when `model` is not set. Override with `model:` in space.yaml. */
export const DEFAULT_MODELS = { anthropic: "claude-sonnet-4-5", openai: "gpt-4o-mini" } as const;

export type ProviderKind = "openai" | "anthropic" | "scripted";

export interface ResolvedProvider {
  provider: Provider;
  options: Omit<ModelOptions, "signal">;
  /** What was chosen; `none` when nothing usable is configured. */
  kind: ProviderKind | "none";
  /** Set when the provider cannot work: the one-line reason, said in the space and the log. */
  problem?: string;
}

/** A provider that cannot answer, so the agent reports the configuration problem instead of crashing. */
export class UnavailableProvider implements Provider {
  constructor(
    readonly name: string,
    private readonly reason: string,
  ) {}

  async complete(_request: ModelRequest): Promise<ModelResponse> {
    throw new ProviderError("missing_api_key", this.reason, { provider: this.name });
  }
}

export async function resolveProvider(
  id: string,
  config: Partial<AgentConfig>,
  opts: { env?: NodeJS.ProcessEnv; baseDir?: string; retry?: RetryOptions } = {},
): Promise<ResolvedProvider> {
  const env = opts.env ?? process.env;
  const key = (name: string) => (config.api_key ? config.api_key : env[name] || undefined);
  let kind: ProviderKind;
  const chosen = config.provider ?? "auto";
  if (chosen !== "auto") kind = chosen;
  else if (env["ANTHROPIC_API_KEY"]) kind = "anthropic";
  else if (env["OPENAI_API_KEY"]) kind = "openai";
  else kind = "scripted";

  const options: Omit<ModelOptions, "signal"> = { model: config.model ?? (kind === "scripted" ? "scripted" : DEFAULT_MODELS[kind]) };
  if (config.temperature !== undefined) options.temperature = config.temperature;
  if (config.max_tokens !== undefined) options.maxTokens = config.max_tokens;

  switch (kind) {
    case "anthropic":
      return {
        kind,
        options,
        provider: new AnthropicProvider({
          baseUrl: config.base_url,
          apiKey: key("ANTHROPIC_API_KEY"),
          apiKeyEnv: config.api_key !== undefined ? `participants.${id}.agent.api_key` : "ANTHROPIC_API_KEY",
          retry: opts.retry,
        }),
      };
    case "openai":
      return {
        kind,
        options,
        provider: new OpenAIProvider({
          baseUrl: config.base_url,
          apiKey: key("OPENAI_API_KEY"),
          apiKeyEnv: config.api_key !== undefined ? `participants.${id}.agent.api_key` : "OPENAI_API_KEY",
          retry: opts.retry,
        }),
      };
    case "scripted": {
      if (!config.script) {
        const problem =
          chosen === "auto"
            ? `agent "${id}" has no model: set ANTHROPIC_API_KEY or OPENAI_API_KEY, or give participants.${id}.agent a provider and model, or a script`
            : `agent "${id}" uses the scripted provider but has no script: set participants.${id}.agent.script`;
        return { kind: "none", options, provider: new UnavailableProvider(chosen === "auto" ? "auto" : "scripted", problem), problem };
      }
      const file = path.resolve(opts.baseDir ?? ".", config.script);
      try {
        return { kind, options, provider: await ScriptedProvider.fromFile(file) };
      } catch (err) {
        const problem = `agent "${id}": ${(err as Error).message}`;
        return { kind: "none", options, provider: new UnavailableProvider("scripted", problem), problem };
      }
    }
  }
}
