/**
 * MEW's HTTP message injection: `POST /participants/<id>/messages?space=<space>` with the
 * participant's token as `Authorization: Bearer`, and an envelope (at least a `kind`) as
 * the body — for scripts, CI and systems that cannot hold a WebSocket. Also
 * `GET /participants?space=<space>`.
 *
 * The envelope goes through the space's whole pipeline as that participant (`space.seats.act`,
 * as the operator API does): `from` is the token's, never the body's; capabilities, tool
 * policy and proposals hold as on the wire. Answers as MEW's gateway does:
 * `{id, status: "accepted", timestamp}`, or an error with the wire's code.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Envelope } from "../wire/envelope.js";
import type { Space } from "../space/space.js";
import { bearer, readJsonObject, sendJson as send } from "./http.js";
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
    const token = bearer(req.headers.authorization);
    const auth = token === undefined ? undefined : s.authenticate(token);
    return auth?.ok ? auth.id : undefined;
  };

  gateway.addHttpRoute("/participants", (req, res) => {
    const url = new URL(req.url ?? "/", "http://gateway");
    const s = space(url);
    if (!s) return send(res, 404, { error: "unknown_space", message: "no such space (give ?space=ID)" });
    if (!who(req, s)) return send(res, 401, { error: "unauthorized", message: "send a participant's token as Authorization: Bearer" });
    send(res, 200, {
      participants: s.participantsView().map((p) => ({ id: p["id"], connected: p["online"], capabilities: p["capabilities"] })),
    });
  });

  gateway.addHttpPrefix("/participants/", (req, res) => {
    void (async () => {
      const url = new URL(req.url ?? "/", "http://gateway");
      const m = /^\/participants\/([^/]+)\/messages$/.exec(url.pathname);
      const named = m ? decoded(m[1]!) : undefined;
      if (named === undefined || req.method !== "POST")
        return send(res, 404, { error: "not_found", message: "POST /participants/<id>/messages?space=<space>" });
      const s = space(url);
      if (!s) return send(res, 404, { error: "unknown_space", message: "no such space (give ?space=ID)" });
      if (!/^Bearer\s+\S+/i.test(req.headers.authorization ?? ""))
        return send(res, 401, { error: "unauthorized", message: "missing or invalid authorization header" });
      const id = who(req, s);
      // The path names the participant; the token must be that participant's.
      if (id === undefined || id !== named) return send(res, 403, { error: "forbidden", message: "invalid token for participant" });
      const read = await readJsonObject(req, res, MAX_BODY);
      if (!read.ok) return send(res, read.status, { error: "invalid_request", message: read.message });
      const body = read.body;
      if (typeof body["kind"] !== "string" || body["kind"] === "")
        return send(res, 400, { error: "invalid_request", message: "message kind is required" });
      const envelopeId = typeof body["id"] === "string" && body["id"] ? body["id"] : `http-${randomUUID()}`;
      const replies: Envelope[] = [];
      const errors = await s.seats.act(id, { ...body, id: envelopeId }, { tellLive: true, replies });
      const e = errors[0];
      if (e) {
        const code = String(e["code"] ?? "error");
        return send(res, statusOf(code), { error: code, message: String(e["message"] ?? code), ...e });
      }
      // An invitation answers with the new participant's token, to the inviter alone (MEW's shape).
      const ack = replies.find((r) => r.kind === "space/invite-ack");
      if (ack) return send(res, 200, { id: envelopeId, ...(ack.payload as Record<string, unknown>), timestamp: new Date().toISOString() });
      send(res, 200, { id: envelopeId, status: "accepted", timestamp: new Date().toISOString() });
    })().catch(() => {
      if (!res.headersSent) send(res, 500, { error: "internal_error", message: "the gateway failed on this request" });
    });
  });
}

/** A percent-encoded path segment, or undefined when it is not valid encoding (`%ZZ`). */
function decoded(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}
