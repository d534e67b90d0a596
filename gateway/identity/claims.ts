/**
 * From an identity provider's verified claims to who that is in a space: a declared
 * participant (`identity.people`), or — for a member of a group under `identity.guests` who
 * is not declared — a runtime human; and the groups the claims put the person in.
 *
 * Only claims that were verified (a signed ID token, a validated access token) come here.
 * The result is what a session or a bearer token stands for: `participant` + `groups`
 * (names without the `@`; policy's group membership joins these with space.yaml's groups).
 */
import type { IdentityConfig } from "../config/identity.js";
import { Lookalikes } from "../config/confusables.js";

export interface Identity {
  /** The participant id this person or client acts as. */
  participant: string;
  /** Runtime groups from the provider's claims (`ops` for `@ops`). */
  groups: string[];
  /** The provider's stable subject (`iss` + `sub`). */
  subject: string;
  /** A runtime human admitted through a group (`identity.guests`), not declared in space.yaml. */
  guest?: { capabilities: unknown[]; tools: { allow: string[]; ask: string[]; deny: string[] } };
}

export type Mapped = { ok: true; identity: Identity } | { ok: false; reason: string };

const GUEST_ID_CHARS = /[^a-z0-9_.-]+/g;
const MAX_ID = 64;

/**
 * Which subject holds each runtime id, so two people whose claims sanitise to the same id
 * (`a.b@x` and `a_b@x`, say) can never act as one another. In memory: a runtime human's id
 * is derived again at each sign-in, and the first subject after a start takes it.
 */
export class GuestBook {
  private readonly holders = new Map<string, string>();
  private readonly alike = new Lookalikes();

  constructor(declared: Iterable<string>) {
    for (const id of declared) this.alike.add(id);
  }

  /** The runtime id for `subject`, or why it cannot have one. */
  claim(wanted: string, subject: string, isDeclared: (id: string) => boolean): { ok: true; id: string } | { ok: false; reason: string } {
    const holder = this.holders.get(wanted);
    if (holder !== undefined)
      return holder === subject ? { ok: true, id: wanted } : { ok: false, reason: `the runtime id "${wanted}" is held by another person` };
    if (isDeclared(wanted)) return { ok: false, reason: `"${wanted}" is a declared participant; map this person under identity.people` };
    const like = this.alike.clash(wanted);
    if (like !== undefined) return { ok: false, reason: `the runtime id "${wanted}" reads like participant "${like}"` };
    this.holders.set(wanted, subject);
    this.alike.add(wanted);
    return { ok: true, id: wanted };
  }
}

/** The groups (without `@`) the claims put the person in, through `identity.groups`. */
export function groupsOf(config: IdentityConfig, claims: Record<string, unknown>): string[] {
  const raw = claims[config.groups_claim];
  const values = Array.isArray(raw) ? raw : typeof raw === "string" ? raw.split(/[\s,]+/) : [];
  const out = new Set<string>();
  for (const v of values) {
    if (typeof v !== "string") continue;
    const g = Object.hasOwn(config.groups, v) ? config.groups[v] : undefined;
    if (g !== undefined) out.add(g.slice(1));
  }
  return [...out].sort();
}

/** Who verified `claims` are in the space. `isDeclared` says whether an id is in space.yaml (runtime humans are not). */
export function mapClaims(
  config: IdentityConfig,
  claims: Record<string, unknown>,
  guests: GuestBook,
  isDeclared: (id: string) => boolean,
): Mapped {
  const sub = typeof claims["sub"] === "string" ? claims["sub"] : undefined;
  if (!sub) return { ok: false, reason: "the token names no subject (sub)" };
  const subject = `${String(claims["iss"] ?? config.issuer)} ${sub}`;
  const groups = groupsOf(config, claims);
  let named: string | undefined;
  for (const c of config.person_claims) {
    const v = claims[c];
    if (typeof v !== "string" || v === "") continue;
    // An address the provider has not verified names nobody.
    if (c === "email" && claims["email_verified"] === false) continue;
    named ??= v;
    const id = Object.hasOwn(config.people, v) ? config.people[v] : undefined;
    if (id !== undefined) return { ok: true, identity: { participant: id, groups, subject } };
  }
  const entries = Object.entries(config.guests).filter(([g]) => groups.includes(g.slice(1)));
  if (entries.length === 0 || named === undefined)
    return {
      ok: false,
      reason: "this identity is not a participant of the space (not under identity.people, and in no group under identity.guests)",
    };
  const wanted = named
    .toLowerCase()
    .replace("@", ".")
    .replace(GUEST_ID_CHARS, "-")
    .replace(/^[^a-z0-9]+/, "")
    .slice(0, MAX_ID);
  if (wanted === "") return { ok: false, reason: "no participant id can be made from this identity's claims" };
  const held = guests.claim(wanted, subject, isDeclared);
  if (!held.ok) return held;
  // A member of several guest groups gets what each of them gives.
  const guest: NonNullable<Identity["guest"]> = { capabilities: [], tools: { allow: [], ask: [], deny: [] } };
  for (const [, g] of entries) {
    const entry = g as { capabilities?: unknown[]; tools?: { allow?: string[]; ask?: string[]; deny?: string[] } };
    guest.capabilities.push(...(entry.capabilities ?? []));
    for (const k of ["allow", "ask", "deny"] as const) guest.tools[k].push(...(entry.tools?.[k] ?? []));
  }
  return { ok: true, identity: { participant: held.id, groups, subject, guest } };
}
