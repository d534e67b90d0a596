/**
 * Small HTTP helpers shared by the operator routes (api.ts, inject.ts): a bearer token
 * from the header, a bounded JSON-object body, a JSON answer.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { nestsWithin } from "../wire/envelope.js";

/** Deepest body any route takes: the deepest frame a space may allow (`gateway.limits.max_depth`), which then applies. */
const MAX_BODY_DEPTH = 1000;

export function bearer(header: string | undefined): string | undefined {
  const m = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return m?.[1];
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store", ...headers });
  res.end(JSON.stringify(body));
}

/** Bytes of an over-long body read and dropped after the 413, so the client reads the answer; past them the socket is cut. */
const DRAIN_MAX = 16 * 1024 * 1024;

/**
 * Reads a JSON object of at most `max` bytes (an empty body is `{}`). Past the limit it
 * answers 413 at once: `res` closes after the answer, and what is left of the body is read
 * and dropped (up to DRAIN_MAX), since a socket closed with unread bytes is reset and the
 * client would lose the answer.
 */
export function readJsonObject(
  req: IncomingMessage,
  res: ServerResponse,
  max: number,
): Promise<{ ok: true; body: Record<string, unknown> } | { ok: false; status: number; message: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max + DRAIN_MAX) return void req.destroy();
      if (size > max) {
        if (!over) {
          over = true;
          chunks.length = 0;
          res.setHeader("connection", "close");
          resolve({ ok: false, status: 413, message: `request body over ${max} bytes` });
        }
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => {
      if (over) return;
      if (size === 0) return resolve({ ok: true, body: {} });
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown;
        if (typeof body !== "object" || body === null || Array.isArray(body))
          return resolve({ ok: false, status: 400, message: "the body must be a JSON object" });
        if (!nestsWithin(body, MAX_BODY_DEPTH))
          return resolve({ ok: false, status: 400, message: `the body nests arrays and objects more than ${MAX_BODY_DEPTH} deep` });
        resolve({ ok: true, body: body as Record<string, unknown> });
      } catch {
        resolve({ ok: false, status: 400, message: "the body is not JSON" });
      }
    });
    req.on("error", () => resolve({ ok: false, status: 400, message: "the request failed" }));
  });
}

/** Where RFC 9728 protected-resource metadata is served (operator/resource.ts). */
export const RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource";

/** `http://host:port` as the client addressed the gateway (Host is checked before any route runs). */
export function requestOrigin(req: IncomingMessage): string {
  const tls = (req.socket as { encrypted?: boolean }).encrypted === true;
  return `${tls ? "https" : "http"}://${req.headers.host ?? "127.0.0.1"}`;
}

/**
 * This gateway's resource URLs as the request reached it: the origin, its `/mcp` and `path`
 * (the protected path asked, e.g. `/mcp/fs`) (a JWT's `aud` must be one; with
 * `identity.resource` set, the same paths under that resource). Only when `Host` names the port this
 * socket was accepted on: Host names any loopback address or IP literal, so a token another
 * service on this machine was given (`aud: http://127.0.0.1:8080`) must not pass here because
 * a client wrote that Host. Behind a proxy (another port), set `identity.resource`.
 */
export function resourceUrls(req: IncomingMessage, path?: string): string[] {
  const o = requestOrigin(req);
  let port: string;
  try {
    const u = new URL(o);
    port = u.port || (u.protocol === "https:" ? "443" : "80");
  } catch {
    return [];
  }
  if (port !== String(req.socket.localPort)) return [];
  // The path's own resource too (`/mcp/<participant>`), as its RFC 9728 document names it.
  return [o, `${o}/`, `${o}/mcp`, ...(path && path !== "/mcp" && path.startsWith("/") ? [`${o}${path}`] : [])];
}

/**
 * The `WWW-Authenticate` value of a refusal (RFC 6750, RFC 9728): where the resource's
 * metadata is, and — for a token that was presented — what was wrong with it and, for a
 * token without the scope, which scope to ask for; `scope` alone (a 401 without a token) says
 * which scope a token needs here.
 */
export function bearerChallenge(
  req: IncomingMessage,
  metadataSuffix: string,
  failure?: { error: string; description?: string; scope?: string },
  scope?: string,
): string {
  const quote = (v: string) => v.replace(/[\\"]/g, "").replace(/[^\x20-\x7e]/g, "?");
  const parts = [
    `Bearer realm="mewgate"`,
    `resource_metadata="${quote(`${requestOrigin(req)}${RESOURCE_METADATA_PATH}${metadataSuffix}`)}"`,
  ];
  // An identity that is no one here (access_denied) is not a scope problem: no error to retry for.
  if (failure && failure.error !== "temporarily_unavailable" && failure.error !== "access_denied") {
    parts.push(`error="${quote(failure.error)}"`);
    if (failure.description) parts.push(`error_description="${quote(failure.description)}"`);
  }
  const needed = failure?.error === "access_denied" ? undefined : (failure?.scope ?? scope);
  if (needed) parts.push(`scope="${quote(needed)}"`);
  return parts.join(", ");
}

/** The console's session cookie for a space: one per space, so signing in to one never touches another. */
export function sessionCookieName(spaceId: string): string {
  return `mewgate_session_${spaceId}`;
}

/** A cookie's value from the request, or undefined. */
export function cookie(req: IncomingMessage, name: string): string | undefined {
  const raw = req.headers.cookie;
  if (!raw) return undefined;
  for (const part of raw.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  const s = Array.isArray(v) ? v[0] : v;
  return s === undefined || s === "" ? undefined : s;
}
