/**
 * space.yaml's `identity:` block: the organisation's OpenID provider. People sign in to the
 * console through it (authorization code with PKCE), and its JWT access tokens are taken on
 * `/mcp`, the operator API and WebSocket joins beside the static tokens (identity/).
 *
 * Built by a factory that is handed the capability and tool-rule schemas, so that this file
 * does not import config.ts (which imports it).
 */
import * as z from "zod";
import { expected, int, section } from "./schema.js";

/** Algorithms an access or ID token may be signed with: asymmetric only, never `none` or HS*. */
export const ASYMMETRIC_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"] as const;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** `@ops`: how a group is named wherever participants are. */
export const GROUP_NAME = /^@[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export function identitySchema(capability: z.ZodType, toolPolicy: z.ZodType) {
  const url = (what: string) =>
    z
      .string({ error: expected(what) })
      .url({ error: expected(what) })
      .refine((u) => /^https?:\/\//i.test(u), { error: expected(what) });
  const group = z
    .string({ error: expected('a group name like "@ops"') })
    .regex(GROUP_NAME, { error: expected('a group name like "@ops"') });
  return section({
    /** The OpenID provider's issuer URL: discovery at `<issuer>/.well-known/openid-configuration`, and `iss` of every token. */
    issuer: url("the issuer's URL, like https://sso.example.com/realms/acme"),
    /** The console's client at the provider (confidential: its secret comes from the environment). */
    client_id: z.string().min(1).optional(),
    /** The environment variable that holds the client's secret; never the secret itself. */
    client_secret_env: z
      .string({ error: expected("an environment variable name") })
      .regex(ENV_NAME, { error: expected("an environment variable name like MEWGATE_OIDC_SECRET") })
      .optional(),
    /** Scopes the console asks for at sign-in. */
    scopes: z.array(z.string().min(1)).default(["openid", "email", "profile"]),
    /** This gateway's resource URL: the `aud` access tokens must carry. Default: the address the request came to (and it with `/mcp`). */
    resource: url("this gateway's public URL, like https://mewgate.example.com").optional(),
    /** Signing algorithms accepted (asymmetric only). */
    algorithms: z.array(z.enum(ASYMMETRIC_ALGORITHMS)).min(1).default(["RS256", "PS256", "ES256", "EdDSA"]),
    /** Leeway for `exp`, `nbf` and `iat`, in seconds. */
    clock_skew_s: int(0, 300).default(30),
    /** How long to wait for the provider's keys (JWKS) before refusing. */
    jwks_timeout_ms: int(100, 30_000).default(5000),
    /** Claims whose value names a person, tried in order (an `email` with `email_verified: false` is skipped). */
    person_claims: z.array(z.string().min(1)).min(1).default(["email", "sub"]),
    /** Claim value → declared participant (`alice@example.com: alice`). */
    people: z.record(z.string().min(1), z.string().min(1)).default({}),
    /** The claim that lists the person's groups at the provider. */
    groups_claim: z.string().min(1).default("groups"),
    /** Group claim value → group (`/mewgate-ops: "@ops"`). */
    groups: z.record(z.string().min(1), group).default({}),
    /** Members of these groups who are not in `people` join as runtime humans, with these capabilities and tool rules. */
    guests: z.record(group, section({ capabilities: z.array(capability).optional(), tools: toolPolicy.optional() })).default({}),
    /** The scope a token must carry for each surface. */
    required_scopes: section({
      mcp: z.string().min(1).default("mewgate:mcp"),
      api: z.string().min(1).default("mewgate:api"),
      join: z.string().min(1).default("mewgate:join"),
    }).prefault({}),
    /** A console session's lifetime (sign in again after it). */
    session_ttl_s: int(60, 7 * 24 * 3600).default(8 * 3600),
  });
}

export type IdentityConfig = z.output<ReturnType<typeof identitySchema>>;
