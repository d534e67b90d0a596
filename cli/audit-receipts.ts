/**
 * `mewgate audit receipts verify [receipt]` and `mewgate audit receipts rotate-key`.
 *
 * verify, offline: the receipt's signature against the space's public keys (the state
 * directory's `receipts/jwks.json`, or `--jwks FILE` saved from the gateway's JWKS URL), then
 * against the audit trail when there is one: the approval entry with the receipt's decision id
 * must exist and agree on the proposal, proposer, owner, tool, last approver and the digest of
 * its arguments. Without a receipt, every receipt in the trail is checked so. `--arguments JSON`
 * checks that the receipt approves exactly those arguments. Exit 1 on any failure.
 *
 * rotate-key: a new signing key; the old public keys stay in the JWKS, so earlier receipts
 * still verify. A running gateway signs with the new key after its next reload.
 */
import { existsSync, readFileSync } from "node:fs";
import { argumentsDigest, readAudit, readJwks, rotateReceiptKey, verifyReceipt } from "../gateway/index.js";
import type { AuditEntry, PublicJwk, ReceiptClaims } from "../gateway/index.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { CliError, loadSpace, spaceFile } from "./space.js";
import { sanitize } from "./terminal/format.js";

export interface ReceiptOptions {
  config?: string | undefined;
  stateDir?: string | undefined;
  jwks?: string | undefined;
  arguments?: string | undefined;
  json?: boolean | undefined;
}

async function stateDirOf(opts: ReceiptOptions, io: Io): Promise<string | undefined> {
  if (opts.stateDir && !opts.config) return opts.stateDir;
  if (opts.jwks && !opts.config && !existsSync(spaceFile(undefined))) return undefined;
  return (await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env })).stateDir;
}

function readText(where: string, what: string): string {
  try {
    return readFileSync(where === "-" ? 0 : where, "utf8");
  } catch (err) {
    throw new CliError(`${what} ${where}: ${(err as Error).message}`);
  }
}

/** The keys to check with: `--jwks FILE`, else the state directory's. */
function keysOf(opts: ReceiptOptions, stateDir: string | undefined): { keys: PublicJwk[] } {
  if (opts.jwks !== undefined) {
    try {
      const set = JSON.parse(readText(opts.jwks, "--jwks")) as { keys?: unknown };
      if (!Array.isArray(set.keys)) throw new Error("no keys list");
      return { keys: set.keys as PublicJwk[] };
    } catch (err) {
      throw new CliError(`--jwks ${opts.jwks}: not a JWKS (${(err as Error).message})`);
    }
  }
  if (!stateDir) throw new CliError("no state directory and no --jwks: nothing to check the signature with");
  const set = readJwks(stateDir);
  if (!set.keys.length) throw new CliError(`${stateDir} holds no receipt keys (receipts/jwks.json): the gateway has signed none`);
  return set;
}

/** What differs between a receipt and the approval entry it names, in words. */
function disagreement(c: ReceiptClaims, e: AuditEntry): string | undefined {
  const tool = e.tool === undefined ? e.method : `${e.owner}/${e.tool}`;
  if (e.proposal !== c.proposal) return `the audit entry is for proposal ${e.proposal}`;
  if (e.proposer !== c.proposer) return `the audit entry's proposer is ${e.proposer}`;
  if (e.owner !== c.owner || tool !== c.tool) return `the audit entry's call is ${tool}`;
  if (e.by !== c.approvers[c.approvers.length - 1]) return `the audit entry's approver is ${e.by}`;
  if (e.arguments !== undefined && argumentsDigest(e.arguments) !== c.args)
    return "the audit entry's arguments are not the ones the receipt approves";
  return undefined;
}

interface Verdict {
  decision?: string | undefined;
  proposal?: string | undefined;
  ok: boolean;
  why?: string | undefined;
  claims?: ReceiptClaims | undefined;
}

async function check(
  jws: string,
  jwks: { keys: PublicJwk[] },
  approvals: Map<string, AuditEntry> | undefined,
  args: Record<string, unknown> | undefined,
): Promise<Verdict> {
  const r = await verifyReceipt(jws, jwks, args === undefined ? {} : { arguments: args });
  if (!r.ok) return { ok: false, why: `${r.code}: ${r.message}`, decision: r.claims?.decision, proposal: r.claims?.proposal };
  const c = r.claims;
  if (approvals) {
    const e = approvals.get(c.decision);
    if (!e)
      return {
        ok: false,
        why: `no approval with decision ${c.decision} in the audit trail`,
        decision: c.decision,
        proposal: c.proposal,
        claims: c,
      };
    const why = disagreement(c, e);
    if (why) return { ok: false, why, decision: c.decision, proposal: c.proposal, claims: c };
    if (e.receipt !== undefined && e.receipt !== jws)
      return {
        ok: false,
        why: "the audit trail holds another receipt for this decision",
        decision: c.decision,
        proposal: c.proposal,
        claims: c,
      };
  }
  return { ok: true, decision: c.decision, proposal: c.proposal, claims: c };
}

export function runReceiptsVerify(receipt: string | undefined, opts: ReceiptOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const stateDir = await stateDirOf(opts, io);
    const jwks = keysOf(opts, stateDir);
    let args: Record<string, unknown> | undefined;
    if (opts.arguments !== undefined) {
      try {
        args = JSON.parse(opts.arguments) as Record<string, unknown>;
      } catch {
        throw new CliError("--arguments: not JSON");
      }
      if (typeof args !== "object" || args === null || Array.isArray(args)) throw new CliError("--arguments: a JSON object");
    }
    const entries = stateDir ? readAudit(stateDir).filter((e) => e.event === "approved" && e.decision !== undefined) : undefined;
    const approvals = entries && new Map(entries.map((e) => [e.decision!, e]));
    let receipts: string[];
    if (receipt !== undefined) {
      const text = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(receipt.trim()) ? receipt : readText(receipt, "receipt");
      receipts = [text.trim()];
    } else {
      if (!entries) throw new CliError("which receipt? Without a state directory, give one (a JWS, a file, or - for stdin)");
      receipts = entries.filter((e) => e.receipt !== undefined).map((e) => e.receipt!);
    }
    const verdicts = await Promise.all(receipts.map((r) => check(r, jwks, approvals, args)));
    const failed = verdicts.filter((v) => !v.ok);
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ ok: failed.length === 0, checked: verdicts.length, receipts: verdicts })}\n`);
      return failed.length ? 1 : 0;
    }
    for (const v of verdicts) {
      const who = v.claims
        ? ` ${sanitize(v.claims.tool)} by ${v.claims.approvers.map(sanitize).join(", ")} for ${sanitize(v.claims.proposer)}`
        : "";
      io.stdout.write(
        v.ok
          ? `ok      ${sanitize(v.decision ?? "")} proposal ${sanitize(v.proposal ?? "")}:${who}, arguments ${v.claims!.args.slice(0, 16)}…, policy ${v.claims!.policy.slice(0, 16)}…${v.claims!.passkey ? ", passkey" : ""}\n`
          : `FAILED  ${sanitize(v.decision ?? "?")}${v.proposal ? ` proposal ${sanitize(v.proposal)}` : ""}: ${sanitize(v.why ?? "")}\n`,
      );
    }
    io.stdout.write(
      `${verdicts.length - failed.length} of ${verdicts.length} receipt(s) verified${approvals ? " against the audit trail" : " (signature only: no audit trail)"}\n`,
    );
    return failed.length ? 1 : 0;
  });
}

export function runReceiptsRotate(opts: ReceiptOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const stateDir = await stateDirOf(opts, io);
    if (!stateDir) throw new CliError("which state directory? -c space.yaml or --state-dir DIR");
    const kid = await rotateReceiptKey(stateDir);
    io.stdout.write(
      `new receipt key ${kid}; earlier keys stay in the JWKS. A running gateway signs with it after its next reload (mewgate reload)\n`,
    );
    return 0;
  });
}
