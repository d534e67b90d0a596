/**
 * A reviewer's word, read in one place: who reviews a proposer's proposals as a reviewer, and
 * the bound its decisions meet where every decision passes (deciders.ts) — whatever route it
 * takes: the wire, the operator API, the console, a link, a MEW fulfilment.
 *
 * A reviewer of a proposer is named by the proposer's `review.by` (itself, or a group it is
 * in) and is not a person: a person (`kind: human`) it names decides as a person. For the
 * proposals of those it reviews, a reviewer never rejects (its doubts go to people with its
 * note, policy/learn/review.ts), and its approval stands only for a tool call that needs one
 * approval (it never counts toward `approvals: N`), once (never `always`, never with a limit),
 * as proposed (no edits), whose risk as the gateway states it is at most `may_approve`: read
 * with the arguments that will run, over the history as it is now (policy/learn/recorded.ts,
 * risk.ts), never a card's, which may lag it. It need not be named in the proposer's
 * `approvers`, and it lends nothing to those it reviews (agents/lending.ts).
 */
import type { SpaceConfig } from "../config/config.js";
import type { Groups } from "../policy/groups.js";
import type { Recorded } from "../policy/learn/recorded.js";
import type { RiskLevel } from "../policy/learn/risk.js";
import type { Registry } from "../tools/registry.js";
import { type ErrorCode, ErrorCodes } from "../wire/envelope.js";
import type { Proposal } from "./book.js";
import { proposalRisk } from "./risk.js";

export interface ReviewerDesk {
  config: SpaceConfig;
  groups: Groups;
  recorded: Recorded;
  registry: Registry;
}

/** What a decision asks for. */
export interface Act {
  approving: boolean;
  scope?: "once" | "always" | undefined;
  /** The approval edits the arguments, or limits an "always". */
  edited?: boolean | undefined;
  limited?: boolean | undefined;
  /** The arguments that will run; book.ts `runningArguments` when not given. */
  args?: Record<string, unknown> | undefined;
}

/** The highest risk a reviewer approves by itself (space.yaml's `review.may_approve`). */
export type MayApprove = "none" | "low" | "medium";
/** The bound a reviewer decides under. */
export interface Bound {
  may: MayApprove;
}

const RANK: Record<MayApprove | RiskLevel, number> = { none: -1, low: 0, medium: 1, high: 2 };

/** The bound `id` works under for `proposer`'s proposals, if it reviews them as a reviewer; else undefined. */
export function reviewerBound(config: SpaceConfig, groups: Groups, proposer: string, id: string): Bound | undefined {
  const review = config.participants[proposer]?.review;
  if (!review || id === proposer || config.participants[id]?.kind === "human") return undefined;
  const by = review.by;
  const named = by.startsWith("@") ? groups.of(id).includes(by.slice(1)) : by === id;
  return named ? { may: review.may_approve } : undefined;
}

/** Whether `id` reviews `p`'s proposer as a reviewer (and so decides under its bound). */
export function reviews(desk: ReviewerDesk, id: string, p: Proposal): boolean {
  return reviewerBound(desk.config, desk.groups, p.proposer, id) !== undefined;
}

/** Why a reviewer of `p`'s proposer, under `bound`, may not make this decision of `p`, if it may not. */
export function reviewerRefusal(desk: ReviewerDesk, p: Proposal, act: Act, bound: Bound): { code: ErrorCode; message: string } | undefined {
  const refuse = (why: string) => ({ code: ErrorCodes.reviewerBound, message: `you review ${p.proposer}'s proposals: ${why}` });
  if (!act.approving) return refuse("a reviewer does not reject; its doubts go to people (POST proposals/<id>/review with escalate)");
  if (act.scope === "always" || act.limited) return refuse('a reviewer approves once, never "always"');
  if (act.edited) return refuse("a reviewer approves what was proposed, never edited arguments");
  const risk = proposalRisk(p, desk.registry, desk.recorded, { args: act.args, fresh: true });
  if (!risk) return refuse("a reviewer approves tool calls only");
  const required = p.required ?? 1;
  const may = bound.may;
  if (required > 1) return refuse(`it needs ${required} approvals: a reviewer never stands for people in a quorum (${risk.summary})`);
  if (RANK[risk.level] > RANK[may])
    return refuse(
      `the gateway rates it ${risk.level}; this reviewer may approve ${may === "none" ? "nothing by itself" : `up to ${may}`} (${risk.summary})`,
    );
  return undefined;
}
