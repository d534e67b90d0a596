/**
 * The gateway's public surface: what `cli/`, `participants/` and `bench/` may use. Anything
 * not named here is the gateway's own, free to change without touching them; `.ci/shape.mjs`
 * fails a deep import from outside `gateway/`. Tests may reach inside.
 */
export { ConfigError, DEFAULT_LIMITS, formatIssue, loadSpaceConfig, parseSpaceConfig } from "./config/config.js";
export type { AgentConfig, ConfigIssue, McpServerConfig, OAuthConfig, ParticipantConfig, SpaceConfig } from "./config/config.js";
export { addToolRule } from "./config/rule-edit.js";
export { Gateway } from "./edge/server.js";
export type { McpFaceHost, McpFaceSpace } from "./edge/mcp-face.js";
export { TokenBook, readTokenMeta, tokenEnvName, tokenFile, writeTokenMeta } from "./identity/tokens.js";
export type { TokenMeta } from "./identity/tokens.js";
export { bearer, bearerChallenge, resourceUrls } from "./operator/http.js";
export { createLogger } from "./operator/log.js";
export { Authority } from "./policy/authority.js";
export type { Explanation } from "./policy/authority.js";
export { checkPolicy, formatFinding } from "./policy/check.js";
export { GrantBook } from "./policy/grants.js";
export { inspectTool, stripHidden } from "./tools/inspect.js";
export { pastCalls, personIn, replayedCalls } from "./policy/learn/history.js";
export { Replayer, dryRunView } from "./policy/learn/replay.js";
export type { KnownTool } from "./policy/learn/replay.js";
export { learn, suggest } from "./policy/learn/suggest.js";
export type { Suggestion, Withheld } from "./policy/learn/suggest.js";
export { CompiledPolicy } from "./policy/rules.js";
export { limitOptions } from "./policy/scope.js";
export type { AlwaysLimit } from "./policy/scope.js";
export { Registry } from "./tools/registry.js";
export { Tracing } from "./ports/tracing.js";
export type { CallTrace, FaceCallInfo, OutboundCallInfo } from "./ports/tracing.js";
export type { AuditEntry } from "./audit/entry.js";
export { verifyReceipt } from "./proposals/receipt-check.js";
export type { ReceiptCheck, ReceiptExpect } from "./proposals/receipt-check.js";
export { argumentsDigest, readJwks, rotateReceiptKey } from "./proposals/receipts.js";
export type { PublicJwk, ReceiptClaims } from "./proposals/receipts.js";
export { TASK_TTL_META_KEY } from "./proposals/unheard.js";
export { connectInProcess } from "./space/inprocess.js";
export { isHistoryRecord, readAudit } from "./space/ledger.js";
export type { ReloadReport } from "./space/reload.js";
export type { Space } from "./space/space.js";
export { openStore } from "./store/index.js";
export { verifyHistory } from "./store/verify.js";
export { schemaProblem } from "./wire/arguments-schema.js";
export {
  CloseCodes,
  EDITED_KEY,
  GATEWAY_ID,
  INTENT_MAX,
  INTENT_META_KEY,
  PROTOCOL,
  RESPOND_KEY,
  RejectPayloadSchema,
  RpcErrors,
  WithdrawPayloadSchema,
  DEFAULT_MAX_DEPTH,
  nestsWithin,
  parseMcpRequest,
  parseMcpResponse,
} from "./wire/envelope.js";
export type { Capability, Envelope } from "./wire/envelope.js";
export { replaceHidden } from "./wire/text.js";
export { TURN_META_KEY } from "./wire/turn.js";
export type { TurnMark } from "./wire/turn.js";
export { clip, isRecord } from "./wire/values.js";
