/**
 * Acting and watching as a participant without joining: how the operator API (and MEW's
 * HTTP injection) sends a frame as a participant, and how a web console follows what a
 * participant may see. An actor is a throwaway member run through the same pipeline as
 * any frame; a watcher is a peer the space's delivery also writes to (delivery.ts).
 */
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import { Member, type Peer } from "../ports/member.js";
import { type Envelope, GATEWAY_ID, parseFrame } from "../wire/envelope.js";
import type { Delivery } from "./delivery.js";
import type { Pipeline } from "./pipeline.js";

export interface SeatsHost {
  readonly id: string;
  readonly config: SpaceConfig;
  readonly log: Logger;
  readonly delivery: Delivery;
  readonly pipeline: Pipeline;
  /** Groups each participant's identity provider put it in (bearer.ts). */
  readonly runtimeGroups: ReadonlyMap<string, readonly string[]>;
  recompile(member: Member): void;
  watching(id: string): boolean;
  /** Nobody can answer for `id` any more: what waits on it fails now (calls/router.ts). */
  unreachable(id: string): void;
}

export class Seats {
  constructor(private readonly host: SeatsHost) {}

  /**
   * Runs one frame through the whole pipeline as participant `id` without joining: what
   * the participant's live connection, if any, sees of it is what it would see of any
   * other participant's frame, and the connection is left alone. Resolves with the errors
   * the frame earned (none: it took effect).
   */
  async act(
    id: string,
    frame: Record<string, unknown>,
    opts: { tellLive?: boolean; replies?: Envelope[] } = {},
  ): Promise<Array<Record<string, unknown>>> {
    const h = this.host;
    const config = h.config.participants[id];
    if (!config) throw new Error(`act: "${id}" is not a participant of space "${h.id}"`);
    const errors: Array<Record<string, unknown>> = [];
    const peer: Peer = {
      send: (bytes) => {
        const env = JSON.parse(bytes.toString("utf8")) as Envelope;
        const toActor = env.to?.length === 1 && env.to[0] === id && env.from === GATEWAY_ID;
        if (env.kind === "system/error") errors.push(env.payload as Record<string, unknown>);
        else if (toActor) opts.replies?.push(env);
        else return;
        // MEW's injection: the participant's own connection hears the gateway's answer too.
        if (opts.tellLive) h.delivery.members.get(id)?.peer.send(bytes);
      },
      close: () => {},
    };
    const actor = new Member(id, config, peer, config.visibility, false, h.log, h.delivery.joins, "api");
    actor.groups = h.runtimeGroups.get(id) ?? [];
    h.recompile(actor);
    const pending = h.pipeline.run(actor, parseFrame(JSON.stringify(frame), h.config.gateway.limits.max_depth));
    if (pending) await pending;
    return errors;
  }

  /** Participant `id` as the operator API acts for it (groups and capabilities as now), hearing nothing: for asking what it may do. */
  actor(id: string): Member | undefined {
    const h = this.host;
    const config = h.config.participants[id];
    if (!config) return undefined;
    const actor = new Member(id, config, { send: () => {}, close: () => {} }, config.visibility, false, h.log, h.delivery.joins, "api");
    actor.groups = h.runtimeGroups.get(id) ?? [];
    h.recompile(actor);
    return actor;
  }

  /** Streams to `peer` what participant `id` may see, until the returned function is called. */
  watch(id: string, peer: Peer): () => void {
    const h = this.host;
    const config = h.config.participants[id];
    if (!config) throw new Error(`watch: "${id}" is not a participant of space "${h.id}"`);
    const w = { id, visibility: config.visibility, peer };
    h.delivery.watchers.add(w);
    return () => {
      if (!h.delivery.watchers.delete(w)) return;
      // The last console of someone not connected closed: what only they could answer fails now.
      if (!h.delivery.members.has(id) && !h.watching(id)) h.unreachable(id);
    };
  }
}
