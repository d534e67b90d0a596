/**
 * The `oauth:` key of a `url:` MCP server (how its bridge signs in, participants/bridge/
 * oauth*.ts) and a secret kept out of space.yaml (`${VAR}`, or `{secret_file: path}`).
 */
import path from "node:path";
import * as z from "zod";
import { expected, section } from "./schema.js";

/** A secret given in space.yaml as text (usually `${VAR}`), or as `{secret_file: path}` read at start (relative to the space.yaml). */
export const SecretSchema = z.union([z.string().min(1), section({ secret_file: z.string().min(1) })], {
  error: expected("a secret: text (e.g. ${VAR}) or {secret_file: path}"),
});
export type SecretValue = z.output<typeof SecretSchema>;

/**
 * How the bridge signs in to a `url:` server behind OAuth (participants/bridge/oauth*.ts).
 * Without `oauth:` a server answering 401 is signed in to with the defaults; `oauth: false`
 * turns that off (a 401 then fails the start, as a static header would).
 */
export const OAuthSchema = section({
  /** Whose upstream identity a call uses: one sign-in for the space, or the caller's person's own. */
  as: z.enum(["space", "caller"]).default("space"),
  /** `link`: a person follows the link on a card; `auto` (tests only, loopback issuers only): the gateway follows it itself. */
  consent: z.enum(["link", "auto"]).default("link"),
  /** `client_credentials`: a service account, no person involved (needs client_id and client_secret). */
  grant: z.enum(["authorization_code", "client_credentials"]).default("authorization_code"),
  client_id: z.string().min(1).max(2048).optional(),
  client_secret: SecretSchema.optional(),
  /** private_key_jwt (RFC 7523): the client's private key, PEM (PKCS #8), signing its token-endpoint assertions. */
  private_key: SecretSchema.optional(),
  /** The key's JWS algorithm (e.g. ES256, RS256); absent, the first the server lists that the key can make. */
  signing_alg: z.string().min(1).max(16).optional(),
  token_endpoint_auth_method: z.enum(["client_secret_basic", "client_secret_post", "private_key_jwt", "none"]).optional(),
  /**
   * A client ID metadata document published elsewhere (https), used as client_id where the
   * authorization server accepts one; absent, the gateway's own
   * `/oauth/client/<space>/<server>.json` is used when the gateway's address is https or loopback.
   */
  client_metadata_url: z
    .string()
    .max(2048)
    .refine((u) => URL.canParse(u) && new URL(u).protocol === "https:" && new URL(u).pathname !== "/", {
      error: "client_metadata_url must be an https URL with a path (a client ID metadata document)",
    })
    .optional(),
  /** Asked for when neither the server's 401 nor its metadata names scopes. */
  scope: z.string().max(4096).optional(),
})
  .refine(
    (o) =>
      o.grant !== "client_credentials" || (o.client_id !== undefined && (o.client_secret !== undefined || o.private_key !== undefined)),
    { error: "grant: client_credentials needs client_id and client_secret (or private_key)" },
  )
  .refine(
    (o) =>
      (o.token_endpoint_auth_method === "private_key_jwt") === (o.private_key !== undefined) || o.token_endpoint_auth_method === undefined,
    {
      error: "token_endpoint_auth_method: private_key_jwt goes with private_key (and private_key with it)",
      path: ["private_key"],
    },
  )
  .refine((o) => o.private_key === undefined || o.client_id !== undefined, {
    error: "private_key needs the client_id it was registered for",
    path: ["private_key"],
  })
  // A service account is nobody's own identity: it cannot stand for each person.
  .refine((o) => o.as !== "caller" || o.grant !== "client_credentials", {
    error: "as: caller (each person's own sign-in) goes with grant: authorization_code, not a service account",
    path: ["as"],
  });
export type OAuthConfig = z.output<typeof OAuthSchema>;

/**
 * A `url:` server that may need a sign-in: its bridge may put the sign-in card (a URL
 * elicitation) before the space's people, and only that.
 */
export function allowSignInCards(
  participants: Record<
    string,
    {
      id: string;
      kind: string;
      mcp?: { url?: string | undefined; oauth?: OAuthConfig | false | undefined } | undefined;
      capabilities: Array<Record<string, unknown>>;
    }
  >,
): void {
  const humans = Object.values(participants).filter((p) => p.kind === "human");
  for (const p of Object.values(participants)) {
    if (p.mcp?.url === undefined || p.mcp.oauth === false) continue;
    for (const h of humans) p.capabilities.push({ kind: "mcp/request", to: [h.id], payload: { method: "elicitation/create" } });
  }
}

/** A `secret_file` means a file next to the space.yaml, wherever mewgate is started from. */
export function resolveSecretFile(oauth: OAuthConfig, dir: string): void {
  if (typeof oauth.client_secret === "object") oauth.client_secret.secret_file = path.resolve(dir, oauth.client_secret.secret_file);
  if (typeof oauth.private_key === "object") oauth.private_key.secret_file = path.resolve(dir, oauth.private_key.secret_file);
}
