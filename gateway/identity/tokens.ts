/**
 * Participant tokens. A token decides who a connection is; nothing the client claims does.
 *
 * Sources, first that applies: the participant's `token` in space.yaml (usually
 * `${ENV}`), the environment variable `MEWGATE_TOKEN_<ID>`, or a token generated once
 * into `<state>/tokens/<id>.token` (mode 0600) and reused on later starts.
 *
 * Only SHA-256 digests are kept in memory after loading. A presented token is hashed and
 * looked up by its digest: the lookup's timing depends on the digest, which an attacker
 * cannot steer towards a real token's, and the final comparison uses `timingSafeEqual`.
 * So nothing about how close a guess came leaks, and a join costs the same in a space of
 * three participants or five thousand.
 *
 * Managed tokens (`mewgate token rotate|revoke`): beside each participant's token a file
 * `<state>/tokens/<id>.meta.json` (0600) may hold what is known about token digests —
 * never tokens: the current token's expiry, earlier tokens still accepted until a time
 * (a rotation's grace), and digests revoked (refused whatever their source, so a token set
 * in space.yaml or the environment can be revoked too). A reload (space/reload.ts) reads
 * it again.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export type TokenSource = "config" | "env" | "file" | "invite";

export interface ResolvedToken {
  id: string;
  source: TokenSource;
  /** Where a generated or stored token lives, for `mewgate token show`. */
  file?: string;
}

/** `MEWGATE_TOKEN_<ID>`: the id upper-cased, every character outside [A-Z0-9] as `_`. */
export function tokenEnvName(id: string): string {
  return `MEWGATE_TOKEN_${id.toUpperCase().replace(/[^A-Z0-9]/g, "_")}`;
}

export function tokenFile(stateDir: string, id: string): string {
  return join(stateDir, "tokens", `${id}.token`);
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/** What `<state>/tokens/<id>.meta.json` holds: digests (base64 SHA-256), never tokens. */
export interface TokenMeta {
  /** The current token's expiry, and earlier tokens accepted until theirs (a rotation's grace). */
  tokens?: Array<{ digest: string; expires_at?: string | undefined; note?: string | undefined }>;
  /** Digests refused, whatever their source. */
  revoked?: string[];
}

export function tokenMetaFile(stateDir: string, id: string): string {
  return join(stateDir, "tokens", `${id}.meta.json`);
}

export function readTokenMeta(stateDir: string, id: string): TokenMeta {
  try {
    const parsed = JSON.parse(readFileSync(tokenMetaFile(stateDir, id), "utf8")) as TokenMeta;
    return parsed && typeof parsed === "object" ? parsed : {};
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw new Error(`${tokenMetaFile(stateDir, id)} cannot be read: ${(err as Error).message}`);
  }
}

/** Writes the meta file whole, 0600, through a rename: a gateway reading it meanwhile sees the old or the new. */
export function writeTokenMeta(stateDir: string, id: string, meta: TokenMeta): void {
  const file = tokenMetaFile(stateDir, id);
  mkdirSync(join(file, ".."), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(meta, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/** A digest the book accepts: whose, the digest itself, and until when (ms since the epoch). */
interface Entry {
  id: string;
  buf: Buffer;
  expiresAt?: number | undefined;
  /** A rotated-out token still accepted during its grace. */
  grace?: boolean | undefined;
}

/** What a presented token is: someone's (with its digest), someone's that has expired, or nobody's. */
export type TokenCheck = { ok: true; id: string; digest: string } | { ok: false; expired: true; id: string; at: number } | undefined;

export class TokenBook {
  private readonly digests = new Map<string, Buffer>();
  /** digest (base64) → the participant it admits */
  private readonly owners = new Map<string, Entry>();
  readonly sources = new Map<string, ResolvedToken>();

  /** Loads (or generates) a token for each participant. Returns the tokens themselves once, for callers that must hand them to child participants. */
  static load(
    participants: Iterable<[string, { token?: string | undefined }]>,
    opts: { stateDir: string; env?: NodeJS.ProcessEnv },
  ): { book: TokenBook; tokens: Map<string, string> } {
    const env = opts.env ?? process.env;
    const book = new TokenBook();
    const tokens = new Map<string, string>();
    for (const [id, p] of participants) {
      let token: string;
      let source: ResolvedToken;
      const fromEnv = env[tokenEnvName(id)];
      if (p.token) {
        token = p.token;
        source = { id, source: "config" };
      } else if (fromEnv) {
        token = fromEnv;
        source = { id, source: "env" };
      } else {
        const file = tokenFile(opts.stateDir, id);
        token = readOrCreateToken(file);
        source = { id, source: "file", file };
      }
      const d = digest(token);
      const b64 = d.toString("base64");
      const meta = readTokenMeta(opts.stateDir, id);
      const revoked = new Set(meta.revoked ?? []);
      const now = Date.now();
      book.digests.set(id, d);
      if (!revoked.has(b64)) book.owners.set(b64, { id, buf: d, expiresAt: when(meta.tokens?.find((t) => t.digest === b64)?.expires_at) });
      for (const t of meta.tokens ?? []) {
        const until = when(t.expires_at);
        // An earlier token is accepted only while its grace runs, and never once revoked.
        if (t.digest === b64 || until === undefined || until <= now || revoked.has(t.digest) || book.owners.has(t.digest)) continue;
        book.owners.set(t.digest, { id, buf: Buffer.from(t.digest, "base64"), expiresAt: until, grace: true });
      }
      book.sources.set(id, source);
      tokens.set(id, token);
    }
    return { book, tokens };
  }

  /** The participant this token belongs to, or undefined (expired, revoked or unknown). */
  identify(token: string): string | undefined {
    return this.identifyDigest(digest(token));
  }

  /** The participant whose token has this SHA-256 digest (a cluster node passes digests, never tokens). */
  identifyDigest(d: Buffer): string | undefined {
    const c = this.checkDigest(d);
    return c?.ok ? c.id : undefined;
  }

  /** What a presented token is: whose, or whose but expired, or nobody's. */
  check(token: string): TokenCheck {
    return this.checkDigest(digest(token));
  }

  checkDigest(d: Buffer): TokenCheck {
    const b64 = d.toString("base64");
    const e = this.owners.get(b64);
    if (!e || e.buf.length !== d.length || !timingSafeEqual(d, e.buf)) return undefined;
    if (e.expiresAt !== undefined && e.expiresAt <= Date.now()) return { ok: false, expired: true, id: e.id, at: e.expiresAt };
    return { ok: true, id: e.id, digest: b64 };
  }

  /** Whether the token with this digest (base64) still admits `id` now: what a reload asks of each connected member. */
  admits(id: string, digestB64: string): boolean {
    const e = this.owners.get(digestB64);
    return e !== undefined && e.id === id && (e.expiresAt === undefined || e.expiresAt > Date.now());
  }

  /** What the book accepts for `id`, as a string to compare (digests and expiries; never a token). */
  describe(id: string): string {
    return [...this.owners]
      .filter(([, e]) => e.id === id)
      .map(([k, e]) => `${k}@${e.expiresAt ?? ""}`)
      .sort()
      .join(",");
  }

  /** When the token with this digest stops being accepted, if it does (ms since the epoch). */
  expiresAt(digestB64: string): number | undefined {
    return this.owners.get(digestB64)?.expiresAt;
  }

  /**
   * Takes over what `next` holds (a reload): the participants' tokens from it, the runtime
   * participants' (invites) from this book.
   */
  replaceWith(next: TokenBook): void {
    const invited = [...this.sources.values()].filter((s) => s.source === "invite").map((s) => s.id);
    const keep = [...this.owners].filter(([, e]) => invited.includes(e.id) && !next.digests.has(e.id));
    const keepDigests = invited.filter((id) => !next.digests.has(id)).map((id) => [id, this.digests.get(id)!] as const);
    this.digests.clear();
    this.owners.clear();
    this.sources.clear();
    for (const [id, d] of next.digests) this.digests.set(id, d);
    for (const [k, e] of next.owners) this.owners.set(k, e);
    for (const [id, s] of next.sources) this.sources.set(id, s);
    for (const [id, d] of keepDigests) if (d) this.digests.set(id, d);
    for (const [k, e] of keep) {
      this.owners.set(k, e);
      this.sources.set(e.id, { id: e.id, source: "invite" });
    }
  }

  has(id: string): boolean {
    return this.digests.has(id);
  }

  /** The digest under which a token is kept (base64): what the state store records for a minted token. */
  static digestOf(token: string): string {
    return digest(token).toString("base64");
  }

  /** Admits a runtime participant (space/invite) by its token's digest. */
  addDigest(id: string, digestB64: string): void {
    const d = Buffer.from(digestB64, "base64");
    this.digests.set(id, d);
    this.owners.set(digestB64, { id, buf: d });
    this.sources.set(id, { id, source: "invite" });
  }

  /** Forgets a runtime participant's token (space/kick). */
  remove(id: string): void {
    for (const [k, e] of this.owners) if (e.id === id) this.owners.delete(k);
    this.digests.delete(id);
    this.sources.delete(id);
  }
}

function when(iso: string | undefined): number | undefined {
  if (iso === undefined) return undefined;
  const t = Date.parse(iso);
  // An expiry that cannot be read is in the past: refuse rather than accept forever.
  return Number.isNaN(t) ? 0 : t;
}

function readOrCreateToken(file: string): string {
  try {
    const existing = readFileSync(file, "utf8").trim();
    if (existing) return existing;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  mkdirSync(join(file, ".."), { recursive: true, mode: 0o700 });
  const token = randomBytes(24).toString("base64url");
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  // writeFileSync's mode is masked by the umask; make sure it is 0600.
  chmodSync(file, 0o600);
  return token;
}
