/**
 * Who is connected, from where, with which token — and the end of a session: by an
 * operator (`DELETE /api/spaces/<space>/sessions/<id>`, 4413 `session_ended`), or when the
 * token it joined with expires (4411 `token_expired`). One timer per space, set for the
 * earliest expiry among the connected; set again on every join and reload.
 *
 * Besides members, other sessions are opened with a token: an operator API event stream
 * (`GET …/events`) and an MCP session (`/mcp`). Each is held here (`hold`) with the digest
 * of the token that opened it, and ends when that token expires, or when a reload finds the
 * token no longer admitted (rotated, revoked, its participant removed: `revoke`) — not only
 * at its next request.
 */
import type { TokenBook } from "../identity/tokens.js";
import type { Member } from "../ports/member.js";
import { CloseCodes } from "../wire/envelope.js";

/** setTimeout's ceiling (about 24.8 days): a later expiry is looked at again then. */
const MAX_DELAY = 2 ** 31 - 1;

export class Sessions {
  private timer: NodeJS.Timeout | undefined;
  private due = Infinity;
  /** Members already closed (an expired token, an operator), still members until their leave comes through: listed no more. */
  private readonly ended = new WeakSet<Member>();
  /** Sessions other than members' opened with a token (event streams, MCP sessions). */
  private readonly holds = new Set<Hold>();

  constructor(
    private readonly members: () => Iterable<Member>,
    private readonly tokens: TokenBook,
    private readonly onExpired: (m: Member) => void = (m) =>
      m.peer.close(CloseCodes.tokenExpired, "your token expired; connect with a new one (mewgate token rotate)"),
  ) {}

  /** What the operator sees: one line per connected member; never a token, only the first characters of its digest. */
  view(): Array<Record<string, unknown>> {
    return [...this.members()]
      .filter((m) => !this.ended.has(m))
      .map((m) => {
        const expires = m.tokenDigest === undefined ? undefined : this.tokens.expiresAt(m.tokenDigest);
        return {
          participant: m.id,
          kind: m.config.kind,
          address: m.peer.address ?? "in-process",
          joined_at: new Date(m.joinedAt).toISOString(),
          ...(m.tokenDigest !== undefined ? { token: `sha256:${Buffer.from(m.tokenDigest, "base64").toString("hex").slice(0, 12)}` } : {}),
          ...(expires !== undefined ? { token_expires_at: new Date(expires).toISOString() } : {}),
        };
      });
  }

  /** Ends participant `id`'s session (an operator's decision, 4413); false when it is not connected. */
  end(id: string, by: string): boolean {
    const m = [...this.members()].find((x) => x.id === id && !this.ended.has(x));
    if (!m) return false;
    this.ended.add(m);
    m.log.info({ by }, "session ended by an operator");
    m.peer.close(CloseCodes.sessionEnded, `your session was ended by ${by}`);
    return true;
  }

  /**
   * A session other than a member's, opened by participant `id` with the token whose digest
   * (base64) is `digest`: `close` ends it when that token is no longer admitted. `what` names
   * it for the operator ("event stream"). Returns the function to call when it ends on its own.
   */
  hold(id: string, digest: string, what: string, close: () => void): () => void {
    const h: Hold = { id, digest, what, close };
    this.holds.add(h);
    this.schedule();
    return () => void this.holds.delete(h);
  }

  /** After the tokens changed (a reload): ends every held session whose token is no longer admitted, and sets the timer again. What was ended, as "id (what)". */
  revoke(): string[] {
    const out: string[] = [];
    for (const h of [...this.holds]) {
      if (this.tokens.admits(h.id, h.digest)) continue;
      this.holds.delete(h);
      out.push(`${h.id} (${h.what})`);
      h.close();
    }
    this.schedule();
    return out;
  }

  /**
   * A member joined: the timer moves earlier if its token expires before what it waits for.
   * Only this member is looked at — a wave of joins must not scan everyone for each — since
   * the timer already covers everyone else (a member that left meanwhile only makes a sweep
   * find nothing).
   */
  joined(member: Member): void {
    const at = member.tokenDigest === undefined ? undefined : this.tokens.expiresAt(member.tokenDigest);
    if (at === undefined || (this.timer && at >= this.due)) return;
    clearTimeout(this.timer);
    this.due = at;
    this.timer = setTimeout(() => this.sweep(), Math.min(MAX_DELAY, Math.max(0, at - Date.now())));
    this.timer.unref();
  }

  /** The tokens changed, or a sweep is done: the timer is set for the earliest expiry of all. */
  schedule(): void {
    let next = Infinity;
    for (const h of this.holds) {
      const at = this.tokens.expiresAt(h.digest);
      if (at !== undefined && at < next) next = at;
    }
    for (const m of this.members()) {
      if (this.ended.has(m)) continue;
      const at = m.tokenDigest === undefined ? undefined : this.tokens.expiresAt(m.tokenDigest);
      if (at !== undefined && at < next) next = at;
    }
    if (next === this.due && this.timer) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.due = next;
    if (next === Infinity) return;
    this.timer = setTimeout(() => this.sweep(), Math.min(MAX_DELAY, Math.max(0, next - Date.now())));
    this.timer.unref();
  }

  /** Closes every member whose token has expired, then sets the timer for the next. */
  sweep(): void {
    this.timer = undefined;
    this.due = Infinity;
    const now = Date.now();
    for (const m of [...this.members()]) {
      const at = m.tokenDigest === undefined ? undefined : this.tokens.expiresAt(m.tokenDigest);
      if (at === undefined || at > now || this.ended.has(m)) continue;
      this.ended.add(m);
      this.onExpired(m);
    }
    for (const h of [...this.holds]) {
      const at = this.tokens.expiresAt(h.digest);
      if (at === undefined || at > now) continue;
      this.holds.delete(h);
      h.close();
    }
    this.schedule();
  }

  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

interface Hold {
  id: string;
  digest: string;
  what: string;
  close: () => void;
}
