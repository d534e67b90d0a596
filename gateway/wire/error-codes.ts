/**
 * The error codes of the wire: the stable codes of `system/error` payloads, and the JSON-RPC
 * codes of the errors the gateway itself answers calls with. Both are part of the protocol
 * (docs/protocol.md); clients and tests match on them. (The WebSocket close codes are in
 * `close-codes.ts`.) `envelope.ts` re-exports them with the envelope.
 */

/** JSON-RPC error codes of the errors the gateway itself answers calls with. */
export const RpcErrors = {
  timeout: -32001,
  targetLeft: -32002,
  failed: -32003,
  cancelled: -32004,
  methodNotFound: -32601,
} as const;

/** Stable codes of `system/error` payloads. Tests and clients match on these. */
export const ErrorCodes = {
  invalidJson: "invalid_json",
  invalidEnvelope: "invalid_envelope",
  invalidPayload: "invalid_payload",
  payloadTooLarge: "payload_too_large",
  tooDeep: "too_deep",
  fromMismatch: "from_mismatch",
  reservedKind: "reserved_kind",
  capabilityViolation: "capability_violation",
  unknownRecipient: "unknown_recipient",
  rateLimited: "rate_limited",
  grantExceedsHeld: "grant_exceeds_held",
  unknownGrant: "unknown_grant",
  revokeNotAllowed: "revoke_not_allowed",
  grantExceedsPolicy: "grant_exceeds_policy",
  quotaExceeded: "quota_exceeded",
  duplicateId: "duplicate_id",
  lookalikeId: "lookalike_id",
  alreadyJoined: "already_joined",
  // tools, policy and calls
  unknownTool: "unknown_tool",
  proposalRequired: "proposal_required",
  denied: "denied",
  toolFlagged: "tool_flagged",
  /** A guard of the space (space.yaml `guards:`) found what it denies in the call's arguments (`findings`, masked). */
  guardDenied: "guard_denied",
  /** A cap of the space (space.yaml `caps:`) is reached: too many calls, or too much cost, this minute. */
  capExceeded: "cap_exceeded",
  targetOffline: "target_offline",
  cycleDetected: "cycle_detected",
  depthExceeded: "depth_exceeded",
  circuitOpen: "circuit_open",
  tooManyPending: "too_many_pending",
  forgedResponse: "forged_response",
  noPendingCall: "no_pending_call",
  notCaller: "not_caller",
  participantDisabled: "participant_disabled",
  lookalikeTool: "lookalike_tool",
  hiddenCharacters: "hidden_characters",
  // proposals
  unknownProposal: "unknown_proposal",
  proposalNotPending: "proposal_not_pending",
  selfApproval: "self_approval",
  notAnApprover: "not_an_approver",
  /** The sender already approved a proposal that needs more approvers (proposals/approvals.ts). */
  alreadyApproved: "already_approved",
  /** A later approver sent arguments other than those the first approver approved. */
  approvalMismatch: "approval_mismatch",
  /** A MEW fulfilment of a proposal that still needs other approvals first. */
  approvalsNeeded: "approvals_needed",
  approverLacksCapability: "approver_lacks_capability",
  /** A reviewer decided outside its bound (review.may_approve, once, a single approval, never a rejection). */
  reviewerBound: "reviewer_bound",
  /** A guard or a cap holds the call for a person: an agent or service may not approve it. */
  guardHeld: "guard_held",
  /** The approval must be confirmed with the approver's passkey (proposals/passkey-bar.ts), and was not, or not for this call. */
  passkeyRequired: "passkey_required",
  notProposer: "not_proposer",
  fulfilmentMismatch: "fulfilment_mismatch",
  toolChanged: "tool_changed",
  /** The space's rules changed (a reload) while an approval waited to be written: nothing was approved; approve again. */
  policyChanged: "policy_changed",
  storeFailed: "store_failed",
  internal: "internal_error",
} as const;
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];
