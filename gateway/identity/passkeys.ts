/**
 * People's passkeys (WebAuthn), registered in the console and used to confirm an approval the
 * space's policy says needs one (`policy.passkey`; proposals/passkey-bar.ts derives each
 * challenge from the call). Kept in the state directory, one file per person
 * (`passkeys/<participant>.json`, mode 0600): each credential's id, public key, signature
 * counter and transports — nothing secret, but nothing anyone else should edit either.
 *
 * `@simplewebauthn/server` (14.0.x: 14.1 needs Node 22) checks the attestation and assertion
 * formats, the origin, the RP ID, user presence and verification and the counter: WebAuthn's
 * CBOR, COSE keys and attestation formats are a specification's worth of detail better kept
 * in one well-tested library than written again here.
 *
 * Registration challenges live in memory for five minutes, one per person; a registration
 * needs the person's own session (the API), never an agent's token. A person who has a
 * passkey adds another only with an assertion by one they have (over a challenge made with
 * the registration's options): a program holding their session cannot enrol a key of its own
 * and approve with it. (Their first passkey asks only the session.) An assertion is checked
 * against the one challenge the caller says it signed, which the caller derives and keeps
 * single-use; a counter that does not move forward (a cloned authenticator, a replay) fails.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AuthenticationResponseJSON, RegistrationResponseJSON } from "@simplewebauthn/server";

/** `@simplewebauthn/server` and its ASN.1 and CBOR readers (1.8 MB bundled), loaded by the first passkey asked for, not with the gateway. */
let webauthn: Promise<typeof import("@simplewebauthn/server")> | undefined;
const lib = () => (webauthn ??= import("@simplewebauthn/server"));

export interface StoredPasskey {
  id: string;
  /** The COSE public key, base64url. */
  publicKey: string;
  counter: number;
  transports?: string[] | undefined;
  createdAt: string;
}

/** Where passkeys are checked: the origins a person's browser shows, and their host names (RP IDs). */
export interface PasskeyPlace {
  origins: string[];
  rpIds: string[];
}

/** Most passkeys one person may keep. */
const MAX_PER_PERSON = 16;
const CHALLENGE_MS = 5 * 60_000;
const ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export class Passkeys {
  private readonly memory = new Map<string, StoredPasskey[]>();
  /** A registration under way: its challenge, and the one an existing passkey must sign to confirm it. */
  private readonly registering = new Map<string, { challenge: string; confirm?: string | undefined; until: number }>();

  /** `dir`: the state directory; without one (a cluster's bus store) passkeys live in memory. */
  constructor(
    private readonly space: string,
    private readonly dir: string | undefined,
  ) {}

  private file(who: string): string | undefined {
    if (!this.dir || !ID.test(who)) return undefined;
    return join(this.dir, "passkeys", `${who}.json`);
  }

  /** The passkeys `who` registered. */
  of(who: string): StoredPasskey[] {
    const file = this.file(who);
    if (!file) return this.memory.get(who) ?? [];
    if (!existsSync(file)) return [];
    try {
      const parsed = JSON.parse(readFileSync(file, "utf8")) as { passkeys?: StoredPasskey[] };
      return Array.isArray(parsed.passkeys) ? parsed.passkeys : [];
    } catch {
      return [];
    }
  }

  private save(who: string, keys: StoredPasskey[]): void {
    const file = this.file(who);
    if (!file) {
      this.memory.set(who, keys);
      return;
    }
    mkdirSync(join(this.dir!, "passkeys"), { recursive: true, mode: 0o700 });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify({ passkeys: keys }, null, 2)}\n`, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, file);
  }

  /**
   * Options for `who` to register a passkey (navigator.credentials.create); when they have one
   * already, `confirm` too: options for one of theirs to sign (navigator.credentials.get),
   * without which `register` refuses.
   */
  async registrationOptions(who: string, place: PasskeyPlace, rpId = place.rpIds[0]!): Promise<Record<string, unknown>> {
    const have = this.of(who);
    if (have.length >= MAX_PER_PERSON) throw new PasskeyError(`you have ${have.length} passkeys, the most one person may keep`);
    const options = await (await lib()).generateRegistrationOptions({
      rpName: `mewgate ${this.space}`,
      rpID: rpId,
      userName: who,
      userID: new TextEncoder().encode(`${this.space}\u0000${who}`),
      attestationType: "none",
      excludeCredentials: have.map((k) => ({ id: k.id, ...(k.transports ? { transports: k.transports } : {}) })),
      authenticatorSelection: { residentKey: "preferred", userVerification: "required" },
    });
    const confirm = have.length ? Passkeys.nonce() : undefined;
    this.registering.set(who, { challenge: options.challenge, confirm, until: Date.now() + CHALLENGE_MS });
    return confirm === undefined ? { ...options } : { ...options, confirm: await this.assertionOptions(who, confirm, rpId) };
  }

  /**
   * Keeps the passkey `who` made with the options last given them, once it verifies — and,
   * when they had one already, once `confirm` (an assertion by one of theirs over the
   * options' `confirm` challenge) verifies too.
   */
  async register(who: string, response: unknown, place: PasskeyPlace, confirm?: unknown): Promise<StoredPasskey> {
    const pending = this.registering.get(who);
    this.registering.delete(who);
    if (!pending || pending.until < Date.now()) throw new PasskeyError("no registration is under way for you (ask for options again)");
    if (pending.confirm !== undefined) {
      if (confirm === undefined)
        throw new PasskeyError("you have a passkey already: adding another needs one you have to confirm it (confirm)");
      await this.verify(who, confirm, pending.confirm, place);
    }
    let verified: Awaited<ReturnType<typeof import("@simplewebauthn/server").verifyRegistrationResponse>>;
    try {
      verified = await (await lib()).verifyRegistrationResponse({
        response: response as RegistrationResponseJSON,
        expectedChallenge: pending.challenge,
        expectedOrigin: place.origins,
        expectedRPID: place.rpIds,
        requireUserVerification: true,
      });
    } catch (err) {
      throw new PasskeyError(`the passkey was not registered: ${(err as Error).message}`);
    }
    if (!verified.verified) throw new PasskeyError("the passkey was not registered: its attestation did not verify");
    const c = verified.registrationInfo.credential;
    const key: StoredPasskey = {
      id: c.id,
      publicKey: Buffer.from(c.publicKey).toString("base64url"),
      counter: c.counter,
      ...(c.transports ? { transports: c.transports as string[] } : {}),
      createdAt: new Date().toISOString(),
    };
    const keys = this.of(who).filter((k) => k.id !== key.id);
    this.save(who, [...keys, key]);
    return key;
  }

  /** Options for `who` to sign `challenge` (base64url) with one of their passkeys; undefined when they have none. */
  async assertionOptions(who: string, challenge: string, rpId: string): Promise<unknown | undefined> {
    const have = this.of(who);
    if (!have.length) return undefined;
    return (await lib()).generateAuthenticationOptions({
      rpID: rpId,
      challenge: Buffer.from(challenge, "base64url"),
      allowCredentials: have.map((k) => ({ id: k.id, ...(k.transports ? { transports: k.transports } : {}) })),
      userVerification: "required",
    });
  }

  /**
   * Whether `response` is `who`'s passkey signing exactly `challenge` (base64url), with user
   * verification, at one of `place`'s origins; its counter moves on. Returns the credential id.
   */
  async verify(who: string, response: unknown, challenge: string, place: PasskeyPlace): Promise<string> {
    const r = response as Partial<AuthenticationResponseJSON> | null;
    if (typeof r !== "object" || r === null || typeof r.id !== "string" || r.id.length > 1024)
      throw new PasskeyError("the passkey assertion is missing or malformed");
    const keys = this.of(who);
    const key = keys.find((k) => k.id === r.id);
    if (!key) throw new PasskeyError("that passkey is not one of yours in this space");
    let verified: Awaited<ReturnType<typeof import("@simplewebauthn/server").verifyAuthenticationResponse>>;
    try {
      verified = await (await lib()).verifyAuthenticationResponse({
        response: r as AuthenticationResponseJSON,
        expectedChallenge: challenge,
        expectedOrigin: place.origins,
        expectedRPID: place.rpIds,
        credential: {
          id: key.id,
          publicKey: new Uint8Array(Buffer.from(key.publicKey, "base64url")),
          counter: key.counter,
          ...(key.transports ? { transports: key.transports as never } : {}),
        },
        requireUserVerification: true,
      });
    } catch (err) {
      throw new PasskeyError(`the passkey assertion does not hold for this call: ${(err as Error).message}`);
    }
    if (!verified.verified) throw new PasskeyError("the passkey assertion does not hold for this call");
    key.counter = verified.authenticationInfo.newCounter;
    this.save(who, keys);
    return key.id;
  }

  /** A fresh nonce for a challenge. */
  static nonce(): string {
    return randomBytes(16).toString("base64url");
  }
}

export class PasskeyError extends Error {}
