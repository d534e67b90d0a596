/**
 * A participant as a space sees it once it has joined: its identity, configuration,
 * compiled capabilities, and the peer its bytes go to. Kept apart from space.ts so the
 * modules that act on members (mcp.ts, decisions.ts, endpoint.ts) need not import the space.
 */
import type { Logger } from "pino";
import type { Capability, Matcher } from "./capabilities.js";
import type { ParticipantConfig } from "./config.js";

/** A connected participant, seen from the space: a place to put bytes. */
export interface Peer {
  /** Queues one serialized envelope. A peer that cannot keep up drops itself. */
  send(bytes: Buffer): void;
  close(code: number, reason: string): void;
}

export type Visibility = "all" | "addressed";

export class Member {
  /** Everything the member may send: configured, compiled from `allow`, and granted (grants that stand). */
  capabilities: Capability[] = [];
  allows: Matcher = () => false;

  constructor(
    readonly id: string,
    readonly config: ParticipantConfig,
    readonly peer: Peer,
    readonly visibility: Visibility,
    readonly echo: boolean,
    readonly log: Logger,
    /** Order of joining in this space. */
    readonly joinSeq: number,
  ) {}
}

