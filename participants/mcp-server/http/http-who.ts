/**
 * Who presents a request at the MCP route over HTTP (http.ts), and what it addresses: the
 * space (`?space=ID`, the `Mcp-Space` header, the session's, or the only one hosted), the
 * participant its bearer token is in that space (a static token, or a JWT of the space's
 * identity provider, whose audience may be this path's own resource), and the one
 * participant a `<path>/<participant>` serves. A refusal is answered here too, with the
 * RFC 9728 / RFC 6750 challenge that tells a client what was wrong and where to look.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { bearer, bearerChallenge, type McpFaceHost, type McpFaceSpace, resourceUrls } from "../../../gateway/index.js";
import { header, rpcError, RPC_SERVER_ERROR } from "./http-io.js";

export type Who =
  | { ok: true; space: McpFaceSpace; participant: string; digest?: string | undefined }
  | {
      ok: false;
      status: number;
      reason: string;
      message: string;
      challenge?: { error: string; description?: string; scope?: string };
      scope?: string;
    };

/** Who presents the request at `resource` (this path: `/mcp` or `/mcp/<participant>`); `sessionSpace` is its session's space, if any. */
export async function identify(
  host: McpFaceHost,
  req: IncomingMessage,
  url: URL,
  sessionSpace: string | undefined,
  resource: string,
): Promise<Who> {
  const named = url.searchParams.get("space") ?? header(req, "mcp-space");
  const known = host.space(named ?? sessionSpace);
  const spaceId = named ?? sessionSpace ?? known?.id;
  // The scope a token needs here (RFC 6750 `scope` on the 401), when the space takes the provider's tokens.
  const scope = known?.requiredScope;
  const token = bearer(req.headers.authorization);
  if (token === undefined)
    return {
      ok: false,
      status: 401,
      reason: "unauthorized",
      message: "missing token: send Authorization: Bearer <participant token>",
      ...(scope ? { scope } : {}),
    };
  if (spaceId === undefined)
    return {
      ok: false,
      status: 400,
      reason: "bad_request",
      message: "which space? add ?space=ID to the URL or send an Mcp-Space header",
    };
  const space = known;
  if (!space) return { ok: false, status: 404, reason: "unknown_space", message: `no space named "${spaceId.slice(0, 64)}"` };
  // A static token, or a JWT access token from the space's identity provider (which stops here: the space's tools never see it).
  // Its audience may be this path's own resource, as this path's RFC 9728 document names it.
  const auth = await space.authenticate(token, resourceUrls(req, resource));
  if (auth.ok) return { ok: true, space, participant: auth.id, digest: auth.digest };
  // 403 insufficient_scope only for a missing scope; an identity that is nobody in this space is a plain 403 saying so.
  const reason =
    auth.http.status === 403
      ? auth.http.error === "insufficient_scope"
        ? "insufficient_scope"
        : "forbidden"
      : auth.http.status === 503
        ? "unavailable"
        : "unauthorized";
  return { ok: false, status: auth.http.status, reason, message: auth.reason, challenge: auth.http, ...(scope ? { scope } : {}) };
}

/** Answers a request whose presenter was refused at `resource`. */
export function refuse(req: IncomingMessage, res: ServerResponse, who: Who & { ok: false }, resource: string): void {
  // RFC 9728: tell the client where this path's protected-resource metadata is (and, RFC 6750, what was wrong with its token
  // and the scope it needs). Not for an identity that is nobody here: no token would do better.
  const challenge = who.status === 401 || (who.status === 403 && who.reason === "insufficient_scope");
  const headers: Record<string, string> | undefined = challenge
    ? { "www-authenticate": bearerChallenge(req, resource, who.challenge, who.scope) }
    : who.status === 503
      ? { "retry-after": "5" }
      : undefined;
  return rpcError(res, who.status, RPC_SERVER_ERROR, who.message, who.reason, headers);
}

/** Under the route `path`: `/mcp` → undefined (the space), `/mcp/fs` → "fs", anything else under it → null. */
export function onlyOf(path: string, pathname: string): string | undefined | null {
  if (pathname === path) return undefined;
  let id: string;
  try {
    id = decodeURIComponent(pathname.slice(path.length + 1));
  } catch {
    return null;
  }
  return /^[A-Za-z0-9_.:-]{1,128}$/.test(id) ? id : null;
}
