/**
 * RFC 9728 protected-resource metadata at `/.well-known/oauth-protected-resource` and under
 * it for each protected path (`…/mcp`, `…/api`): what the resource is, how a token is
 * presented, and — for spaces with `identity:` — which authorization server issues tokens
 * for it and the scopes it takes. An MCP client that got a 401 from `/mcp` follows the
 * `resource_metadata` of its `WWW-Authenticate` here, then to the provider.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Space } from "../space/space.js";
import { RESOURCE_METADATA_PATH, requestOrigin, sendJson } from "./http.js";

export interface ResourceHost {
  readonly spaces: ReadonlyMap<string, Space>;
  addHttpRoute(path: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
  addHttpPrefix(prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
}

export function mountResourceMetadata(gateway: ResourceHost): void {
  const serve = (req: IncomingMessage, res: ServerResponse): void => {
    if (req.method !== "GET" && req.method !== "HEAD") return sendJson(res, 405, { error: "method_not_allowed" }, { allow: "GET, HEAD" });
    const path = (req.url ?? "/").split("?", 1)[0]!;
    const suffix = path.slice(RESOURCE_METADATA_PATH.length).replace(/\/$/, "");
    const identities = [...gateway.spaces.values()].flatMap((s) => (s.identity ? [s.identity.config] : []));
    const configured = identities.find((i) => i.resource)?.resource?.replace(/\/$/, "");
    const issuers = [...new Set(identities.map((i) => i.issuer))];
    const scopes = [...new Set(identities.flatMap((i) => Object.values(i.required_scopes)))];
    sendJson(res, 200, {
      resource: `${configured ?? requestOrigin(req)}${suffix}`,
      bearer_methods_supported: ["header"],
      resource_name:
        suffix === "/mcp" ? "mewgate space (MCP)" : suffix.startsWith("/mcp/") ? "one MCP server of a mewgate space" : "mewgate",
      ...(issuers.length ? { authorization_servers: issuers, scopes_supported: scopes } : {}),
    });
  };
  gateway.addHttpRoute(RESOURCE_METADATA_PATH, serve);
  gateway.addHttpPrefix(`${RESOURCE_METADATA_PATH}/`, serve);
}
