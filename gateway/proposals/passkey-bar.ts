/**
 * Which approvals need the approver's passkey, and the challenge each signs (the community's
 * draft SEP-2672's idea: proof that a person, not a program clicking a button, decided this
 * very call). `policy.passkey` names tools (`owner/tool` globs) and, or, a risk level (the
 * gateway's risk of what will run, policy/learn/risk.ts): a call that matches needs every
 * approval of it confirmed with a passkey the approver registered (identity/passkeys.ts), on
 * every route a decision takes (the wire, the API, the console, a link, a fulfilment).
 *
 * The challenge is SHA-256 over the space, the proposal, the approver, the tool, the digest of
 * the arguments that will run, the tool definition's pinned digest, and a nonce the gateway
 * issued for this approver and proposal — kept five minutes and used once. An assertion for
 * another call, other arguments, another approver, or one already used, does not verify.
 */
import { createHash } from "node:crypto";
import type { SpaceConfig } from "../config/config.js";
import { type PasskeyPlace, Passkeys } from "../identity/passkeys.js";
import type { RiskLevel } from "../policy/learn/risk.js";
import { compileGlob } from "../policy/capabilities.js";
import { canonical } from "../store/chain.js";
import { OPEN_OWNER, type Proposal, runningArguments } from "./book.js";
import type { Recorded } from "../policy/learn/recorded.js";
import type { Registry } from "../tools/registry.js";
import { argumentsDigest } from "./receipts.js";
import { proposalRisk } from "./risk.js";

export interface PasskeyProof {
  credential: string;
  challenge: string;
}

export interface PasskeyHost {
  space: string;
  config(): SpaceConfig;
  /** The gateway's risk of what `p` will run. */
  risk(p: Proposal): RiskLevel;
  /** The origins and RP IDs people's browsers reach the console at. */
  place(): PasskeyPlace;
  passkeys: Passkeys;
}

const NONCE_MS = 5 * 60_000;
const ORDER: Record<RiskLevel, number> = { low: 0, medium: 1, high: 2 };

/** The gateway's risk of what `p` will run (risk.ts), as the passkey bar weighs it: "high" for a call held open or not of a tool. */
export function passkeyRisk(p: Proposal, registry: Registry, recorded: Pick<Recorded, "riskOf">): RiskLevel {
  if (p.owner === OPEN_OWNER) return "high";
  return proposalRisk(p, registry, recorded, { fresh: true })?.level ?? "high";
}

export class PasskeyBar {
  private readonly nonces = new Map<string, { nonce: string; until: number }>();

  constructor(private readonly host: PasskeyHost) {}

  /** Whether approving `p` needs the approver's passkey. */
  needs(p: Proposal): boolean {
    const rule = this.host.config().policy.passkey;
    if (!rule || p.method !== "tools/call" || p.tool === undefined) return false;
    const name = `${p.owner}/${p.tool}`;
    if (rule.tools.some((g) => compileGlob(g)(name))) return true;
    return rule.risk !== undefined && ORDER[this.host.risk(p)] >= ORDER[rule.risk];
  }

  /** Where a person confirms: the console's passkey page at this proposal. */
  where(p: Proposal): string {
    const origin = this.host.place().origins[0] ?? "";
    return `${origin}/ui/passkey.html#space=${encodeURIComponent(this.host.space)}&proposal=${encodeURIComponent(p.id)}`;
  }

  /** The challenge for `approver` approving `p` with the arguments whose digest is `args` (receipts.ts `argumentsDigest`). */
  private challenge(p: Proposal, approver: string, args: string, nonce: string): string {
    const bound = {
      v: "mewgate-passkey-1",
      space: this.host.space,
      proposal: p.id,
      approver,
      tool: `${p.owner}/${p.tool ?? p.method}`,
      args,
      definition: p.digest ?? "",
      nonce,
    };
    return createHash("sha256").update(canonical(bound)).digest("base64url");
  }

  /** Options for `approver` to sign approving `p` as it would run now; undefined when they have no passkey. */
  async options(p: Proposal, approver: string, host?: string): Promise<unknown | undefined> {
    const nonce = Passkeys.nonce();
    const key = `${p.id}\u0000${approver}`;
    if (this.nonces.size > 10_000) this.nonces.clear();
    this.nonces.set(key, { nonce, until: Date.now() + NONCE_MS });
    return this.host.passkeys.assertionOptions(
      approver,
      this.challenge(p, approver, argumentsDigest(runningArguments(p)), nonce),
      this.rpId(host),
    );
  }

  /** The RP ID for a browser at `host` (the request's Host header): its name when the place lists it, else the first. */
  rpId(host: string | undefined): string {
    const place = this.host.place();
    const name = host?.replace(/:\d+$/, "").replace(/^\[|\]$/g, "");
    return name !== undefined && place.rpIds.includes(name) ? name : place.rpIds[0]!;
  }

  /** Checks `approver`'s assertion for approving `p` with the arguments whose digest is `args`; the nonce is used up either way. */
  async check(p: Proposal, approver: string, assertion: unknown, args: string): Promise<PasskeyProof> {
    const key = `${p.id}\u0000${approver}`;
    const issued = this.nonces.get(key);
    this.nonces.delete(key);
    if (assertion === undefined) throw new Error("this approval needs your passkey");
    if (!issued || issued.until < Date.now()) throw new Error("no passkey challenge is open for you on this proposal (ask for one again)");
    const challenge = this.challenge(p, approver, args, issued.nonce);
    const credential = await this.host.passkeys.verify(approver, assertion, challenge, this.host.place());
    return { credential, challenge };
  }
}
