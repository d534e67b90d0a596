/**
 * The space seam: how a connection reaches a space, wherever the space runs.
 *
 * server.ts owns sockets and their limits; it hands an authenticated connection's frames
 * to a `MemberPort` and gets bytes back through the `Peer` it gave. It never sees whether
 * the space behind the door runs in this process (`localDoor`) or on another node of a
 * cluster (cluster/edge.ts) — as a socket.io adapter hides where a room's members are.
 */
import type { Logger } from "pino";
import type { Member, Peer } from "../ports/member.js";
import { looksLikeJwt } from "../identity/jwt.js";
import { CloseCodes } from "../wire/envelope.js";
import { authenticateBearer } from "./bearer.js";
import type { Space } from "./space.js";

/** A joined participant, as its connection reaches it. */
export interface MemberPort {
  readonly id: string;
  readonly log: Logger;
  /** One text frame, in the order the participant sent it. */
  handle(data: Buffer): void;
  /** A raw stream frame (`#<id>#<data>`). */
  streamFrame(data: Buffer, binary: boolean): void;
  /** The connection ended. */
  leave(reason: string): void;
}

export type Admission = { ok: true; port: MemberPort } | { ok: false; code: number; reason: string };

export interface AdmitRequest {
  token: string;
  claimed?: string | undefined;
  echo?: boolean | undefined;
  /** This gateway's resource URLs as the connection reached it: where a JWT access token must be for (space/bearer.ts). */
  audiences?: string[] | undefined;
}

export interface SpaceDoor {
  readonly id: string;
  /** Authenticates by the token and joins; `peer` gets what the participant is sent. */
  admit(who: AdmitRequest, peer: Peer): Admission | Promise<Admission>;
}

/** The door of a space in this process. */
export function localDoor(space: Space): SpaceDoor {
  return {
    id: space.id,
    admit(who, peer) {
      const auth = space.authenticate(who.token, who.claimed);
      if (auth.ok) return { ok: true, port: new LocalPort(space, space.join(auth.id, peer, { echo: who.echo, digest: auth.digest })) };
      // Perhaps an access token from the space's identity provider: checked asynchronously.
      if (!space.identity || !looksLikeJwt(who.token)) return auth;
      return authenticateBearer(space, who.token, "join", who.audiences ?? [], who.claimed).then((r): Admission => {
        if (!r.ok) return { ok: false, code: r.code, reason: r.reason };
        if (space.closed) return { ok: false, code: CloseCodes.goingAway, reason: "the space has shut down" };
        return { ok: true, port: new LocalPort(space, space.join(r.id, peer, { echo: who.echo })) };
      });
    },
  };
}

/**
 * A member of a space in this process. A class, not an object of closures: a space of
 * thousands of idle members keeps one of these each, and methods cost it nothing.
 */
class LocalPort implements MemberPort {
  constructor(
    private readonly space: Space,
    private readonly member: Member,
  ) {}

  get id(): string {
    return this.member.id;
  }

  get log(): Logger {
    return this.member.log;
  }

  handle(data: Buffer): void {
    this.space.pipeline.handle(this.member, data.toString("utf8"));
  }

  streamFrame(data: Buffer, binary: boolean): void {
    this.space.streamFrame(this.member, data, binary);
  }

  leave(reason: string): void {
    this.space.leave(this.member, reason);
  }
}
