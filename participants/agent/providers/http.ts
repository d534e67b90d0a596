/**
 * JSON over HTTP with bounded retries, shared by the HTTP providers.
 *
 * Retried: 429, 5xx, and network failures (refused, reset, no answer within the attempt
 * timeout). Waits grow exponentially with jitter; a `retry-after` (or `retry-after-ms`)
 * header replaces the computed wait. Both the number of attempts and the total time,
 * waits included, are bounded: a wait that would end past the budget is not started.
 * Any other 4xx fails at once. Every message names the provider, the URL and the status
 * and quotes the provider's own error message, with the API key removed.
 */
import { ProviderError, type ProviderErrorCode } from "./types.js";
import { isRecord } from "../../../gateway/index.js";

export interface RetryOptions {
  /** Attempts in all, the first included. Default 4. */
  attempts?: number;
  /** The first wait; each later one doubles, up to `maxDelayMs`. Default 500. */
  baseDelayMs?: number;
  /** Default 8000. */
  maxDelayMs?: number;
  /** Bound on the whole call: attempts plus waits. Default 120 000. */
  totalTimeMs?: number;
  /** Bound on one attempt (a model turn can be slow). Default 120 000. */
  requestTimeoutMs?: number;
}

export const DEFAULT_RETRY: Readonly<Required<RetryOptions>> = {
  attempts: 4,
  baseDelayMs: 500,
  maxDelayMs: 8000,
  totalTimeMs: 120_000,
  requestTimeoutMs: 120_000,
};

export interface PostJsonOptions {
  /** Provider name for messages. */
  provider: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
  /** Removed from every error message (the API key), whatever the server echoes. */
  secret?: string | undefined;
  signal?: AbortSignal | undefined;
  retry?: RetryOptions | undefined;
}

/** POSTs `body` as JSON and returns the parsed JSON of the first 2xx response. */
export async function postJson(opts: PostJsonOptions): Promise<unknown> {
  const retry = { ...DEFAULT_RETRY, ...opts.retry };
  const attempts = Math.max(1, Math.floor(retry.attempts));
  const deadline = Date.now() + retry.totalTimeMs;
  const payload = JSON.stringify(opts.body);
  const fail = (code: ProviderErrorCode, message: string, detail: { status?: number; attempts: number; cause?: unknown }) =>
    new ProviderError(code, redact(`${opts.provider}: ${message}`, opts.secret), { provider: opts.provider, ...detail });

  let last: ProviderError | undefined;
  let attempt = 0;
  while (attempt < attempts) {
    attempt++;
    if (opts.signal?.aborted) throw fail("aborted", "request aborted", { attempts: attempt - 1, cause: opts.signal.reason });
    const timeoutMs = Math.max(1, Math.min(retry.requestTimeoutMs, deadline - Date.now()));
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;

    let status: number;
    let text: string;
    let headers: Headers;
    try {
      const res = await fetch(opts.url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json", ...opts.headers },
        body: payload,
        signal,
      });
      status = res.status;
      headers = res.headers;
      text = await res.text();
    } catch (err) {
      if (opts.signal?.aborted) throw fail("aborted", "request aborted", { attempts: attempt, cause: opts.signal.reason });
      const why = timeout.aborted ? `no response within ${timeoutMs} ms` : describeNetworkError(err);
      last = fail("unreachable", `cannot reach ${opts.url} (${why}) after ${attempt} attempt${attempt === 1 ? "" : "s"}`, {
        attempts: attempt,
        cause: err,
      });
      if (!(await wait(undefined))) break;
      continue;
    }

    if (status >= 200 && status < 300) {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        throw fail("bad_response", `HTTP ${status} from ${opts.url} is not JSON: ${excerpt(text)}`, { status, attempts: attempt });
      }
    }

    const detail = errorMessageOf(text);
    if (status === 429 || status >= 500) {
      const code = status === 429 ? "rate_limited" : "http_error";
      const what = status === 429 ? "rate limited" : "server error";
      last = fail(code, `${what} (HTTP ${status}) by ${opts.url} after ${attempt} attempt${attempt === 1 ? "" : "s"}: ${detail}`, {
        status,
        attempts: attempt,
      });
      const asked = retryAfterMs(headers);
      if (asked !== undefined && Date.now() + asked > deadline) {
        throw fail(
          code,
          `${what} (HTTP ${status}) by ${opts.url}: asked to retry after ${Math.ceil(asked / 1000)} s, beyond the retry budget: ${detail}`,
          {
            status,
            attempts: attempt,
          },
        );
      }
      if (!(await wait(asked))) break;
      continue;
    }

    const hint = status === 401 || status === 403 ? " (check the API key and its permissions)" : "";
    throw fail("http_error", `HTTP ${status} from ${opts.url}${hint}: ${detail}`, { status, attempts: attempt });
  }
  // Only reachable after at least one failed attempt.
  throw last ?? fail("unreachable", `no attempt could be made to ${opts.url}`, { attempts: 0 });

  /** Waits before the next attempt; false when there is no next attempt within the budget. */
  async function wait(asked: number | undefined): Promise<boolean> {
    if (attempt >= attempts) return false;
    const ms = asked ?? backoffDelay(attempt, retry);
    if (Date.now() + ms >= deadline) return false;
    await sleep(ms, opts.signal);
    if (opts.signal?.aborted) throw fail("aborted", "request aborted", { attempts: attempt, cause: opts.signal.reason });
    return true;
  }
}

/**
 * The wait after failed attempt `attempt` (1-based): `base * 2^(attempt-1)` capped at
 * `maxDelayMs`, then drawn uniformly from its upper half, so clients that failed together
 * do not retry together.
 */
export function backoffDelay(
  attempt: number,
  retry: Pick<Required<RetryOptions>, "baseDelayMs" | "maxDelayMs">,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** `retry-after-ms` (OpenAI), else `retry-after` in seconds or as an HTTP date. */
export function retryAfterMs(headers: Headers, now = Date.now()): number | undefined {
  const ms = headers.get("retry-after-ms");
  if (ms !== null && ms.trim() !== "" && Number.isFinite(Number(ms))) return Math.max(0, Number(ms));
  const value = headers.get("retry-after");
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** The provider's own words: `error.message` (OpenAI, Anthropic), `message`, `error`, or the text. */
export function errorMessageOf(text: string): string {
  try {
    const body = JSON.parse(text) as unknown;
    if (isRecord(body)) {
      const error = body["error"];
      if (isRecord(error) && typeof error["message"] === "string") return excerpt(error["message"]);
      if (typeof error === "string") return excerpt(error);
      if (typeof body["message"] === "string") return excerpt(body["message"]);
      if (typeof body["detail"] === "string") return excerpt(body["detail"]);
    }
  } catch {
    // Not JSON: a proxy's HTML page or plain text; quote it.
  }
  return text.trim() ? excerpt(text) : "(empty body)";
}

function describeNetworkError(err: unknown): string {
  // undici wraps the socket error: TypeError("fetch failed", { cause: Error("connect ECONNREFUSED …") }).
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return code && !cause.message.includes(code) ? `${code}: ${cause.message}` : cause.message;
  }
  return err instanceof Error ? err.message : String(err);
}

function excerpt(text: string, max = 500): string {
  const one = text.replace(/\s+/g, " ").trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

function redact(text: string, secret: string | undefined): string {
  return secret && secret.length >= 4 ? text.split(secret).join("[redacted]") : text;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** `https://host/v1/` → `https://host/v1`, so paths can be appended with one `/`. */
export function trimBaseUrl(url: string): string {
  return url.replace(/\/+$/, "");
}
