/**
 * The console's sign-in sessions, kept in memory on the server: the browser holds only a
 * random id in an `HttpOnly` cookie. In memory rather than in the state directory because a
 * session is a credential: nothing that lets a browser act as a person is written to disk,
 * and a restart signs everyone out (they sign in again through the provider in one click).
 * A cluster node therefore knows only the sessions opened through it.
 *
 * A session is bound to its space (a cookie of one space names nothing in another), expires
 * (`identity.session_ttl_s`), carries a CSRF value that state-changing requests must echo in
 * a header, and ending it closes whatever was opened with it (the console's event streams).
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { Identity } from "./claims.js";

export interface Session {
  /** Kept by digest: a memory dump shows no cookie that works. */
  readonly key: string;
  readonly space: string;
  readonly identity: Identity;
  readonly csrf: string;
  readonly createdAt: number;
  readonly expiresAt: number;
  /** Where it came from, for the people who look at who is signed in. */
  readonly address: string | undefined;
  /** Called when the session ends: streams opened with it close. */
  readonly closers: Set<() => void>;
}

/** Most sessions per space: past it the oldest is ended to make room. */
const MAX_SESSIONS = 10_000;

const digest = (id: string) => createHash("sha256").update(id).digest("base64url");

export class Sessions {
  private readonly byKey = new Map<string, Session>();

  constructor(
    readonly space: string,
    private readonly ttlMs: number,
  ) {}

  /** Opens a session for `identity`; returns the cookie value (shown once) and the session. */
  open(identity: Identity, address: string | undefined): { cookie: string; session: Session } {
    this.sweep();
    if (this.byKey.size >= MAX_SESSIONS) this.end(this.byKey.values().next().value!);
    const cookie = randomBytes(32).toString("base64url");
    const now = Date.now();
    const session: Session = {
      key: digest(cookie),
      space: this.space,
      identity,
      csrf: randomBytes(24).toString("base64url"),
      createdAt: now,
      expiresAt: now + this.ttlMs,
      address,
      closers: new Set(),
    };
    this.byKey.set(session.key, session);
    return { cookie, session };
  }

  /** The live session this cookie value names in this space, if any. */
  find(cookie: string | undefined): Session | undefined {
    if (!cookie) return undefined;
    const s = this.byKey.get(digest(cookie));
    if (!s || s.space !== this.space) return undefined;
    if (s.expiresAt <= Date.now()) {
      this.end(s);
      return undefined;
    }
    return s;
  }

  /** Whether `presented` is this session's CSRF value (constant time). */
  static csrfMatches(s: Session, presented: string | undefined): boolean {
    if (presented === undefined) return false;
    const a = Buffer.from(s.csrf);
    const b = Buffer.from(presented);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** Ends a session: its cookie stops working and everything opened with it closes. */
  end(s: Session): void {
    if (!this.byKey.delete(s.key)) return;
    for (const close of [...s.closers]) close();
    s.closers.clear();
  }

  /** Every live session (for a view of who is signed in). */
  list(): Session[] {
    this.sweep();
    return [...this.byKey.values()];
  }

  private sweep(): void {
    const now = Date.now();
    for (const s of this.byKey.values()) if (s.expiresAt <= now) this.end(s);
  }
}
