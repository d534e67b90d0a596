/**
 * A reviewer's word where every decision passes (deciders.ts): whatever route it takes — the
 * wire, the operator API, the console, a link, a MEW fulfilment — an approval by a reviewer
 * of the proposer (policy/learn/review.ts says who is one) stands only within its bound, and
 * it never rejects. Checked with the arguments that will run, against the gateway's own risk
 * over the history as it is now (policy/learn/recorded.ts), never a card's.
 */
import type { SpaceConfig } from "../config/config.js";
import type { Groups } from "../policy/groups.js";
import type { Recorded } from "../policy/learn/recorded.js";
import { mayApprove, reviewerBound } from "../policy/learn/review.js";
import type { Registry } from "../tools/registry.js";
import { type ErrorCode, ErrorCodes } from "../wire/envelope.js";
import { DEFINITION_CHANGED_KEY, heldFindings, type Proposal } from "./book.js";

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
  /** The arguments that will run. */
  args?: Record<string, unknown> | undefined;
}

/** The bound `id` decides `p` under, if it reviews `p`'s proposer as a reviewer (policy/learn/review.ts). */
export type Bound = NonNullable<ReturnType<typeof reviewerBound>>;

/** The bound `id` decides `p` under, if it reviews `p`'s proposer; else undefined. */
export function boundOf(desk: ReviewerDesk, id: string, p: Proposal): Bound | undefined {
  return reviewerBound(desk.config, desk.groups, p.proposer, id);
}

/** Whether `id` reviews `p`'s proposer as a reviewer (and so decides under its bound). */
export function reviews(desk: ReviewerDesk, id: string, p: Proposal): boolean {
  return boundOf(desk, id, p) !== undefined;
}

/** Why reviewer `id` may not make this decision of `p`, if it is a reviewer and may not (`bound`: its bound, when already known). */
export function reviewerRefusal(
  desk: ReviewerDesk,
  id: string,
  p: Proposal,
  act: Act,
  bound = boundOf(desk, id, p),
): { code: ErrorCode; message: string } | undefined {
  if (!bound) return undefined;
  const refuse = (why: string) => ({ code: ErrorCodes.reviewerBound, message: `you review ${p.proposer}'s proposals: ${why}` });
  if (!act.approving) return refuse("a reviewer does not reject; its doubts go to people (POST proposals/<id>/review with escalate)");
  if (act.scope === "always" || act.limited) return refuse('a reviewer approves once, never "always"');
  if (act.edited) return refuse("a reviewer approves what was proposed, never edited arguments");
  if (p.method !== "tools/call" || p.tool === undefined) return refuse("a reviewer approves tool calls only");
  const required = p.required ?? 1;
  const entry = desk.registry.get(p.owner, p.tool);
  const payload = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
  const risk = desk.recorded.riskOf(
    {
      id: p.id,
      proposer: p.proposer,
      owner: p.owner,
      tool: p.tool,
      args: act.args ?? {},
      annotations: entry?.annotations,
      definitionChanged: payload?.[DEFINITION_CHANGED_KEY] !== undefined,
      flagged: (entry?.findings?.length ?? 0) > 0,
      guarded: heldFindings(payload),
    },
    true,
  );
  const ok = mayApprove(bound.may, risk.level, required);
  return ok.ok ? undefined : refuse(`${ok.why} (${risk.summary})`);
}
