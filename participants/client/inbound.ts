/**
 * What arrives at the participant client: each frame is read once (JSON, then a header
 * check) and dispatched by `kind` — answers and decisions to the calls, requests and
 * cancellations to serving, notifications to their handlers — and what the client knows of
 * the space from it: the last welcome, the participants present (from presence), the tools,
 * the pending proposals, and the calls a person's conversation holds across a reconnect.
 */
import * as z from "zod";
import { EDITED_KEY, GATEWAY_ID, type Capability, type Envelope } from "../../gateway/index.js";
import { ParticipantError } from "../errors.js";
import {
  parseMcpRequest,
  ParticipantInfoSchema,
  PresencePayloadSchema,
  PresenceSummarySchema,
  SystemErrorPayloadSchema,
  ToolInfoSchema,
  WelcomePayloadSchema,
  type ParticipantInfo,
  type ToolInfo,
} from "../wire.js";
import type { Calls } from "./calls.js";
import type { Connection } from "./connection.js";
import { outsideServing, type Serving } from "./serving.js";
import type { CallOptions, ClientEvents, IncomingNotification, NotificationHandler, WelcomeInfo } from "./types.js";
import { isRecord } from "../../gateway/index.js";

const ToolsPageSchema = z.looseObject({ tools: z.array(ToolInfoSchema), nextCursor: z.string().optional() });
const ParticipantsPageSchema = z.looseObject({ participants: z.array(ParticipantInfoSchema), nextCursor: z.string().optional() });
const ProposalsPageSchema = z.looseObject({
  proposals: z.array(z.looseObject({ id: z.string(), kind: z.string() })),
  nextCursor: z.string().optional(),
});

/** The client's events, raised for it. */
export interface InboundPorts {
  emit<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void;
  /** A problem tied to no call: an `error` event, or a log line when nobody listens. */
  report(error: ParticipantError): void;
}

/** One client's receiving side and its view of the space. The client's getters read these fields; only this class writes them. */
export class Inbound {
  lastWelcome: WelcomeInfo | undefined;
  readonly others = new Map<string, ParticipantInfo>();
  readonly seenProposals = new Map<string, Envelope>();
  toolList: ToolInfo[] = [];
  caps: Capability[] = [];
  private readonly notificationHandlers = new Set<NotificationHandler>();
  /** Calls of mine (made or served) held in a person's conversation, per person. */
  private readonly heldCalls = new Map<string, string[]>();

  constructor(
    private readonly conn: Connection,
    private readonly calls: Calls,
    private readonly serving: Serving,
    private readonly ports: InboundPorts,
  ) {}

  /** Adds a notification handler; returns the function that removes it. */
  onNotification(handler: NotificationHandler): () => void {
    this.notificationHandlers.add(handler);
    return () => this.notificationHandlers.delete(handler);
  }

  /** My proposal was withdrawn: it is pending no more. */
  forgetProposal(proposalId: string): void {
    this.seenProposals.delete(proposalId);
  }

  /** The ids of the calls a person's conversation holds: the gateway keeps them across a reconnect. */
  heldCallIds(): Set<string> {
    return new Set([...this.heldCalls.values()].flat());
  }

  /** Every tool of the space, all pages; updates `toolList`. See `ParticipantClient.listTools`. */
  async listTools(opts: CallOptions = {}): Promise<ToolInfo[]> {
    const tools: ToolInfo[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const res = await this.calls.request(GATEWAY_ID, "tools/list", cursor === undefined ? {} : { cursor }, {
        ...opts,
        schema: ToolsPageSchema,
      });
      tools.push(...res.tools);
      cursor = res.nextCursor;
      if (cursor === undefined) break;
    }
    this.toolList = tools;
    return tools;
  }

  /** Every pending proposal, all pages; remembered in `seenProposals`. See `ParticipantClient.listProposals`. */
  async listProposals(opts: CallOptions = {}): Promise<Envelope[]> {
    const proposals: Envelope[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const res = await this.calls.request(GATEWAY_ID, "proposals/list", cursor === undefined ? {} : { cursor }, {
        ...opts,
        schema: ProposalsPageSchema,
      });
      proposals.push(...(res.proposals as unknown as Envelope[]));
      cursor = res.nextCursor;
      if (cursor === undefined) break;
    }
    for (const p of proposals) if (!this.seenProposals.has(p.id)) this.seenProposals.set(p.id, p);
    return proposals;
  }

  /** A frame from the gateway: JSON, then a header check, then the dispatch. */
  receive(text: string): void {
    let env: Envelope;
    try {
      env = JSON.parse(text) as Envelope;
    } catch {
      this.conn.log?.warn("a frame from the gateway is not JSON; ignored");
      return;
    }
    if (!isEnvelope(env)) {
      this.conn.log?.warn("a frame from the gateway is not an envelope; ignored");
      return;
    }
    // Deliveries may arrive inside a handler's async context (in-process transports
    // inherit it); nothing received belongs to the request being served.
    outsideServing(() => this.dispatch(env));
  }

  private dispatch(env: Envelope): void {
    switch (env.kind) {
      case "system/welcome":
        this.onWelcome(env);
        if (isRecord(env.payload)) {
          this.heldCalls.clear();
          const list = env.payload["conversations"];
          for (const c of Array.isArray(list) ? list : []) if (isRecord(c)) this.noteConversation(c["human"], c["stack"]);
        }
        break;
      case "space/conversation":
        if (env.from === GATEWAY_ID && isRecord(env.payload)) this.noteConversation(env.payload["human"], env.payload["stack"]);
        break;
      case "system/presence":
        this.onPresence(env);
        break;
      case "system/error":
        this.onSystemError(env);
        break;
      case "mcp/request":
        this.onMcpRequest(env);
        break;
      case "mcp/response":
        this.forgetProposals(env);
        this.calls.answered(env);
        break;
      case "mcp/proposal":
        this.onProposal(env);
        break;
      case "mcp/approve": {
        this.calls.approved(env);
        this.forgetProposals(env);
        break;
      }
      case "mcp/reject":
        this.forgetProposals(env);
        this.calls.rejected(env);
        break;
      case "mcp/withdraw":
        this.forgetProposals(env);
        this.calls.withdrawn(env);
        break;
      case "system/approval":
        if (env.from === GATEWAY_ID) this.onApprovalProgress(env);
        break;
    }
    this.ports.emit("envelope", env);
  }

  private onWelcome(env: Envelope): void {
    const parsed = WelcomePayloadSchema.safeParse(env.payload);
    if (!parsed.success) {
      this.ports.report(
        new ParticipantError("invalid_response", `unreadable welcome: ${parsed.error.issues[0]?.message ?? "invalid"}`, { envelope: env }),
      );
      return;
    }
    const w = parsed.data;
    const first = !this.conn.welcomed;
    const info: WelcomeInfo = {
      id: w.you.id,
      kind: w.you.kind,
      capabilities: w.you.capabilities,
      visibility: w.you.visibility,
      space: w.space,
      participants: w.participants,
      tools: w.tools,
      proposals: w.proposals as unknown as Envelope[],
      history: w.history as unknown as Envelope[],
      reconnected: first && this.conn.everOpen,
      refreshed: !first,
      envelope: env,
    };
    this.lastWelcome = info;
    this.caps = info.capabilities;
    this.toolList = info.tools;
    this.others.clear();
    for (const p of info.participants) this.others.set(p.id, p);
    if (first) {
      this.seenProposals.clear();
      for (const p of info.proposals) this.seenProposals.set(p.id, p);
      this.calls.resumed(info.proposals, w.proposals_cursor === undefined);
      this.conn.opened(info);
    }
    this.ports.emit("welcome", info);
    // A welcome carries what fits in one frame; the rest is a page away.
    if (w.tools_cursor !== undefined)
      this.listTools().catch((err: unknown) => this.conn.log?.warn({ err }, "could not fetch the rest of the catalogue"));
    if (first && w.proposals_cursor !== undefined)
      this.listProposals().catch((err: unknown) => this.conn.log?.warn({ err }, "could not fetch the rest of the pending proposals"));
    // Whether the server has tools is private to the SDK; a server without any answers
    // the gateway's tools/list with an error, which costs one round trip.
    if (first && this.serving.servesMcp) this.serving.announceTools();
  }

  /** Everyone connected, all pages of `participants/list`: `others` is set from it (a large space sends summaries rather than each join). */
  async listParticipants(opts: CallOptions = {}): Promise<ParticipantInfo[]> {
    const all: ParticipantInfo[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const res = await this.calls.request(GATEWAY_ID, "participants/list", cursor === undefined ? {} : { cursor }, {
        ...opts,
        schema: ParticipantsPageSchema,
      });
      all.push(...res.participants);
      cursor = res.nextCursor;
      if (cursor === undefined) break;
    }
    this.others.clear();
    for (const p of all) this.others.set(p.id, p);
    return all;
  }

  /**
   * A large space's presence: each id it names joins or leaves `others` and is raised as a
   * presence event of its own (a joiner described by its id alone); when it only counted
   * some, the whole list is fetched again.
   */
  private onSummary(env: Envelope): void {
    const parsed = PresenceSummarySchema.safeParse(env.payload);
    if (!parsed.success) return;
    const { joined, left, joined_more, left_more } = parsed.data;
    for (const id of left) {
      this.others.delete(id);
      this.ports.emit("presence", { event: "leave", participant: { id }, reason: undefined, envelope: env });
    }
    for (const id of joined) {
      if (id === this.lastWelcome?.id) continue;
      const participant = this.others.get(id) ?? { id };
      this.others.set(id, participant);
      this.ports.emit("presence", { event: "join", participant, reason: undefined, envelope: env });
    }
    if (joined_more || left_more)
      this.listParticipants().catch((err: unknown) => this.conn.log?.warn({ err }, "could not fetch the participants present"));
  }

  private onPresence(env: Envelope): void {
    if (isRecord(env.payload) && env.payload["event"] === "summary") return this.onSummary(env);
    const parsed = PresencePayloadSchema.safeParse(env.payload);
    if (!parsed.success) return;
    const { event, participant, reason } = parsed.data;
    if (event === "join") this.others.set(participant.id, participant);
    else this.others.delete(participant.id);
    this.ports.emit("presence", { event, participant, reason, envelope: env });
  }

  private onSystemError(env: Envelope): void {
    const parsed = SystemErrorPayloadSchema.safeParse(env.payload);
    const payload = parsed.success ? parsed.data : {};
    const code = payload.code ?? payload.error ?? "error";
    const error = new ParticipantError(code, payload.message ?? code, { data: env.payload, envelope: env });
    if (!this.calls.failCorrelated(env, error)) this.ports.report(error);
  }

  private onMcpRequest(env: Envelope): void {
    const parsed = parseMcpRequest(env.payload);
    if (!parsed.success) return;
    const { id: rpcId, method, params } = parsed.data;
    const me = this.lastWelcome?.id;
    const addressed = env.to?.includes(me ?? "") ?? false;
    if (rpcId === undefined) {
      if ((env.to !== undefined && !addressed) || env.from === me) return;
      if (method === "notifications/cancelled") this.serving.cancelServing(env, params);
      else if (method === "notifications/progress") this.calls.progress(env, params);
      else if (addressed) this.serving.deliverNotification(method, params);
      const n: IncomingNotification = { method, params, from: env.from, envelope: env };
      for (const h of this.notificationHandlers) {
        try {
          h(n);
        } catch (err) {
          this.conn.log?.warn({ err, method }, "notification handler threw");
        }
      }
      return;
    }
    // Watchers see every request in the space; only the addressee answers.
    if (addressed) this.serving.serve(env, rpcId, method, params);
  }

  private onProposal(env: Envelope): void {
    this.seenProposals.set(env.id, env);
    this.calls.proposed(env);
    this.ports.emit("proposal", env);
  }

  /**
   * One of several approvals a proposal needs was given: the proposal as remembered takes the
   * count and, when an approver edited the arguments, what now runs (`mewgate/edited`), as a
   * welcome would show it, so a card drawn from it shows what an approval runs.
   */
  private onApprovalProgress(env: Envelope): void {
    const id = env.correlation_id?.[0];
    const seen = id === undefined ? undefined : this.seenProposals.get(id);
    if (!seen || !isRecord(seen.payload) || !isRecord(env.payload)) return;
    const { required, by, arguments: args, edited_by, edited_at } = env.payload;
    const edited = isRecord(args)
      ? {
          [EDITED_KEY]: {
            arguments: args,
            ...(typeof edited_by === "string" ? { by: edited_by } : {}),
            ...(typeof edited_at === "string" ? { at: edited_at } : {}),
          },
        }
      : {};
    const progress = { "mewgate/approvals": { required, by, ...(isRecord(args) ? { arguments: args } : {}) } };
    this.seenProposals.set(seen.id, { ...seen, payload: { ...seen.payload, ...progress, ...edited } });
  }

  /** A decision or an answer ends a proposal's pending life. */
  private forgetProposals(env: Envelope): void {
    for (const id of env.correlation_id ?? []) this.seenProposals.delete(id);
  }

  private noteConversation(human: unknown, stack: unknown): void {
    if (typeof human !== "string") return;
    const me = this.lastWelcome?.id;
    const mine = (Array.isArray(stack) ? stack : [])
      .filter(
        (f): f is Record<string, unknown> => isRecord(f) && typeof f["call"] === "string" && (f["caller"] === me || f["agent"] === me),
      )
      .map((f) => f["call"] as string);
    if (mine.length) this.heldCalls.set(human, mine);
    else this.heldCalls.delete(human);
  }
}

/** A cheap header check: the gateway has already validated every envelope it routes. */
function isEnvelope(v: unknown): v is Envelope {
  return isRecord(v) && typeof v["kind"] === "string" && typeof v["id"] === "string" && typeof v["from"] === "string";
}
