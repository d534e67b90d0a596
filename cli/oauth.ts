/**
 * What `up` gives its bridges to sign in to `url:` servers behind OAuth: the credential
 * vault of the state directory (its key beside it, or in MEWGATE_CREDENTIALS_KEY), the
 * gateway's callback route `/oauth/callback/<space>` and the URL of it the authorization
 * server sends a person back to (`gateway.public_url` when set, else where `up` listens),
 * and the client ID metadata documents `/oauth/client/<space>/<server>.json` of its `url:`
 * servers (participants/bridge/oauth-client-document.ts).
 */
import type { McpServerConfig, SpaceConfig } from "../gateway/index.js";
import type { Gateway } from "../gateway/index.js";
import { CLIENT_DOCUMENT_PREFIX, clientDocumentHandler, clientDocumentUrl } from "../participants/bridge/oauth-client-document.js";
import { ConsentDesk } from "../participants/bridge/oauth-consent.js";
import type { OAuthBridgeOptions } from "../participants/bridge/oauth-signin.js";
import { CredentialVault, VaultError } from "../participants/bridge/oauth-vault.js";
import { CliError } from "./space.js";

/** Undefined when no bridged server could need a sign-in (no vault, no key file made). */
export function prepareOAuth(
  config: SpaceConfig,
  stateDir: string,
  gateway: Gateway,
  url: string,
  env: NodeJS.ProcessEnv,
): OAuthBridgeOptions | undefined {
  const needs = Object.values(config.participants).some((p) => p.mcp?.url !== undefined && p.mcp.oauth !== false);
  if (!needs) return undefined;
  let vault: CredentialVault;
  try {
    vault = new CredentialVault(stateDir, env);
  } catch (err) {
    if (err instanceof VaultError) throw new CliError(err.message);
    throw err;
  }
  const desk = new ConsentDesk();
  gateway.addHttpPrefix("/oauth/callback/", desk.handler());
  const base = (config.gateway.public_url ?? url.replace(/^ws/, "http")).replace(/\/+$/, "");
  const space = config.space.id;
  const redirectUri = `${base}${ConsentDesk.path(space)}`;
  const servers = Object.values(config.participants)
    .filter((p) => p.mcp?.url !== undefined && p.mcp.oauth !== false)
    .map((p) => p.id);
  gateway.addHttpPrefix(CLIENT_DOCUMENT_PREFIX, clientDocumentHandler(space, servers, base, redirectUri));
  return {
    vault,
    desk,
    space,
    redirectUri,
    clientMetadataUrl: (server) => (servers.includes(server) ? clientDocumentUrl(base, space, server) : undefined),
  };
}

/**
 * `mewgate bridge --url`: it runs apart from the gateway, so no callback reaches it. It
 * signs in only where no person's browser has to come back to it: `--oauth-consent auto`
 * (loopback authorization servers, tests) or a service account (`grant:
 * client_credentials` in the participant's `mcp:` entry). The vault is the space's state
 * directory's, as under `up`.
 */
export function bridgeOAuth(
  server: McpServerConfig,
  opts: { oauthConsent?: string | undefined },
  stateDir: string | undefined,
  space: string,
  env: NodeJS.ProcessEnv,
): OAuthBridgeOptions | undefined {
  if (opts.oauthConsent !== undefined && opts.oauthConsent !== "auto" && opts.oauthConsent !== "link")
    throw new CliError(`--oauth-consent "${opts.oauthConsent}": expected auto or link`);
  const consent = opts.oauthConsent ?? (server.oauth ? server.oauth.consent : "link");
  const serviceAccount = server.oauth !== undefined && server.oauth !== false && server.oauth.grant === "client_credentials";
  if (server.oauth === false || (consent !== "auto" && !serviceAccount)) return undefined;
  if (!stateDir) throw new CliError("signing in needs a place for the credentials: give -c space.yaml or --state-dir");
  let vault: CredentialVault;
  try {
    vault = new CredentialVault(stateDir, env);
  } catch (err) {
    if (err instanceof VaultError) throw new CliError(err.message);
    throw err;
  }
  // Never served: headless consent stops at this address and reads the code from it.
  return {
    vault,
    space,
    consent: consent === "auto" ? "auto" : "link",
    redirectUri: `http://127.0.0.1/oauth/callback/${encodeURIComponent(space)}`,
  };
}
