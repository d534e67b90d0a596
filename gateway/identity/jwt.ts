/**
 * The OAuth 2.1 resource server's check of a bearer token that is a JWT from the space's
 * identity provider, with `jose`:
 * - the provider's keys come from its discovery document's `jwks_uri`, fetched with a
 *   timeout, cached, and fetched again (after a cooldown) when a token names a key id the
 *   cache does not know — so key rotation at the provider needs nothing here;
 * - only the configured asymmetric algorithms (never `none`, never HS*: an HS256 token
 *   "signed" with the public key is refused before any key is looked at);
 * - `iss` must be the configured issuer, `aud` this gateway's resource URL, `exp`/`nbf`
 *   within a small skew; the scope the surface needs must be in `scope` (or `scp`).
 * A provider that hangs or answers garbage makes requests fail (503), logged once a
 * minute at most; the process carries on and static tokens keep working.
 * `jose` is loaded by the first JWT, not at every start of a gateway that may never see one.
 */
import type { createRemoteJWKSet, JWTPayload } from "jose";
import type { Logger } from "pino";
import type { IdentityConfig } from "../config/identity.js";

export type Surface = "mcp" | "api" | "join";

export type Verified =
  | { ok: true; claims: JWTPayload & Record<string, unknown>; scopes: string[] }
  /** 401: the token is not good (RFC 6750 `invalid_token`). */
  | { ok: false; status: 401; error: "invalid_token"; description: string }
  /** 403: good, but without the scope the surface needs. */
  | { ok: false; status: 403; error: "insufficient_scope"; description: string; scope: string }
  /** 503: the provider's keys could not be had; nothing is wrong with the token as far as we know. */
  | { ok: false; status: 503; error: "temporarily_unavailable"; description: string };

/** A bearer token shaped as a compact JWS: three base64url parts. Static tokens never have dots. */
export function looksLikeJwt(token: string): boolean {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token);
}

let jose: Promise<typeof import("jose")> | undefined;

const DISCOVERY_RETRY_MS = 30_000;
const JWKS_COOLDOWN_MS = 30_000;
const JWKS_MAX_AGE_MS = 10 * 60_000;
const LOG_EVERY_MS = 60_000;

export class AccessTokens {
  private jwks: ReturnType<typeof createRemoteJWKSet> | undefined;
  private discovering: Promise<ReturnType<typeof createRemoteJWKSet>> | undefined;
  private discoveryFailedAt = 0;
  private lastLogged = new Map<string, number>();

  constructor(
    private readonly config: IdentityConfig,
    private readonly log: Logger,
  ) {}

  /** Verifies `token` for `surface`; `audiences` are this gateway's resource URLs as the request reached it. */
  async verify(token: string, surface: Surface, audiences: string[]): Promise<Verified> {
    jose ??= import("jose");
    const { decodeProtectedHeader, errors, jwtVerify } = await jose;
    // A token no key could make valid is refused before the provider is asked anything.
    let alg: unknown;
    try {
      alg = decodeProtectedHeader(token).alg;
    } catch {
      return { ok: false, status: 401, error: "invalid_token", description: "the token is not a valid JWT" };
    }
    if (!(this.config.algorithms as readonly unknown[]).includes(alg))
      return { ok: false, status: 401, error: "invalid_token", description: "the token's signing algorithm is not accepted" };
    let keys: ReturnType<typeof createRemoteJWKSet>;
    try {
      keys = await this.keys();
    } catch (err) {
      this.warn(
        "discovery",
        `could not read the identity provider's discovery document (${(err as Error).message}); JWT access tokens are refused until it answers`,
      );
      return {
        ok: false,
        status: 503,
        error: "temporarily_unavailable",
        description: "the identity provider could not be reached to check this token; try again later",
      };
    }
    const resource = this.config.resource?.replace(/\/$/, "");
    // With a configured resource, the paths the request's own URLs name, under it (`…/mcp/fs`).
    const paths = audiences.flatMap((a) => (URL.canParse(a) ? [new URL(a).pathname] : [])).filter((p) => p.length > 1 && p !== "/mcp");
    const audience = resource
      ? [...new Set([resource, `${resource}/`, `${resource}/mcp`, ...paths.map((p) => `${resource}${p}`)])]
      : audiences;
    let claims: JWTPayload;
    try {
      ({ payload: claims } = await jwtVerify(token, keys, {
        issuer: this.config.issuer,
        audience,
        algorithms: this.config.algorithms,
        clockTolerance: this.config.clock_skew_s,
        requiredClaims: ["exp", "sub"],
      }));
    } catch (err) {
      // The keys could not be had (timeout, an error status, garbage, no network): not the token's fault.
      const unavailable =
        err instanceof errors.JWKSTimeout ||
        err instanceof errors.JWKSInvalid ||
        !(err instanceof errors.JOSEError) ||
        err.code === "ERR_JOSE_GENERIC";
      if (unavailable) {
        this.warn(
          "jwks",
          `could not get the identity provider's keys (${(err as Error).name}: ${(err as Error).message}); JWT access tokens are refused until it answers`,
        );
        return {
          ok: false,
          status: 503,
          error: "temporarily_unavailable",
          description: "the identity provider's keys could not be fetched to check this token; try again later",
        };
      }
      return { ok: false, status: 401, error: "invalid_token", description: describe(errors, err) };
    }
    const scopes = scopesOf(claims);
    const needed = this.config.required_scopes[surface];
    if (!scopes.includes(needed))
      return { ok: false, status: 403, error: "insufficient_scope", description: `this token lacks the scope "${needed}"`, scope: needed };
    return { ok: true, claims: claims as JWTPayload & Record<string, unknown>, scopes };
  }

  /** The provider's key set, from its discovery document (read once; a failure is retried after a pause). */
  private keys(): Promise<ReturnType<typeof createRemoteJWKSet>> {
    if (this.jwks) return Promise.resolve(this.jwks);
    if (this.discovering) return this.discovering;
    if (Date.now() - this.discoveryFailedAt < DISCOVERY_RETRY_MS && this.discoveryFailedAt > 0)
      return Promise.reject(new Error("failed moments ago"));
    const attempt = (async () => {
      const url = `${this.config.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`;
      const res = await fetch(url, { signal: AbortSignal.timeout(this.config.jwks_timeout_ms), redirect: "error" });
      if (!res.ok) throw new Error(`HTTP ${res.status} from ${url}`);
      const doc = (await res.json()) as { issuer?: unknown; jwks_uri?: unknown };
      // RFC 8414 / OIDC discovery: the document must be the issuer's own.
      if (doc.issuer !== this.config.issuer)
        throw new Error(
          `the discovery document names issuer ${JSON.stringify(String(doc.issuer).slice(0, 100))}, not ${this.config.issuer}`,
        );
      if (typeof doc.jwks_uri !== "string" || !/^https?:\/\//.test(doc.jwks_uri)) throw new Error("the discovery document has no jwks_uri");
      jose ??= import("jose");
      const { createRemoteJWKSet } = await jose;
      this.jwks = createRemoteJWKSet(new URL(doc.jwks_uri), {
        timeoutDuration: this.config.jwks_timeout_ms,
        cooldownDuration: JWKS_COOLDOWN_MS,
        cacheMaxAge: JWKS_MAX_AGE_MS,
      });
      return this.jwks;
    })();
    this.discovering = attempt;
    attempt.then(
      () => (this.discovering = undefined),
      () => {
        this.discovering = undefined;
        this.discoveryFailedAt = Date.now();
      },
    );
    return attempt;
  }

  private warn(what: string, message: string): void {
    const now = Date.now();
    if (now - (this.lastLogged.get(what) ?? 0) < LOG_EVERY_MS) return;
    this.lastLogged.set(what, now);
    this.log.warn({ issuer: this.config.issuer }, message);
  }
}

function scopesOf(claims: JWTPayload): string[] {
  const scope = claims["scope"];
  const scp = claims["scp"];
  if (typeof scope === "string") return scope.split(" ").filter(Boolean);
  if (Array.isArray(scp)) return scp.filter((s): s is string => typeof s === "string");
  if (typeof scp === "string") return scp.split(" ").filter(Boolean);
  return [];
}

/** Why a token was refused, for the client (never the token). */
function describe(errors: typeof import("jose").errors, err: unknown): string {
  if (err instanceof errors.JWTExpired) return "the token has expired";
  if (err instanceof errors.JWTClaimValidationFailed) return `the token's "${err.claim}" claim is not valid here (${err.reason})`;
  if (err instanceof errors.JOSEAlgNotAllowed) return "the token's signing algorithm is not accepted";
  if (err instanceof errors.JWSSignatureVerificationFailed) return "the token's signature does not verify";
  if (err instanceof errors.JWKSNoMatchingKey) return "the token is not signed by a key of the identity provider";
  if (err instanceof errors.JWSInvalid || err instanceof errors.JWTInvalid) return "the token is not a valid JWT";
  return "the token could not be verified";
}
