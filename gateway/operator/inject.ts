/**
 * MEW's HTTP message injection: `POST /participants/<id>/messages?space=<space>` with the
 * participant's token as `Authorization: Bearer`, and an envelope (at least a `kind`) as
 * the body — for scripts, CI and systems that cannot hold a WebSocket. Also
 * `GET /participants?space=<space>`.
 *
 * The envelope goes through the space's whole pipeline as that participant (`Space.act`,
 * as the operator API does): `from` is the token's, never the body's; capabilities, tool
 * policy and proposals hold as on the wire. Answers as MEW's gateway does:
 * `{id, status: "accepted", timestamp}`, or an error with the wire's code.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Space } from "../space.js";
import { statusOf } from "./views.js";

const MAX_BODY = 1024 * 1024;

export interface InjectHost {
  readonly spaces: ReadonlyMap<string, Space>;
  addHttpRoute(path: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
  addHttpPrefix(prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
}

export function mountInjection(gateway: InjectHost): void {
  const space = (url: URL): Space | undefined => {
    const named = url.searchParams.get("space");
    if (named) return gateway.spaces.get(named);
    return gateway.spaces.size === 1 ? [...gateway.spaces.values()][0] : undefined;
  };
  const who = (req: IncomingMessage, s: Space): string | undefined => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
    const auth = m ? s.authenticate(m[1]!) : undefined;
    return auth?.ok ? auth.id : undefined;
  };

  gateway.addHttpRoute("/participants", (req, res) => {
    const url = new URL(req.url ?? "/", "http://gateway");
    const s = space(url);
    if (!s) return send(res, 404, { error: "unknown_space", message: "no such space (give ?space=ID)" });
    if (!who(req, s)) return send(res, 401, { error: "unauthorized", message: "send a participant's token as Authorization: Bearer" });
    send(res, 200, { participants: s.participantsView().map((p) => ({ id: p["id"], connected: p["online"], capabilities: p["capabilities"] })) });
  });

  gateway.addHttpPrefix("/participants/", (req, res) => {
    void (async () => {
      const url = new URL(req.url ?? "/", "http://gateway");
      const m = /^\/participants\/([^/]+)\/messages$/.exec(url.pathname);
      if (!m || req.method !== "POST") return send(res, 404, { error: "not_found", message: "POST /participants/<id>/messages?space=<space>" });
      const s = space(url);
      if (!s) return send(res, 404, { error: "unknown_space", message: "no such space (give ?space=ID)" });
      if (!/^Bearer\s+\S+/i.test(req.headers.authorization ?? "")) return send(res, 401, { error: "unauthorized", message: "missing or invalid authorization header" });
      const id = who(req, s);
      // The path names the participant; the token must be that participant's.
      if (id === undefined || id !== decodeURIComponent(m[1]!)) return send(res, 403, { error: "forbidden", message: "invalid token for participant" });
      const body = await readBody(req);
      if (!body.ok) return send(res, body.status, { error: "invalid_request", message: body.message });
      if (typeof body.value["kind"] !== "string" || body.value["kind"] === "") return send(res, 400, { error: "invalid_request", message: "message kind is required" });
      const envelopeId = typeof body.value["id"] === "string" && body.value["id"] ? body.value["id"] : `http-${randomUUID()}`;
      const errors = await s.act(id, { ...body.value, id: envelopeId });
      const e = errors[0];
      if (e) {
        const code = String(e["code"] ?? "error");
        return send(res, statusOf(code), { error: code, message: String(e["message"] ?? code), ...e });
      }
      send(res, 200, { id: envelopeId, status: "accepted", timestamp: new Date().toISOString() });
    })().catch(() => {
      if (!res.headersSent) send(res, 500, { error: "internal_error", message: "the gateway failed on this request" });
    });
  });
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}

function readBody(req: IncomingMessage): Promise<{ ok: true; value: Record<string, unknown> } | { ok: false; status: number; message: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        resolve({ ok: false, status: 413, message: `request body over ${MAX_BODY} bytes` });
        req.destroy();
      } else chunks.push(c);
    });
    req.on("end", () => {
      try {
        const v = JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown;
        if (typeof v !== "object" || v === null || Array.isArray(v)) return resolve({ ok: false, status: 400, message: "request body must be a JSON object" });
        resolve({ ok: true, value: v as Record<string, unknown> });
      } catch {
        resolve({ ok: false, status: 400, message: "request body must be a JSON object" });
      }
    });
    req.on("error", () => resolve({ ok: false, status: 400, message: "the request failed" }));
  });
}
