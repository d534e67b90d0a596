/**
 * Who is in a space and who sees what: the members, the operators watching, presence and
 * recent history, and the one way bytes leave the space.
 *
 * This is the delivery port the space gives its handlers (`SpaceHost.deliver`, `sendTo`,
 * `fail`, `capabilityViolation`): they hand it an envelope and never see a socket or the
 * member map. Every envelope is serialized once and the same bytes go to each recipient.
 */
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import type { SpaceMetrics } from "../ports/metrics.js";
import type { Member, Peer, Visibility } from "../ports/member.js";
import { type Envelope, type ErrorCode, ErrorCodes, errorEnvelope, type InboundEnvelope, systemEnvelope } from "../wire/envelope.js";
import { WELCOME_HISTORY_BYTES } from "./welcome.js";

/** How long presence may wait to be sent together with more presence. */
const PRESENCE_BATCH_MS = 10;
/** Ids a presence summary names, of those who joined and of those who left; past that it counts them. */
export const SUMMARY_IDS = 100;

/** An operator API event stream (operator/api.ts): it sees, it does not act. */
export interface Watcher {
  id: string;
  visibility: Visibility;
  peer: Peer;
}

export class Delivery {
  readonly members = new Map<string, Member>();
  readonly watchers = new Set<Watcher>();
  /** Recent envelopes, oldest first, for welcomes. */
  readonly history: { env: Envelope; size: number }[] = [];
  private presence: { env: Envelope; subject: Member | undefined; joinedBy: number }[] = [];
  /** Joins and leaves waiting for the next summary (a large space: `presence.each_up_to`). */
  private summary: { joined: string[]; left: string[]; joinedMore: number; leftMore: number } | undefined;
  /** Joins so far; each member remembers its number. */
  joins = 0;

  constructor(
    private readonly config: SpaceConfig,
    private readonly metrics: SpaceMetrics,
    private readonly log: Logger,
  ) {}

  /** Whether someone watches as this participant (the web console): it can answer what is asked of it. */
  watching(id: string): boolean {
    for (const w of this.watchers) if (w.id === id) return true;
    return false;
  }

  /**
   * Serializes once and hands the same bytes to every recipient: `all` members see
   * everything, `addressed` members what names them, everyone sees presence (and what
   * the caller sends `toEveryone`). The sender gets its own envelope back only with echo
   * on. `joinedBy` is for presence only: members who joined later learnt it from their
   * welcome.
   */
  deliver(env: Envelope, sender?: Member, toEveryone = false, joinedBy = Infinity): void {
    if (this.presence.length) this.flushPresence();
    const json = JSON.stringify(env);
    const bytes = Buffer.from(json);
    this.remember(env, bytes.length);
    const to = env.to;
    const everyone = toEveryone || env.kind === "system/presence";
    for (const m of this.members.values()) {
      if ((m === sender && !m.echo) || m.joinSeq > joinedBy) continue;
      if (everyone || m.visibility === "all" || to?.includes(m.id)) {
        m.peer.send(bytes, json);
        this.metrics.envelopesOut++;
      }
    }
    // Operators watching through the API see what their participant may see.
    for (const w of this.watchers) {
      if (everyone || w.visibility === "all" || to?.includes(w.id)) w.peer.send(bytes, json);
    }
  }

  /**
   * Presence waits up to PRESENCE_BATCH_MS, so a wave of joins reaches each member as one
   * write rather than one per join (each socket's frames of a tick leave together): announcing
   * every join to every member is quadratic, and syscalls were nine tenths of it. Anything
   * else delivered meanwhile flushes it first, so nobody sees a participant act before it
   * is announced.
   */
  announce(env: Envelope, subject?: Member): void {
    // Whoever joins after this moment learns the news from its welcome instead.
    if (this.presence.push({ env, subject, joinedBy: this.joins }) === 1) setTimeout(() => this.flushPresence(), PRESENCE_BATCH_MS).unref();
  }

  /**
   * A member joined or left. While at most `presence.each_up_to` members are connected it is
   * announced to everyone, each event on its own as MEW sends it (`announce`); past that it
   * goes into the next summary, which everyone hears once per `presence.summary_ms`: a join
   * is no longer a frame to each of thousands of members. A summary waiting when the space is
   * small again is sent first, so events are heard in order.
   */
  presenceOf(event: "join" | "leave", id: string, env: Envelope, subject?: Member): void {
    const { each_up_to, summary_ms } = this.config.presence;
    if (this.members.size <= each_up_to) {
      if (this.summary) this.flushSummary();
      return this.announce(env, subject);
    }
    if (!this.summary) {
      this.summary = { joined: [], left: [], joinedMore: 0, leftMore: 0 };
      setTimeout(() => this.flushSummary(), summary_ms).unref();
    }
    const s = this.summary;
    if (event === "join") {
      if (s.joined.length < SUMMARY_IDS) s.joined.push(id);
      else s.joinedMore++;
    } else if (s.left.length < SUMMARY_IDS) s.left.push(id);
    else s.leftMore++;
  }

  private flushSummary(): void {
    const s = this.summary;
    if (!s) return;
    this.summary = undefined;
    const payload: Record<string, unknown> = { event: "summary", joined: s.joined, left: s.left, online: this.members.size };
    if (s.joinedMore) payload["joined_more"] = s.joinedMore;
    if (s.leftMore) payload["left_more"] = s.leftMore;
    this.deliver(systemEnvelope("system/presence", payload), undefined, true);
  }

  private flushPresence(): void {
    const batch = this.presence;
    this.presence = [];
    for (const { env, subject, joinedBy } of batch) this.deliver(env, subject, false, joinedBy);
  }

  /**
   * To participant `id` alone, wherever it is (its connection and its consoles), whatever
   * anyone's visibility, and kept out of the history a welcome replays: for what only that
   * person may read (a sign-in link, calls/router.ts `isPrivate`).
   */
  deliverOnly(env: Envelope, id: string): void {
    const bytes = Buffer.from(JSON.stringify(env));
    const m = this.members.get(id);
    if (m) {
      m.peer.send(bytes);
      this.metrics.envelopesOut++;
    }
    for (const w of this.watchers) if (w.id === id) w.peer.send(bytes);
  }

  sendTo(member: Member, env: Envelope): void {
    const json = JSON.stringify(env);
    this.metrics.envelopesOut++;
    member.peer.send(Buffer.from(json), json);
  }

  sendBytes(member: Member, bytes: Buffer): void {
    this.metrics.envelopesOut++;
    member.peer.send(bytes);
  }

  fail(member: Member, code: ErrorCode, message: string, correlationId?: string, extra?: Record<string, unknown>): void {
    if (this.log.isLevelEnabled("debug")) member.log.debug({ code, correlationId }, message);
    this.sendTo(member, errorEnvelope(member.id, code, message, { correlationId, ...extra }));
  }

  capabilityViolation(member: Member, inbound: InboundEnvelope): void {
    this.fail(
      member,
      ErrorCodes.capabilityViolation,
      `your capabilities do not allow sending this "${inbound.kind}" envelope`,
      inbound.id,
      {
        attempted_kind: inbound.kind,
        your_capabilities: member.capabilities,
      },
    );
  }

  private remember(env: Envelope, size: number): void {
    const max = this.config.gateway.limits.history;
    // Big envelopes would not fit a welcome anyway; keeping them would only hold memory.
    if (max === 0 || size > WELCOME_HISTORY_BYTES / 4) return;
    this.history.push({ env, size });
    if (this.history.length > max) this.history.shift();
  }

  /**
   * The recent envelopes `viewer` may see, as a welcome would give them (its visibility),
   * oldest first, at most `limit`; `match` narrows them (the last chat of a proposer, say).
   */
  recentFor(viewer: string, limit: number, match: (env: Envelope) => boolean = () => true): Envelope[] {
    const all = this.config.participants[viewer]?.visibility === "all";
    const out: Envelope[] = [];
    for (let i = this.history.length - 1; i >= 0 && out.length < limit; i--) {
      const env = this.history[i]!.env;
      if ((all || env.to?.includes(viewer) || env.kind === "system/presence") && match(env)) out.push(env);
    }
    return out.reverse();
  }
}
