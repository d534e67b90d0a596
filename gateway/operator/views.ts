/**
 * What the operator API shows of a space's state, and how its errors map to HTTP.
 */
import { DEFINITION_CHANGED_KEY, INTERRUPTED_TEXT, type Proposal } from "../proposals/book.js";
import type { Space } from "../space/space.js";

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
    ...(p.tool !== undefined ? { tool: `${p.owner}/${p.tool}`, why: space.authority.why(p.proposer, p.owner, p.tool, p.params["arguments"] ?? {}) } : {}),
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
