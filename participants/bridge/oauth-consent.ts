/**
 * Where a person's consent comes back: the gateway's `/oauth/callback/<space>` route (the
 * `ConsentDesk`, mounted with `Gateway.addHttpPrefix`), and for tests the headless consent
 * that follows an authorization URL itself and reads the code from its redirect.
 *
 * A callback is matched to the sign-in it finishes by its `state`, once: an unknown or
 * already used `state` (a stale link, a replay, a forgery) is answered with a page that
 * says so, and no code is exchanged. The page a person sees never repeats the code, the
 * state, or anything else from the query.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { isLoopback, safe } from "./oauth.js";

/** What finishing a sign-in does with the callback URL: resolves once the tokens are kept, or rejects saying why. */
export type Finish = (callbackUrl: URL) => Promise<void>;

interface Expected {
  space: string;
  finish: Finish;
  timer: NodeJS.Timeout;
}

/** A sign-in waits this long for its callback before its state is forgotten. */
const PENDING_MS = 15 * 60_000;
const MAX_PENDING = 1000;

export class ConsentDesk {
  private readonly pending = new Map<string, Expected>();

  /** The callback route's path for `space`. */
  static path(space: string): string {
    return `/oauth/callback/${encodeURIComponent(space)}`;
  }

  /** Waits for the callback carrying `state` for `space`. */
  expect(space: string, state: string, finish: Finish): () => void {
    if (this.pending.size >= MAX_PENDING) {
      const oldest = this.pending.keys().next().value;
      if (oldest !== undefined) this.forget(oldest);
    }
    const timer = setTimeout(() => this.pending.delete(state), PENDING_MS);
    timer.unref();
    this.pending.set(state, { space, finish, timer });
    return () => this.forget(state);
  }

  private forget(state: string): void {
    const e = this.pending.get(state);
    if (e) clearTimeout(e.timer);
    this.pending.delete(state);
  }

  /** A callback URL arrived (over HTTP, or from the headless consent). */
  async deliver(space: string, url: URL): Promise<{ ok: true } | { ok: false; status: number; message: string }> {
    const state = url.searchParams.get("state");
    const e = state === null ? undefined : this.pending.get(state);
    if (!e || e.space !== space)
      return { ok: false, status: 400, message: "This sign-in link is unknown or was already used. Start again from the card in mewgate." };
    this.forget(state!);
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
      const m = /^\/oauth\/callback\/([^/]+)$/.exec(url.pathname);
      if (req.method !== "GET" || !m) return page(res, 404, "Not a sign-in callback.");
      let space: string;
      try {
        space = decodeURIComponent(m[1]!);
      } catch {
        return page(res, 400, "Not a sign-in callback.");
      }
      void this.deliver(space, url).then((r) =>
        r.ok ? page(res, 200, "Signed in. You can close this tab and go back to mewgate.") : page(res, r.status, r.message),
      );
    };
  }
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
export async function followConsent(authorizationUrl: URL, redirectUri: string, fetchFn: typeof fetch = fetch): Promise<URL> {
  if (!isLoopback(authorizationUrl))
    throw new Error(`headless consent is for loopback authorization servers only, not ${safe(authorizationUrl)}`);
  const target = new URL(redirectUri);
  const jar = new Map<string, Map<string, string>>();
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
