/**
 * Signed approval receipts: each approved call gets a compact JWS (a JWT of type
 * `mewgate-receipt+jwt`, EdDSA over Ed25519) that says who approved exactly which call under
 * which policy. It is made before the approval is written (its audit entry carries it), sent
 * to the server with the call (`params._meta["mewgate/receipt"]`), served by the API and
 * checked offline (`mewgate audit receipts verify`, receipt-check.ts).
 *
 * The key is the space's own, kept in the state directory: `receipts/key.jwk` (the private
 * JWK, mode 0600) and `receipts/jwks.json` (every public key it ever had, so a receipt
 * signed before a rotation still verifies). `mewgate audit receipts rotate-key` makes a new
 * one; a running gateway picks it up on its next reload. Without a state directory (a
 * cluster's bus store) the key lives in memory for the process's life.
 *
 * Why a JWS (jose) here, when decision links are HMAC (links.ts): a receipt is checked by
 * someone other than the gateway — the tool's server, an auditor — who must be able to check
 * it without being able to make one. Only a public-key signature gives that, and a JWS with
 * a published JWKS is what such a party already knows how to check.
 */
import { createHash, createPrivateKey, generateKeyPairSync, type KeyObject, sign as cryptoSign } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { JWK } from "jose";
import type { SpaceConfig } from "../config/config.js";
import { canonical } from "../store/chain.js";

/** The JWS header's `typ`: a receipt is never mistaken for an access token, nor one for it. */
export const RECEIPT_TYP = "mewgate-receipt+jwt";
export const RECEIPT_ALG = "EdDSA";

/** Who decided, by kind: a person, an agent approving as a participant, a reviewer within its bound. */
export type DeciderKind = "person" | "agent" | "reviewer";

/** What a receipt binds (its JWT claims). Every field is checked by `verifyReceipt`. */
export interface ReceiptClaims {
  /** `mewgate:<space>`: which space's key signed it. */
  iss: string;
  /** The proposal. */
  sub: string;
  /** The decision id (also `decision`): one per decision, shared by the audit entry and the span. */
  jti: string;
  /** When it was signed (seconds). */
  iat: number;
  space: string;
  proposal: string;
  decision: string;
  proposer: string;
  /** Who serves the call, and the tool (`owner/tool`) or the method. */
  owner: string;
  tool: string;
  method: string;
  /** Everyone whose approval counted, in order; the last made it run. */
  approvers: string[];
  /** What the last approver is. */
  decider: DeciderKind;
  /** SHA-256 (hex) of the canonical JSON of the arguments that ran. */
  args: string;
  /** The tool definition's pinned digest (tools/pins.ts) the approver was shown; "" when none was pinned. */
  definition: string;
  /** SHA-256 (hex) of the policy in force (`policyDigest`). */
  policy: string;
  proposed_at: string;
  decided_at: string;
  /** The approver confirmed with a passkey: the credential and the challenge it signed. */
  passkey?: { credential: string; challenge: string } | undefined;
}

/** SHA-256 (hex) of `args` as canonical JSON: the same digest an audit entry keeps for arguments it does not repeat. */
export function argumentsDigest(args: unknown): string {
  return createHash("sha256")
    .update(canonical(args ?? {}))
    .digest("hex");
}

const policyDigests = new WeakMap<SpaceConfig, string>();

/**
 * SHA-256 (hex) of what decides calls in `config`: `policy:`, `groups:` and each
 * participant's kind, capabilities, tool rules, approvers and reviewer (never a token).
 * Computed once per configuration (a reload makes a new one).
 */
export function policyDigest(config: SpaceConfig): string {
  const known = policyDigests.get(config);
  if (known) return known;
  const participants = Object.fromEntries(
    Object.entries(config.participants).map(([id, p]) => [
      id,
      { kind: p.kind, capabilities: p.capabilities, tools: p.tools, approvers: p.approvers, review: p.review },
    ]),
  );
  const c = config as unknown as Record<string, unknown>;
  const digest = createHash("sha256")
    .update(canonical({ policy: c["policy"], groups: c["groups"], participants }))
    .digest("hex");
  policyDigests.set(config, digest);
  return digest;
}

interface KeyFile {
  kid: string;
  jwk: JWK;
}

interface Loaded {
  kid: string;
  key: KeyObject;
}

/** A public key as the JWKS lists it. */
export type PublicJwk = JWK & { kid: string; alg: string; use: string };

function publicOf(jwk: JWK, kid: string): PublicJwk {
  return { kty: jwk.kty, crv: jwk.crv, x: jwk.x, kid, alg: RECEIPT_ALG, use: "sig" } as PublicJwk;
}

async function makeKey(): Promise<KeyFile> {
  const { privateKey } = generateKeyPairSync("ed25519");
  const jwk = privateKey.export({ format: "jwk" }) as JWK;
  // The key's RFC 7638 thumbprint: SHA-256 over its required members in order (for OKP: crv, kty, x).
  const kid = createHash("sha256")
    .update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x }))
    .digest("base64url");
  return { kid, jwk };
}

function writeSecret(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/** Where a state directory keeps the receipt keys. */
export function receiptFiles(stateDir: string): { dir: string; key: string; jwks: string } {
  const dir = join(stateDir, "receipts");
  return { dir, key: join(dir, "key.jwk"), jwks: join(dir, "jwks.json") };
}

/** Reads the public keys a state directory kept (every key it had); empty when it has none. */
export function readJwks(stateDir: string): { keys: PublicJwk[] } {
  const { jwks } = receiptFiles(stateDir);
  if (!existsSync(jwks)) return { keys: [] };
  const parsed = JSON.parse(readFileSync(jwks, "utf8")) as { keys?: unknown };
  return { keys: Array.isArray(parsed.keys) ? (parsed.keys as PublicJwk[]) : [] };
}

/**
 * Makes a new signing key in `stateDir` and adds its public half to the JWKS (the old ones
 * stay listed, so earlier receipts still verify). Returns the new key's id.
 */
export async function rotateReceiptKey(stateDir: string): Promise<string> {
  const files = receiptFiles(stateDir);
  mkdirSync(files.dir, { recursive: true, mode: 0o700 });
  const made = await makeKey();
  const set = readJwks(stateDir);
  set.keys.push(publicOf(made.jwk, made.kid));
  writeFileSync(files.jwks, `${JSON.stringify(set, null, 2)}\n`, { mode: 0o644 });
  writeSecret(files.key, `${JSON.stringify(made)}\n`);
  return made.kid;
}

/** The space's receipt key: signs receipts, and publishes the public keys (the JWKS). */
export class ReceiptKeys {
  private current: Loaded | undefined;
  private memoryJwks: PublicJwk[] = [];
  private loading: Promise<Loaded> | undefined;

  constructor(
    private readonly space: string,
    private readonly stateDir: string | undefined,
  ) {}

  /** The key to sign with: the state directory's (made on first use), read again after a rotation (`reload`). */
  private key(): Promise<Loaded> {
    if (this.current) return Promise.resolve(this.current);
    this.loading ??= this.load().then(
      (k) => {
        this.current = k;
        this.loading = undefined;
        return k;
      },
      (err: unknown) => {
        this.loading = undefined;
        throw err;
      },
    );
    return this.loading;
  }

  private async load(): Promise<Loaded> {
    const loaded = (k: KeyFile): Loaded => ({ kid: k.kid, key: createPrivateKey({ key: k.jwk as never, format: "jwk" }) });
    if (!this.stateDir) {
      const made = await makeKey();
      this.memoryJwks.push(publicOf(made.jwk, made.kid));
      return loaded(made);
    }
    const files = receiptFiles(this.stateDir);
    if (!existsSync(files.key)) await rotateReceiptKey(this.stateDir);
    const k = JSON.parse(readFileSync(files.key, "utf8")) as KeyFile;
    if (typeof k.kid !== "string" || k.jwk?.kty !== "OKP" || k.jwk.crv !== "Ed25519" || typeof k.jwk.d !== "string")
      throw new Error(`${files.key}: not an Ed25519 receipt key; remove it to make a new one (mewgate audit receipts rotate-key)`);
    return loaded(k);
  }

  /** Forgets the key in memory, so the next receipt reads the state directory again (after `rotate-key`). */
  reload(): void {
    if (this.stateDir) this.current = undefined;
  }

  /** Loads (or makes) the key now, so the first approval does not pay for it. */
  async ready(): Promise<void> {
    await this.key();
  }

  /** The public keys (JWKS) a verifier fetches. */
  jwks(): { keys: PublicJwk[] } {
    return this.stateDir ? readJwks(this.stateDir) : { keys: this.memoryJwks };
  }

  /**
   * A receipt for `claims` (without `iss`, `iat`, `jti`, `sub`: set here from them): a compact
   * JWS (RFC 7515) signed with Ed25519 (RFC 8037) by node:crypto itself, a third of the time
   * jose's WebCrypto path takes on every approval; any JWT library verifies it.
   */
  async sign(claims: Omit<ReceiptClaims, "iss" | "iat" | "jti" | "sub">, now = Date.now()): Promise<string> {
    const k = await this.key();
    const header = { alg: RECEIPT_ALG, typ: RECEIPT_TYP, kid: k.kid };
    const payload = { ...claims, iss: `mewgate:${this.space}`, sub: claims.proposal, jti: claims.decision, iat: Math.floor(now / 1000) };
    const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
    return `${input}.${cryptoSign(null, Buffer.from(input), k.key).toString("base64url")}`;
  }
}

function b64url(text: string): string {
  return Buffer.from(text).toString("base64url");
}
