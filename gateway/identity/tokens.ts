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
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
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

export class TokenBook {
  private readonly digests = new Map<string, Buffer>();
  /** digest (base64) → participant */
  private readonly owners = new Map<string, string>();
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
      book.digests.set(id, d);
      book.owners.set(d.toString("base64"), id);
      book.sources.set(id, source);
      tokens.set(id, token);
    }
    return { book, tokens };
  }

  /** The participant this token belongs to, or undefined. */
  identify(token: string): string | undefined {
    return this.identifyDigest(digest(token));
  }

  /** The participant whose token has this SHA-256 digest (a cluster node passes digests, never tokens). */
  identifyDigest(d: Buffer): string | undefined {
    const id = this.owners.get(d.toString("base64"));
    const mine = id === undefined ? undefined : this.digests.get(id);
    return mine !== undefined && mine.length === d.length && timingSafeEqual(d, mine) ? id : undefined;
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
    this.owners.set(digestB64, id);
    this.sources.set(id, { id, source: "invite" });
  }

  /** Forgets a runtime participant's token (space/kick). */
  remove(id: string): void {
    const d = this.digests.get(id);
    if (d) this.owners.delete(d.toString("base64"));
    this.digests.delete(id);
    this.sources.delete(id);
  }
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
