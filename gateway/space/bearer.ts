/**
 * Who a bearer token is, in a space: a static token (identity/tokens.ts) first, then — in a
 * space with `identity:` — a JWT access token from its identity provider (identity/jwt.ts),
 * mapped to a participant and runtime groups (identity/claims.ts). One function for every
 * door: WebSocket joins (door.ts), the operator API and `/mcp`.
 *
 * An identity the provider vouches for is adopted here: its groups are remembered for the
 * member (`Space.runtimeGroups`, read into `Member.groups`), and a member of a guest group
 * who is not declared becomes a runtime human of the space with that group's capabilities.
 * The token itself goes no further than this check: bridged servers never see it.
 */
import { defaultCapabilities, type ParticipantConfig } from "../config/config.js";
import type { Identity } from "../identity/claims.js";
import { looksLikeJwt, type Surface } from "../identity/jwt.js";
import { CloseCodes } from "../wire/envelope.js";
import type { Space } from "./space.js";

export type BearerResult =
  | {
      ok: true;
      id: string;
      groups: readonly string[];
      via: "token" | "jwt" /** A static token's digest (base64): what a session opened with it is held to (sessions.ts). */;
      digest?: string | undefined;
    }
  | { ok: false; code: number; reason: string; http: { status: 401 | 403 | 503; error: string; description: string; scope?: string } };

/** `audiences`: this gateway's resource URLs as the request reached it (a JWT's `aud` must be one, unless `identity.resource` is set). */
export async function authenticateBearer(
  space: Space,
  token: string,
  surface: Surface,
  audiences: string[],
  claimed?: string,
): Promise<BearerResult> {
  const auth = space.authenticate(token, claimed);
  if (auth.ok) return { ok: true, id: auth.id, groups: space.runtimeGroups.get(auth.id) ?? [], via: "token", digest: auth.digest };
  if (!space.identity || !looksLikeJwt(token) || auth.code !== CloseCodes.unauthorized) {
    return { ...auth, http: { status: 401, error: "invalid_token", description: auth.reason } };
  }
  const r = await space.identity.resolve(token, surface, audiences);
  if (!r.ok) {
    const code = r.status === 503 ? CloseCodes.tryAgain : r.status === 403 ? CloseCodes.identityMismatch : CloseCodes.unauthorized;
    return { ok: false, code, reason: r.description, http: r };
  }
  const id = r.identity.participant;
  if (claimed !== undefined && claimed !== id) {
    const reason = `this token belongs to "${id}", not "${claimed.slice(0, 64)}"`;
    return { ok: false, code: CloseCodes.identityMismatch, reason, http: { status: 403, error: "access_denied", description: reason } };
  }
  adopt(space, r.identity);
  return { ok: true, id, groups: r.identity.groups, via: "jwt" };
}

/** Remembers what the provider says of `identity`, and admits it as a runtime human if it is a guest. */
export function adopt(space: Space, identity: Identity): void {
  const id = identity.participant;
  if (identity.guest && !Object.hasOwn(space.config.participants, id)) {
    const g = identity.guest;
    const config: ParticipantConfig = {
      id,
      kind: "human",
      description: "signed in through the identity provider (a member of a guest group)",
      echo: false,
      visibility: "all",
      capabilities: g.capabilities.length ? (g.capabilities as ParticipantConfig["capabilities"]) : defaultCapabilities("human"),
      tools: g.tools,
    };
    space.config.participants[id] = config;
    space.authority.forget(id);
    space.log.info({ participant: id, groups: identity.groups }, "a member of a guest group signed in as a runtime human");
  }
  space.runtimeGroups.set(id, identity.groups);
  // Who may decide asks the one place group membership is worked out (policy/groups.ts).
  space.authority.groups.setRuntime(id, identity.groups);
  const member = space.delivery.members.get(id);
  if (member) member.groups = identity.groups;
}
