/**
 * Whether a bridge signs in to its server (oauth-signin.ts): a `url:` server, not
 * `oauth: false`, and a credential vault given to the bridge (`up` and `mewgate bridge`
 * give one). Kept apart so bridge.ts holds one line for it.
 */
import type { McpServerConfig } from "../../gateway/index.js";
import type { ParticipantClient } from "../client.js";
import { UpstreamAuth } from "./oauth-signin.js";
import type { BridgeOptions, BridgeStatus } from "./types.js";

export interface BridgeSide {
  readonly client: ParticipantClient;
  readonly status: BridgeStatus;
  signInNeeded(info: { issuer: string; url: string }): void;
}

export function oauthFor(bridge: BridgeSide, server: McpServerConfig, opts: BridgeOptions): UpstreamAuth | undefined {
  if (server.url === undefined || server.oauth === false || !opts.oauth) return undefined;
  return new UpstreamAuth(server, opts.oauth, {
    id: opts.id,
    participant: bridge.client,
    log: opts.logger?.child({ participant: opts.id, component: "mcp-oauth" }),
    onSignIn: (info) => bridge.signInNeeded(info),
    get stopping() {
      return bridge.status === "stopped";
    },
  });
}
