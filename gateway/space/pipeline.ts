/**
 * The inbound pipeline of a space: one frame of one member, from text to its handler.
 *
 * Every frame goes through the same steps and stops at the first failure:
 *   JSON → envelope schema (wire/envelope.ts) → from → reserved kinds → recipients →
 *   capability (unless the kind's handler checks the sender itself) → the handler of its
 *   kind (kinds.ts), or delivery as it came.
 * A frame that changes durable state is answered once the change is on disk; meanwhile
 * the member's later frames wait in order behind it (see `handle`).
 */
import type { SpaceConfig } from "../config/config.js";
import type { SpaceMetrics } from "../ports/metrics.js";
import { type Answer, clip } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import { ErrorCodes, type ErrorCode, GATEWAY_ID, type InboundEnvelope, parseFrame, type ParsedFrame } from "../wire/envelope.js";
import { deliverAsIs, type Handlers, ROUTES } from "./kinds.js";

/** Frames of one member that may wait behind its changes being written. */
const MAX_BACKLOG = 256;
/** Decisions of one member that may be on their way to disk at once. */
const MAX_IN_FLIGHT = 64;
/** Kinds whose durable changes one member may pipeline (each is acknowledged in order). */
const PIPELINED = new Set(["mcp/proposal", "mcp/approve", "mcp/reject", "mcp/withdraw", "mcp/response"]);

function pipelined(parsed: ParsedFrame, inFlight: number): boolean {
  return inFlight < MAX_IN_FLIGHT && parsed.ok && "envelope" in parsed && PIPELINED.has(parsed.envelope.kind);
}

/** What the pipeline needs of its space. */
export interface PipelinePorts {
  readonly config: SpaceConfig;
  readonly metrics: SpaceMetrics;
  readonly handlers: Handlers;
  /** The member connected now under this id, if any. */
  member(id: string): Member | undefined;
  /** Set once the space has closed: it routes nothing more. */
  closed(): boolean;
  /** Whether `token` (and the id it claims, if any) is `member`'s own: a join sent again after joining. */
  sameIdentity(member: Member, token: string, claimed: string | undefined): boolean;
  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void;
  capabilityViolation(member: Member, inbound: InboundEnvelope): void;
}

export class Pipeline {
  constructor(private readonly space: PipelinePorts) {}

  /**
   * One text frame from `member`.
   *
   * A frame that changes durable state is answered once the change is on disk, while the
   * member goes on sending. Its frames still take effect in the order it sent them:
   * decisions on proposals are pipelined — the store writes and acknowledges them in
   * order — and any other frame waits until the member's writes in flight are done, so
   * that, say, a chat message never overtakes the proposal sent before it. Other members
   * are never held.
   */
  handle(member: Member, text: string): void {
    this.space.metrics.envelopesIn++;
    const parsed = parseFrame(text, this.space.config.gateway.limits.max_depth);
    if (member.backlog || (member.inFlight > 0 && !pipelined(parsed, member.inFlight))) {
      member.backlog ??= [];
      if (member.backlog.length >= MAX_BACKLOG) {
        return this.space.fail(
          member,
          ErrorCodes.rateLimited,
          `${MAX_BACKLOG} of your frames are already waiting for the disk; frame dropped`,
        );
      }
      member.backlog.push(parsed);
      return;
    }
    this.run(member, parsed);
  }

  /**
   * Runs one parsed frame inside the error boundary every frame shares, whether it came
   * straight from the socket, from the member's backlog after a write, or from the operator
   * API: a bug in a handler costs that frame (the member hears `internal_error`), never the
   * process or the space. Resolves when the frame's durable change, if any, is done.
   */
  run(member: Member, parsed: ParsedFrame): Promise<void> | undefined {
    let pending: Promise<void> | void;
    try {
      pending = this.process(member, parsed);
    } catch (err) {
      this.crashed(member, parsed, err);
      return undefined;
    }
    if (!pending) return undefined;
    member.inFlight++;
    return pending
      .catch((err: unknown) => this.crashed(member, parsed, err))
      .finally(() => {
        member.inFlight--;
        // A member that left or was replaced meanwhile gets nothing more done.
        if (this.space.member(member.id) !== member || this.space.closed()) return;
        const queue = member.backlog;
        while (queue?.length && (member.inFlight === 0 || pipelined(queue[0]!, member.inFlight))) this.run(member, queue.shift()!);
        if (queue?.length === 0 && member.backlog === queue) member.backlog = undefined;
      });
  }

  private crashed(member: Member, parsed: ParsedFrame, err: unknown): void {
    const id = parsed.ok && "envelope" in parsed ? parsed.envelope.id : undefined;
    member.log.error(
      {
        err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err),
        kind: parsed.ok && "envelope" in parsed ? parsed.envelope.kind : undefined,
      },
      "a frame's handling failed",
    );
    try {
      this.space.fail(member, ErrorCodes.internal, "the gateway failed to handle this frame; nothing else was affected", id);
    } catch {
      // Telling the member failed too (its socket is gone): the frame is lost, the space goes on.
    }
  }

  /** The whole inbound pipeline for one frame; a promise when the frame changes durable state. Throws only on a bug (`run` catches it). */
  private process(member: Member, parsed: ParsedFrame): Promise<void> | void {
    const space = this.space;
    if (!parsed.ok) return space.fail(member, parsed.code, parsed.message, parsed.id);
    if ("join" in parsed) {
      // MEW clients may send a join even after authenticating by header; harmless when
      // it names the same identity.
      const claimed = parsed.join.participantId ?? parsed.join.participant_id;
      const token = parsed.join.token;
      if (token === undefined ? claimed === undefined || claimed === member.id : space.sameIdentity(member, token, claimed)) return;
      return space.fail(member, ErrorCodes.alreadyJoined, `this connection is already joined as "${member.id}"`);
    }
    const inbound = parsed.envelope;
    if (inbound.from !== undefined && inbound.from !== member.id) {
      return space.fail(
        member,
        ErrorCodes.fromMismatch,
        `from must be "${member.id}" (your authenticated id), not "${clip(inbound.from)}"`,
        inbound.id,
      );
    }
    if (inbound.kind.startsWith("system/")) {
      // Worded as MEW's gateway words it ("system/register is reserved for the gateway"): its clients match on it.
      return space.fail(member, ErrorCodes.reservedKind, `${clip(inbound.kind)} is reserved for the gateway`, inbound.id);
    }
    if (inbound.to) {
      // MEW addresses the gateway as "gateway" too (stream/request and the like).
      const participants = space.config.participants;
      const unknown = inbound.to.filter((to) => to !== GATEWAY_ID && to !== "gateway" && !(to in participants));
      if (unknown.length) {
        return space.fail(
          member,
          ErrorCodes.unknownRecipient,
          `no participant ${unknown.map((u) => `"${clip(u)}"`).join(", ")} in space "${space.config.space.id}"`,
          inbound.id,
        );
      }
    }
    const route = ROUTES.get(inbound.kind);
    if (!route?.checksItself && !member.allows(inbound)) return space.capabilityViolation(member, inbound);
    return this.answer(member, inbound.id, (route?.handle ?? deliverAsIs)(space.handlers, member, inbound));
  }

  /** Sends the refusal a handler returned, correlated to the frame it refused: once, here. */
  private answer(member: Member, sentId: string | undefined, out: Answer): Promise<void> | void {
    if (out instanceof Promise) return out.then((refusal) => this.answer(member, sentId, refusal));
    if (out) this.space.fail(member, out.code, out.message, sentId, out.extra);
  }
}
