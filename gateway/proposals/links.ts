/**
 * Signed links to decide one proposal from a notification (a webhook, a Slack button):
 * `<public url>/ui/link.html#t=<link>`. A link names the space, the proposal, a digest of
 * what would be called (owner, tool, arguments), the one approver it was made for, an
 * expiry and a nonce, and is signed with HMAC-SHA256 under a per-space secret kept in the
 * state directory (`links/secret`, mode 0600).
 *
 * HMAC rather than a JWS (jose): the gateway is the only party that makes and checks these,
 * so a shared secret is all it takes, and a fixed format with one algorithm leaves nothing
 * to negotiate (no `alg` header to confuse); a link must be checked against server state
 * anyway (single use, the proposal still waiting with the same arguments), so a self-
 * contained token would buy nothing.
 *
 * A link decides nothing by itself: the page that opens it decides only on a POST carrying
 * the approver's own session (their token, never in the link) and a value the page got when
 * it opened the link. It works once: the nonces of used links are appended to
 * `links/used` (fsynced before the decision is made) and read back at start, so a restart
 * does not make a used link good again. A changed argument (an interrupted proposal's edits),
 * an expired link, or another person's session decides nothing.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { appendFileSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Proposal } from "./book.js";
import { shownArguments } from "./preview.js";

/** What a link says. Short keys: it travels in a URL. */
export interface LinkClaims {
  /** space */
  s: string;
  /** proposal id */
  p: string;
  /** digest of what would be called */
  d: string;
  /** the approver it was made for */
  a: string;
  /** expiry, ms since the epoch */
  e: number;
  /** nonce: what marks it used */
  n: string;
}

export type LinkCheck =
  | { ok: true; claims: LinkClaims }
  | { ok: false; code: "link_invalid" | "link_expired" | "link_used"; message: string };

/** Longest a link lives, whatever the proposal's own expiry. */
const MAX_LINK_MS = 24 * 60 * 60 * 1000;
const VERSION = "v1";

export class Links {
  private readonly secret: Buffer;
  /** Used nonces and when their links expire (after which they need not be kept). */
  private readonly used = new Map<string, number>();
  private readonly usedFile: string | undefined;

  /** `dir`: the state directory; without one (a cluster's bus store) the secret lives only in memory. */
  constructor(
    private readonly space: string,
    dir: string | undefined,
  ) {
    if (!dir) {
      this.secret = randomBytes(32);
      return;
    }
    const home = join(dir, "links");
    mkdirSync(home, { recursive: true, mode: 0o700 });
    const secretFile = join(home, "secret");
    if (existsSync(secretFile)) this.secret = Buffer.from(readFileSync(secretFile, "utf8").trim(), "base64url");
    else {
      this.secret = randomBytes(32);
      writeFileSync(secretFile, this.secret.toString("base64url"), { mode: 0o600 });
    }
    if (this.secret.length < 32)
      throw new Error(
        `${secretFile}: the link secret is shorter than 32 bytes; remove the file to make a new one (links made with the old one stop working)`,
      );
    this.usedFile = join(home, "used");
    this.load();
  }

  /** The digest a link binds: who serves the call, which tool or method, and the arguments it would carry. */
  static digest(p: Proposal): string {
    const what = JSON.stringify([p.owner, p.tool ?? p.method, shownArguments(p)]);
    return createHash("sha256").update(what).digest("base64url").slice(0, 32);
  }

  /** A link for `approver` to decide `p`, valid until the proposal expires (at most a day). */
  mint(p: Proposal, approver: string, now = Date.now()): string {
    const claims: LinkClaims = {
      s: this.space,
      p: p.id,
      d: Links.digest(p),
      a: approver,
      e: Math.min(p.expiresAt, now + MAX_LINK_MS),
      n: randomBytes(12).toString("base64url"),
    };
    const body = Buffer.from(JSON.stringify(claims)).toString("base64url");
    return `${VERSION}.${body}.${this.sign(`${VERSION}.${body}`)}`;
  }

  /** Whether `link` is one of ours, unaltered, unexpired and unused. Who may use it, and for what, the caller checks. */
  check(link: unknown, now = Date.now()): LinkCheck {
    const bad = {
      ok: false as const,
      code: "link_invalid" as const,
      message: "this link is not a valid decision link of this space (it was altered, cut short, or made elsewhere)",
    };
    if (typeof link !== "string" || link.length > 2048) return bad;
    const parts = link.split(".");
    if (parts.length !== 3 || parts[0] !== VERSION) return bad;
    const expected = Buffer.from(this.sign(`${parts[0]}.${parts[1]}`));
    const given = Buffer.from(parts[2]!);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return bad;
    let claims: LinkClaims;
    try {
      claims = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8")) as LinkClaims;
    } catch {
      return bad;
    }
    if (
      claims.s !== this.space ||
      typeof claims.p !== "string" ||
      typeof claims.a !== "string" ||
      typeof claims.n !== "string" ||
      typeof claims.e !== "number"
    )
      return bad;
    if (now > claims.e) return { ok: false, code: "link_expired", message: `this link expired at ${new Date(claims.e).toISOString()}` };
    if (this.used.has(claims.n)) return { ok: false, code: "link_used", message: "this link was already used; a link decides once" };
    return { ok: true, claims };
  }

  /** The value the link's page must send back with its decision: only a page that opened the link has it. */
  confirmation(claims: LinkClaims): string {
    return this.sign(`confirm\0${claims.n}`);
  }

  confirms(claims: LinkClaims, value: unknown): boolean {
    if (typeof value !== "string") return false;
    const a = Buffer.from(value);
    const b = Buffer.from(this.confirmation(claims));
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /**
   * Marks a link used, durably, before anything is decided by it: false if it already was
   * (two clicks at once: the second finds it taken here, synchronously). Throws when the
   * record cannot be written; then nothing is decided.
   */
  use(claims: LinkClaims): boolean {
    if (this.used.has(claims.n)) return false;
    if (this.usedFile) {
      const fd = openSync(this.usedFile, "a", 0o600);
      try {
        appendFileSync(fd, `${claims.n} ${claims.e}\n`);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    this.used.set(claims.n, claims.e);
    return true;
  }

  /** An HMAC under the link secret for another `purpose` (a device session: operator/device-session.ts), which no link or confirmation can pass for. */
  signFor(purpose: string, text: string): string {
    return this.sign(`${purpose}\0\0${text}`);
  }

  private sign(text: string): string {
    return createHmac("sha256", this.secret).update(text).digest("base64url");
  }

  /** Reads the used nonces back; those of expired links are dropped, and the file rewritten without them. */
  private load(): void {
    if (!this.usedFile || !existsSync(this.usedFile)) return;
    const now = Date.now();
    let dropped = 0;
    for (const line of readFileSync(this.usedFile, "utf8").split("\n")) {
      const [n, e] = line.split(" ");
      if (!n || !e) continue;
      if (Number(e) < now) dropped++;
      else this.used.set(n, Number(e));
    }
    if (dropped === 0) return;
    const tmp = `${this.usedFile}.new`;
    writeFileSync(tmp, [...this.used].map(([n, e]) => `${n} ${e}\n`).join(""), { mode: 0o600 });
    renameSync(tmp, this.usedFile);
  }
}

/**
 * The people a link is made for: humans other than the proposer, named by its approvers now
 * if it has any (`named`: ids and `@group`s, with the escalation stages reached — each member
 * of a group gets a link of their own), who may make the call themselves (`mayCall`: the
 * approver's bar, deciders.ts). Only tool calls get links; anything else is decided in the
 * console or the terminal.
 */
export function linkApprovers(
  participants: Record<string, { id: string; kind: string }>,
  p: Proposal,
  named: ((id: string) => boolean) | undefined,
  mayCall: (id: string) => boolean,
): string[] {
  if (p.method !== "tools/call" || p.tool === undefined) return [];
  return Object.values(participants)
    .filter((c) => c.kind === "human" && c.id !== p.proposer && (!named || named(c.id)) && mayCall(c.id))
    .map((c) => c.id);
}
