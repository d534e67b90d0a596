/**
 * The seam between a space and the modules that handle its MCP traffic.
 *
 * space.ts keeps members, routing, visibility and presence; the MCP side lives beside it:
 * requests/requests.ts (every mcp/request first), calls/router.ts (routing, responses, the tool
 * catalogue), requests/endpoint.ts (the gateway's own endpoint) and proposals/ (what happens to a proposal).
 * Those modules never see the member map, the presence batch or a socket: they act on a space
 * only through `SpaceHost`, which space/compose.ts builds from delivery and the ledger; and on
 * each other through the interface of the one below (calls/routing.ts `CallRouter`,
 * requests/desk.ts `ProposalDesk`). This file names none of their types, so every arrow
 * between them points down a floor.
 */
import type { Logger } from "pino";
import type { Authority, Verdict } from "../policy/authority.js";
import type { Capability } from "../policy/capabilities.js";
import type { GrantCondition } from "../policy/scope.js";
import type { SpaceConfig } from "../config/config.js";
import type { PolicyFinding } from "../policy/check.js";
import type { Envelope, ErrorCode, InboundEnvelope } from "../wire/envelope.js";
import type { SpaceMetrics } from "./metrics.js";
import type { Plan } from "../store/plan.js";
import type { Member } from "./member.js";
import type { Tracing } from "./tracing.js";

export interface SpaceHost {
  readonly id: string;
  readonly config: SpaceConfig;
  readonly log: Logger;
  /** The policy decision point: every call, on every path, is decided here. */
  readonly authority: Authority;
  /** Figures for /metrics. */
  readonly metrics: SpaceMetrics;
  /** Spans of call chains, when the space exports traces (tracing.ts). */
  readonly tracing: Tracing;
  /** Findings made after the load, such as a tool rule that matches none of its owner's registered tools: kept and told to the operator. */
  noteFindings(found: PolicyFinding[]): void;
  /** The decision point for participant `caller`, connected or not, with its capabilities as they stand (`confirming`: the approver's bar). */
  verdictOf(caller: string, owner: string, method: string, params: Record<string, unknown>, confirming: boolean): Verdict;
  /** The connected member with this id, if any. */
  member(id: string): Member | undefined;
  /** Whether someone watches as this participant (the web console): it can answer what is asked of it. */
  watching(id: string): boolean;
  /**
   * Routes an envelope by visibility, serialized once (see `Delivery.deliver`, space/delivery.ts). `sender` does
   * not get it back unless it asked for echo; `toEveryone` reaches `addressed` members too.
   */
  deliver(env: Envelope, sender?: Member, toEveryone?: boolean): void;
  /** To participant `id` alone (its connection and consoles), never by visibility nor into a welcome's history. */
  deliverOnly(env: Envelope, id: string): void;
  /** Sends one envelope to one member, whatever its visibility. */
  sendTo(member: Member, env: Envelope): void;
  /** `sendTo` for an envelope the caller serialised itself (a large answer put together from parts made before). */
  sendBytes(member: Member, bytes: Buffer): void;
  /** Answers `member` with a `system/error`. */
  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void;
  /** The `capability_violation` error, worded the same wherever a capability check fails. */
  capabilityViolation(member: Member, inbound: InboundEnvelope): void;
  /** Grants held now, each with whether it stands. */
  grantsView(): Array<Record<string, unknown>>;
  /** Writes the plans as one durable transaction, then applies them (ledger.ts). Rejects, having changed nothing, if the write fails. */
  record(...plans: Plan[]): Promise<void>;
  /** Applies a plan now and writes it behind: for bookkeeping no decision waits on (a call's outcome). Resolves once written or failed; never rejects. */
  note(plan: Plan): Promise<void>;
  /**
   * Writes a plan behind, coalesced with others, made when its batch goes (off the call's path): the record
   * of a call that went straight through (ledger.ts `later`: on disk within `gateway.audit_flush_ms` and a batch's write).
   */
  later(make: () => Plan): void;
  /** Tells `member` that its change could not be recorded (the disk is full, say), and logs why. */
  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void;
}

/** What the MCP router (calls/router.ts) uses of the space, the catalogue it keeps included (its findings, written behind). */
export type RouterHost = Pick<
  SpaceHost,
  | "authority"
  | "config"
  | "deliver"
  | "deliverOnly"
  | "fail"
  | "id"
  | "member"
  | "metrics"
  | "note"
  | "noteFindings"
  | "sendTo"
  | "tracing"
  | "watching"
>;

/** What decisions.ts needs of grants (agents/lending.ts): an "always" approval makes one, in the approval's transaction. */
export interface GrantDesk {
  /** Why `granter` may not make one more grant (its quota or the space's), if it may not. */
  quota(granter: string): string | undefined;
  /**
   * A grant as a plan for `record`. `pins`: the digests of the tools it names, as the approver
   * saw them (authority.ts). `condition`: a scoped "always" (policy/scope.ts), which holds only
   * for calls whose arguments meet it.
   */
  plan(
    from: string,
    recipient: string,
    capabilities: Capability[],
    reason: string | undefined,
    env?: Envelope,
    pins?: Record<string, string>,
    condition?: GrantCondition,
  ): Plan;
}

/**
 * Why something asked was refused: the error code and words of the `system/error` the asker
 * gets (a handler returns it, and the pipeline sends it once), or of an approved proposal's outcome.
 */
export interface Refusal {
  code: ErrorCode;
  message: string;
  extra?: Record<string, unknown> | undefined;
}

/** Why a request was not routed. */
export type NotRouted = Refusal;

/**
 * What a handler of a frame returns: the refusal its sender is sent (the pipeline sends it,
 * correlated to the frame, once), or nothing; a promise when the frame changes durable state.
 */
// biome-ignore lint/suspicious/noConfusingVoidType: a handler that never refuses returns what it did, a Promise<void> or nothing.
export type Answer = Refusal | undefined | void | Promise<Refusal | undefined | void>;

/** The refusal of a call to a switched-off participant (agents/switches.ts), worded the same on every path. */
export function disabledRefusal(target: string): NotRouted {
  return {
    code: "participant_disabled",
    message: `"${clip(target)}" is switched off in this space; ask someone who may switch it on (space/enable)`,
  };
}

/** The refusal of something asked of a participant the space does not have, worded the same by every handler. */
export function noParticipantRefusal(id: unknown): Refusal {
  return { code: "unknown_recipient", message: `no participant "${clip(String(id))}" in the space` };
}

/** Keeps client-supplied strings in messages short. */
export function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 61)}...` : s;
}
