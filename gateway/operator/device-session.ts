/**
 * A short-lived device session for decision links: after a person has used their token on
 * a link's page once, the gateway sets a cookie so that the next link on that device opens
 * with one tap, without pasting the token again.
 *
 * The cookie is signed under the space's link secret (proposals/links.ts, its own purpose
 * so it can pass for nothing else), HttpOnly (no script reads it), SameSite=Strict (no
 * other site's page sends it), Secure behind HTTPS, and scoped to the link routes
 * (`/api/spaces/<space>/links/`): it decides nothing but a link made for the same person,
 * and every other route still wants a token. It is bound to the participant and to the
 * token it was made from: a rotated, revoked or expired token ends it. It lasts
 * `DEVICE_SESSION_MS` at most.
 *
 *   POST links/state  {link}  no sign-in needed: `{state, for}` — "usable", "used",
 *                             "expired", "invalid" or "not_pending" — so the page says a
 *                             link is spent before it asks for a token
 *   POST links/forget         ends this device's session (clears the cookie)
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { TokenBook } from "../identity/tokens.js";
import type { Space } from "../space/space.js";
import { cookie } from "./http.js";

export const DEVICE_SESSION_MS = 12 * 3600_000;

interface DeviceClaims {
  /** participant */
  a: string;
  /** expiry, ms since the epoch */
  e: number;
  /** the SHA-256 (base64) of the token it was made from */
  t: string;
  n: string;
}

export function deviceCookieName(space: string): string {
  return `mewgate_device_${space}`;
}

function path(space: string): string {
  return `/api/spaces/${encodeURIComponent(space)}/links/`;
}

function secure(req: IncomingMessage): boolean {
  return (req.socket as { encrypted?: boolean }).encrypted === true || req.headers["x-forwarded-proto"] === "https";
}

/** The Set-Cookie header that opens a device session for `participant`, made from `token`. */
export function deviceCookie(space: Space, req: IncomingMessage, participant: string, token: string, now = Date.now()): string {
  const claims: DeviceClaims = {
    a: participant,
    e: now + DEVICE_SESSION_MS,
    t: TokenBook.digestOf(token),
    n: randomBytes(9).toString("base64url"),
  };
  const body = Buffer.from(JSON.stringify(claims)).toString("base64url");
  const value = `${body}.${space.aids.links.signFor("device", body)}`;
  return `${deviceCookieName(space.id)}=${value}; Path=${path(space.id)}; Max-Age=${Math.floor(DEVICE_SESSION_MS / 1000)}; HttpOnly; SameSite=Strict${secure(req) ? "; Secure" : ""}`;
}

/** The header that ends it. */
export function clearDeviceCookie(space: Space, req: IncomingMessage): string {
  return `${deviceCookieName(space.id)}=; Path=${path(space.id)}; Max-Age=0; HttpOnly; SameSite=Strict${secure(req) ? "; Secure" : ""}`;
}

/** Who the request's device session is, if it has a valid one; else undefined. */
export function deviceParticipant(space: Space, req: IncomingMessage, now = Date.now()): { id: string; until: number } | undefined {
  const raw = cookie(req, deviceCookieName(space.id));
  if (!raw || raw.length > 1024) return undefined;
  const [body, sig, extra] = raw.split(".");
  if (!body || !sig || extra !== undefined) return undefined;
  const want = Buffer.from(space.aids.links.signFor("device", body));
  const got = Buffer.from(sig);
  if (want.length !== got.length || !timingSafeEqual(want, got)) return undefined;
  let c: DeviceClaims;
  try {
    c = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as DeviceClaims;
  } catch {
    return undefined;
  }
  if (typeof c?.a !== "string" || typeof c.e !== "number" || typeof c.t !== "string" || now > c.e) return undefined;
  // The token it was made from must still admit the participant (not rotated, revoked, expired).
  if (!space.tokens.admits(c.a, c.t)) return undefined;
  return { id: c.a, until: c.e };
}

/** `links/state`: what a link's page may say before anyone signs in. Nothing of the proposal itself. */
export function linkState(space: Space, link: unknown): { state: string; for?: string; message: string } {
  const check = space.aids.links.check(link);
  if (!check.ok) return { state: check.code.replace(/^link_/, ""), message: check.message };
  const pending = space.proposals.pending().some((p) => p.id === check.claims.p);
  if (!pending)
    return { state: "not_pending", for: check.claims.a, message: "the proposal this link decides is no longer waiting for a decision" };
  return { state: "usable", for: check.claims.a, message: "this link can decide once, by the person it was made for" };
}
