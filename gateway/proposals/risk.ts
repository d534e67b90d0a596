/**
 * The gateway's risk of what a proposal will run (policy/learn/risk.ts, over the recorded
 * calls: policy/learn/recorded.ts), built one way for every reader that acts on it: the
 * passkey bar (passkey-bar.ts), a reviewer's bound (reviewer-bound.ts) and a decision's span
 * (space/compose.ts). It weighs what the card weighs: the tool's annotations and findings, a
 * definition changed since a person confirmed it, and what a guard held the call for.
 */
import type { Recorded } from "../policy/learn/recorded.js";
import type { Risk } from "../policy/learn/risk.js";
import type { Registry } from "../tools/registry.js";
import { DEFINITION_CHANGED_KEY, heldFindings, type Proposal, runningArguments } from "./book.js";

/**
 * The risk of `p` with `args` (the arguments that will run, by default), or undefined when it
 * is not a tool call (nothing to weigh: its readers treat it as they must; so too a call held
 * open, which names no participant whose tool it weighs). `fresh`: over the history as it is
 * now, never a lagging index.
 */
export function proposalRisk(
  p: Proposal,
  registry: Registry,
  recorded: Pick<Recorded, "riskOf">,
  opts: { args?: Record<string, unknown> | undefined; fresh?: boolean } = {},
): Risk | undefined {
  if (p.method !== "tools/call" || p.tool === undefined) return undefined;
  const entry = registry.get(p.owner, p.tool);
  const payload = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
  return recorded.riskOf(
    {
      id: p.id,
      proposer: p.proposer,
      owner: p.owner,
      tool: p.tool,
      args: opts.args ?? runningArguments(p),
      annotations: entry?.annotations,
      definitionChanged: payload?.[DEFINITION_CHANGED_KEY] !== undefined,
      flagged: (entry?.findings?.length ?? 0) > 0,
      guarded: heldFindings(payload),
    },
    opts.fresh ?? false,
  );
}
