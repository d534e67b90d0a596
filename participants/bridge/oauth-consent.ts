/**
 * Where a person's consent comes back: the gateway's `/oauth/callback/<space>` route (the
 * `ConsentDesk`, mounted with `Gateway.addHttpPrefix`), and for tests the headless consent
 * that follows an authorization URL itself and reads the code from its redirect.
 *
 * A sign-in's card does not carry the authorization URL: it carries the desk's own start
 * link (`/oauth/callback/<space>/start?k=…`), a single-use secret shown to the person the
 * sign-in is for and nobody else (the card is a URL elicitation, which the gateway delivers
 * to its addressee alone). Opening it binds the sign-in to that browser (an HttpOnly cookie
 * scoped to the callback's path) and sends it on to the authorization server. The callback
 * completes only in the browser that opened the start link: whoever else lands there with
 * the sign-in's `state` — an agent that followed the person's link, another person signed
 * in at the authorization server as themselves (login CSRF) — is refused, nothing is
 * exchanged, and the person's own sign-in still waits for them.
 *
 * A callback is matched to the sign-in it finishes by its `state`, once: an unknown or
 * already used `state` (a stale link, a replay, a forgery) is answered with a page that
 * says so, and no code is exchanged. The page a person sees never repeats the code, the
 * state, or anything else from the query.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isLoopback, safe } from "./oauth.js";

/** What finishing a sign-in does with the callback URL: resolves once the tokens are kept, or rejects saying why. */
export type Finish = (callbackUrl: URL) => Promise<void>;

interface Expected {
  space: string;
  finish: Finish;
  timer: NodeJS.Timeout;
  /** Where the start link sends the browser. */
  authorizationUrl: string;
  /** The start link's secret, hashed (the link is the person's; the desk keeps no copy that would open it). */
  key: string;
  /** The secret the opening browser holds as a cookie, once the start link was opened. */
  binding?: string | undefined;
  /** The cookie goes over https only. */
  secure: boolean;
}

/** A sign-in waits this long for its callback before its state is forgotten. */
const PENDING_MS = 15 * 60_000;
const MAX_PENDING = 1000;
const COOKIE = "mewgate_signin_";

export class ConsentDesk {
  private readonly pending = new Map<string, Expected>();
  /** Hashed start key → state. */
  private readonly starts = new Map<string, string>();

  /** The callback route's path for `space`. */
  static path(space: string): string {
    return `/oauth/callback/${encodeURIComponent(space)}`;
  }

  /**
   * Waits for the callback carrying `state` for `space`. Returns the start link to show the
   * person (on the gateway whose callback is `redirectUri`), and the function that forgets it.
   */
  expect(
    space: string,
    state: string,
    finish: Finish,
    at: { authorizationUrl: URL; redirectUri: string },
  ): { link: string; forget: () => void } {
    if (this.pending.size >= MAX_PENDING) {
      const oldest = this.pending.keys().next().value;
      if (oldest !== undefined) this.forget(oldest);
    }
    const timer = setTimeout(() => this.forget(state), PENDING_MS);
    timer.unref();
    const secret = randomBytes(32).toString("base64url");
    const key = hash(secret);
    this.pending.set(state, {
      space,
      finish,
      timer,
      authorizationUrl: at.authorizationUrl.href,
      key,
      secure: new URL(at.redirectUri).protocol === "https:",
    });
    this.starts.set(key, state);
    return { link: `${at.redirectUri.replace(/\/+$/, "")}/start?k=${secret}`, forget: () => this.forget(state) };
  }

  private forget(state: string): void {
    const e = this.pending.get(state);
    if (e) {
      clearTimeout(e.timer);
      this.starts.delete(e.key);
    }
    this.pending.delete(state);
  }

  /**
   * A person opened a start link: the first browser to open it is the one the sign-in
   * completes in (a cookie it holds from now on); the same browser may open it again.
   */
  start(
    space: string,
    secret: string | null,
    cookies: ReadonlyMap<string, string>,
  ): { ok: true; location: string; cookie?: string } | { ok: false; status: number; message: string } {
    const state = secret === null ? undefined : this.starts.get(hash(secret));
    const e = state === undefined ? undefined : this.pending.get(state);
    if (!e || e.space !== space || state === undefined)
      return { ok: false, status: 400, message: "This sign-in link is unknown or was already used. Start again from the card in mewgate." };
    const name = cookieName(state);
    if (e.binding !== undefined) {
      if (same(cookies.get(name), e.binding)) return { ok: true, location: e.authorizationUrl };
      return {
        ok: false,
        status: 403,
        message:
          "This sign-in link was already opened in another browser. Only the person it was made for may use it; ask mewgate for a new card.",
      };
    }
    e.binding = randomBytes(32).toString("base64url");
    const path = ConsentDesk.path(space);
    const cookie = `${name}=${e.binding}; Path=${path}; Max-Age=${PENDING_MS / 1000}; HttpOnly; SameSite=Lax${e.secure ? "; Secure" : ""}`;
    return { ok: true, location: e.authorizationUrl, cookie };
  }

  /**
   * A callback URL arrived: over HTTP with the browser's cookies, or (`cookies` undefined)
   * from headless consent in this process, which followed the authorization URL itself.
   */
  async deliver(
    space: string,
    url: URL,
    cookies?: ReadonlyMap<string, string>,
  ): Promise<{ ok: true } | { ok: false; status: number; message: string }> {
    const state = url.searchParams.get("state");
    const e = state === null ? undefined : this.pending.get(state);
    if (!e || e.space !== space || state === null)
      return { ok: false, status: 400, message: "This sign-in link is unknown or was already used. Start again from the card in mewgate." };
    // Bound to the browser that opened the card's link: anyone else's callback is refused, and the sign-in still waits for its person.
    if (cookies !== undefined && (e.binding === undefined || !same(cookies.get(cookieName(state)), e.binding)))
      return {
        ok: false,
        status: 403,
        message:
          "This sign-in was not started from its card in this browser, so it was not completed: a sign-in completes only for the person whose card it is. Open the link on your card in mewgate.",
      };
    this.forget(state);
    const error = url.searchParams.get("error");
    if (error !== null) {
      const failed = e.finish(url);
      failed.catch(() => {});
      return { ok: false, status: 400, message: `The authorization server refused the sign-in (${printable(error)}).` };
    }
    try {
      await e.finish(url);
      return { ok: true };
    } catch (err) {
      return { ok: false, status: 400, message: `The sign-in did not complete: ${printable((err as Error).message)}` };
    }
  }

  /** The HTTP handler for `/oauth/callback/` (mount with `gateway.addHttpPrefix`). */
  handler(): (req: IncomingMessage, res: ServerResponse) => void {
    return (req, res) => {
      const url = new URL(req.url ?? "/", "http://gateway.invalid");
      const m = /^\/oauth\/callback\/([^/]+)(\/start)?$/.exec(url.pathname);
      if (req.method !== "GET" || !m) return page(res, 404, "Not a sign-in callback.");
      let space: string;
      try {
        space = decodeURIComponent(m[1]!);
      } catch {
        return page(res, 400, "Not a sign-in callback.");
      }
      const cookies = parseCookies(req.headers.cookie);
      if (m[2] !== undefined) {
        const r = this.start(space, url.searchParams.get("k"), cookies);
        if (!r.ok) return page(res, r.status, r.message);
        res.writeHead(302, {
          location: r.location,
          "cache-control": "no-store",
          "referrer-policy": "no-referrer",
          ...(r.cookie ? { "set-cookie": r.cookie } : {}),
        });
        res.end();
        return;
      }
      void this.deliver(space, url, cookies).then((r) =>
        r.ok ? page(res, 200, "Signed in. You can close this tab and go back to mewgate.") : page(res, r.status, r.message),
      );
    };
  }
}

function hash(secret: string): string {
  return createHash("sha256").update(secret).digest("base64url");
}

/** The cookie of one sign-in: named by its state's hash, so a browser may hold several. */
function cookieName(state: string): string {
  return `${COOKIE}${hash(state).slice(0, 16)}`;
}

function same(given: string | undefined, want: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(want);
  return a.length === b.length && timingSafeEqual(a, b);
}

function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? "").slice(0, 16384).split(";")) {
    const i = part.indexOf("=");
    if (i <= 0) continue;
    const name = part.slice(0, i).trim();
    if (name.startsWith(COOKIE)) out.set(name, part.slice(i + 1).trim());
  }
  return out;
}

function page(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
  });
  res.end(`${text}\n`);
}

function printable(s: string): string {
  const t = s.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?");
  return t.length > 300 ? `${t.slice(0, 300)}…` : t;
}

/**
 * Headless consent, for tests: follows `authorizationUrl` (GET redirects, keeping cookies)
 * until it is sent to `redirectUri`, and returns that URL with its code. Refused for an
 * authorization server that is not on a loopback address, and for any hop that leaves
 * loopback: nobody's real account is ever signed in to without them.
 */
export async function followConsent(
  authorizationUrl: URL,
  redirectUri: string,
  fetchFn: typeof fetch = fetch,
  /** The cookies kept on the way, by origin (a browser's jar: the caller may send the gateway's with the callback). */
  jar: Map<string, Map<string, string>> = new Map(),
): Promise<URL> {
  if (!isLoopback(authorizationUrl))
    throw new Error(`headless consent is for loopback authorization servers only, not ${safe(authorizationUrl)}`);
  const target = new URL(redirectUri);
  let url = authorizationUrl;
  for (let hop = 0; hop < 20; hop++) {
    const cookies = jar.get(url.origin);
    const res = await fetchFn(url, {
      redirect: "manual",
      headers: cookies?.size ? { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join("; ") } : {},
    });
    for (const line of res.headers.getSetCookie?.() ?? []) {
      const [pair] = line.split(";", 1);
      const i = pair!.indexOf("=");
      if (i <= 0) continue;
      const store = jar.get(url.origin) ?? new Map<string, string>();
      store.set(pair!.slice(0, i).trim(), pair!.slice(i + 1).trim());
      jar.set(url.origin, store);
    }
    await res.body?.cancel().catch(() => {});
    const location = res.headers.get("location");
    if (res.status < 300 || res.status >= 400 || !location)
      throw new Error(`the authorization server wants a person (HTTP ${res.status} at ${safe(url)}); headless consent cannot go on`);
    const next = new URL(location, url);
    if (next.origin === target.origin && next.pathname === target.pathname) return next;
    if (!isLoopback(next)) throw new Error(`the sign-in led away from loopback (${safe(next)}); headless consent stops`);
    url = next;
  }
  throw new Error("the authorization server redirected more than 20 times");
}
