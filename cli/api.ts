/**
 * The operator HTTP API as the one-shot commands use it (`proposals`, `status`, `tools`,
 * `grants`): they act as a participant without joining, so a human's live terminal, or
 * an in-process agent with the same identity, is never logged out by them.
 */
import { selfCommand } from "./invocation.js";
import type { Envelope } from "../gateway/index.js";
import type { Target } from "./remote.js";
import { CliError } from "./space.js";

export class ApiClient {
  private readonly base: string;

  constructor(private readonly target: Target) {
    const http = target.url.replace(/^ws:/i, "http:").replace(/^wss:/i, "https:");
    this.base = `${http}/api/spaces/${encodeURIComponent(target.space)}/`;
  }

  // biome-ignore lint/suspicious/noExplicitAny: the API answers untyped JSON; callers name the shape they read
  get<T = any>(path: string): Promise<T> {
    return this.call<T>("GET", path);
  }

  // biome-ignore lint/suspicious/noExplicitAny: the API answers untyped JSON; callers name the shape they read
  post<T = any>(path: string, body: unknown): Promise<T> {
    return this.call<T>("POST", path, body);
  }

  // biome-ignore lint/suspicious/noExplicitAny: the API answers untyped JSON; callers name the shape they read
  delete<T = any>(path: string): Promise<T> {
    return this.call<T>("DELETE", path);
  }

  /**
   * Opens the caller's event stream and resolves once it is open, with `next`: the first
   * envelope matching `pred` within `ms` (subscribe first, then act). Wrapped in an object
   * because a promise resolved with a promise would wait for the inner one.
   */
  async watch(pred: (e: Envelope) => boolean, ms: number): Promise<{ next: Promise<Envelope | undefined> }> {
    const ctl = new AbortController();
    const res = await fetch(`${this.base}events`, { headers: this.headers(), signal: ctl.signal }).catch((err: Error) => {
      throw this.unreachable(err);
    });
    if (!res.ok || !res.body) throw new CliError(`the event stream was refused (HTTP ${res.status})`);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const next = (async () => {
      const timer = setTimeout(() => ctl.abort(), ms);
      let buf = "";
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return undefined;
          buf += decoder.decode(value, { stream: true });
          for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
            const event = buf.slice(0, end);
            buf = buf.slice(end + 2);
            const data = /^data: (.*)$/m.exec(event)?.[1];
            if (!event.startsWith("event: envelope") || data === undefined) continue;
            const env = JSON.parse(data) as Envelope;
            if (pred(env)) return env;
          }
        }
      } catch {
        return undefined;
      } finally {
        clearTimeout(timer);
        ctl.abort();
      }
    })();
    return { next };
  }

  private headers(): Record<string, string> {
    return { authorization: `Bearer ${this.target.token}`, "content-type": "application/json" };
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.base}${path}`, {
      method,
      headers: this.headers(),
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    }).catch((err: Error) => {
      throw this.unreachable(err);
    });
    const text = await res.text();
    // biome-ignore lint/suspicious/noExplicitAny: parsed JSON of any shape, read by key below
    let parsed: any;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    if (res.ok) return parsed as T;
    if (res.status === 401)
      throw new CliError(`the gateway refused the token from ${this.target.tokenSource} for space "${this.target.space}"`);
    const e = parsed?.error;
    if (e?.code === "unknown_space") throw new CliError(`the gateway at ${this.target.url} has no space "${this.target.space}"`);
    if (e) throw new CliError(`the gateway refused it: ${String(e.code)}: ${String(e.message)}`);
    throw new CliError(`the gateway answered HTTP ${res.status}${text ? `: ${text.trim().slice(0, 200)}` : ""}`);
  }

  private unreachable(err: Error): CliError {
    const cause = (err as { cause?: { code?: string } }).cause?.code;
    return new CliError(
      `cannot reach the gateway at ${this.target.url}${cause ? ` (${cause})` : ""}: is it running? (${selfCommand()} up, or ${selfCommand()} status)`,
    );
  }
}

/** A proposal awaiting a decision from the API (pending or interrupted), in the envelope shape the terminal's formatting reads. */
// biome-ignore lint/suspicious/noExplicitAny: an API proposal as untyped JSON, read by key
export function asEnvelope(p: Record<string, any>): Envelope {
  const tool = typeof p["tool"] === "string" ? (p["tool"] as string).slice(String(p["owner"]).length + 1) : undefined;
  return {
    protocol: "mew/v0.4",
    id: String(p["id"]),
    ts: String(p["createdAt"] ?? ""),
    from: String(p["proposer"]),
    to: [String(p["owner"])],
    kind: "mcp/proposal",
    payload: {
      method: p["method"],
      params: p["method"] === "tools/call" ? { name: tool, arguments: p["arguments"] } : p["params"],
      // Approved before the gateway stopped: shown as such, and approved again in one step.
      // Edited by an approver: `arguments` above are what runs; who edited, and the mark the approval echoes.
      ...(p["edited"] ? { "mewgate/edited": { arguments: p["arguments"], by: p["edited"]["by"], at: p["edited"]["at"] } } : {}),
      ...(p["interrupted"]
        ? {
            "mewgate/interrupted": {
              approved_by: p["interrupted"]["approvedBy"],
              message: p["interrupted"]["message"],
              arguments: p["interrupted"]["arguments"],
            },
          }
        : {}),
    },
  };
}
