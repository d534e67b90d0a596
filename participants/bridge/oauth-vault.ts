/**
 * The credential store of the bridges' upstream sign-ins: access and refresh tokens and
 * client registrations (with their secrets), encrypted at rest with AES-256-GCM.
 *
 * The data is one file in the state directory, `credentials.enc`; the key is 32 bytes from
 * `MEWGATE_CREDENTIALS_KEY` (base64 or hex), or else a key file *beside* the state
 * directory (`<state dir>.credentials.key`, mode 600), created on first start when there is
 * no data yet. So a state directory copied alone yields nothing, and a key file missing
 * while data exists is an error that says so: nothing is ever decrypted, or encrypted
 * again, with a key made up on the spot.
 *
 * Every operation reads the file again and writes it whole (temporary file, then rename):
 * `mewgate credentials revoke` in another process takes effect at the next use. What this
 * holds is never logged; `list()` gives who and where, never a token or secret.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

export const KEY_ENV = "MEWGATE_CREDENTIALS_KEY";
const DATA_FILE = "credentials.enc";
const AAD = Buffer.from("mewgate-credentials-v1");
/** Bounds on what a damaged or hostile file can make us hold. */
const MAX_FILE_BYTES = 16 * 1024 * 1024;

export interface StoredTokens {
  access_token: string;
  token_type?: string | undefined;
  refresh_token?: string | undefined;
  scope?: string | undefined;
  /** Epoch ms; absent when the server said nothing. */
  expires_at?: number | undefined;
}

export interface StoredClient {
  client_id: string;
  client_secret?: string | undefined;
  token_endpoint_auth_method?: string | undefined;
  /** How it came to be: configured in space.yaml, registered dynamically (RFC 7591), or a client ID metadata document's URL. */
  origin: "configured" | "registered" | "document";
}

/** Who a sign-in is for: the space as a whole, or one participant (a person). */
export type Subject = "space" | `caller:${string}`;

interface Data {
  v: 1;
  /** `server\u0000issuer` → the client identity mewgate has there. */
  clients: Record<string, StoredClient & { server: string; issuer: string; updated: number }>;
  /** `server\u0000issuer\u0000subject` → tokens. */
  tokens: Record<string, StoredTokens & { server: string; issuer: string; subject: Subject; updated: number }>;
}

export interface CredentialListing {
  server: string;
  issuer: string;
  subject: Subject | "client";
  /** What is held, by name only. */
  holds: string[];
  expires_at?: number | undefined;
  updated: number;
}

export class VaultError extends Error {}

export class CredentialVault {
  readonly file: string;
  readonly keyFile: string;
  private key: Buffer;

  /** Opens (or, with no data yet, creates the key of) the vault of `stateDir`. Throws VaultError saying what is wrong. */
  constructor(
    readonly stateDir: string,
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    this.file = join(stateDir, DATA_FILE);
    this.keyFile = keyFileFor(stateDir);
    this.key = this.loadKey();
    // Proves the key before anything relies on it: a wrong key is said at start, not at first sign-in.
    this.read();
  }

  private loadKey(): Buffer {
    const fromEnv = this.env[KEY_ENV];
    if (fromEnv !== undefined && fromEnv !== "") return parseKey(fromEnv, KEY_ENV);
    if (existsSync(this.keyFile)) return parseKey(readFileSync(this.keyFile, "utf8").trim(), this.keyFile);
    if (existsSync(this.file)) {
      throw new VaultError(
        `stored credentials ${this.file} exist but their key does not: set ${KEY_ENV} or put back ${this.keyFile} (or remove ${this.file} and sign in again)`,
      );
    }
    const key = randomBytes(32);
    mkdirSync(dirname(this.keyFile), { recursive: true });
    writeFileSync(this.keyFile, `${key.toString("base64")}\n`, { mode: 0o600, flag: "wx" });
    return key;
  }

  private read(): Data {
    if (!existsSync(this.file)) return { v: 1, clients: {}, tokens: {} };
    const raw = readFileSync(this.file);
    if (raw.length > MAX_FILE_BYTES) throw new VaultError(`${this.file} is larger than ${MAX_FILE_BYTES} bytes; not read`);
    let data: unknown;
    try {
      const box = JSON.parse(raw.toString("utf8")) as { v?: unknown; iv?: unknown; tag?: unknown; data?: unknown };
      if (box.v !== 1 || typeof box.iv !== "string" || typeof box.tag !== "string" || typeof box.data !== "string")
        throw new Error("not a credentials file");
      const decipher = createDecipheriv("aes-256-gcm", this.key, Buffer.from(box.iv, "base64"));
      decipher.setAAD(AAD);
      decipher.setAuthTag(Buffer.from(box.tag, "base64"));
      data = JSON.parse(Buffer.concat([decipher.update(Buffer.from(box.data, "base64")), decipher.final()]).toString("utf8"));
    } catch {
      throw new VaultError(`cannot decrypt ${this.file} with the key from ${this.keySource()}: wrong key or damaged file`);
    }
    const d = data as Partial<Data>;
    if (d.v !== 1 || typeof d.clients !== "object" || typeof d.tokens !== "object" || d.clients === null || d.tokens === null) {
      throw new VaultError(`${this.file} decrypts to something that is not a credential store`);
    }
    return d as Data;
  }

  private write(data: Data, key = this.key): void {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", key, iv);
    cipher.setAAD(AAD);
    const ct = Buffer.concat([cipher.update(JSON.stringify(data), "utf8"), cipher.final()]);
    const box = { v: 1, iv: iv.toString("base64"), tag: cipher.getAuthTag().toString("base64"), data: ct.toString("base64") };
    mkdirSync(this.stateDir, { recursive: true });
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(box), { mode: 0o600 });
    renameSync(tmp, this.file);
  }

  private keySource(): string {
    return this.env[KEY_ENV] ? KEY_ENV : this.keyFile;
  }

  client(server: string, issuer: string): StoredClient | undefined {
    const c = this.read().clients[clientKey(server, issuer)];
    return (
      c && {
        client_id: c.client_id,
        client_secret: c.client_secret,
        token_endpoint_auth_method: c.token_endpoint_auth_method,
        origin: c.origin,
      }
    );
  }

  saveClient(server: string, issuer: string, client: StoredClient): void {
    const data = this.read();
    data.clients[clientKey(server, issuer)] = { ...client, server, issuer, updated: Date.now() };
    this.write(data);
  }

  tokens(server: string, issuer: string, subject: Subject): StoredTokens | undefined {
    const t = this.read().tokens[tokenKey(server, issuer, subject)];
    return (
      t && {
        access_token: t.access_token,
        token_type: t.token_type,
        refresh_token: t.refresh_token,
        scope: t.scope,
        expires_at: t.expires_at,
      }
    );
  }

  saveTokens(server: string, issuer: string, subject: Subject, tokens: StoredTokens): void {
    const data = this.read();
    data.tokens[tokenKey(server, issuer, subject)] = { ...tokens, server, issuer, subject, updated: Date.now() };
    this.write(data);
  }

  /** Forgets the tokens (all subjects if none given) and, with `client`, the registration of `server`. Returns how many entries went. */
  revoke(server: string, opts: { subject?: Subject | undefined; issuer?: string | undefined; client?: boolean } = {}): number {
    const data = this.read();
    let n = 0;
    for (const [k, t] of Object.entries(data.tokens)) {
      if (
        t.server !== server ||
        (opts.subject !== undefined && t.subject !== opts.subject) ||
        (opts.issuer !== undefined && t.issuer !== opts.issuer)
      )
        continue;
      delete data.tokens[k];
      n++;
    }
    if (opts.client) {
      for (const [k, c] of Object.entries(data.clients)) {
        if (c.server !== server || (opts.issuer !== undefined && c.issuer !== opts.issuer)) continue;
        delete data.clients[k];
        n++;
      }
    }
    if (n) this.write(data);
    return n;
  }

  list(): CredentialListing[] {
    const data = this.read();
    const out: CredentialListing[] = [];
    for (const c of Object.values(data.clients)) {
      out.push({
        server: c.server,
        issuer: c.issuer,
        subject: "client",
        holds: ["client_id", ...(c.client_secret ? ["client_secret"] : [])],
        updated: c.updated,
      });
    }
    for (const t of Object.values(data.tokens)) {
      out.push({
        server: t.server,
        issuer: t.issuer,
        subject: t.subject,
        holds: ["access_token", ...(t.refresh_token ? ["refresh_token"] : [])],
        expires_at: t.expires_at,
        updated: t.updated,
      });
    }
    return out.sort((a, b) => a.server.localeCompare(b.server) || a.subject.localeCompare(b.subject));
  }

  /**
   * A new key for the same data. With the key in the environment the data is written under
   * the new key and the new key is returned for the operator to set; with a key file, the
   * new key replaces it. A crash between the two renames leaves `<key file>.new` beside the
   * old one, which `rotateKey` then says rather than guessing.
   */
  rotateKey(): { key?: string } {
    const data = this.read();
    const next = randomBytes(32);
    if (this.env[KEY_ENV]) {
      this.write(data, next);
      this.key = next;
      return { key: next.toString("base64") };
    }
    const pending = `${this.keyFile}.new`;
    if (existsSync(pending))
      throw new VaultError(
        `${pending} is left from an interrupted rotation: check which key decrypts ${this.file}, keep it as ${this.keyFile}, remove the other`,
      );
    writeFileSync(pending, `${next.toString("base64")}\n`, { mode: 0o600, flag: "wx" });
    this.write(data, next);
    renameSync(pending, this.keyFile);
    this.key = next;
    return {};
  }

  /** Removes the data and the key file (tests, `credentials revoke --all`). */
  destroy(): void {
    rmSync(this.file, { force: true });
    if (!this.env[KEY_ENV]) rmSync(this.keyFile, { force: true });
  }
}

/** The key file of a state directory: beside it, so copying the directory alone copies no key. */
export function keyFileFor(stateDir: string): string {
  return join(dirname(stateDir), `${basename(stateDir)}.credentials.key`);
}

function parseKey(text: string, from: string): Buffer {
  const key = /^[0-9a-f]{64}$/i.test(text) ? Buffer.from(text, "hex") : Buffer.from(text, "base64");
  if (key.length !== 32) throw new VaultError(`the key in ${from} is not 32 bytes (give base64 or 64 hex digits)`);
  return key;
}

function clientKey(server: string, issuer: string): string {
  return `${server}\u0000${issuer}`;
}

function tokenKey(server: string, issuer: string, subject: Subject): string {
  return `${server}\u0000${issuer}\u0000${subject}`;
}
