/**
 * The operator HTTP API, on the gateway's port under `/api/spaces/<space>/`:
 *
 *   GET    me | participants | tools | grants | audit | proposals[?state=all|decided] | proposals/<id>
 *   GET    proposals/<id>/preview (what the call would change, read as the caller: proposals/preview.ts)
 *   GET    proposals/<id>/receipt (its approval's signed receipt: proposals/receipts.ts)
 *   GET    receipts/jwks.json     (the keys receipts are checked with; no sign-in)
 *   GET    passkeys · POST passkeys/options|register · GET proposals/<id>/passkey   (passkey-api.ts)
 *   GET    history[?limit=N]      (recent envelopes the caller may see: chat and activity on open)
 *   POST   proposals/<id>/approve {scope?, arguments?, reason?}
 *   POST   proposals/<id>/reject  {reason, text?}
 *   POST   proposals/<id>/withdraw {reason?}
 *   POST   proposals/<id>/respond {text}  (a chat to the proposer tied to the proposal; decides nothing)
 *   DELETE grants/<id>            (cascading, like capability/revoke)
 *   POST   chat {text, to?}
 *   POST   participants/<id>/disable {reason?} · participants/<id>/enable  (space/disable, space/enable)
 *   GET    conversations          (who holds each person's conversation: interactive delegation)
 *   GET    requests               (forms asked of the caller: elicitation/create waiting on it)
 *   POST   requests/<id>/respond  {result} or {error: {code, message}}: the caller's answer
 *   GET    events                 (server-sent events: every envelope the caller may see)
 *   GET    policy/explain?caller&tool&args · policy/check · policy/caps   (policy-api.ts)
 *   GET    reviews · POST proposals/<id>/review {verdict, risk, reason}   (a reviewer before the human: review-api.ts)
 *   GET    policy/suggestions · POST policy/suggestions/<id>/accept|dismiss · POST policy/dry-run · GET policy/fatigue (learn-api.ts)
 *   POST   links/open {link} · links/decide {link, confirm, decision}  (decision links: links.ts)
 *   POST   reload                 (re-read space.yaml and tokens; space/reload.ts)   } for a caller whose
 *   GET    sessions               (who is connected, from where, which token)        } capabilities allow
 *   DELETE sessions/<id>          (end that participant's session: 4413)             } `space/reload`
 *
 * Authenticated by a participant's token in `Authorization: Bearer` — never in the URL,
 * which gets logged. A call acts as that participant through the space's own pipeline
 * (`space.seats.act`), so every rule holds as on the wire: nobody decides on their own
 * proposal or revokes what they may not; and it never joins, so the participant's live
 * connection (a terminal, an agent) is not disturbed. Origin and Host are checked before
 * any of this, like every route (origin.ts); a browser page from elsewhere gets 403.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { clip } from "../ports/host.js";
import type { Peer } from "../ports/member.js";
import type { Proposal } from "../proposals/book.js";
import type { Space } from "../space/space.js";
import { Sessions, type Session } from "../identity/sessions.js";
import { adopt, authenticateBearer } from "../space/bearer.js";
import { bearer, bearerChallenge, cookie, header, readJsonObject, resourceUrls, sendJson, sessionCookieName } from "./http.js";
import { decidedView, proposalView, statusOf } from "./views.js";
import { capsRoute, checkRoute, explainRoute } from "./policy-api.js";
import { linkRoute } from "./links.js";
import { learnRoute, notePreviewOpened } from "./learn-api.js";
import { reviewRoute, reviewsRoute } from "./review-api.js";
import { passkeyRoute } from "./passkey-api.js";
import { clearDeviceCookie, deviceCookie, deviceParticipant, DEVICE_SESSION_MS, linkState } from "./device-session.js";
import type { ReloadReport } from "../space/reload.js";
import { compileCapabilities } from "../policy/capabilities.js";

const PREFIX = "/api/spaces/";
const MAX_BODY = 1024 * 1024;
/** A comment line on an idle event stream, so proxies and clients know it is alive. */
const KEEPALIVE_MS = 15_000;

interface Caller {
  space: Space;
  id: string;
  /** The console session it came with (signin.ts), if not a bearer token. */
  session?: Session | undefined;
  /** The digest of the static token it came with: a stream it opens ends when that token is revoked or rotated. */
  digest?: string | undefined;
}

/**
 * Who calls: a bearer token (static, or a JWT from the space's identity provider), or the
 * console's session cookie — with which a request that changes anything must also carry the
 * session's CSRF value in `X-CSRF-Token` (a page elsewhere cannot read it). Answers the
 * refusal itself and returns undefined.
 */
async function authenticate(space: Space, req: IncomingMessage, res: ServerResponse): Promise<Caller | undefined> {
  const token = bearer(req.headers.authorization);
  if (token === undefined) {
    const session = space.identity?.sessions.find(cookie(req, sessionCookieName(space.id)));
    if (!session) {
      send(res, fail(401, "unauthorized", "send the participant's token as Authorization: Bearer <token>, or sign in"), {
        "www-authenticate": bearerChallenge(req, "/api"),
      });
      return undefined;
    }
    if (req.method !== "GET" && req.method !== "HEAD" && !Sessions.csrfMatches(session, header(req, "x-csrf-token"))) {
      send(res, fail(403, "csrf_failed", "this request changes something and lacks the session's X-CSRF-Token; reload the console"));
      return undefined;
    }
    adopt(space, session.identity);
    return { space, id: session.identity.participant, session };
  }
  const auth = await authenticateBearer(space, token, "api", resourceUrls(req));
  if (!auth.ok) {
    const { status } = auth.http;
    const code = status === 403 ? "insufficient_scope" : status === 503 ? "unavailable" : "unauthorized";
    send(
      res,
      fail(status, code, auth.reason),
      status === 503 ? { "retry-after": "5" } : { "www-authenticate": bearerChallenge(req, "/api", auth.http) },
    );
    return undefined;
  }
  return { space, id: auth.id, digest: auth.digest };
}

type Reply = { status: number; body: unknown };

/** What the API needs of the gateway: its spaces and a place on its HTTP port. */
export interface ApiHost {
  readonly spaces: ReadonlyMap<string, Space>;
  addHttpPrefix(prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
  /** Re-reads a space's space.yaml and applies it (edge/server.ts). */
  reload?(opts: { space?: string | undefined; by: string }): Promise<ReloadReport[]>;
}

export function mountOperatorApi(gateway: ApiHost): void {
  gateway.addHttpPrefix(PREFIX, (req, res) => {
    handle(gateway, req, res).catch((err: Error) => {
      if (!res.headersSent)
        send(res, { status: 500, body: { error: { code: "internal_error", message: "the gateway failed on this request" } } });
      else res.end();
      void err;
    });
  });
}

async function handle(gateway: ApiHost, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", "http://gateway");
  const parts = decodePath(url.pathname.slice(PREFIX.length));
  // A path that is not valid percent-encoding names nothing here.
  if (!parts) return send(res, fail(404, "not_found", "the path is not valid percent-encoding; see docs/operator-api.md"));
  const [spaceId, ...rest] = parts;
  const space = gateway.spaces.get(spaceId ?? "");
  if (!space) return send(res, fail(404, "unknown_space", `no space named "${clip(spaceId ?? "")}"`));
  // Decision links (device-session.ts): a link's state needs no sign-in, and the link routes
  // take this device's session when no token is sent.
  const linkPath = rest[0] === "links" && rest.length === 2 && req.method === "POST" ? rest[1] : undefined;
  if (linkPath === "state") {
    const read = await readJsonObject(req, res, MAX_BODY);
    return send(
      res,
      read.ok ? { status: 200, body: linkState(space, read.body["link"]) } : fail(read.status, "invalid_payload", read.message),
    );
  }
  // The public keys approval receipts are checked with (proposals/receipts.ts): anyone may fetch them.
  if (req.method === "GET" && rest.length === 2 && rest[0] === "receipts" && rest[1] === "jwks.json")
    return send(res, { status: 200, body: space.receipts.jwks() }, { "cache-control": "max-age=300" });
  const device = linkPath !== undefined && req.headers.authorization === undefined ? deviceParticipant(space, req) : undefined;
  const caller = device ? { space, id: device.id } : await authenticate(space, req, res);
  if (!caller) return;
  if (linkPath === "forget") return send(res, { status: 200, body: { forgotten: true } }, { "set-cookie": clearDeviceCookie(space, req) });
  const route = `${req.method} ${rest.map((p, i) => (i === 1 && rest[0] !== undefined && ["proposals", "grants", "requests", "participants", "sessions"].includes(rest[0]) ? ":id" : p)).join("/")}`;
  if (route === "GET events") return events(caller, req, res);
  let body: Record<string, unknown> = {};
  if (req.method === "POST") {
    const read = await readJsonObject(req, res, MAX_BODY);
    if (!read.ok) return send(res, fail(read.status, "invalid_payload", read.message));
    body = read.body;
  }
  if (route === "POST reload" || route === "GET sessions" || route === "DELETE sessions/:id")
    return send(res, await operate(gateway, caller, route, rest[1]));
  if (route === "GET reviews") return send(res, reviewsRoute(space, caller.id));
  const passkey = await passkeyRoute(space, caller.id, route, rest[1], body, header(req, "host"));
  if (passkey) return send(res, passkey);
  if (route === "POST proposals/:id/review") return send(res, await reviewRoute(space, caller.id, rest[1] ?? "", body));
  if (rest[0] === "policy" && (rest[1] === "suggestions" || rest[1] === "dry-run" || rest[1] === "fatigue"))
    return send(res, await learnRoute(gateway, space, caller.id, req.method ?? "GET", rest.slice(1), body));
  const reply = await dispatch(caller, route, rest[1], url.searchParams, body);
  // A link opened with the person's own token: this device may open their next links with one tap.
  const token = bearer(req.headers.authorization);
  if (linkPath === "open" && reply.status === 200 && token !== undefined && space.authenticate(token).ok) {
    (reply.body as Record<string, unknown>)["device"] = { until: new Date(Date.now() + DEVICE_SESSION_MS).toISOString() };
    return send(res, reply, { "set-cookie": deviceCookie(space, req, caller.id, token) });
  }
  if (device && reply.status === 200 && typeof reply.body === "object" && reply.body)
    (reply.body as Record<string, unknown>)["device"] = { until: new Date(device.until).toISOString() };
  send(res, reply);
}

/**
 * What only an operator may do: reload the space, list its sessions, end one. An operator
 * is a participant whose capabilities allow the kind `space/reload` (the space's humans,
 * by default: they hold `*`).
 */
async function operate(gateway: ApiHost, c: Caller, route: string, id: string | undefined): Promise<Reply> {
  const capabilities = c.space.participantsView().find((p) => p.id === c.id)?.["capabilities"] as
    | Parameters<typeof compileCapabilities>[0]
    | undefined;
  if (!capabilities || !compileCapabilities(capabilities)({ kind: "space/reload" }))
    return fail(403, "capability_violation", "only an operator may do this: your capabilities do not allow space/reload");
  if (route === "GET sessions") return ok({ sessions: c.space.sessions.view() });
  if (route === "DELETE sessions/:id")
    return c.space.sessions.end(id ?? "", c.id)
      ? ok({ ended: id })
      : fail(404, "not_connected", `"${clip(id ?? "")}" has no session in this space`);
  if (!gateway.reload) return fail(501, "not_supported", "this gateway cannot reload");
  try {
    return ok({ reloaded: await gateway.reload({ space: c.space.id, by: c.id }) });
  } catch (err) {
    const issues = (err as { issues?: unknown }).issues;
    // The file's own errors (file:line:col): nothing changed.
    return {
      status: 422,
      body: {
        error: {
          code: issues ? "invalid_config" : "reload_failed",
          message: `nothing changed: ${(err as Error).message}`,
          ...(issues ? { issues } : {}),
        },
      },
    };
  }
}

async function dispatch(
  c: Caller,
  route: string,
  id: string | undefined,
  q: URLSearchParams,
  body: Record<string, unknown>,
): Promise<Reply> {
  const { space } = c;
  switch (route) {
    case "GET me":
      return ok(space.participantsView().find((p) => p.id === c.id));
    case "GET participants":
      return ok({ participants: space.participantsView() });
    case "GET tools":
      return ok({ tools: space.toolsForId(c.id) });
    case "GET grants":
      return ok({ grants: space.grantsView() });
    case "GET notify":
      return ok({ deliveries: space.notifier.deliveries() });
    case "GET audit":
      return ok({ entries: space.ledger.audit(auditQuery(q), limit(q)) });
    case "GET proposals": {
      if (q.get("state") === "decided") return ok({ decided: decidedFor(c, q) });
      const pending = visible(c).map((p) => proposalView(space, c.id, p));
      if (q.get("state") !== "all") return ok({ proposals: pending });
      return ok({ proposals: pending, past: space.ledger.audit(auditQuery(q), limit(q)).filter((e) => e.event !== "proposed") });
    }
    case "GET proposals/:id": {
      const p = visible(c).find((x) => x.id === id);
      return p ? ok(proposalView(space, c.id, p)) : fail(404, "unknown_proposal", `no pending proposal "${clip(id ?? "")}"`);
    }
    case "GET proposals/:id/receipt": {
      // The signed receipt of its approval, from the audit trail (every approval of it: an interrupted one may have two).
      const entries = space.ledger.audit({}).filter((e) => e.proposal === id && e.event === "approved" && e.receipt !== undefined);
      if (!entries.length) return fail(404, "no_receipt", `no approval receipt for proposal "${clip(id ?? "")}"`);
      const last = entries[entries.length - 1]!;
      return ok({
        proposal: id,
        receipt: last.receipt,
        decision: last.decision,
        receipts: entries.map((e) => ({ receipt: e.receipt, decision: e.decision, ts: e.ts })),
        jwks: `/api/spaces/${encodeURIComponent(space.id)}/receipts/jwks.json`,
      });
    }
    case "GET proposals/:id/preview": {
      const p = visible(c).find((x) => x.id === id);
      if (p) notePreviewOpened(space, p.id, c.id);
      return p ? ok(await space.aids.previews.of(p, c.id)) : fail(404, "unknown_proposal", `no pending proposal "${clip(id ?? "")}"`);
    }
    case "POST links/open":
    case "POST links/decide":
    case "POST links/preview":
      return linkRoute(space, c.id, route === "POST links/open" ? "open" : route === "POST links/preview" ? "preview" : "decide", body);
    case "POST proposals/:id/approve": {
      const errors = await space.seats.act(c.id, {
        kind: "mcp/approve",
        correlation_id: [id],
        payload: pick(body, ["scope", "arguments", "reason", "limit", "passkey"]),
      });
      // One of several approvals it needs: it still waits, and says how far it got.
      const still = errors.length ? undefined : space.proposals.pending().find((x) => x.id === id && x.state === "pending");
      return acted(errors, still ? { state: "pending", ...proposalView(space, c.id, still) } : { state: "approved" });
    }
    case "POST proposals/:id/reject":
      return acted(
        await space.seats.act(c.id, {
          kind: "mcp/reject",
          correlation_id: [id],
          payload: { reason: "disagree", ...pick(body, ["reason", "text"]) },
        }),
        { state: "rejected" },
      );
    case "POST proposals/:id/respond": {
      // An answer to the proposer about this proposal, without deciding it: a chat to the
      // proposer tied to the proposal (docs/protocol.md, Respond). It stays pending.
      const p = visible(c).find((x) => x.id === id);
      if (!p) return fail(404, "unknown_proposal", `no pending proposal "${clip(id ?? "")}"`);
      if (typeof body["text"] !== "string" || body["text"].trim() === "")
        return fail(400, "invalid_payload", "respond: text must be a non-empty string");
      // Only someone who may decide it answers about it (respond.ts): anyone else would send a plain chat.
      const why = space.whyNotDecide(c.id, p);
      if (why) return fail(403, why.code, `you may not respond to proposal "${clip(p.id)}": ${why.message}`);
      const envId = crypto.randomUUID();
      return acted(
        await space.seats.act(c.id, { id: envId, kind: "chat", to: [p.proposer], correlation_id: [p.id], payload: { text: body["text"] } }),
        { id: envId },
      );
    }
    case "POST proposals/:id/withdraw":
      return acted(await space.seats.act(c.id, { kind: "mcp/withdraw", correlation_id: [id], payload: pick(body, ["reason"]) }), {
        state: "withdrawn",
      });
    case "DELETE grants/:id": {
      const g = space.grantById(id ?? "");
      if (!g) return fail(404, "unknown_grant", `no grant "${clip(id ?? "")}"`);
      return acted(await space.seats.act(c.id, { kind: "capability/revoke", payload: { recipient: g.recipient, grant_id: g.id } }), {
        revoked: g.id,
      });
    }
    case "POST chat": {
      if (typeof body["text"] !== "string" || body["text"] === "")
        return fail(400, "invalid_payload", "chat: text must be a non-empty string");
      const to = Array.isArray(body["to"]) ? body["to"] : undefined;
      const envId = crypto.randomUUID();
      return acted(await space.seats.act(c.id, { id: envId, kind: "chat", ...(to ? { to } : {}), payload: { text: body["text"] } }), {
        id: envId,
      });
    }
    case "POST participants/:id/disable":
    case "POST participants/:id/enable": {
      const kind = route.endsWith("disable") ? "space/disable" : "space/enable";
      const payload = { participant_id: id, ...pick(body, ["reason"]) };
      return acted(await space.seats.act(c.id, { kind, payload }), { participant: id, disabled: kind === "space/disable" });
    }
    case "GET history":
      return ok({ envelopes: space.delivery.recentFor(c.id, Math.min(limit(q), 500)) });
    case "GET conversations":
      return ok({ conversations: space.conversations.view() });
    case "GET requests":
      return ok({ requests: space.requestsFor(c.id).filter((r) => r["method"] === "elicitation/create") });
    case "POST requests/:id/respond": {
      // Answered as the caller, through the pipeline: only the one asked may answer, and only once.
      const r = space.requestsFor(c.id).find((x) => x["id"] === id);
      if (!r) return fail(404, "unknown_request", `nothing "${clip(id ?? "")}" is waiting for your answer`);
      const outcome = body["error"] !== undefined ? { error: body["error"] } : { result: body["result"] ?? {} };
      return acted(
        await space.seats.act(c.id, {
          kind: "mcp/response",
          correlation_id: [id],
          payload: { jsonrpc: "2.0", id: r["rpc_id"], ...outcome },
        }),
        { answered: id },
      );
    }
    case "GET policy/explain":
      return explainRoute(space, c.id, q);
    case "GET policy/check":
      return checkRoute(space, c.id);
    case "GET policy/caps":
      return capsRoute(space, c.id);
    default:
      return fail(404, "not_found", `no such route: ${clip(route)}; see docs/operator-api.md`);
  }
}

/** Decided proposals the caller may see (as pending ones: all with visibility `all`, else its own and those it served), newest first. */
function decidedFor(c: Caller, q: URLSearchParams): Array<Record<string, unknown>> {
  const all = c.space.config.participants[c.id]?.visibility === "all";
  const entries = c.space.ledger
    .audit(auditQuery(q), 5000)
    .filter((e) => e.event !== "tool_changed" && (all || e.proposer === c.id || e.owner === c.id));
  return decidedView(c.space, entries, Math.min(limit(q), 500));
}

/** Proposals awaiting a decision (pending or interrupted) the caller may see: all with visibility `all`, else its own and those it would serve. */
function visible(c: Caller): Proposal[] {
  const all = c.space.config.participants[c.id]?.visibility === "all";
  return c.space.proposals.pending().filter((p) => all || p.proposer === c.id || p.owner === c.id);
}

/** The server-sent event stream of what the caller may see, until the client goes away. */
function events(c: Caller, req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(200, {
    "content-type": "text/event-stream",
    "cache-control": "no-store",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  res.write(`event: hello\ndata: ${JSON.stringify({ you: c.id, space: c.space.id })}\n\n`);
  const peer: Peer = {
    send: (bytes, text) => {
      // A reader that does not keep up is cut off rather than buffered for.
      if (res.writableLength > 8 * 1024 * 1024) return stop();
      res.write(`event: envelope\ndata: ${text ?? bytes.toString("utf8")}\n\n`);
    },
    close: () => stop(),
  };
  let expiry: NodeJS.Timeout | undefined;
  const unwatch = c.space.seats.watch(c.id, peer);
  // Signing out ends the stream a session opened (sessions.ts), and so does the session's expiry.
  c.session?.closers.add(stop);
  expiry = c.session ? setTimeout(stop, Math.max(0, c.session.expiresAt - Date.now())) : undefined;
  expiry?.unref();
  // And a token revoked, rotated or expired ends the stream opened with it (space/sessions.ts).
  let stopped = false;
  const revoked = () => {
    if (!stopped)
      res.write(
        `event: closed\ndata: ${JSON.stringify({ code: "token_revoked", message: "the token this stream was opened with is no longer accepted (rotated, revoked or expired)" })}\n\n`,
      );
    stop();
  };
  const unhold = c.digest === undefined ? undefined : c.space.sessions.hold(c.id, c.digest, "event stream", revoked);
  const keepalive = setInterval(() => res.write(": keepalive\n\n"), KEEPALIVE_MS);
  keepalive.unref();
  function stop(): void {
    if (stopped) return;
    stopped = true;
    clearInterval(keepalive);
    clearTimeout(expiry);
    c.session?.closers.delete(stop);
    unhold?.();
    unwatch();
    res.end();
  }
  req.on("close", stop);
}

/** The reply to an action: the first error it earned, with an HTTP status, or `done`. */
function acted(errors: Array<Record<string, unknown>>, done: Record<string, unknown>): Reply {
  const e = errors[0];
  if (!e) return ok({ ok: true, ...done });
  const code = String(e["code"] ?? "error");
  return { status: statusOf(code), body: { error: { ...e, code, message: String(e["message"] ?? code) } } };
}

function auditQuery(q: URLSearchParams): { participant?: string; tool?: string; since?: Date; until?: Date } {
  const date = (v: string | null) => (v && !Number.isNaN(Date.parse(v)) ? new Date(v) : undefined);
  return {
    ...(q.get("participant") ? { participant: q.get("participant")! } : {}),
    ...(q.get("tool") ? { tool: q.get("tool")! } : {}),
    ...(date(q.get("since")) ? { since: date(q.get("since"))! } : {}),
    ...(date(q.get("until")) ? { until: date(q.get("until"))! } : {}),
  };
}

function limit(q: URLSearchParams): number {
  const n = Number(q.get("limit") ?? 1000);
  return Number.isInteger(n) && n > 0 ? Math.min(n, 10_000) : 1000;
}

function pick(body: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of keys) if (body[k] !== undefined) out[k] = body[k];
  return out;
}

const ok = (body: unknown): Reply => ({
  status: body === undefined ? 404 : 200,
  body: body ?? { error: { code: "not_found", message: "not found" } },
});
const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });

function send(res: ServerResponse, r: Reply, headers: Record<string, string> = {}): void {
  sendJson(res, r.status, r.body, headers);
}

/** The path's segments, decoded; undefined when one is not valid percent-encoding (`%ZZ`). */
function decodePath(path: string): string[] | undefined {
  try {
    return path.split("/").map(decodeURIComponent);
  } catch {
    return undefined;
  }
}
