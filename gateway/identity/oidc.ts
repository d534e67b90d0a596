/**
 * Signing a person in to the console with OpenID Connect: the authorization code flow with
 * PKCE (S256), `state` and `nonce`, through `openid-client` (loaded by the first sign-in).
 *
 * Each sign-in that is under way is kept here, in memory, by its `state`: its PKCE
 * verifier, its nonce, and a binding value that the browser that started it holds in a
 * short-lived cookie. The callback takes the entry out (one use: a replayed callback finds
 * nothing), checks the binding (a callback carried to another browser is refused), and has
 * openid-client redeem the code and verify the ID token (signature, `iss`, `aud`, `exp`,
 * `nonce`). What comes back is the ID token's verified claims; nothing unsigned is used.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IdentityConfig } from "../config/identity.js";

type OidcClient = typeof import("openid-client");
type Configuration = import("openid-client").Configuration;

interface Pending {
  verifier: string;
  nonce: string;
  binding: string;
  redirectUri: string;
  expiresAt: number;
}

/** How long a person has at the provider to sign in. */
const PENDING_MS = 10 * 60_000;
const MAX_PENDING = 1000;
const DISCOVERY_TIMEOUT_S = 5;

let oidc: Promise<OidcClient> | undefined;

export class SignInError extends Error {
  constructor(
    readonly code: "unknown_state" | "binding_mismatch" | "provider_error" | "unavailable" | "not_configured",
    message: string,
  ) {
    super(message);
  }
}

export class ConsoleSignIn {
  private readonly pending = new Map<string, Pending>();
  private discovered: Promise<Configuration> | undefined;

  constructor(
    private readonly config: IdentityConfig,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  /** Whether the console can sign people in (a client id is configured). */
  get enabled(): boolean {
    return this.config.client_id !== undefined;
  }

  /** Starts a sign-in: the provider's URL to send the browser to, and the binding value for its cookie. */
  async start(redirectUri: string): Promise<{ url: string; binding: string }> {
    const { client, config } = await this.client();
    this.sweep();
    if (this.pending.size >= MAX_PENDING) this.pending.delete(this.pending.keys().next().value!);
    const verifier = client.randomPKCECodeVerifier();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const binding = randomBytes(24).toString("base64url");
    this.pending.set(state, { verifier, nonce, binding, redirectUri, expiresAt: Date.now() + PENDING_MS });
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: this.config.scopes.join(" "),
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      nonce,
    });
    return { url: url.href, binding };
  }

  /** Finishes a sign-in at the callback URL: the ID token's verified claims. */
  async finish(callbackUrl: URL, binding: string | undefined): Promise<Record<string, unknown>> {
    const state = callbackUrl.searchParams.get("state") ?? "";
    const p = this.pending.get(state);
    // One use, whatever happens next: a code or state seen twice is refused the second time.
    this.pending.delete(state);
    if (!p || p.expiresAt <= Date.now())
      throw new SignInError("unknown_state", "this sign-in is unknown, used already or expired; start again");
    if (binding === undefined || binding.length !== p.binding.length || !timingSafeEqual(Buffer.from(binding), Buffer.from(p.binding))) {
      throw new SignInError("binding_mismatch", "this sign-in was started in another browser; start again here");
    }
    const { client, config } = await this.client();
    // The callback's address as registered (the request's own Host may differ behind a proxy).
    const current = new URL(p.redirectUri);
    current.search = callbackUrl.search;
    let tokens: Awaited<ReturnType<OidcClient["authorizationCodeGrant"]>>;
    try {
      tokens = await client.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: p.verifier,
        expectedState: state,
        expectedNonce: p.nonce,
        idTokenExpected: true,
      });
    } catch (err) {
      throw new SignInError("provider_error", `the identity provider did not sign you in: ${describe(err)}`);
    }
    const claims = tokens.claims();
    if (!claims) throw new SignInError("provider_error", "the identity provider returned no ID token");
    return claims as Record<string, unknown>;
  }

  private async client(): Promise<{ client: OidcClient; config: Configuration }> {
    if (!this.enabled) throw new SignInError("not_configured", "identity.client_id is not set: the console cannot sign people in");
    oidc ??= import("openid-client");
    const client = await oidc;
    this.discovered ??= this.discover(client);
    const attempt = this.discovered;
    try {
      return { client, config: await attempt };
    } catch (err) {
      // A provider that was down is asked again by the next sign-in.
      if (this.discovered === attempt) this.discovered = undefined;
      throw new SignInError("unavailable", `the identity provider could not be reached (${describe(err)})`);
    }
  }

  private discover(client: OidcClient): Promise<Configuration> {
    const secretName = this.config.client_secret_env;
    const secret = secretName ? this.env[secretName] : undefined;
    if (secretName && !secret)
      return Promise.reject(new Error(`the environment variable ${secretName} (identity.client_secret_env) is not set`));
    const issuer = new URL(this.config.issuer);
    // Plain http only to a provider on this machine (tests, a local Keycloak).
    const loopback = issuer.protocol === "http:" && /^(127\.\d+\.\d+\.\d+|\[::1\]|localhost)$/.test(issuer.hostname);
    return client.discovery(
      issuer,
      this.config.client_id!,
      secret ? { client_secret: secret, id_token_signed_response_alg: this.config.algorithms[0] } : undefined,
      secret ? client.ClientSecretBasic(secret) : client.None(),
      {
        timeout: DISCOVERY_TIMEOUT_S,
        ...(loopback ? { execute: [client.allowInsecureRequests] } : {}),
      },
    );
  }

  private sweep(): void {
    const now = Date.now();
    for (const [k, p] of this.pending) if (p.expiresAt <= now) this.pending.delete(k);
  }
}

function describe(err: unknown): string {
  const e = err as {
    error?: unknown;
    error_description?: unknown;
    message?: unknown;
    code?: unknown;
    cause?: { claim?: unknown; cause?: { claim?: unknown } };
  };
  if (typeof e.error === "string")
    return `${e.error}${typeof e.error_description === "string" ? `: ${e.error_description}` : ""}`.slice(0, 200);
  // Which claim did not match (nonce, iss, aud…): its name only, never a value.
  const name = e.cause?.claim ?? e.cause?.cause?.claim;
  const claim = typeof name === "string" ? ` (the "${name}" claim)` : "";
  return `${String(e.message ?? err)}${claim}`.slice(0, 200);
}
