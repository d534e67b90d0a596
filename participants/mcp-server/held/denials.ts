/**
 * Structured authorization denials (the MCP community's draft SEP-2643) at the faces: a
 * refusal a client can act on carries `io.modelcontextprotocol/authorization` — in a tool
 * result's `_meta`, an `input_required` result's `_meta`, or a JSON-RPC error's `data` — with:
 *
 *   reason                  "insufficient_authorization" (the draft's one value)
 *   remediation             "available" (someone can still make it run: a person's approval,
 *                           a sign-in) or "unavailable" (decided: rejected, expired, denied)
 *   authorizationContextId  `authzctx_…`: a handle bound to the exact operation (below)
 *   remediationHints        [{type: "url", url}] where to act (the card, the console's
 *                           sign-in), [{type: "task"}] for a task the client polls
 *   mewgate/why             the gateway's own reason code (held, denied, rejected, expired,
 *                           sign_in_needed, step_up_needed, passkey_required, …): ours, additive
 *
 * The context id is sealed (HMAC-SHA256 under the mount's key, like held.ts's states) over
 * the space, the seat, the tool and the SHA-256 of the arguments, with an expiry. A client
 * retries echoing it in `_meta["io.modelcontextprotocol/authorization-context-id"]`; a retry
 * whose id opens but names another operation (another tool, other arguments, another seat)
 * is refused (-32602, `authorization_context_mismatch`). One that does not open (altered,
 * expired, another process's) is ignored, as the draft requires: the handle is never
 * authority, the call is decided by policy as ever.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";

export const AUTHZ_KEY = "io.modelcontextprotocol/authorization";
export const CONTEXT_ID_KEY = "io.modelcontextprotocol/authorization-context-id";
const PREFIX = "authzctx_";
const MAX_ID = 2048;

export interface Denial {
  reason: "insufficient_authorization";
  remediation: "available" | "unavailable";
  authorizationContextId?: string | undefined;
  remediationHints?: Array<{ type: "url"; url?: string } | { type: "task" }> | undefined;
  /** The gateway's own reason code. */
  "mewgate/why": string;
}

/** Reasons a client can act on: someone may still make the call run. */
const AVAILABLE = new Set(["held", "sign_in_needed", "step_up_needed", "passkey_required"]);

export function denial(why: string, opts: { url?: string | undefined; task?: boolean; contextId?: string | undefined } = {}): Denial {
  const hints: NonNullable<Denial["remediationHints"]> = [];
  if (opts.task) hints.push({ type: "task" });
  if (opts.url !== undefined) hints.push({ type: "url", url: opts.url });
  return {
    reason: "insufficient_authorization",
    remediation: AVAILABLE.has(why) ? "available" : "unavailable",
    ...(opts.contextId !== undefined ? { authorizationContextId: opts.contextId } : {}),
    ...(hints.length ? { remediationHints: hints } : {}),
    "mewgate/why": why,
  };
}

/** What a context id binds. Short keys: it travels in a retry's `_meta`. */
interface ContextClaims {
  /** space */
  s: string;
  /** seat */
  w: string;
  /** tool, as the client named it */
  t: string;
  /** SHA-256 (base64url) of the arguments as canonical JSON */
  a: string;
  /** expiry, ms */
  e: number;
}

export type ContextCheck = { ok: true } | { ok: false; ignored: true } | { ok: false; ignored: false; message: string };

/** Canonical JSON (keys sorted at every depth), so the same arguments digest the same however a client orders them. */
function canonical(v: unknown, depth = 0): string {
  if (depth > 64) return '"…"';
  if (v === null || typeof v !== "object") return JSON.stringify(v) ?? "null";
  if (Array.isArray(v)) return `[${v.map((x) => canonical(x, depth + 1)).join(",")}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k], depth + 1)}`)
    .join(",")}}`;
}

const digest = (args: unknown) =>
  createHash("sha256")
    .update(canonical(args ?? {}))
    .digest("base64url");

/** Context ids of one mount: one key for the process's life. */
export class AuthzContexts {
  private readonly key = randomBytes(32);

  constructor(private readonly ttlMs = 24 * 60 * 60_000) {}

  /** A context id for `seat` calling `tool` with `args` in `space`. */
  mint(space: string, seat: string, tool: string, args: unknown, now = Date.now()): string {
    const claims: ContextClaims = { s: space, w: seat, t: tool, a: digest(args), e: now + this.ttlMs };
    const body = Buffer.from(JSON.stringify(claims)).toString("base64url");
    return `${PREFIX}${body}.${this.mac(body)}`;
  }

  /** A retry's echoed id against what it asks: the same operation, or refused; ignored when it does not open. */
  check(id: unknown, space: string, seat: string, tool: string, args: unknown, now = Date.now()): ContextCheck {
    const ignored = { ok: false as const, ignored: true as const };
    if (typeof id !== "string" || id.length > MAX_ID || !id.startsWith(PREFIX)) return ignored;
    const [body, mac] = id.slice(PREFIX.length).split(".");
    if (body === undefined || mac === undefined) return ignored;
    const want = Buffer.from(this.mac(body));
    const given = Buffer.from(mac);
    if (want.length !== given.length || !timingSafeEqual(want, given)) return ignored;
    let c: ContextClaims;
    try {
      c = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as ContextClaims;
    } catch {
      return ignored;
    }
    if (typeof c.e !== "number" || c.e <= now) return ignored;
    const refuse = (message: string) => ({ ok: false as const, ignored: false as const, message });
    if (c.s !== space || c.w !== seat)
      return refuse("the authorization context was issued to another participant; it authorizes nothing here");
    if (c.t !== tool)
      return refuse(`the authorization context is for a call of ${String(c.t).slice(0, 200)}, not of ${tool.slice(0, 200)}`);
    if (c.a !== digest(args)) return refuse("the authorization context is for the same tool with other arguments; ask again with these");
    return { ok: true };
  }

  private mac(text: string): string {
    return createHmac("sha256", this.key).update(text).digest("base64url");
  }
}
