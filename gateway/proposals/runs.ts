/**
 * Whether a proposal's call may run with the arguments that will run (book.ts `whatRuns`),
 * asked at every approval (approval.ts): edited arguments must fit the tool's input schema
 * (wire/arguments-schema.ts, the one checker), and the proposer's own tool rules, asked again
 * with what runs (policy/authority.ts `approval`), must not deny them, so a rule with a `when:`
 * that denies them now (an edit, a reload) stops the call. A refusal approves nothing: the
 * proposal stays as it was.
 */
import type { Verdict } from "../policy/authority.js";
import type { Refusal } from "../ports/host.js";
import type { Registry } from "../tools/registry.js";
import { firstProblem } from "../wire/arguments-schema.js";
import { ErrorCodes } from "../wire/envelope.js";
import { runningArguments, type Proposal } from "./book.js";
import { sameArguments } from "./approvals.js";

/**
 * Why `p`'s call to `owner` may not run with `args` (`edited`: they are an approver's edits),
 * given `verdict`, the proposer's own on that call with them, if it may not.
 */
export function cannotRun(
  registry: Registry,
  p: Proposal,
  owner: string,
  args: Record<string, unknown>,
  edited: boolean,
  verdict: Verdict,
): Refusal | undefined {
  if (p.method !== "tools/call" || p.tool === undefined) return undefined;
  const stays = `nothing was approved; the proposal stays ${p.state}`;
  if (edited) {
    const problem = firstProblem(registry.get(owner, p.tool)?.inputSchema, args);
    if (problem)
      return {
        code: ErrorCodes.invalidPayload,
        message: `edited arguments do not fit the input schema of ${owner}/${p.tool}: ${problem.message}; ${stays}`,
        extra: { field: problem.field },
      };
  }
  // Asked as confirming: a changed definition is checked on its own (approval.ts), not here.
  if (verdict.decision === "denied") {
    return {
      code: verdict.code,
      message: `the space's policy for "${p.proposer}", who proposed it, denies this call with the arguments that would run (${verdict.reason?.why ?? verdict.message}); ${stays}`,
      extra: { ...verdict.extra, proposer: p.proposer },
    };
  }
  return undefined;
}

/**
 * What an approval that sent `sent` (or nothing) does to what runs: approving without arguments
 * approves `running`; sending exactly those confirms them (`confirmed`); only a difference is an
 * edit (`edited`), which the record then says.
 */
export function editOf(
  p: Proposal,
  sent: Record<string, unknown> | undefined,
): { running: Record<string, unknown>; edited: Record<string, unknown> | undefined; confirmed: boolean } {
  const running = runningArguments(p);
  const edited = sent !== undefined && !sameArguments(sent, running) ? sent : undefined;
  return { running, edited, confirmed: sent !== undefined && edited === undefined };
}
