/**
 * The console's sign-in through the space's identity provider (`identity:` in space.yaml):
 *
 *   GET  /auth/login/<space>      → 302 to the provider (code flow, PKCE, state, nonce)
 *   GET  /auth/callback/<space>   ← the provider's answer; opens a session, → 302 /ui/
 *   GET  /auth/session/<space>    who the session is, and its CSRF value (same origin only)
 *   POST /auth/logout/<space>     ends the session (X-CSRF-Token required)
 *
 * The session is a random id in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` over
 * TLS or when `identity.resource` is https), named after the space and with the session's
 * expiry; the server keeps the session (identity/sessions.ts). The binding cookie of a
 * sign-in under way is `SameSite=Lax`, since it must come back with the provider's redirect.
 * Spaces without `identity:` keep the token form; these routes answer 404 for them.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { SignInError } from "../identity/oidc.js";
import { Sessions } from "../identity/sessions.js";
import { stripHidden } from "../tools/inspect.js";
import { adopt } from "../space/bearer.js";
import type { Space } from "../space/space.js";
import { cookie, header, requestOrigin, sendJson, sessionCookieName } from "./http.js";

const PREFIX = "/auth/";
const BINDING_MAX_AGE_S = 600;

export interface SignInHost {
  readonly spaces: ReadonlyMap<string, Space>;
  addHttpPrefix(prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
}

export function mountSignIn(gateway: SignInHost): void {
  gateway.addHttpPrefix(PREFIX, (req, res) => {
    handle(gateway, req, res).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { error: { code: "internal_error", message: "the gateway failed on this request" } });
      else res.end();
      void err;
    });
  });
}

async function handle(gateway: SignInHost, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", "http://gateway");
  const [action, spaceId, ...rest] = url.pathname.slice(PREFIX.length).split("/");
  const space = rest.length === 0 ? gateway.spaces.get(spaceId ?? "") : undefined;
  const identity = space?.identity;
  if (!space || !identity) return sendJson(res, 404, { error: { code: "not_found", message: "no space with sign-in (identity:) here" } });
  const secure = (req.socket as { encrypted?: boolean }).encrypted === true || identity.config.resource?.startsWith("https:") === true;
  const base = identity.config.resource?.replace(/\/$/, "") ?? requestOrigin(req);
  const bindingName = `mewgate_signin_${space.id}`;
  const sessionName = sessionCookieName(space.id);
  const route = `${req.method} ${action}`;
  switch (route) {
    case "GET login": {
      if (!identity.signIn.enabled)
        return sendJson(res, 404, { error: { code: "not_configured", message: "identity.client_id is not set: sign in with a token" } });
      let started: { url: string; binding: string };
      try {
        started = await identity.signIn.start(`${base}/auth/callback/${space.id}`);
      } catch (err) {
        space.log.warn({ err: (err as Error).message }, "console sign-in could not start");
        return page(res, 503, "The identity provider could not be reached. Try again later.");
      }
      res.writeHead(302, {
        location: started.url,
        "set-cookie": cookieHeader(bindingName, started.binding, { maxAge: BINDING_MAX_AGE_S, sameSite: "Lax", secure, path: "/auth/" }),
        "cache-control": "no-store",
      });
      return void res.end();
    }
    case "GET callback": {
      let claims: Record<string, unknown>;
      try {
        claims = await identity.signIn.finish(url, cookie(req, bindingName));
      } catch (err) {
        const code = err instanceof SignInError ? err.code : "provider_error";
        space.log.info({ code, remote: req.socket.remoteAddress }, "console sign-in refused");
        return page(res, 400, `Sign-in failed (${code}): ${(err as Error).message}`, [
          cookieHeader(bindingName, "", { maxAge: 0, sameSite: "Lax", secure, path: "/auth/" }),
        ]);
      }
      const mapped = identity.map(claims);
      if (!mapped.ok) {
        space.log.info({ remote: req.socket.remoteAddress }, "console sign-in of an identity that is no participant refused");
        return page(res, 403, `Signed in at the identity provider, but not allowed in space "${space.id}": ${mapped.description}`);
      }
      adopt(space, mapped.identity);
      const { cookie: value, session } = identity.sessions.open(mapped.identity, req.socket.remoteAddress);
      space.log.info(
        { participant: session.identity.participant, groups: session.identity.groups, remote: session.address },
        "signed in to the console",
      );
      res.writeHead(302, {
        location: `/ui/#space=${encodeURIComponent(space.id)}`,
        "set-cookie": [
          cookieHeader(sessionName, value, {
            maxAge: Math.floor((session.expiresAt - Date.now()) / 1000),
            sameSite: "Strict",
            secure,
            path: "/",
          }),
          cookieHeader(bindingName, "", { maxAge: 0, sameSite: "Lax", secure, path: "/auth/" }),
        ],
        "cache-control": "no-store",
      });
      return void res.end();
    }
    case "GET session": {
      const s = identity.sessions.find(cookie(req, sessionName));
      const base = { space: space.id, sign_in: identity.signIn.enabled, issuer: identity.config.issuer };
      if (!s) return sendJson(res, 200, { ...base, signed_in: false });
      return sendJson(res, 200, {
        ...base,
        signed_in: true,
        participant: s.identity.participant,
        groups: s.identity.groups,
        csrf: s.csrf,
        expires_at: new Date(s.expiresAt).toISOString(),
      });
    }
    case "POST logout": {
      const s = identity.sessions.find(cookie(req, sessionName));
      if (s && !Sessions.csrfMatches(s, header(req, "x-csrf-token")))
        return sendJson(res, 403, { error: { code: "csrf_failed", message: "signing out needs the session's X-CSRF-Token" } });
      if (s) {
        identity.sessions.end(s);
        space.log.info({ participant: s.identity.participant }, "signed out of the console");
      }
      return sendJson(
        res,
        200,
        { signed_out: true },
        { "set-cookie": cookieHeader(sessionName, "", { maxAge: 0, sameSite: "Strict", secure, path: "/" }) },
      );
    }
    default:
      return sendJson(res, 404, {
        error: { code: "not_found", message: "GET /auth/login/<space>, GET /auth/session/<space>, POST /auth/logout/<space>" },
      });
  }
}

function cookieHeader(
  name: string,
  value: string,
  o: { maxAge: number; sameSite: "Strict" | "Lax"; secure: boolean; path: string },
): string {
  return `${name}=${value}; Path=${o.path}; Max-Age=${Math.max(0, o.maxAge)}; HttpOnly; SameSite=${o.sameSite}${o.secure ? "; Secure" : ""}`;
}

/** A short plain-text answer a person reads in the browser (never HTML: the message may hold the provider's words). */
function page(res: ServerResponse, status: number, text: string, cookies: string[] = []): void {
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    ...(cookies.length ? { "set-cookie": cookies } : {}),
  });
  res.end(`${stripHidden(text).replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, "?")}\n`);
}
