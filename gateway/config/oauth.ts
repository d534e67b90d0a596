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
  token_endpoint_auth_method: z.enum(["client_secret_basic", "client_secret_post", "none"]).optional(),
  /** Asked for when neither the server's 401 nor its metadata names scopes. */
  scope: z.string().max(4096).optional(),
})
  .refine((o) => o.grant !== "client_credentials" || (o.client_id !== undefined && o.client_secret !== undefined), {
    error: "grant: client_credentials needs client_id and client_secret",
  })
  // Refused rather than quietly served with the space's sign-in: a person's call must never run on someone else's upstream identity.
  .refine((o) => o.as !== "caller", {
    error: "as: caller (each person's own upstream identity) is not available yet; use as: space",
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
}
