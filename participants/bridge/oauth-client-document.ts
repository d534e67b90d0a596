/**
 * The gateway's client ID metadata document (the MCP authorization spec's preferred client
 * identity): for each `url:` server of a space, `GET /oauth/client/<space>/<server>.json`
 * answers a JSON document whose `client_id` is that very URL. Where an authorization
 * server's metadata says `client_id_metadata_document_supported`, the bridge uses the URL
 * as its client_id (oauth.ts) instead of registering: the server reads the document to
 * learn the callback address and that the client is public (PKCE, no secret).
 *
 * The URL is used only when it is https (a `gateway.public_url` a browser and the
 * authorization server can reach) or loopback (a gateway and authorization server on one
 * machine, tests): an authorization server does not fetch a plain-http document from
 * elsewhere. The document holds nothing secret: a name, the callback, grant types.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { isLoopback } from "./oauth.js";

export const CLIENT_DOCUMENT_PREFIX = "/oauth/client/";

/** The path of `server`'s document in `space`. */
export function clientDocumentPath(space: string, server: string): string {
  return `${CLIENT_DOCUMENT_PREFIX}${encodeURIComponent(space)}/${encodeURIComponent(server)}.json`;
}

/** The document's URL under the gateway's `base` (origin and optional path), if it may serve as a client_id (https or loopback). */
export function clientDocumentUrl(base: string, space: string, server: string): string | undefined {
  let url: URL;
  try {
    url = new URL(`${base.replace(/\/+$/, "")}${clientDocumentPath(space, server)}`);
  } catch {
    return undefined;
  }
  return url.protocol === "https:" || (url.protocol === "http:" && isLoopback(url)) ? url.href : undefined;
}

/** The document for `clientId` (its own URL) whose sign-ins come back to `redirectUri`. */
export function clientDocument(clientId: string, redirectUri: string, space: string): Record<string, unknown> {
  return {
    client_id: clientId,
    client_name: `mewgate (${space})`,
    redirect_uris: [redirectUri],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    // A public client: PKCE protects the code, and no secret is published or kept.
    token_endpoint_auth_method: "none",
  };
}

/**
 * The HTTP handler for `/oauth/client/` (mount with `gateway.addHttpPrefix`): the documents
 * of `space`'s `servers` (the ids of its `url:` servers), each at its own URL under `base`;
 * anything else is a 404 that repeats nothing of the request.
 */
export function clientDocumentHandler(
  space: string,
  servers: readonly string[],
  base: string,
  redirectUri: string,
): (req: IncomingMessage, res: ServerResponse) => void {
  const docs = new Map<string, string>();
  for (const server of servers) {
    const url = clientDocumentUrl(base, space, server);
    if (url) docs.set(clientDocumentPath(space, server), JSON.stringify(clientDocument(url, redirectUri, space)));
  }
  return (req, res) => {
    let path: string;
    try {
      path = new URL(req.url ?? "/", "http://gateway.invalid").pathname;
    } catch {
      path = "";
    }
    const body = req.method === "GET" || req.method === "HEAD" ? docs.get(path) : undefined;
    if (body === undefined) {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
      res.end("No client metadata document here.\n");
      return;
    }
    res.writeHead(200, {
      "content-type": "application/json",
      "cache-control": "public, max-age=300",
      "x-content-type-options": "nosniff",
    });
    res.end(req.method === "HEAD" ? undefined : body);
  };
}
