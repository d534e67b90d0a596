/**
 * An approval checked apart from its commit. `checkApproval` reads the proposal, the space and
 * its policy, asking the decision point once (policy/authority.ts `approval`, over the arguments
 * that will run), and returns either the refusal the approver is sent or the approval to commit:
 * everything the commit (decisions.ts) writes and routes. It changes nothing, so a refused
 * approval leaves the proposal as it was, whichever route it came by (`mcp/approve`, a MEW
 * fulfilment, the operator API, the console, a link: each reaches the one check).
 */
import type { ApprovePayload } from "../wire/envelope.js";
import { ErrorCodes } from "../wire/envelope.js";
import { clip, type GrantDesk, type Refusal, type SpaceHost } from "../ports/host.js";
import type { Calls } from "../calls/calls.js";
import type { Registry } from "../tools/registry.js";
import type { Member } from "../ports/member.js";
import { conditionFor, type GrantCondition } from "../policy/scope.js";
import { awaiting, OPEN_OWNER, type Proposal } from "./book.js";
import { completesQuorum, quorumRefusal } from "./approvals.js";
import { cannotRun, editOf } from "./runs.js";
import type { Deciders } from "./deciders.js";
import type { PasskeyBar } from "./passkey-bar.js";
import { argumentsDigest } from "./receipts.js";

/** A MEW fulfilment: who sent it, under which ids, and the target it names. */
export interface Fulfiller {
  id: string;
  envelopeId: string;
  rpcId: string | number;
  target: string;
}

/** What an approval asks: `mcp/approve`'s payload, or a fulfilment's (once, with the arguments it carried). */
export type Ask = Pick<ApprovePayload, "scope" | "reason" | "arguments" | "limit"> & { fulfiller?: Fulfiller | undefined };

/** An approval that may be committed, with everything its commit writes and routes. */
export interface Approval {
  readonly p: Proposal;
  readonly approver: Member;
  /** Whom the call goes to: the proposal's owner, or the target a fulfilment named for an open one. */
  readonly owner: string;
  readonly scope: "once" | "always";
  readonly reason: string | undefined;
  /** What an "always" is held to (policy/scope.ts), when limited. */
  readonly condition: GrantCondition | undefined;
  /** The arguments that will run: this approval's edits, else book.ts `whatRuns`. */
  readonly args: Record<string, unknown> | undefined;
  /** Their digest (receipts.ts `argumentsDigest`, of `{}` when there are none): what the passkey and the receipt bind, the same for both. */
  readonly digest: string;
  /** This approval's own edits, when it sent arguments that differ from those that run. */
  readonly edited: Record<string, unknown> | undefined;
  /** It sent exactly the arguments that run: a later approver confirming an edit it saw (approvals.ts). */
  readonly confirmed: boolean;
  /**
   * How it counts: the one approval the call needs, or one of several (approvals.ts): `last`
   * completes them if the earlier ones still count, `one-of` leaves the proposal waiting.
   */
  readonly counts: "alone" | "last" | "one-of";
  /** The approver confirms it with a passkey over this very call before it is written (passkey-bar.ts). */
  readonly passkey: boolean;
  readonly fulfiller: Fulfiller | undefined;
  /** The rules it was checked under (policy/authority.ts `rulesRevision`): changed before it is written, it is checked again. */
  readonly rules: number;
}

/** What checking an approval reads. */
export interface ApprovalDesk {
  space: Pick<SpaceHost, "authority" | "member">;
  calls: Pick<Calls, "refuse">;
  registry: Registry;
  deciders: Pick<Deciders, "whyNotApprove">;
  grants: Pick<GrantDesk, "quota">;
  passkeys?: Pick<PasskeyBar, "needs" | "where"> | undefined;
}

/** `member` approving `p` as `ask` says: the refusal it is sent, or the approval to commit. */
export function checkApproval(desk: ApprovalDesk, member: Member, p: Proposal, ask: Ask): Refusal | Approval {
  const { fulfiller, scope } = ask;
  if (p.owner === OPEN_OWNER && !fulfiller) {
    const how = `proposal "${clip(p.id)}" names no participant to serve it: fulfil it with an mcp/request to the one that should (to: [id], correlation_id: ["${clip(p.id)}"]), or reject it`;
    return { code: ErrorCodes.invalidEnvelope, message: how };
  }
  // An open proposal's target is the one its fulfilment names; it is recorded with the approval.
  const owner = fulfiller?.target ?? p.owner;
  const q = owner === p.owner ? p : { ...p, owner };
  const open = p.owner === OPEN_OWNER;
  // Approving without arguments approves what runs (book.ts `whatRuns`, an interrupted one's edits included).
  const { running, edited, confirmed } = editOf(p, ask.arguments);
  const tool = p.method === "tools/call";
  const args = tool ? (edited ?? running) : (edited ?? (p.params["arguments"] as Record<string, unknown> | undefined));
  const params = args === undefined ? p.params : { ...p.params, arguments: args };
  const authority = desk.space.authority;
  // An open proposal's proposer is asked for its target now, with its capabilities: it must be here.
  const proposer = open ? desk.space.member(p.proposer) : undefined;
  if (open && !proposer)
    return {
      code: ErrorCodes.targetOffline,
      message: `"${p.proposer}", who proposed it, is not connected, so its policy for "${clip(owner)}" cannot be checked; the proposal stays ${p.state}`,
    };
  // The decision point, asked once: the proposer's rules, the approver's own standing, the caps.
  const verdict = authority.approval({ id: p.proposer, allows: proposer?.allows }, member, owner, p.method, params);
  const own = verdict.proposer ?? { decision: "direct" };
  if (open && own.decision === "denied")
    return { code: own.code, message: `${own.message} (policy of "${p.proposer}", who proposed it)`, extra: own.extra };
  const limited = ask.limit !== undefined && ask.limit !== "tool";
  const act = { approving: true, scope, edited: edited !== undefined, limited, args: running };
  const why = desk.deciders.whyNotApprove(member, q, { verdict, edited: edited !== undefined }, act);
  if (why) return why;
  const always = scope === "always" ? alwaysRefusal(desk, member, p) : undefined;
  if (always) return always;
  // Edited arguments are a new call: they must fit the tool, and the proposer's rules must let them run.
  const cannot = cannotRun(desk.registry, p, owner, args ?? {}, edited !== undefined, own);
  if (cannot) return cannot;
  // A scoped "always" holds only for the approved arguments, or a path under theirs (policy/scope.ts).
  let condition: GrantCondition | undefined;
  if (limited) {
    if (scope !== "always") return { code: ErrorCodes.invalidPayload, message: 'limit applies to scope "always" only' };
    const made = conditionFor(ask.limit!, args ?? {});
    if (made.error !== undefined) return { code: ErrorCodes.invalidPayload, message: `cannot limit the grant: ${made.error}` };
    condition = made.condition;
  }
  const standing = stillStands(desk, p, owner, fulfiller?.id);
  if (standing) return standing;
  const several = (p.required ?? 1) > 1 && awaiting(p.state);
  const quorum = several ? quorumRefusal(member.id, p, { scope, edited, confirmed }) : undefined;
  if (quorum) return quorum;
  return {
    p,
    approver: member,
    owner,
    scope,
    reason: ask.reason,
    condition,
    args,
    digest: argumentsDigest(args ?? {}),
    edited,
    confirmed,
    counts: !several ? "alone" : completesQuorum(p) ? "last" : "one-of",
    passkey: desk.passkeys?.needs(q) ?? false,
    fulfiller,
    rules: authority.rulesRevision,
  };
}

/**
 * Whether what the approval rests on still stands, asked when it is checked and again after
 * each wait before it is written (a passkey, a receipt's signature): the target is here, the
 * call's chain may go on, and the tool is the one the card showed.
 */
export function stillStands(
  desk: Pick<ApprovalDesk, "space" | "calls">,
  p: Proposal,
  owner: string,
  caller: string | undefined,
): Refusal | undefined {
  const stays = `the proposal stays ${p.state}`;
  if (desk.space.member(owner) === undefined) return { code: ErrorCodes.targetOffline, message: `"${owner}" is not connected; ${stays}` };
  const refusal = desk.calls.refuse(caller ?? p.proposer, owner, p.chain);
  if (refusal) return { code: refusal.code, message: `${refusal.message}; ${stays}` };
  // The tool changed again after it was proposed: the card showed another definition.
  const pinned = p.tool === undefined || p.digest === undefined ? undefined : desk.space.authority.pin(p.owner, p.tool);
  if (pinned && pinned.digest !== p.digest)
    return {
      code: ErrorCodes.toolChanged,
      message: `the definition of ${p.owner}/${p.tool} changed after this was proposed, so approving it would run what nobody was shown; ${stays} (reject it, and it can be proposed again)`,
      extra: { previous: p.digest, digest: pinned.digest },
    };
  return undefined;
}

/** Why an "always" may not be given for `p`, if not: a tool named exactly, no passkey asked, the approver's grants under quota. */
function alwaysRefusal(desk: ApprovalDesk, member: Member, p: Proposal): Refusal | undefined {
  if (p.tool === undefined || /[*!]/.test(p.tool))
    return { code: ErrorCodes.invalidPayload, message: 'scope "always" applies to a tools/call of a tool whose name has no * or !' };
  // A passkey confirms one call (passkey-bar.ts): a grant would let later calls run with none.
  if (desk.passkeys?.needs(p))
    return {
      code: ErrorCodes.invalidPayload,
      message: `approving this call needs your passkey, for this call alone: approve it once (scope "once") at ${desk.passkeys.where(p)}`,
      extra: { reason: "passkey_once", url: desk.passkeys.where(p) },
    };
  const over = desk.grants.quota(member.id);
  if (over)
    return { code: ErrorCodes.quotaExceeded, message: `${over}; approve once instead, or revoke a grant`, extra: { quota: "grants" } };
  return undefined;
}
