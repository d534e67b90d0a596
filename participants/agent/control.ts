/**
 * The `participant/*` control messages addressed to the agent: pause (with its timer),
 * resume, request-status, forget, clear, compact (the model summarizes the older half),
 * restart and shutdown, each answered to its sender. The rules are in participant.ts's
 * opening comment; the gateway has already checked that the sender may send them.
 *
 * participant.ts owns the pieces these act on and hands them over as `ControlHost`.
 */
import type { Logger } from "pino";
import type { Envelope } from "../../gateway/index.js";
import type { OutboundEnvelope } from "../client.js";
import type { ChatTurns } from "./chat.js";
import type { Summarize } from "./context.js";
import type { ProviderHealth } from "./health.js";
import { ProviderError, type ModelOptions, type Provider } from "./providers/types.js";
import type { AskServer } from "./serve.js";
import { isRecord, clip } from "../../gateway/index.js";

/** What the controls act on. */
export interface ControlHost {
  readonly id: string;
  readonly provider: Provider;
  readonly modelOptions: Omit<ModelOptions, "signal">;
  readonly log: Logger | undefined;
  readonly chat: ChatTurns;
  readonly health: ProviderHealth;
  readonly serving: AskServer;
  /** The space's name of a tool the model called by its function name. */
  toolName(functionName: string): string;
  send(env: OutboundEnvelope): string | undefined;
  /** The agent's status without its id, as `participant/status` carries it. */
  statusPayload(): Record<string, unknown>;
  stop(reason: "shutdown"): Promise<unknown>;
}

export class Controls {
  private pausedNow = false;
  private pauseTimer: NodeJS.Timeout | undefined;
  private compacting = false;

  constructor(private readonly host: ControlHost) {}

  get paused(): boolean {
    return this.pausedNow;
  }

  /** The agent stops: a pause's timer must not resume it. */
  stop(): void {
    clearTimeout(this.pauseTimer);
  }

  onControl(env: Envelope): void {
    const payload = isRecord(env.payload) ? env.payload : {};
    switch (env.kind) {
      case "participant/pause": {
        this.pausedNow = true;
        clearTimeout(this.pauseTimer);
        // Waiting triggers become context: a pause may be long, and stale questions should not all be answered at resume.
        this.host.chat.queuedToContext();
        const seconds = payload["timeout_seconds"];
        if (typeof seconds === "number" && seconds > 0 && Number.isFinite(seconds)) {
          this.pauseTimer = setTimeout(
            () => {
              this.resume();
              this.reportStatus(env, { resumed: "timeout" });
            },
            Math.min(seconds * 1000, 2_147_483_647),
          );
          this.pauseTimer.unref();
        }
        this.host.log?.info({ by: env.from, timeout_seconds: seconds }, "paused");
        return this.reportStatus(env);
      }
      case "participant/resume":
        this.resume();
        this.host.log?.info({ by: env.from }, "resumed");
        return this.reportStatus(env);
      case "participant/request-status":
        return this.reportStatus(env);
      case "participant/forget": {
        const direction = payload["direction"] === "newest" ? "newest" : "oldest";
        const requested = payload["entries"];
        const entries =
          typeof requested === "number" && Number.isFinite(requested) && requested > 0
            ? Math.floor(requested)
            : Math.ceil(this.host.chat.conversation.messagesInContext / 2);
        const forgotten = this.host.chat.conversation.forget(direction, entries);
        return this.reportStatus(env, { forgotten });
      }
      case "participant/clear": {
        const cleared = this.host.chat.clear();
        return this.reportStatus(env, { cleared });
      }
      case "participant/compact":
        void this.compact(env);
        return;
      case "participant/restart":
        this.restart();
        this.host.log?.info({ by: env.from }, "restarted");
        return this.reportStatus(env, { restarted: true });
      case "participant/shutdown":
        this.host.log?.info({ by: env.from }, "shutdown requested");
        this.host.send({ kind: "chat/acknowledge", to: [env.from], correlation_id: [env.id], payload: { status: "shutdown" } });
        void this.host.stop("shutdown");
        return;
      default:
        // participant/status and the like from others: nothing to do.
        return;
    }
  }

  private resume(): void {
    clearTimeout(this.pauseTimer);
    this.pauseTimer = undefined;
    this.pausedNow = false;
    void this.host.chat.pump();
  }

  private restart(): void {
    this.host.chat.abort("restart");
    this.host.serving.abortAll("restart");
    this.host.chat.reset();
    this.host.health.reset();
    this.host.serving.done = 0;
    clearTimeout(this.pauseTimer);
    this.pausedNow = false;
  }

  private async compact(env: Envelope): Promise<void> {
    const reply = (extra: Record<string, unknown>) =>
      this.host.send({
        kind: "participant/compact-done",
        to: [env.from],
        correlation_id: [env.id],
        payload: { ...this.host.statusPayload(), ...extra },
      });
    if (this.compacting) return void reply({ error: "a compaction is already running" });
    if (this.host.health.providerDown()) return void reply({ error: `the model is unavailable: ${this.host.health.down!.error.message}` });
    this.compacting = true;
    try {
      const before = this.host.chat.conversation.tokens;
      const replaced = await this.host.chat.conversation.compact(this.summarize);
      reply({ replaced, tokens_before: before });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (err instanceof ProviderError) this.host.health.providerFailed(err, undefined);
      reply({ error: message });
    } finally {
      this.compacting = false;
    }
  }

  private readonly summarize: Summarize = async (messages) => {
    const transcript = messages
      .map((m) => {
        switch (m.role) {
          case "user":
            return m.text;
          case "assistant": {
            const calls = m.toolCalls.map((c) => this.host.toolName(c.name));
            return `${this.host.id}: ${m.text}${calls.length ? ` [called ${calls.join(", ")}]` : ""}`;
          }
          case "tool":
            return `[tool result${m.isError ? ", error" : ""}] ${clip(m.content, 2000)}`;
          default:
            return ""; // join() writes an unknown role's undefined as "" too
        }
      })
      .join("\n");
    const response = await this.host.provider.complete({
      system: `You condense conversation transcripts for ${this.host.id}, an AI agent, so it can keep working with less context.`,
      messages: [
        {
          role: "user",
          text: `Summarize this earlier part of the conversation in a few short paragraphs. Keep who asked what, decisions, results of tool calls, rejections and open tasks. Write the summary only.\n\n${transcript}`,
        },
      ],
      tools: [],
      options: this.host.modelOptions,
    });
    return response.text.trim() || "(nothing worth keeping)";
  };

  private reportStatus(env: Envelope, extra: Record<string, unknown> = {}): void {
    this.host.send({
      kind: "participant/status",
      to: [env.from],
      correlation_id: [env.id],
      payload: { ...this.host.statusPayload(), ...extra },
    });
  }
}
