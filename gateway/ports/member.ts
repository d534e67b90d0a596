/**
 * A participant as a space sees it once it has joined: its identity, configuration,
 * compiled capabilities, and the peer its bytes go to. Kept apart from space.ts so the
 * modules that act on members (calls/router.ts, proposals/, requests/endpoint.ts) need not import the space.
 */
import type { Logger } from "pino";
import type { Capability, Matcher } from "../policy/capabilities.js";
import type { ParticipantConfig } from "../config/config.js";
import type { ParsedFrame } from "../wire/envelope.js";

/** A connected participant, seen from the space: a place to put bytes. */
export interface Peer {
  /**
   * Queues one serialized envelope. A peer that cannot keep up drops itself. `text` is the same
   * envelope as a string, when the sender has it: an in-process peer takes it rather than decode the bytes.
   */
  send(bytes: Buffer, text?: string): void;
  /** A raw stream frame (`#<id>#<data>`), as text or binary; peers without streams leave it out. */
  sendFrame?(data: Buffer, binary: boolean): void;
  close(code: number, reason: string): void;
  /** Where the connection comes from (the remote address), for the operator's list of sessions. */
  readonly address?: string | undefined;
}

export type Visibility = "all" | "addressed";

export class Member {
  /** Everything the member may send: configured, compiled from `allow`, and granted (grants that stand). */
  capabilities: Capability[] = [];
  allows: Matcher = () => false;
  /**
   * How others see this member (welcome, presence), with its size as JSON: made once per
   * change of capabilities or switch, not once per joiner (space.ts `describe`).
   */
  described: { value: Record<string, unknown>; json: string; bytes: number; capabilities: Capability[]; disabled: boolean } | undefined;
  /** Frames waiting for this member's changes in flight to be written (space.ts). */
  backlog: ParsedFrame[] | undefined;
  /** This member's changes on their way to disk. */
  inFlight = 0;
  /** Groups its identity provider put it in (identity/claims.ts), without the `@`; none for a static token. */
  groups: readonly string[] = [];
  /** The digest (base64) of the token it joined with, when it joined with one: a reload or a revoke checks it again. */
  tokenDigest: string | undefined;
  /** When it joined (ms since the epoch). */
  readonly joinedAt = Date.now();
  private ownLog: Logger | undefined;

  constructor(
    readonly id: string,
    /** Replaced when a reload changes the participant (space/reload.ts). */
    public config: ParticipantConfig,
    readonly peer: Peer,
    readonly visibility: Visibility,
    readonly echo: boolean,
    /** The space's logger; the member's own is its child, made when first used. */
    private readonly spaceLog: Logger,
    /** Order of joining in this space. */
    readonly joinSeq: number,
    /** How the member acts when it has no socket (`api`: the operator API acting for it). */
    readonly via?: "api",
  ) {}

  /**
   * A child logger with the member's id. Made on first use: most members of a large space
   * never log after joining, and a pino child (its bindings kept as a string) is a few
   * hundred bytes a member.
   */
  get log(): Logger {
    this.ownLog ??= this.spaceLog.child(this.via ? { participant: this.id, via: this.via } : { participant: this.id });
    return this.ownLog;
  }
}
