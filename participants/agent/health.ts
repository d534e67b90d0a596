/**
 * The model provider's health and what the agent spent on it: a failure that says "the
 * provider cannot serve now" starts a cool-down in which triggers do not call it again;
 * turns, tokens and the last turn's latency feed `participant/status`.
 *
 * The chat turns, the ask server and the control messages share this one object
 * (participant.ts builds it).
 */
import type { Logger } from "pino";
import type { TurnResult } from "./loop.js";
import type { ProviderError } from "./providers/types.js";

/** Failures that say "the provider cannot serve now", as opposed to one bad request. */
function isAvailabilityError(error: ProviderError): boolean {
  switch (error.code) {
    case "missing_api_key":
    case "unreachable":
    case "rate_limited":
      return true;
    case "http_error":
      return error.status === undefined || error.status >= 500 || error.status === 401 || error.status === 403 || error.status === 404;
    default:
      return false;
  }
}

export class ProviderHealth {
  down: { until: number; error: ProviderError } | undefined;
  lastError: string | undefined;
  /** Chat turns run since start (or restart). */
  turns = 0;
  inputTokens = 0;
  outputTokens = 0;
  latencyMs: number | undefined;

  constructor(
    private readonly cooldownMs: number,
    private readonly log: Logger | undefined,
  ) {}

  providerDown(): boolean {
    if (this.down && Date.now() < this.down.until) return true;
    this.down = undefined;
    return false;
  }

  /** Says a provider failure once; availability failures start the cool-down. */
  providerFailed(error: ProviderError, tell: ((text: string) => void) | undefined): void {
    this.lastError = error.message;
    const availability = isAvailabilityError(error);
    if (availability) this.down = { until: Date.now() + this.cooldownMs, error };
    this.log?.warn({ code: error.code, status: error.status, provider: error.provider }, error.message);
    const after = availability ? ` I will not try again for ${Math.ceil(this.cooldownMs / 1000)} s; ask me again after that.` : "";
    tell?.(`I could not answer: ${error.message}.${after}`);
  }

  account(turn: TurnResult, started: number): void {
    this.inputTokens += turn.usage.input;
    this.outputTokens += turn.usage.output;
    this.latencyMs = Date.now() - started;
    if (turn.status !== "error") {
      this.down = undefined;
    }
  }

  /** `participant/restart`: the cool-down and the counters start again. */
  reset(): void {
    this.down = undefined;
    this.lastError = undefined;
    this.turns = 0;
    this.inputTokens = 0;
    this.outputTokens = 0;
    this.latencyMs = undefined;
  }
}
