/**
 * The seam between a space and the modules that handle its MCP traffic.
 *
 * space.ts keeps members, routing, visibility and presence; the MCP side lives beside it:
 * mcp.ts (requests, responses, the gateway's own endpoint, the tool catalogue) and
 * decisions.ts (what happens to a proposal). Those modules never see the member map,
 * the presence batch or a socket: they act on a space only through `SpaceHost`, which
 * `Space` implements. Imports in this direction are type-only, so nothing is circular at
 * runtime: space.ts imports the modules, the modules import only types from space.ts.
 */
import type { Logger } from "pino";
import type { Authority } from "./authority.js";
import type { Capability } from "./capabilities.js";
import type { SpaceConfig } from "./config.js";
import type { Envelope, ErrorCode, InboundEnvelope } from "./envelope.js";
import type { Proposal } from "./proposals.js";
import type { Member } from "./space.js";

export interface SpaceHost {
  readonly id: string;
  readonly config: SpaceConfig;
  readonly log: Logger;
  /** The policy decision point: every call, on every path, is decided here. */
  readonly authority: Authority;
  /** The connected member with this id, if any. */
  member(id: string): Member | undefined;
  /**
   * Routes an envelope by visibility, serialized once (see `Space.deliver`). `sender` does
   * not get it back unless it asked for echo; `toEveryone` reaches `addressed` members too.
   */
  deliver(env: Envelope, sender?: Member, toEveryone?: boolean): void;
  /** Sends one envelope to one member, whatever its visibility. */
  sendTo(member: Member, env: Envelope): void;
  /** Answers `member` with a `system/error`. */
  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void;
  /** The `capability_violation` error, worded the same wherever a capability check fails. */
  capabilityViolation(member: Member, inbound: InboundEnvelope): void;
  /** Pending proposals, oldest first. */
  pendingProposals(): Proposal[];
  /** Why `granter` may not make one more grant (its quota or the space's), if it may not. */
  grantQuota(granter: string): string | undefined;
  /** Records a persisted grant and refreshes the recipient (an "always" approval makes one). */
  addGrant(from: string, recipient: string, capabilities: Capability[], reason: string | undefined): void;
}

/** Keeps client-supplied strings in messages short. */
export function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 61)}...` : s;
}
