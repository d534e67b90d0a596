/**
 * What both terminal modes share: one participant connection (taken back after another
 * connection of the same participant replaced it, when the caller can), the proposal
 * queue, and the actions a person takes (chat, approve, reject, control an agent).
 */
import type { SpaceConfig } from "../../gateway/index.js";
import type { Envelope } from "../../gateway/index.js";
import type { ClientCloseEvent, IncomingRequest, ParticipantClient, WelcomeInfo } from "../../participants/index.js";
import { RpcError, RpcErrorCodes } from "../../participants/errors.js";
import { parseForm, type Form } from "./elicit.js";
import { callShape, GATEWAY, type SeenCall } from "./format.js";
import { isRecord } from "../../gateway/index.js";
import { ProposalQueue } from "./queue.js";
import type { ApproveOptions } from "../../participants/client/types.js";

export interface TerminalInput extends NodeJS.ReadableStream {
  isTTY?: boolean | undefined;
  setRawMode?(mode: boolean): unknown;
}

export interface TerminalOutput extends NodeJS.WritableStream {
  isTTY?: boolean | undefined;
  columns?: number | undefined;
}

export interface TerminalOptions {
  client: ParticipantClient;
  input: TerminalInput;
  output: TerminalOutput;
  /** The space.yaml, when known (under `up`): for "why does this need approval" and offline participants. */
  config?: SpaceConfig | undefined;
  /**
   * Called when another connection of this participant replaced ours (someone ran
   * `mewgate status` as the same human, say): resolves with a new connected client once
   * the seat is free. Without it the terminal ends.
   */
  reclaim?: (() => Promise<ParticipantClient>) | undefined;
  /** End when the input ends (`connect`); `up` keeps the space running until a signal. */
  exitOnEof?: boolean | undefined;
  env?: NodeJS.ProcessEnv | undefined;
}

export interface TerminalEnd {
  reason: "quit" | "eof" | "closed";
  /** For `closed`: the close code and a message. */
  code?: number | undefined;
  message?: string | undefined;
}

/** A form asked of this person. */
export interface Ask {
  /** The request's envelope id. */
  id: string;
  from: string;
  /** The tool the form is about, as the asker says. */
  about: string | undefined;
  form: Form;
  resolve(result: unknown): void;
}

export abstract class TerminalSession {
  client: ParticipantClient;
  readonly queue = new ProposalQueue();
  readonly done: Promise<TerminalEnd>;
  protected ended = false;
  /** Envelope ids already shown, so a re-welcome shows only what was missed. */
  protected readonly seen = new Set<string>();
  /** Our approve/reject envelopes by id → the proposal, to undo on a refusal. */
  private readonly decisions = new Map<string, string>();
  private unsubscribe: (() => void)[] = [];
  /** Forms someone asked this person to fill in (elicit.ts), oldest first; each ends once. */
  protected readonly forms: Ask[] = [];
  private resolveDone!: (end: TerminalEnd) => void;
  private toolsTimer: NodeJS.Timeout | undefined;

  constructor(protected readonly opts: TerminalOptions) {
    this.client = opts.client;
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  /** Starts showing the space and reading input. */
  start(): void {
    this.bind(this.client);
    const welcome = this.client.welcome;
    if (welcome) this.onWelcome(welcome, true);
    this.startInput();
  }

  get isEnded(): boolean {
    return this.ended;
  }

  get me(): string {
    return this.client.welcome?.id ?? "?";
  }

  /** A line from the program itself (a child restarted, the greeting sent, …). */
  abstract notice(text: string, level?: "info" | "error"): void;

  protected abstract startInput(): void;
  protected abstract stopInput(): void;
  protected abstract showEnvelope(env: Envelope): void;
  protected abstract showWelcome(info: WelcomeInfo, first: boolean, missed: Envelope[]): void;
  /** The queue changed (or its selection did). */
  protected abstract queueChanged(): void;
  /** Our own chat, which the gateway does not send back to us. */
  protected abstract echoChat(text: string, to: string[] | undefined): void;
  /** Someone asked a form of this person (it is also in `forms`). */
  protected abstract formAsked(ask: Ask): void;
  /** A form ended without this terminal answering it: the asker withdrew it, or the call it was about ended. */
  protected abstract formEnded(ask: Ask, why: string): void;
  /** Whether this view shows the tool count (it costs a tools/list per change). */
  protected readonly watchesTools: boolean = true;
  protected toolsChanged(_count: number): void {}

  /** Ends the session: stops reading input, leaves the connection to the caller. */
  finish(end: TerminalEnd): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.toolsTimer);
    for (const u of this.unsubscribe.splice(0)) u();
    for (const ask of [...this.forms]) this.answer(ask, { action: "cancel" });
    this.stopInput();
    this.resolveDone(end);
  }

  private bind(client: ParticipantClient): void {
    for (const u of this.unsubscribe.splice(0)) u();
    this.client = client;
    this.unsubscribe.push(
      client.on("envelope", (env) => this.onEnvelope(env)),
      client.on("close", (ev) => void this.onClose(ev)),
      // A connection that came back (`mewgate connect` rides through a node's loss or a
      // take-over): say so, and show what was missed meanwhile.
      client.on("welcome", (info) => {
        if (this.ended || !info.reconnected) return;
        this.notice(`reconnected to the space as ${info.id}`);
        this.onWelcome(info, false);
      }),
      // Refusals come correlated to our envelopes as system/error and are shown from the
      // envelope stream; this listener only keeps the client from logging them again.
      client.on("error", () => {}),
      client.onRequest((req) => this.serveRequest(req)),
    );
  }

  /** A person answers forms (`elicitation/create`) and nothing else. */
  private serveRequest(req: IncomingRequest): Promise<unknown> {
    if (req.method !== "elicitation/create") {
      throw new RpcError(
        RpcErrorCodes.methodNotFound,
        `${this.me} is a person at a terminal: it answers elicitation/create, not ${req.method}`,
      );
    }
    const parsed = parseForm(req.params);
    if (!parsed.ok) throw new RpcError(RpcErrorCodes.invalidParams, `elicitation/create: ${parsed.error}`);
    const params = req.params as Record<string, unknown>;
    const meta = isRecord(params["_meta"]) ? params["_meta"] : {};
    const about =
      isRecord(meta["mewgate/for"]) && typeof meta["mewgate/for"]["tool"] === "string" ? meta["mewgate/for"]["tool"] : undefined;
    return new Promise((resolve) => {
      const ask: Ask = { id: req.envelope.id, from: req.from, about, form: parsed.value, resolve };
      this.forms.push(ask);
      req.signal.addEventListener(
        "abort",
        () => {
          const i = this.forms.indexOf(ask);
          if (i < 0) return;
          this.forms.splice(i, 1);
          this.formEnded(ask, `${String(req.signal.reason ?? "cancelled")}`);
        },
        { once: true },
      );
      this.formAsked(ask);
    });
  }

  /** Answers a form: accept with content, decline, or cancel. */
  answer(ask: Ask, result: { action: "accept"; content?: Record<string, unknown> } | { action: "decline" | "cancel" }): void {
    const i = this.forms.indexOf(ask);
    if (i < 0) return;
    this.forms.splice(i, 1);
    ask.resolve(result);
  }

  private onEnvelope(env: Envelope): void {
    if (this.ended) return;
    if (env.kind === "system/welcome") {
      const info = this.client.welcome;
      // The first welcome of a connection is handled by start()/reclaim; later ones (grants) refresh.
      if (info?.envelope === env && info.refreshed) this.onWelcome(info, false);
      return;
    }
    this.markSeen(env.id);
    if (env.kind === "system/error") {
      const ref = env.correlation_id?.[0];
      const proposal = ref ? this.decisions.get(ref) : undefined;
      if (proposal) this.queue.undo(proposal);
    }
    if (
      this.watchesTools &&
      env.kind === "mcp/request" &&
      isRecord(env.payload) &&
      env.payload["method"] === "notifications/tools/list_changed" &&
      env.from === GATEWAY
    ) {
      this.refreshTools();
    }
    this.showEnvelope(env);
    this.syncQueue();
  }

  private onWelcome(info: WelcomeInfo, first: boolean): void {
    // Our own comings and goings (a one-shot command borrowing the seat) are not news.
    const aboutMe = (e: Envelope) =>
      e.kind === "system/presence" &&
      isRecord(e.payload) &&
      isRecord(e.payload["participant"]) &&
      e.payload["participant"]["id"] === info.id;
    const missed = info.history.filter((e) => !this.seen.has(e.id) && !aboutMe(e));
    for (const e of info.history) this.markSeen(e.id);
    this.showWelcome(info, first, missed);
    this.syncQueue(true);
  }

  protected syncQueue(force = false): void {
    if (this.queue.sync(this.client.proposals.values()) || force) this.queueChanged();
  }

  private async onClose(ev: ClientCloseEvent): Promise<void> {
    if (this.ended) return;
    if (ev.reconnecting) return this.notice(`disconnected (${ev.code}${ev.reason ? `: ${ev.reason}` : ""}); reconnecting…`, "error");
    if (ev.error?.code === "replaced" && this.opts.reclaim) {
      this.notice(`another connection joined as ${this.me} (mewgate status, send, …); this terminal takes the seat back when it leaves`);
      try {
        const client = await this.opts.reclaim();
        if (this.ended) {
          await client.close();
          return;
        }
        this.bind(client);
        this.onWelcome(client.welcome!, false);
        return;
      } catch (err) {
        this.finish({ reason: "closed", code: ev.code, message: `could not rejoin: ${(err as Error).message}` });
        return;
      }
    }
    const message =
      ev.error?.code === "replaced"
        ? `another connection joined as ${this.me}; this one was closed (4409)`
        : ev.code === 1001
          ? "the gateway shut down"
          : `disconnected (${ev.code}${ev.reason ? `: ${ev.reason}` : ""})`;
    this.finish({ reason: "closed", code: ev.code, message });
  }

  private markSeen(id: string): void {
    this.seen.add(id);
    if (this.seen.size > 5000) this.seen.delete(this.seen.values().next().value!);
  }

  private refreshTools(): void {
    clearTimeout(this.toolsTimer);
    this.toolsTimer = setTimeout(() => {
      this.client
        .listTools({ timeoutMs: 5000 })
        .then((tools) => this.toolsChanged(tools.length))
        .catch(() => {});
    }, 250);
  }

  // --- actions ----------------------------------------------------------------------------

  /** Sends a chat. `@id text` addresses a participant. Returns the envelope sent, for the local echo. */
  chat(text: string, to?: string[]): { to: string[] | undefined } {
    let addressees = to;
    if (!addressees) {
      const m = /^@([A-Za-z0-9][A-Za-z0-9_.-]*)\s/.exec(text);
      if (m && (this.client.participants.has(m[1]!) || this.opts.config?.participants[m[1]!])) addressees = [m[1]!];
    }
    this.client.send({ kind: "chat", to: addressees, payload: { text } });
    this.echoChat(text, addressees);
    return { to: addressees };
  }

  approve(
    proposalId: string,
    opts: { scope?: "once" | "always"; arguments?: Record<string, unknown> | undefined; limit?: ApproveOptions["limit"] } = {},
  ): string {
    // Edited by an earlier approver: approving sends the arguments the card shows, so the
    // gateway counts this approval only for what it runs (docs/protocol.md, Two-person approvals).
    const shown = this.client.proposals.get(proposalId);
    const edit = shown && isRecord(shown.payload) ? shown.payload["mewgate/edited"] : undefined;
    const args = opts.arguments ?? (isRecord(edit) && isRecord(edit["arguments"]) ? edit["arguments"] : undefined);
    const id = this.client.approve(proposalId, {
      scope: opts.scope ?? "once",
      ...(args ? { arguments: args } : {}),
      ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
    });
    this.decided(id, proposalId);
    return id;
  }

  reject(proposalId: string, reason: string, text?: string): string {
    const id = this.client.reject(proposalId, reason, text || undefined);
    this.decided(id, proposalId);
    return id;
  }

  private decided(envelopeId: string, proposalId: string): void {
    this.decisions.set(envelopeId, proposalId);
    if (this.decisions.size > 500) this.decisions.delete(this.decisions.keys().next().value!);
    this.queue.markDecided(proposalId);
    this.queueChanged();
  }

  /** `participant/pause`, `participant/resume`, … to one participant. */
  control(kind: "pause" | "resume" | "request-status", target: string): void {
    this.client.send({ kind: `participant/${kind}`, to: [target], payload: {} });
  }

  /**
   * Cancels what an id names: a waiting proposal is rejected with reason `cancelled`; a call
   * in flight gets `notifications/cancelled` (its target honours it only from the caller or
   * the gateway, so for someone else's call this is a request, not a guarantee).
   */
  cancel(ref: string, calls: ReadonlyMap<string, SeenCall>): string {
    const p = this.queue.resolve(ref);
    if (p.ok) {
      this.reject(p.proposal.id, "cancelled", `cancelled by ${this.me}`);
      return `cancelled proposal ${callShape(p.proposal).label} [${p.proposal.id.slice(0, 8)}]`;
    }
    const matches = [...calls.entries()].filter(([id]) => id === ref || id.startsWith(ref));
    if (matches.length !== 1)
      return matches.length ? `"${ref}" matches several calls` : `nothing to cancel named "${ref}" (no pending proposal or call in flight)`;
    const [callId, call] = matches[0]!;
    if (!call.target) return `cannot cancel ${call.label}: its target is unknown`;
    this.client.send({
      kind: "mcp/request",
      to: [call.target],
      correlation_id: [callId],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: call.rpcId, reason: `cancelled by ${this.me}` } },
    });
    return `asked ${call.target} to cancel ${call.label}${call.caller === this.me ? "" : ` (a call by ${call.caller}; it may only honour its caller)`}`;
  }
}
