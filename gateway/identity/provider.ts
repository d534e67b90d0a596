/**
 * A space's identity provider (`identity:` in space.yaml), as the space uses it: a bearer
 * token that is a JWT from the provider becomes an `Identity` (a participant id and its
 * runtime groups), and the console's sign-in sessions (sessions.ts) are kept here too, so
 * that everything a person can be signed in by is in one place per space.
 */
import type { Logger } from "pino";
import type { IdentityConfig } from "../config/identity.js";
import { GuestBook, type Identity, mapClaims } from "./claims.js";
import { AccessTokens, type Surface } from "./jwt.js";
import { ConsoleSignIn } from "./oidc.js";
import { Sessions } from "./sessions.js";

export type Resolved =
  | { ok: true; identity: Identity }
  | { ok: false; status: 401 | 403 | 503; error: string; description: string; scope?: string };

export class SpaceIdentity {
  readonly tokens: AccessTokens;
  readonly guests: GuestBook;
  readonly sessions: Sessions;
  readonly signIn: ConsoleSignIn;

  constructor(
    readonly config: IdentityConfig,
    readonly spaceId: string,
    declared: Iterable<string>,
    private readonly isDeclared: (id: string) => boolean,
    log: Logger,
    env: NodeJS.ProcessEnv = process.env,
  ) {
    this.tokens = new AccessTokens(config, log);
    this.guests = new GuestBook(declared);
    this.sessions = new Sessions(spaceId, config.session_ttl_s * 1000);
    this.signIn = new ConsoleSignIn(config, env);
  }

  /** Who a JWT access token stands for, once verified for `surface` at one of `audiences`. */
  async resolve(token: string, surface: Surface, audiences: string[]): Promise<Resolved> {
    const v = await this.tokens.verify(token, surface, audiences);
    if (!v.ok) return v;
    return this.map(v.claims, 403);
  }

  /** Verified claims (an ID token's, an access token's) to a participant and groups. */
  map(claims: Record<string, unknown>, status: 401 | 403 = 403): Resolved {
    const m = mapClaims(this.config, claims, this.guests, this.isDeclared);
    return m.ok ? m : { ok: false, status, error: status === 403 ? "access_denied" : "invalid_token", description: m.reason };
  }
}
