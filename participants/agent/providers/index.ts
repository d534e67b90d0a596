/**
 * Provider construction from an agent's settings (as space.yaml will give them).
 * The API key is read from the environment here and nowhere else.
 */
import path from "node:path";
import { AnthropicProvider } from "./anthropic.js";
import type { RetryOptions } from "./http.js";
import { OpenAIProvider } from "./openai.js";
import { ScriptedProvider, type Script, type ScriptStep } from "./scripted.js";
import type { ModelOptions, Provider } from "./types.js";

export interface ProviderSettings {
  provider: "openai" | "anthropic" | "scripted";
  /** Required for openai and anthropic; `scripted` by default for scripted. */
  model?: string | undefined;
  base_url?: string | undefined;
  /** Environment variable holding the key; default `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`. */
  api_key_env?: string | undefined;
  /** openai only; see `OpenAIProviderOptions.requireApiKey`. */
  require_api_key?: boolean | undefined;
  temperature?: number | undefined;
  max_tokens?: number | undefined;
  headers?: Record<string, string> | undefined;
  /** scripted only: a file (relative to `baseDir`) or the script itself. */
  script?: string | Script | ScriptStep[] | undefined;
}

export interface CreatedProvider {
  provider: Provider;
  options: Omit<ModelOptions, "signal">;
}

export async function createProvider(
  settings: ProviderSettings,
  opts: { env?: NodeJS.ProcessEnv; baseDir?: string; retry?: RetryOptions } = {},
): Promise<CreatedProvider> {
  const env = opts.env ?? process.env;
  const options: Omit<ModelOptions, "signal"> = { model: settings.model ?? "scripted" };
  if (settings.temperature !== undefined) options.temperature = settings.temperature;
  if (settings.max_tokens !== undefined) options.maxTokens = settings.max_tokens;
  if (settings.provider !== "scripted" && !settings.model) throw new Error(`${settings.provider}: a model is required`);

  switch (settings.provider) {
    case "openai": {
      const apiKeyEnv = settings.api_key_env ?? "OPENAI_API_KEY";
      const provider = new OpenAIProvider({
        baseUrl: settings.base_url,
        apiKey: env[apiKeyEnv] || undefined,
        apiKeyEnv,
        requireApiKey: settings.require_api_key,
        headers: settings.headers,
        retry: opts.retry,
      });
      return { provider, options };
    }
    case "anthropic": {
      const apiKeyEnv = settings.api_key_env ?? "ANTHROPIC_API_KEY";
      const provider = new AnthropicProvider({
        baseUrl: settings.base_url,
        apiKey: env[apiKeyEnv] || undefined,
        apiKeyEnv,
        headers: settings.headers,
        retry: opts.retry,
      });
      return { provider, options };
    }
    case "scripted": {
      const script = settings.script ?? [];
      const provider =
        typeof script === "string"
          ? await ScriptedProvider.fromFile(path.resolve(opts.baseDir ?? ".", script))
          : new ScriptedProvider(script);
      return { provider, options };
    }
  }
}
