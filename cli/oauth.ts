/**
 * What `up` gives its bridges to sign in to `url:` servers behind OAuth: the credential
 * vault of the state directory (its key beside it, or in MEWGATE_CREDENTIALS_KEY), the
 * gateway's callback route `/oauth/callback/<space>` and the URL of it the authorization
 * server sends a person back to (`gateway.public_url` when set, else where `up` listens).
 */
import type { SpaceConfig } from "../gateway/config/config.js";
import type { Gateway } from "../gateway/edge/server.js";
import { ConsentDesk } from "../participants/bridge/oauth-consent.js";
import type { OAuthBridgeOptions } from "../participants/bridge/oauth-signin.js";
import { CredentialVault, VaultError } from "../participants/bridge/oauth-vault.js";
import { CliError } from "./space.js";

/** Undefined when no bridged server could need a sign-in (no vault, no key file made). */
export function prepareOAuth(config: SpaceConfig, stateDir: string, gateway: Gateway, url: string, env: NodeJS.ProcessEnv): OAuthBridgeOptions | undefined {
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
  return { vault, desk, space: config.space.id, redirectUri: `${base}${ConsentDesk.path(config.space.id)}` };
}
