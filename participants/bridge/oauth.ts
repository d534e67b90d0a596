/**
 * mewgate as an MCP OAuth client (the MCP authorization spec): what a bridge does to hold
 * a token for a `url:` server that answers 401.
 *
 * - Protected-resource metadata (RFC 9728): the 401's `resource_metadata`, else the
 *   well-known locations; its `resource` must name this server, or nothing goes further.
 * - Authorization-server metadata (RFC 8414, then OpenID discovery, with the spec's
 *   fallbacks); its `issuer` must be the authorization server the resource named.
 * - A client identity: a client ID metadata document's URL where the authorization server
 *   accepts one (oauth-client-document.ts), else the one configured (`client_id`, with
 *   `client_secret` or a `private_key` for private_key_jwt, RFC 7523), else one registered
 *   before and kept in the vault, else dynamic registration (RFC 7591).
 * - The code flow with PKCE S256, `state`, `resource` (RFC 8707) exactly as the resource
 *   published it; the authorization response's `iss` (RFC 9207) and `state` are checked
 *   before the code is exchanged; refresh tokens are used and their rotation kept;
 *   `client_credentials` for a service account.
 *
 * The discovery comes from the MCP SDK (`client/auth.js`: the spec's URL orders and
 * fallbacks, WWW-Authenticate parsing, registration); the grants from `openid-client`
 * (PKCE, state and `iss` checks, token endpoint authentication basic, post or none).
 * Tokens live only in the vault (oauth-vault.ts) and in the Authorization header sent to
 * the server: never in a log line, an event, or an envelope.
 */
import {
  discoverAuthorizationServerMetadata,
  discoverOAuthProtectedResourceMetadata,
  extractWWWAuthenticateParams,
  registerClient,
} from "@modelcontextprotocol/sdk/client/auth.js";
import { checkResourceAllowed } from "@modelcontextprotocol/sdk/shared/auth-utils.js";
import type { OAuthMetadata, OAuthProtectedResourceMetadata } from "@modelcontextprotocol/sdk/shared/auth.js";
import { importPKCS8 } from "jose";
import * as oidc from "openid-client";
import type { Logger } from "pino";
import type { OAuthConfig } from "../../gateway/index.js";
import type { CredentialVault, StoredClient, StoredTokens, Subject } from "./oauth-vault.js";

/** What a 401 or 403 said (WWW-Authenticate). */
export interface Challenge {
  resourceMetadataUrl?: URL | undefined;
  scope?: string | undefined;
  error?: string | undefined;
}

/** Where this server's tokens come from, checked. */
export interface Discovered {
  /** The authorization server's issuer identifier, as the resource named it and its metadata repeats it. */
  issuer: string;
  /** The `resource` parameter (RFC 8707): the protected resource's own identifier, as published. */
  resource: string;
  metadata: OAuthMetadata;
  scopesSupported: string[] | undefined;
}

/** A sign-in begun: what the callback needs to finish it. Kept in memory only. */
export interface PendingSignIn {
  state: string;
  verifier: string;
  subject: Subject;
  issuer: string;
  redirectUri: string;
  authorizationUrl: URL;
}

export class OAuthFailure extends Error {}

/** Each request to an authorization server, or for metadata, gets this long. */
const AS_TIMEOUT_MS = 15_000;

/** Loopback hosts: the only ones plain http is accepted for, and the only issuers headless consent follows. */
export function isLoopback(url: URL): boolean {
  const h = url.hostname.replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127(\.\d{1,3}){3}$/.test(h);
}

export function parseChallenge(res: Response): Challenge {
  const p = extractWWWAuthenticateParams(res);
  return { resourceMetadataUrl: p.resourceMetadataUrl, scope: p.scope, error: p.error };
}

export interface OAuthClientOptions {
  /** The bridge's participant id: credentials are kept per server. */
  server: string;
  url: string;
  config: Exclude<OAuthConfig, undefined>;
  vault: CredentialVault;
  /** The gateway's callback URL for this space; absent, only client credentials can work. */
  redirectUri: string | undefined;
  /** The client secret, read from space.yaml or its `secret_file` by the caller. */
  clientSecret: string | undefined;
  /** private_key_jwt: the client's private key (PEM, PKCS #8), read by the caller. */
  privateKey?: string | undefined;
  /** A client ID metadata document's URL (https, or loopback), used as client_id where the authorization server accepts one. */
  clientMetadataUrl?: string | undefined;
  log?: Logger | undefined;
  fetch?: typeof fetch | undefined;
}

export class OAuthClient {
  private discovered: Discovered | undefined;
  private readonly fetchFn: typeof fetch;

  constructor(private readonly opts: OAuthClientOptions) {
    const base = opts.fetch ?? fetch;
    // A metadata, registration or token endpoint that never answers does not hold a sign-in for ever.
    this.fetchFn = (input, init) => base(input, { ...init, signal: init?.signal ?? AbortSignal.timeout(AS_TIMEOUT_MS) });
  }

  get issuer(): string | undefined {
    return this.discovered?.issuer;
  }

  /** The access token for `subject`, if one is held (after discovery). */
  tokens(subject: Subject): StoredTokens | undefined {
    const d = this.discovered;
    return d ? this.opts.vault.tokens(this.opts.server, d.issuer, subject) : undefined;
  }

  /** Protected-resource and authorization-server metadata, checked; done again when a 401 names other metadata. */
  async discover(challenge: Challenge = {}): Promise<Discovered> {
    if (this.discovered && challenge.resourceMetadataUrl === undefined) return this.discovered;
    const serverUrl = new URL(this.opts.url);
    let prm: OAuthProtectedResourceMetadata | undefined;
    try {
      prm = await discoverOAuthProtectedResourceMetadata(serverUrl, { resourceMetadataUrl: challenge.resourceMetadataUrl }, this.fetchFn);
    } catch (err) {
      // A 401 that pointed at metadata which is not there is broken, not legacy.
      if (challenge.resourceMetadataUrl)
        throw new OAuthFailure(
          `its protected-resource metadata at ${safe(challenge.resourceMetadataUrl)} could not be read: ${(err as Error).message}`,
        );
    }
    let issuer: string;
    let resource: string;
    if (prm) {
      if (typeof prm.resource !== "string" || !safeCheck(serverUrl, prm.resource)) {
        throw new OAuthFailure(
          `its protected-resource metadata names resource ${JSON.stringify(clip(String(prm.resource)))}, not this server (${safe(serverUrl)}); not signing in`,
        );
      }
      const as = prm.authorization_servers?.[0];
      if (!as) throw new OAuthFailure("its protected-resource metadata names no authorization server");
      issuer = as;
      resource = prm.resource;
    } else {
      // The 2025-03-26 arrangement: the server's origin is its own authorization server.
      issuer = serverUrl.origin;
      resource = stripFragment(serverUrl);
    }
    const issuerUrl = new URL(issuer);
    if (issuerUrl.protocol !== "https:" && !isLoopback(issuerUrl))
      throw new OAuthFailure(`authorization server ${safe(issuerUrl)} is not https`);
    let metadata = await discoverAuthorizationServerMetadata(issuerUrl, { fetchFn: this.fetchFn });
    if (!metadata && !prm) metadata = legacyEndpoints(issuerUrl);
    if (!metadata) throw new OAuthFailure(`no authorization-server metadata found for ${safe(issuerUrl)}`);
    // A resource that named its authorization server gets exactly that one. Without resource
    // metadata (2025-03-26) the server's origin was only a guess: an issuer on that origin is the answer.
    const named = prm ? trimSlash(metadata.issuer) === trimSlash(issuer) : sameOrigin(metadata.issuer, issuerUrl);
    if (!named) {
      throw new OAuthFailure(
        `authorization server ${safe(issuerUrl)} says its issuer is ${JSON.stringify(clip(metadata.issuer))}; they must be the same (RFC 8414); not signing in`,
      );
    }
    this.discovered = { issuer: metadata.issuer, resource, metadata, scopesSupported: prm?.scopes_supported };
    return this.discovered;
  }

  /** The scope to ask for: the challenge's, else the resource's `scopes_supported`, else the configured one. */
  scopeFor(challenge: Challenge, d: Discovered): string | undefined {
    return challenge.scope ?? (d.scopesSupported?.length ? d.scopesSupported.join(" ") : undefined) ?? this.opts.config.scope;
  }

  /**
   * openid-client's view of the authorization server and our identity there: configured,
   * kept, or registered now. A registration names no scope, so that a later step-up may ask
   * for more than the first sign-in did.
   */
  private async configuration(d: Discovered): Promise<oidc.Configuration> {
    const { config, vault, server } = this.opts;
    let client: StoredClient | undefined;
    if (this.opts.clientMetadataUrl && config.grant === "authorization_code" && d.metadata.client_id_metadata_document_supported === true) {
      // The spec's first choice: the authorization server reads who we are from the document's URL; nothing to register or keep.
      client = { client_id: this.opts.clientMetadataUrl, token_endpoint_auth_method: "none", origin: "document" };
    } else if (config.client_id !== undefined) {
      client = {
        client_id: config.client_id,
        client_secret: this.opts.clientSecret,
        token_endpoint_auth_method: config.token_endpoint_auth_method,
        origin: "configured",
      };
    } else {
      client = vault.client(server, d.issuer);
      if (!client) {
        if (!d.metadata.registration_endpoint)
          throw new OAuthFailure(
            `authorization server ${d.issuer} offers no dynamic registration; give oauth.client_id (and client_secret) in space.yaml`,
          );
        if (!this.opts.redirectUri) throw new OAuthFailure("no callback address to register");
        const info = await registerClient(d.issuer, {
          metadata: d.metadata,
          clientMetadata: {
            client_name: "mewgate",
            redirect_uris: [this.opts.redirectUri],
            grant_types: ["authorization_code", "refresh_token"],
            response_types: ["code"],
            // OpenID registration's application_type (asked for by the MCP authorization spec): a
            // callback on a loopback address is a native client's; any other is a web client's.
            application_type: applicationType(this.opts.redirectUri),
          } as Parameters<typeof registerClient>[1]["clientMetadata"],
          fetchFn: this.fetchFn,
        });
        client = {
          client_id: info.client_id,
          client_secret: info.client_secret,
          token_endpoint_auth_method: info.token_endpoint_auth_method,
          origin: "registered",
        };
        vault.saveClient(server, d.issuer, client);
        this.opts.log?.info({ issuer: d.issuer }, "registered mewgate as a client of the authorization server");
      }
    }
    const auth =
      client.origin !== "document" && this.opts.privateKey !== undefined
        ? await privateKeyJwt(this.opts.privateKey, config.signing_alg, d.metadata)
        : clientAuth(client, d.metadata);
    const c = new oidc.Configuration(d.metadata as oidc.ServerMetadata, client.client_id, {}, auth);
    c[oidc.customFetch] = ((url: string, init: RequestInit) => this.fetchFn(url, init)) as never;
    if (new URL(d.issuer).protocol === "http:") oidc.allowInsecureRequests(c);
    return c;
  }

  /** Starts a sign-in of `subject`: the URL a person follows, and what the callback must match. */
  async begin(subject: Subject, challenge: Challenge = {}): Promise<PendingSignIn> {
    const redirectUri = this.opts.redirectUri;
    if (!redirectUri) throw new OAuthFailure("a sign-in needs the gateway's callback address, and this bridge has none");
    const d = await this.discover(challenge);
    const scope = this.scopeFor(challenge, d);
    const c = await this.configuration(d);
    const methods = d.metadata.code_challenge_methods_supported;
    if (methods && !methods.includes("S256")) throw new OAuthFailure(`authorization server ${d.issuer} does not support PKCE S256`);
    const verifier = oidc.randomPKCECodeVerifier();
    const state = oidc.randomState();
    const params: Record<string, string> = {
      redirect_uri: redirectUri,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      resource: d.resource,
    };
    if (scope) params["scope"] = scope;
    if (scope?.split(" ").includes("offline_access")) params["prompt"] = "consent";
    return { state, verifier, subject, issuer: d.issuer, redirectUri, authorizationUrl: oidc.buildAuthorizationUrl(c, params) };
  }

  /** The callback of `pending` arrived at `callbackUrl`: state and `iss` checked, the code exchanged, the tokens kept. */
  async complete(pending: PendingSignIn, callbackUrl: URL): Promise<void> {
    const d = await this.discover();
    if (d.issuer !== pending.issuer)
      throw new OAuthFailure("the authorization server changed while this sign-in was under way; sign in again");
    const iss = callbackUrl.searchParams.get("iss");
    if (iss !== null && trimSlash(iss) !== trimSlash(d.issuer)) {
      throw new OAuthFailure(
        `the authorization response says it comes from ${JSON.stringify(clip(iss))}, not ${d.issuer} (RFC 9207); its code was not used`,
      );
    }
    const c = await this.configuration(d);
    // The redirect_uri sent with the code is the one registered, whatever Host the callback came in by.
    const current = new URL(pending.redirectUri);
    current.search = callbackUrl.search;
    let result: oidc.TokenEndpointResponse;
    try {
      result = await oidc.authorizationCodeGrant(
        c,
        current,
        { pkceCodeVerifier: pending.verifier, expectedState: pending.state, idTokenExpected: false },
        { resource: d.resource },
      );
    } catch (err) {
      throw new OAuthFailure(`the sign-in at ${d.issuer} did not complete: ${describe(err)}`);
    }
    this.keep(d, pending.subject, result, undefined);
  }

  /** Uses the refresh token of `subject`; false (and the tokens forgotten) if the server refused it. */
  async refresh(subject: Subject): Promise<boolean> {
    const d = await this.discover();
    const held = this.opts.vault.tokens(this.opts.server, d.issuer, subject);
    if (!held?.refresh_token) return false;
    const c = await this.configuration(d);
    try {
      const result = await oidc.refreshTokenGrant(c, held.refresh_token, { resource: d.resource });
      this.keep(d, subject, result, held.refresh_token);
      return true;
    } catch (err) {
      this.opts.log?.info({ issuer: d.issuer, subject, err: describe(err) }, "the refresh token was refused; a sign-in is needed");
      if (err instanceof oidc.ResponseBodyError) this.opts.vault.revoke(this.opts.server, { subject, issuer: d.issuer });
      return false;
    }
  }

  /** A service account's token (grant: client_credentials). */
  async clientCredentials(challenge: Challenge = {}): Promise<void> {
    const d = await this.discover(challenge);
    const scope = this.scopeFor(challenge, d);
    const c = await this.configuration(d);
    try {
      const result = await oidc.clientCredentialsGrant(c, { resource: d.resource, ...(scope ? { scope } : {}) });
      this.keep(d, "space", result, undefined);
    } catch (err) {
      throw new OAuthFailure(`client credentials at ${d.issuer} were refused: ${describe(err)}`);
    }
  }

  /** Keeps new tokens; a refresh that returned no new refresh token keeps the old one (rotation only when the server rotates). */
  private keep(d: Discovered, subject: Subject, r: oidc.TokenEndpointResponse, previousRefresh: string | undefined): void {
    if (typeof r.access_token !== "string" || !r.access_token) throw new OAuthFailure(`${d.issuer} answered with no access token`);
    this.opts.vault.saveTokens(this.opts.server, d.issuer, subject, {
      access_token: r.access_token,
      token_type: r.token_type,
      refresh_token: r.refresh_token ?? previousRefresh,
      scope: r.scope,
      expires_at: typeof r.expires_in === "number" ? Date.now() + r.expires_in * 1000 : undefined,
    });
  }
}

/** Token endpoint authentication: as configured or registered, else what the server supports (basic before post), else none. */
function clientAuth(client: StoredClient, metadata: OAuthMetadata): oidc.ClientAuth {
  const supported = metadata.token_endpoint_auth_methods_supported;
  const method =
    client.token_endpoint_auth_method ??
    (client.client_secret === undefined
      ? "none"
      : !supported || supported.includes("client_secret_basic")
        ? "client_secret_basic"
        : "client_secret_post");
  if (method === "none" || client.client_secret === undefined) return oidc.None();
  if (method === "client_secret_post") return oidc.ClientSecretPost(client.client_secret);
  // Basic with each part percent-encoded as URIs encode (RFC 6749 2.3.1 as servers read it):
  // openid-client's own also encodes "-" and "." and similar, which some servers do not decode.
  const secret = client.client_secret;
  return (_as, c, _body, headers) => {
    headers.set(
      "authorization",
      `Basic ${Buffer.from(`${encodeURIComponent(c.client_id)}:${encodeURIComponent(secret)}`).toString("base64")}`,
    );
  };
}

/**
 * private_key_jwt (RFC 7523 2.2): each token request carries a short-lived assertion signed
 * with the configured key (iss and sub the client_id, aud the issuer; openid-client makes it).
 * The algorithm: configured, else the first the server lists that the key can make.
 */
type SigningKey = Parameters<typeof oidc.PrivateKeyJwt>[0];

async function privateKeyJwt(pem: string, configured: string | undefined, metadata: OAuthMetadata): Promise<oidc.ClientAuth> {
  const listed = (metadata as { token_endpoint_auth_signing_alg_values_supported?: unknown })
    .token_endpoint_auth_signing_alg_values_supported;
  const candidates = configured
    ? [configured]
    : [...(Array.isArray(listed) ? listed.filter((a) => typeof a === "string") : []), "ES256", "RS256", "EdDSA"];
  for (const alg of candidates) {
    if (alg === "none" || alg.startsWith("HS")) continue;
    try {
      const key = await importPKCS8(pem, alg);
      return oidc.PrivateKeyJwt(key as SigningKey);
    } catch {
      // Not this key's algorithm: try the next one.
    }
  }
  throw new OAuthFailure(
    configured
      ? `oauth.private_key is not a PKCS #8 private key for ${JSON.stringify(clip(configured))}`
      : "oauth.private_key is not a PKCS #8 private key for any algorithm the server lists; give oauth.signing_alg",
  );
}

/** The 2025-03-26 defaults for a server with no metadata at all: the endpoints at its origin. */
function legacyEndpoints(origin: URL): OAuthMetadata {
  const at = (path: string) => new URL(path, origin).href;
  return {
    issuer: origin.origin,
    authorization_endpoint: at("/authorize"),
    token_endpoint: at("/token"),
    registration_endpoint: at("/register"),
    response_types_supported: ["code"],
  } as OAuthMetadata;
}

function sameOrigin(a: string, b: URL): boolean {
  try {
    return new URL(a).origin === b.origin;
  } catch {
    return false;
  }
}

function safeCheck(serverUrl: URL, resource: string): boolean {
  try {
    return checkResourceAllowed({ requestedResource: serverUrl, configuredResource: resource });
  } catch {
    return false;
  }
}

function stripFragment(u: URL): string {
  const c = new URL(u.href);
  c.hash = "";
  return c.href;
}

function trimSlash(s: string): string {
  return s.endsWith("/") ? s.slice(0, -1) : s;
}

/** A URL for a message: origin and path, no query (it may hold a code or state). */
export function safe(u: URL | string): string {
  try {
    const url = typeof u === "string" ? new URL(u) : u;
    return url.pathname === "/" ? url.origin : `${url.origin}${url.pathname}`;
  } catch {
    return "(invalid URL)";
  }
}

function clip(s: string): string {
  const printable = s.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?");
  return printable.length > 200 ? `${printable.slice(0, 200)}…` : printable;
}

/** An error of openid-client in words, without the response body (it may echo secrets). */
function describe(err: unknown): string {
  if (err instanceof oidc.ResponseBodyError) return `${err.error}${err.error_description ? `: ${clip(err.error_description)}` : ""}`;
  if (err instanceof oidc.AuthorizationResponseError)
    return `${err.error}${err.error_description ? `: ${clip(err.error_description)}` : ""}`;
  return clip((err as Error).message ?? String(err));
}

/** `native` for a callback on a loopback address (a gateway on the operator's machine), `web` for any other. */
function applicationType(redirectUri: string): "native" | "web" {
  const host = new URL(redirectUri).hostname;
  return host === "localhost" || host === "[::1]" || /^127\./.test(host) ? "native" : "web";
}
