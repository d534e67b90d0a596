/**
 * HTTP for a space another node owns (the operator API, the console's calls, MCP at
 * /mcp, MEW's injection) is passed on to that node's HTTP server as it came, streamed
 * both ways, so that event streams and SSE work through it.
 */
import { request, type IncomingMessage, type ServerResponse } from "node:http";
import type { Logger } from "pino";

/** Marks a request one node passed on: it is not passed on again (two nodes with stale views of the owner would bounce it forever). */
export const HOP_HEADER = "x-mewgate-passed-to";

/** Headers that belong to one hop only. */
const HOP = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer"]);

export function passOn(req: IncomingMessage, res: ServerResponse, target: string, node: string, log: Logger): void {
  const url = new URL(req.url ?? "/", target);
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP.has(k)) headers[k] = v;
  headers["x-forwarded-for"] = req.socket.remoteAddress ?? "";
  headers[HOP_HEADER] = node;
  const out = request(url, { method: req.method, headers }, (upstream) => {
    const back: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(upstream.headers)) if (v !== undefined && !HOP.has(k)) back[k] = v;
    back["x-mewgate-node"] = node;
    res.writeHead(upstream.statusCode ?? 502, back);
    upstream.pipe(res);
  });
  out.on("error", (err) => {
    log.warn({ node, err: err.message }, "could not pass a request on to the space's owner");
    if (!res.headersSent) {
      res.writeHead(503, { "content-type": "text/plain", "retry-after": "1" });
      res.end("the node that owns this space is not reachable; try again\n");
    } else res.destroy();
  });
  res.on("close", () => out.destroy());
  req.pipe(out);
}

/**
 * The space an HTTP request is about: `/api/spaces/<id>/…`, `?space=`, or the only one.
 * None for a target that is no URL (`//`) or not valid percent-encoding: the request is
 * then answered here, with a 4xx, rather than throwing in the server's request handler.
 */
export function spaceOfRequest(req: IncomingMessage, spaces: readonly string[]): string | undefined {
  let url: URL;
  try {
    url = new URL(req.url ?? "/", "http://gateway");
    const api = /^\/api\/spaces\/([^/]+)/.exec(url.pathname);
    if (api) return decodeURIComponent(api[1]!);
  } catch {
    return undefined;
  }
  const named = url.searchParams.get("space");
  if (named) return named;
  return spaces.length === 1 ? spaces[0] : undefined;
}

/** Where a space's owner serves HTTP, as the cluster knows it (cluster/index.ts). */
export interface OwnerLookup {
  owner(id: string): { http: string; node: string } | undefined;
}

/**
 * A request about a space another node owns goes to that node; true when this answered it
 * (passed on, or a 503 while nobody owns the space). `configured` are the spaces this gateway
 * serves, `local` those this node owns now.
 */
export function passToOwner(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  configured: readonly { space: { id: string } }[],
  local: ReadonlyMap<string, unknown>,
  cluster: OwnerLookup,
  log: Logger,
): boolean {
  if (path === "/health" || path === "/healthz" || path === "/metrics" || path === "/ui" || path.startsWith("/ui/")) return false;
  const id = spaceOfRequest(
    req,
    configured.map((c) => c.space.id),
  );
  if (id === undefined || local.has(id)) return false;
  const owner = cluster.owner(id);
  if (!owner || req.headers[HOP_HEADER] !== undefined) {
    if (!configured.some((c) => c.space.id === id)) return false;
    res.writeHead(503, { "content-type": "text/plain", "retry-after": "1" });
    res.end(`no node serves space "${id.slice(0, 64)}" right now (a take-over is under way); try again\n`);
    return true;
  }
  passOn(req, res, owner.http, owner.node, log);
  return true;
}
