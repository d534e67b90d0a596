/**
 * What the operator API shows of a space's state, and how its errors map to HTTP.
 */
import { DEFINITION_CHANGED_KEY, INTERRUPTED_TEXT, type Proposal } from "../proposals/book.js";
import type { Space } from "../space/space.js";
import { approversNow, approvalsView } from "../proposals/approvals.js";
import { limitOptions } from "../policy/scope.js";
import { compileCapabilities } from "../policy/capabilities.js";

/**
 * A proposal awaiting a decision as an approver needs to see it: who, what, why it waits,
 * everything it would do. An interrupted one (approved before the gateway stopped) says so,
 * who approved it, and the arguments that approval carried, which approving it again reuses.
 */
export function proposalView(space: Space, viewer: string, p: Proposal): Record<string, unknown> {
  const entry = p.tool === undefined ? undefined : space.toolEntry(p.owner, p.tool);
  return {
    id: p.id,
    proposer: p.proposer,
    owner: p.owner,
    method: p.method,
    // Held open (it named no target): `*`, whoever fulfils it picks.
    ...(p.tool !== undefined ? { tool: `${p.owner || "*"}/${p.tool}`, why: space.authority.why(p.proposer, p.owner, p.tool) } : {}),
    arguments: p.params["arguments"] ?? {},
    ...(p.method !== "tools/call" ? { params: p.params } : {}),
    state: p.state,
    ...(p.state === "interrupted"
      ? { interrupted: { reason: p.reason ?? "gateway_restarted", message: INTERRUPTED_TEXT, approvedBy: p.decidedBy, ...(p.editedArguments !== undefined ? { arguments: p.editedArguments } : {}) } }
      : {}),
    ...definitionChanged(p),
    createdAt: p.createdAt,
    expiresAt: new Date(p.expiresAt).toISOString(),
    ...(entry ? { inputSchema: entry["inputSchema"], description: entry["description"] } : {}),
    // What the gateway found wrong with the tool's texts (policy/inspect.ts): the card shows it.
    ...(entry?.["findings"] ? { findings: entry["findings"] } : {}),
    // Whether the viewer may decide: not its own, and it could make the call itself.
    mine: p.proposer === viewer,
    // What an "always" may be limited to (policy/scope.ts), for the approve confirmation.
    ...(p.tool !== undefined && (p.required ?? 1) <= 1 ? { always_limits: limitOptions((p.editedArguments ?? p.params["arguments"]) as Record<string, unknown> | undefined) } : {}),
    // A two-person rule: "1 of 2", who approved, and whether it can still be met (proposals/approvals.ts).
    ...approvalsOf(space, p),
  };
}

/** A proposal made while its tool's definition was unconfirmed carries what changed (ports/pins.ts). */
function definitionChanged(p: Proposal): Record<string, unknown> {
  const payload = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
  const mark = payload?.[DEFINITION_CHANGED_KEY];
  return mark && typeof mark === "object" ? { definitionChanged: mark } : {};
}

/** The HTTP status for a `system/error` code an API action earned. */
export function statusOf(code: string): number {
  switch (code) {
    case "unknown_proposal":
    case "unknown_grant":
    case "unknown_recipient":
    case "unknown_tool":
      return 404;
    case "proposal_not_pending":
    case "duplicate_id":
    case "target_offline":
    case "tool_changed":
    case "already_approved":
    case "approval_mismatch":
    case "approvals_needed":
      return 409;
    case "quota_exceeded":
    case "rate_limited":
      return 429;
    case "store_failed":
      return 503;
    case "invalid_payload":
    case "invalid_envelope":
    case "reserved_kind":
    case "payload_too_large":
      return 400;
    default:
      // self_approval, not_an_approver, approver_lacks_capability, capability_violation,
      // revoke_not_allowed, not_proposer, denied, grant_exceeds_*: not yours to do.
      return 403;
  }
}

function approvalsOf(space: Space, p: Proposal): Record<string, unknown> {
  // Could `id` approve: may it send mcp/approve at all, and make the call itself?
  const mayApprove = (id: string) => p.tool !== undefined && compileCapabilities(space.authority.configured(id))({ kind: "mcp/approve", payload: {} }) && space.authority.tool(id, p.owner, p.tool, true) === "direct";
  const view = approvalsView(space.config, space.authority.groups, p, mayApprove);
  // Who may decide now: the proposer's approvers, widened by escalation stages reached.
  const approvers = approversNow(space.config, p);
  return { ...(view ? { approvals: view } : {}), ...(approvers ? { approvers } : {}) };
}
