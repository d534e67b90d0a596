/**
 * Checking a receipt (receipts.ts), as a tool's server, an auditor or `mewgate audit receipts
 * verify` does: the signature against the space's public keys (its JWKS), the header (`typ`,
 * `alg`, a `kid` the set has), every claim present and of its type — then, when the checker
 * knows what the call is, that the receipt is for exactly that: the arguments' digest, the
 * tool, the space; and, when it keeps the decision ids it has seen, that this one is new
 * (a replay of a receipt with a second call is refused). Reads nothing: the keys are given.
 */
import { argumentsDigest, type PublicJwk, RECEIPT_ALG, RECEIPT_TYP, type ReceiptClaims } from "./receipts.js";

/** What the checker knows of the call the receipt came with. */
export interface ReceiptExpect {
  /** The arguments the call carries: their digest must be the receipt's `args`. */
  arguments?: Record<string, unknown> | undefined;
  /** `owner/tool`, or the tool's name alone (then only the part after `/` is compared). */
  tool?: string | undefined;
  space?: string | undefined;
  proposal?: string | undefined;
  /** Decision ids already seen: a receipt whose decision is among them is a replay. Added to when it passes. */
  seen?: Set<string> | undefined;
}

export type ReceiptCheck =
  | { ok: true; claims: ReceiptClaims; kid: string }
  | {
      ok: false;
      code: "receipt_invalid" | "receipt_unknown_key" | "receipt_other_call" | "receipt_replayed";
      message: string;
      claims?: ReceiptClaims;
    };

const STRINGS = [
  "iss",
  "sub",
  "jti",
  "space",
  "proposal",
  "decision",
  "proposer",
  "owner",
  "tool",
  "method",
  "decider",
  "args",
  "definition",
  "policy",
  "proposed_at",
  "decided_at",
] as const;

/** Whether `claims` has every field a receipt binds, each of its type. */
function shapeProblem(c: Record<string, unknown>): string | undefined {
  for (const k of STRINGS) if (typeof c[k] !== "string") return `claim "${k}" is missing or not a string`;
  if (typeof c["iat"] !== "number") return `claim "iat" is missing or not a number`;
  if (!Array.isArray(c["approvers"]) || c["approvers"].length === 0 || !c["approvers"].every((a) => typeof a === "string"))
    return `claim "approvers" is not a non-empty list of ids`;
  if (c["jti"] !== c["decision"]) return "jti and decision differ";
  if (c["sub"] !== c["proposal"]) return "sub and proposal differ";
  if (c["iss"] !== `mewgate:${c["space"] as string}`) return "iss does not name the receipt's space";
  if (!/^[0-9a-f]{64}$/.test(c["args"] as string)) return `claim "args" is not a SHA-256 digest`;
  return undefined;
}

/** Checks `jws` against `jwks` and, as far as `expect` says, against the call it came with. */
export async function verifyReceipt(jws: unknown, jwks: { keys: PublicJwk[] }, expect: ReceiptExpect = {}): Promise<ReceiptCheck> {
  // jose is loaded by the first receipt checked, not with every gateway that could check one.
  const { createLocalJWKSet, errors, jwtVerify } = await import("jose");
  if (typeof jws !== "string" || jws.length > 16_384 || !/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(jws))
    return { ok: false, code: "receipt_invalid", message: "not a compact JWS" };
  let claims: ReceiptClaims;
  let kid: string;
  try {
    const got = await jwtVerify(jws, createLocalJWKSet(jwks as never), { algorithms: [RECEIPT_ALG], typ: RECEIPT_TYP });
    claims = got.payload as unknown as ReceiptClaims;
    kid = String(got.protectedHeader.kid ?? "");
  } catch (err) {
    if (err instanceof errors.JWKSNoMatchingKey)
      return { ok: false, code: "receipt_unknown_key", message: "signed with a key this space's JWKS does not list" };
    return { ok: false, code: "receipt_invalid", message: `the signature or header does not hold: ${(err as Error).message}` };
  }
  const bad = shapeProblem(claims as unknown as Record<string, unknown>);
  if (bad) return { ok: false, code: "receipt_invalid", message: bad };
  const other = (message: string) => ({ ok: false as const, code: "receipt_other_call" as const, message, claims });
  if (expect.space !== undefined && claims.space !== expect.space) return other(`it is for space "${claims.space}"`);
  if (expect.proposal !== undefined && claims.proposal !== expect.proposal) return other(`it is for proposal "${claims.proposal}"`);
  if (expect.tool !== undefined) {
    const same = expect.tool.includes("/") ? claims.tool === expect.tool : claims.tool.slice(claims.tool.indexOf("/") + 1) === expect.tool;
    if (!same) return other(`it is for ${claims.tool}, not ${expect.tool}`);
  }
  if (expect.arguments !== undefined && argumentsDigest(expect.arguments) !== claims.args)
    return other("it approves other arguments than these");
  if (expect.seen) {
    if (expect.seen.has(claims.decision))
      return { ok: false, code: "receipt_replayed", message: `decision ${claims.decision} was already used`, claims };
    expect.seen.add(claims.decision);
  }
  return { ok: true, claims, kid };
}
