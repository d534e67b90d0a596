/**
 * MEW v0.4 streams: bulk or binary data beside the envelope bus.
 *
 *   stream/request            → the gateway allocates an id and answers stream/open
 *   #<stream_id>#<data>       raw frames (text or binary), no envelope, from an authorized writer
 *   stream/close              the owner ends it (or the gateway, when the owner leaves)
 *   stream/grant-write, stream/revoke-write, stream/transfer-ownership   the owner's rights
 *                             (a transfer takes the old owner's write right with it)
 *
 * The request's payload is kept whole and shown to late joiners in the welcome's
 * `active_streams`, with the owner and the authorized writers. Frames go to everyone in
 * the space, their writer included (MEW's participants confirm a write by hearing it), or,
 * for a stream requested with `target: [ids]`, only to those participants (spec §3.10.3).
 * A frame counts against its writer's rate and size limits like any other (server.ts), and
 * a reader that cannot keep up is dropped the same way.
 */
import type { Logger } from "pino";
import { type Envelope, type ErrorCode, type InboundEnvelope, stamp, systemEnvelope } from "../wire/envelope.js";
import { clip } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import { isRecord } from "../wire/values.js";

interface Stream {
  id: string;
  owner: string;
  writers: Set<string>;
  created: string;
  /** The only participants the frames go to; undefined: everyone. */
  target: string[] | undefined;
  /** The ids a `stream/close` may name it by in its `correlation_id`: the stream/open's and the stream/request's. */
  envelopes: string[];
  /** The request's payload, whole. */
  request: Record<string, unknown>;
}

export interface StreamHost {
  readonly config: { participants: Record<string, unknown> };
  readonly log: Logger;
  deliver(env: Envelope, sender?: Member, toEveryone?: boolean): void;
  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void;
  /** Every connected member, for frames. */
  members(): Iterable<Member>;
}

/** Most streams open in a space at once. */
const MAX_STREAMS = 256;

export class Streams {
  private readonly streams = new Map<string, Stream>();
  private counter = 0;

  constructor(private readonly host: StreamHost) {}

  /** `stream/request`: allocate, remember, announce. */
  request(member: Member, inbound: InboundEnvelope): void {
    if (this.streams.size >= MAX_STREAMS)
      return this.host.fail(member, "quota_exceeded", `the space has ${MAX_STREAMS} streams open, its limit`, inbound.id, {
        quota: "streams",
      });
    const payload = isRecord(inbound.payload) ? inbound.payload : {};
    const named = Array.isArray(payload["target"]) ? payload["target"].filter((t): t is string => typeof t === "string") : [];
    // Spec §3.10.1: an empty or absent target is a broadcast; a target nobody is refused.
    const target = named.length > 0 ? named : undefined;
    const missing = target?.find((t) => !(t in this.host.config.participants));
    if (missing !== undefined)
      return this.host.fail(member, "unknown_recipient", `no participant "${clip(missing)}" in the space to target`, inbound.id, {
        error: "target_not_found",
      });
    const req = stamp(inbound, member.id);
    const stream: Stream = {
      id: `stream-${++this.counter}`,
      owner: member.id,
      writers: new Set([member.id]),
      created: new Date().toISOString(),
      target,
      envelopes: [req.id],
      request: payload,
    };
    // Announced first, registered after: a request that cannot be delivered must not stay
    // in the list every welcome carries.
    this.host.deliver(req, member);
    this.streams.set(stream.id, stream);
    const encoding = payload["encoding"] === "binary" ? "binary" : "text";
    // The request's own fields first, the gateway's after: nobody names owner or writers but the gateway.
    const open = systemEnvelope("stream/open", { ...this.describe(stream), encoding }, { to: [member.id], correlation_id: [req.id] });
    stream.envelopes.push(open.id);
    this.host.deliver(open, undefined, true);
    this.host.log.info({ stream: stream.id, owner: member.id }, "stream opened");
  }

  /** `stream/close`: the owner ends its stream. */
  close(member: Member, inbound: InboundEnvelope): void {
    const s = this.owned(member, inbound);
    if (!s) return;
    this.streams.delete(s.id);
    const closed = stamp(inbound, member.id);
    // Closed by correlation alone: readers still learn which stream ended.
    if (isRecord(closed.payload) && closed.payload["stream_id"] === undefined) closed.payload = { ...closed.payload, stream_id: s.id };
    this.host.deliver(closed, member, true);
  }

  /** `stream/grant-write`, `stream/revoke-write`, `stream/transfer-ownership`. */
  rights(member: Member, inbound: InboundEnvelope): void {
    const s = this.owned(member, inbound);
    if (!s) return;
    const payload = inbound.payload as Record<string, unknown>;
    const who = String(inbound.kind === "stream/transfer-ownership" ? payload["new_owner"] : payload["participant_id"]);
    if (!(who in this.host.config.participants))
      return this.host.fail(member, "unknown_recipient", `no participant "${clip(who)}" in the space`, inbound.id, {
        error: "participant_not_found",
      });
    let event: string;
    if (inbound.kind === "stream/grant-write") {
      s.writers.add(who);
      event = "stream/write-granted";
    } else if (inbound.kind === "stream/revoke-write") {
      if (who === s.owner)
        return this.host.fail(member, "invalid_payload", "the owner keeps its write access", inbound.id, { error: "invalid_operation" });
      s.writers.delete(who);
      event = "stream/write-revoked";
    } else {
      // The old owner hands over its rights, write included: it writes again only if granted.
      s.writers.delete(s.owner);
      s.owner = who;
      s.writers.add(who);
      event = "stream/ownership-transferred";
    }
    const transfer = event === "stream/ownership-transferred" ? { previous_owner: member.id, new_owner: who } : {};
    this.host.deliver(stamp(inbound, member.id), member, true);
    this.host.deliver(
      systemEnvelope(
        event,
        { stream_id: s.id, participant_id: who, owner: s.owner, authorized_writers: [...s.writers], ...transfer },
        { correlation_id: [inbound.id ?? ""] },
      ),
      undefined,
      true,
    );
  }

  /**
   * One raw frame `#<id>#<data>` from `member`: forwarded as it came to the stream's
   * readers if `member` may write to it; otherwise the writer is told why.
   */
  frame(member: Member, data: Buffer, binary: boolean): void {
    const end = data.indexOf(0x23, 1); // the second "#"
    const id = end > 1 ? data.subarray(1, end).toString("utf8") : "";
    const s = this.streams.get(id);
    if (!s)
      return this.host.fail(member, "invalid_envelope", `no open stream "${clip(id)}" (frames are #<stream_id>#<data>)`, undefined, {
        error: "stream_not_found",
      });
    if (!s.writers.has(member.id)) {
      return this.host.fail(member, "capability_violation", `you may not write to stream "${clip(id)}"; its owner grants that`, undefined, {
        error: "unauthorized_stream_write",
        stream_id: s.id,
      });
    }
    for (const m of this.host.members()) {
      if (s.target && !s.target.includes(m.id)) continue;
      m.peer.sendFrame?.(data, binary);
    }
  }

  /** A participant left: its streams close, and it writes to no other stream. */
  left(id: string): void {
    for (const s of [...this.streams.values()]) {
      if (s.owner === id) {
        this.streams.delete(s.id);
        this.host.deliver(systemEnvelope("stream/close", { stream_id: s.id, reason: "owner_left" }, {}), undefined, true);
      } else s.writers.delete(id);
    }
  }

  /** For the welcome: every open stream, its request's fields, owner and writers. */
  active(): Array<Record<string, unknown>> {
    return [...this.streams.values()].map((s) => this.describe(s));
  }

  private describe(s: Stream): Record<string, unknown> {
    return {
      ...s.request,
      stream_id: s.id,
      owner: s.owner,
      authorized_writers: [...s.writers],
      created: s.created,
      ...(s.target ? { target: s.target } : {}),
    };
  }

  /**
   * The stream an owner's envelope names — by `payload.stream_id`, or, as spec §3.10.4's own
   * example does, by a `correlation_id` naming its stream/open (or stream/request) — or
   * undefined after telling the sender why not.
   */
  private owned(member: Member, inbound: InboundEnvelope): Stream | undefined {
    const id = isRecord(inbound.payload) ? inbound.payload["stream_id"] : undefined;
    const byId = typeof id === "string" ? this.streams.get(id) : undefined;
    const refs = id === undefined ? (inbound.correlation_id ?? []) : [];
    const s = byId ?? [...this.streams.values()].find((st) => refs.some((r) => st.envelopes.includes(r)));
    if (!s) {
      const named =
        id !== undefined
          ? `no open stream "${clip(String(id))}"`
          : refs.length > 0
            ? `no open stream was opened by ${refs.map((r) => `"${clip(r)}"`).join(", ")}`
            : "name the stream: payload.stream_id, or a correlation_id naming its stream/open";
      this.host.fail(member, "invalid_payload", named, inbound.id, { error: "stream_not_found" });
      return undefined;
    }
    if (s.owner !== member.id) {
      this.host.fail(member, "capability_violation", `only "${s.owner}", its owner, may do that to stream "${s.id}"`, inbound.id, {
        error: "unauthorized",
      });
      return undefined;
    }
    return s;
  }
}
