/**
 * The limits part of space.yaml: `gateway.limits` (connections, frames, rates, sessions),
 * `calls` (governance of routed requests) and `quotas` (what one participant, and the
 * space, may hold). Kept apart from config.ts, which assembles the whole schema.
 */
import * as z from "zod";
import { expected, int, MAX_TIMER_MS, numeric, section } from "./schema.js";

export const DEFAULT_LIMITS = Object.freeze({
  max_payload_bytes: 1_048_576,
  max_depth: 64,
  max_buffered_bytes: 8_388_608,
  rate_per_second: 200,
  rate_burst: 400,
  flood_strikes: 50,
  flood_window_ms: 5_000,
  heartbeat_ms: 30_000,
  join_timeout_ms: 5_000,
  history: 50,
  max_connections: 1_000,
  operator_reserve: 16,
  max_per_address: 256,
  max_unauthenticated: 128,
  mcp_sessions: 256,
  mcp_idle_ms: 30 * 60_000,
});

export const LimitsSchema = section({
  max_payload_bytes: int(1024, 64 * 1024 * 1024).default(DEFAULT_LIMITS.max_payload_bytes),
  /**
   * How deeply a frame may nest arrays and objects (the envelope itself is 1). Real tool
   * schemas and arguments stay far below; the bound keeps every recursive walk of a frame
   * (serializing, matching, storing) well inside the stack.
   */
  max_depth: int(8, 1000).default(DEFAULT_LIMITS.max_depth),
  max_buffered_bytes: int(64 * 1024).default(DEFAULT_LIMITS.max_buffered_bytes),
  rate_per_second: numeric(z.number({ error: expected("a number > 0") }).positive()).default(DEFAULT_LIMITS.rate_per_second),
  rate_burst: int(1).default(DEFAULT_LIMITS.rate_burst),
  flood_strikes: int(1).default(DEFAULT_LIMITS.flood_strikes),
  flood_window_ms: int(1, MAX_TIMER_MS).default(DEFAULT_LIMITS.flood_window_ms),
  heartbeat_ms: numeric(
    z
      .int({ error: expected(`0 (disabled) or an integer from 100 to ${MAX_TIMER_MS}`) })
      .max(MAX_TIMER_MS)
      .refine((v) => v === 0 || v >= 100),
  ).default(DEFAULT_LIMITS.heartbeat_ms),
  join_timeout_ms: int(1, MAX_TIMER_MS).default(DEFAULT_LIMITS.join_timeout_ms),
  history: int(0, 1000).default(DEFAULT_LIMITS.history),
  /** WebSocket connections, joined or not; past it only an operator gets in (below). */
  max_connections: int(1, 1_000_000).default(DEFAULT_LIMITS.max_connections),
  /** Extra connections kept for humans who authenticate at the door, so a flood cannot lock them out. */
  operator_reserve: int(0, 10_000).default(DEFAULT_LIMITS.operator_reserve),
  /** Sockets from one remote address, HTTP and WebSocket, counted from the TCP connect (edge/sockets.ts). */
  max_per_address: int(1, 1_000_000).default(DEFAULT_LIMITS.max_per_address),
  /** Connections that have not authenticated yet. */
  max_unauthenticated: int(1, 1_000_000).default(DEFAULT_LIMITS.max_unauthenticated),
  /** Open MCP sessions on /mcp, and how long one may sit idle. */
  mcp_sessions: int(1, 1_000_000).default(DEFAULT_LIMITS.mcp_sessions),
  mcp_idle_ms: int(1000, MAX_TIMER_MS).default(DEFAULT_LIMITS.mcp_idle_ms),
});
export type Limits = z.output<typeof LimitsSchema>;

export const DEFAULT_CALLS = Object.freeze({
  timeout_ms: 30_000,
  max_timeout_ms: 300_000,
  max_call_depth: 5,
  max_pending: 64,
  breaker_failures: 5,
  breaker_cooldown_ms: 30_000,
  takeover_idle_ms: 600_000,
});

export const CallsSchema = section({
  timeout_ms: int(1, MAX_TIMER_MS).default(DEFAULT_CALLS.timeout_ms),
  max_timeout_ms: int(1, MAX_TIMER_MS).default(DEFAULT_CALLS.max_timeout_ms),
  max_call_depth: int(1, 64).default(DEFAULT_CALLS.max_call_depth),
  max_pending: int(1, 100_000).default(DEFAULT_CALLS.max_pending),
  breaker_failures: int(1).default(DEFAULT_CALLS.breaker_failures),
  breaker_cooldown_ms: int(1, MAX_TIMER_MS).default(DEFAULT_CALLS.breaker_cooldown_ms),
  /** An agent holding a person's conversation (a takeover) with no chat either way for this long hands it all back. */
  takeover_idle_ms: int(1, MAX_TIMER_MS).default(DEFAULT_CALLS.takeover_idle_ms),
});

/**
 * What one participant, and the whole space, may hold at once. Each is checked before the
 * state changes; whoever is over gets `quota_exceeded` naming the quota, and nobody else
 * notices. The space-wide figures stop many participants together from filling the disk.
 */
export const DEFAULT_QUOTAS = Object.freeze({
  /** Params of one call or proposal, serialized. */
  argument_bytes: 256 * 1024,
  /** Pending proposals of one participant, and their bytes. */
  pending_proposals: 64,
  pending_bytes: 4 * 1024 * 1024,
  /** Pending proposals in the space, and their bytes. */
  space_pending_proposals: 1024,
  space_pending_bytes: 64 * 1024 * 1024,
  /** Grants one participant has made, and grants in the space. */
  grants: 64,
  space_grants: 1024,
  /** Audit history kept: whichever limit is reached first drops the oldest. */
  audit_max_bytes: 256 * 1024 * 1024,
  audit_max_age_days: 90,
});

export const QuotasSchema = section({
  argument_bytes: int(1024, 64 * 1024 * 1024).default(DEFAULT_QUOTAS.argument_bytes),
  pending_proposals: int(1, 100_000).default(DEFAULT_QUOTAS.pending_proposals),
  pending_bytes: int(1024).default(DEFAULT_QUOTAS.pending_bytes),
  space_pending_proposals: int(1, 1_000_000).default(DEFAULT_QUOTAS.space_pending_proposals),
  space_pending_bytes: int(1024).default(DEFAULT_QUOTAS.space_pending_bytes),
  grants: int(0, 100_000).default(DEFAULT_QUOTAS.grants),
  space_grants: int(0, 1_000_000).default(DEFAULT_QUOTAS.space_grants),
  audit_max_bytes: int(1024 * 1024).default(DEFAULT_QUOTAS.audit_max_bytes),
  audit_max_age_days: int(1, 36_500).default(DEFAULT_QUOTAS.audit_max_age_days),
});

/**
 * How joins and leaves are told (space/delivery.ts). MEW tells every member of every join
 * and leave; in a space of thousands that is quadratic, and nobody reads it. While at most
 * `each_up_to` members are connected, every join and leave goes to everyone as MEW sends it;
 * past that, each member hears one `system/presence` summary (`event: "summary"`: who
 * joined and left, the first 100 of each, and how many are online) at most every
 * `summary_ms`, and asks `system:gateway` for `participants/list` when it wants the roster.
 */
export const DEFAULT_PRESENCE = Object.freeze({
  each_up_to: 200,
  summary_ms: 1000,
});

export const PresenceSchema = section({
  each_up_to: int(0, 10_000_000).default(DEFAULT_PRESENCE.each_up_to),
  summary_ms: int(10, 60_000).default(DEFAULT_PRESENCE.summary_ms),
});
