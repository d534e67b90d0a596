/**
 * How members are described to each other, and the welcome each joiner is sent.
 *
 * A member's description (id, kind, capabilities, description, disabled) is made once per
 * change and kept as JSON on the member, so a wave of joins does not serialize the roster
 * once per joiner; welcome.ts decides what fits the frame.
 */
import { randomBytes } from "node:crypto";
import type { SpaceConfig } from "../config/config.js";
import type { SpaceMetrics } from "../ports/metrics.js";
import type { Member } from "../ports/member.js";
import type { Proposal } from "../proposals/book.js";
import type { Envelope } from "../wire/envelope.js";
import { jsonBytes } from "../wire/paging.js";
import type { Delivery } from "./delivery.js";
import { buildWelcome } from "./welcome.js";

/** Stands for a welcome's participants until they are spliced in (`send`). */
const ROSTER_MARK = `\u0000roster:${randomBytes(12).toString("hex")}`;
const ROSTER_MARK_JSON = JSON.stringify(ROSTER_MARK);

/** What a welcome is made of besides the members: asked of the space's modules when a member joins. */
export interface WelcomeSources {
  readonly config: SpaceConfig;
  isDisabled(id: string): boolean;
  /** The space's tools as `member` sees them, each with the policy that applies to it. */
  tools(member: Member): Array<Record<string, unknown>>;
  /** Pending proposals that `member` may see, oldest first. */
  proposals(member: Member): Proposal[];
  /** Bytes a whole frame to `member` may take. */
  budget(): number;
  activeStreams(): Array<Record<string, unknown>>;
  conversations(): Array<Record<string, unknown>>;
}

export class Roster {
  constructor(
    private readonly delivery: Delivery,
    private readonly metrics: SpaceMetrics,
    private readonly sources: WelcomeSources,
  ) {}

  describe(member: Member): Record<string, unknown> {
    const disabled = this.sources.isDisabled(member.id);
    const cached = member.described;
    // Capabilities are replaced, never mutated, when they change: the reference tells.
    if (cached && cached.capabilities === member.capabilities && cached.disabled === disabled) return cached.value;
    const d: Record<string, unknown> = { id: member.id, kind: member.config.kind, capabilities: member.capabilities };
    if (disabled) d["disabled"] = true;
    if (member.config.description) d["description"] = member.config.description;
    const json = JSON.stringify(d);
    member.described = { value: d, json, bytes: Buffer.byteLength(json) + 1, capabilities: member.capabilities, disabled };
    return d;
  }

  /** A description from `describe` as JSON, and its size, without serializing it again. */
  private describedJson(d: Record<string, unknown>): string {
    const m = typeof d["id"] === "string" ? this.delivery.members.get(d["id"]) : undefined;
    return m?.described?.value === d ? m.described.json : JSON.stringify(d);
  }

  private describedBytes(d: Record<string, unknown>): number {
    const m = typeof d["id"] === "string" ? this.delivery.members.get(d["id"]) : undefined;
    return m?.described?.value === d ? m.described.bytes : jsonBytes(d);
  }

  /**
   * Sends a welcome. Its participants are spliced in from each member's cached JSON rather
   * than serialized again for every joiner (a wave of joins would otherwise serialize the
   * roster once per joiner); the marker is random per process, so no text can forge it.
   */
  send(member: Member): void {
    const env = this.welcome(member);
    const payload = env.payload as Record<string, unknown>;
    const list = payload["participants"] as Record<string, unknown>[];
    payload["participants"] = ROSTER_MARK;
    const text = JSON.stringify(env);
    const at = text.indexOf(ROSTER_MARK_JSON);
    payload["participants"] = list;
    this.metrics.envelopesOut++;
    if (at < 0) return member.peer.send(Buffer.from(JSON.stringify(env)));
    member.peer.send(
      Buffer.from(`${text.slice(0, at)}[${list.map((d) => this.describedJson(d)).join(",")}]${text.slice(at + ROSTER_MARK_JSON.length)}`),
    );
  }

  /**
   * The members a welcome to `member` lists: all the others in a small space; in a large
   * one (past `presence.each_up_to`) the first that many to have joined, with how many there
   * are — the roster is a request away (`participants/list`), and a wave of joins must not
   * describe everyone to each joiner.
   */
  private others(member: Member): { participants: Record<string, unknown>[]; participantsTotal: number } {
    const limit = this.sources.config.presence.each_up_to;
    const members = this.delivery.members;
    const participants: Record<string, unknown>[] = [];
    for (const m of members.values()) {
      if (participants.length >= limit) break;
      if (m !== member) participants.push(this.describe(m));
    }
    return { participants, participantsTotal: members.size - (members.get(member.id) === member ? 1 : 0) };
  }

  private welcome(member: Member): Envelope {
    const { config } = this.sources;
    const history = this.delivery.history;
    const sees = (env: Envelope) => member.visibility === "all" || env.to?.includes(member.id) || env.kind === "system/presence";
    return buildWelcome({
      to: member.id,
      you: { ...this.describe(member), visibility: member.visibility },
      space: {
        id: config.space.id,
        name: config.space.name,
        description: config.space.description,
        // What a frame may be here, so a participant can refuse to send one that would not arrive (an answer too big, too deep).
        limits: { max_payload_bytes: config.gateway.limits.max_payload_bytes, max_depth: config.gateway.limits.max_depth },
      },
      ...this.others(member),
      participantBytes: (d) => this.describedBytes(d),
      tools: this.sources.tools(member),
      proposals: this.sources.proposals(member),
      history: (function* () {
        for (let i = history.length - 1; i >= 0; i--) if (sees(history[i]!.env)) yield history[i]!;
      })(),
      budget: this.sources.budget(),
      activeStreams: this.sources.activeStreams(),
      conversations: this.sources.conversations(),
    });
  }
}
