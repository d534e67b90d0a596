/**
 * Approvals pushed to where people are: each new proposal, and what became of it, POSTed
 * to the webhooks in `gateway.notify` — a generic JSON body, or a Slack message in Block Kit.
 * A notice of a proposal waiting for a decision carries one signed link per person who may
 * decide it (links.ts): the JSON body lists them, and Slack shows Approve / Reject buttons
 * that open the link's page, where the decision is made (never by the click itself).
 *
 * With `secret_env`, every notice is signed (signing.ts, the Standard Webhooks headers). A
 * notice of what became of an approved call (`proposal.answered`, `proposal.failed`, with
 * the "decided" ones) carries its outcome (calls/outcomes.ts).
 *
 * A webhook never slows the space: a delivery runs after the change it reports, off the
 * message path, with a timeout, a few retries with backoff, and a bounded queue (past it,
 * the oldest undelivered notice is dropped and logged). Every attempt's outcome is kept
 * in a small delivery log (`deliveries()`, and the gateway log).
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { parseWebhookSecret } from "../config/webhook-secret.js";
import { type Proposal, runningParams } from "./book.js";
import { signatureHeaders } from "./signing.js";
import { revealText } from "../wire/text.js";

/** A decision link for one approver of one proposal (links.ts). */
export interface ApproverLink {
  approver: string;
  url: string;
}

export interface WebhookConfig {
  url: string;
  format: "json" | "slack";
  /** Which notices: new proposals, their outcomes, or both (default). */
  events: Array<"proposed" | "decided">;
  headers: Record<string, string>;
  /** The environment variable holding the signing secret (config/webhook-secret.ts). */
  secret_env?: string | undefined;
}

export interface Delivery {
  ts: string;
  url: string;
  event: string;
  proposal: string;
  attempt: number;
  ok: boolean;
  status?: number;
  error?: string;
}

const TIMEOUT_MS = 5000;
const BACKOFF_MS = [1000, 5000, 25_000];
const MAX_QUEUE = 1000;
const LOG_SIZE = 200;
const ARGUMENT_CHARS = 2000;

interface Notice {
  hook: WebhookConfig;
  event: string;
  proposal: string;
  /** Made at the first attempt, not when enqueued: a proposal restored at start is noticed before the gateway knows its own address, which the links need. */
  body: string | (() => string);
  attempt: number;
  /** The notice's `webhook-id`: the same on every attempt. */
  id: string;
}

export class Notifier {
  private readonly queue: Notice[] = [];
  private readonly log: Delivery[] = [];
  private running = 0;
  private closed = false;
  private addressWaits = 0;
  private addressTimer: NodeJS.Timeout | undefined;
  /** Each signing webhook's key, read once (its secret was checked when the file was loaded). */
  private readonly keys = new Map<WebhookConfig, Buffer>();

  constructor(
    private readonly space: string,
    private readonly hooks: readonly WebhookConfig[],
    private readonly logger: Logger,
    /** The console's address, for a link in the notice (when known). */
    private readonly consoleUrl: () => string | undefined = () => undefined,
    /** Why a proposal waits, in words. */
    private readonly why: (p: Proposal) => string | undefined = () => undefined,
    /** Decision links for the people who may decide a proposal (none when the space cannot make them). */
    private readonly links: (p: Proposal) => ApproverLink[] = () => [],
    env: NodeJS.ProcessEnv = process.env,
  ) {
    for (const hook of hooks) {
      if (hook.secret_env === undefined) continue;
      const parsed = parseWebhookSecret(env[hook.secret_env], hook.secret_env);
      // Checked at load (config.ts); should the environment have changed since, nothing goes out unsigned.
      if ("error" in parsed) logger.error({ url: hook.url }, `${parsed.error}; this webhook's notices are not sent`);
      else this.keys.set(hook, parsed.key);
    }
  }

  /** A proposal was made or moved on: tell the webhooks that want it. */
  proposal(p: Proposal, event: string): void {
    if (this.hooks.length === 0 || this.closed) return;
    // An interrupted proposal asks for a decision again, as a new one does.
    // What became of an approved call (answered, failed) is told with the decisions.
    const kind =
      event === "proposed" || event === "interrupted" || event === "escalated"
        ? "proposed"
        : ["approved", "rejected", "withdrawn", "expired", "answered", "failed"].includes(event)
          ? "decided"
          : undefined;
    if (!kind) return;
    for (const hook of this.hooks) {
      if (!hook.events.includes(kind)) continue;
      if (hook.secret_env !== undefined && !this.keys.has(hook)) continue;
      const seen = { ...p };
      this.enqueue({ hook, event, proposal: p.id, body: () => this.body(hook, seen, event), attempt: 0, id: `msg_${randomUUID()}` });
    }
  }

  private readonly escalatedTo = new Map<string, readonly string[]>();

  /** A proposal nobody decided in time escalated (proposals/escalation.ts): tell the webhooks again, naming who may decide now. */
  escalated(p: Proposal, approvers: readonly string[]): void {
    this.escalatedTo.set(p.id, approvers);
    try {
      this.proposal(p, "escalated");
    } finally {
      this.escalatedTo.delete(p.id);
    }
  }

  /** The last deliveries, newest last. */
  deliveries(): Delivery[] {
    return [...this.log];
  }

  close(): void {
    this.closed = true;
    this.queue.length = 0;
  }

  private body(hook: WebhookConfig, p: Proposal, event: string): string {
    const owner = p.owner || "*"; // held open: whoever fulfils it picks
    const tool = p.tool === undefined ? `${owner}: ${p.method}` : `${owner}/${p.tool}`;
    const link = this.consoleUrl();
    // Escalated, it asks again: with links for whoever may decide now.
    const asks = event === "proposed" || event === "interrupted" || event === "escalated";
    const links = asks ? this.links(p) : [];
    if (hook.format === "slack") return slackBody(this.space, p, event, tool, link, links);
    // Texts a person reads go through the one table (wire/text.ts): hidden and bidi characters shown as ⟨U+…⟩.
    let args = revealText(JSON.stringify(runningParams(p)["arguments"] ?? {}));
    const truncated = args.length > ARGUMENT_CHARS;
    if (truncated) args = args.slice(0, ARGUMENT_CHARS);
    return JSON.stringify({
      event: `proposal.${event}`,
      space: this.space,
      proposal: {
        id: p.id,
        proposer: p.proposer,
        tool: revealText(tool),
        state: p.state,
        why: event === "proposed" ? this.why(p) : undefined,
        arguments: args,
        arguments_truncated: truncated || undefined,
        decided_by: p.decidedBy,
        // What became of the call, once it ended (calls/outcomes.ts): ok, tool_error, error, timeout, cancelled, not_routed.
        outcome: p.outcome,
        reason: p.reason === undefined ? undefined : revealText(p.reason),
        text: p.text === undefined ? undefined : revealText(p.text),
        expires_at: new Date(p.expiresAt).toISOString(),
        ...(event === "escalated" ? { escalated: p.escalated, approvers: this.escalatedTo.get(p.id) } : {}),
      },
      console: link,
      // One link per person who may decide, each good for that person only, once.
      ...(asks ? { approvers: links.map((l) => l.approver), links } : {}),
    });
  }

  private enqueue(n: Notice): void {
    if (this.queue.length >= MAX_QUEUE) {
      const dropped = this.queue.shift()!;
      this.logger.warn({ url: dropped.hook.url, proposal: dropped.proposal }, "webhook queue full; the oldest notice was dropped");
    }
    this.queue.push(n);
    this.pump();
  }

  /** A few deliveries at once; each notice in its turn. */
  private pump(): void {
    // Before the gateway listens it does not know its own address, which the links need:
    // notices of proposals restored at start wait for it (at most ten seconds).
    if (this.consoleUrl() === undefined && this.queue.length > 0 && this.addressWaits < 200) {
      this.addressWaits++;
      if (!this.addressTimer)
        this.addressTimer = setTimeout(() => {
          this.addressTimer = undefined;
          this.pump();
        }, 50).unref();
      return;
    }
    while (this.running < 4 && this.queue.length > 0) {
      const n = this.queue.shift()!;
      this.running++;
      void this.deliver(n).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async deliver(n: Notice): Promise<void> {
    n.attempt++;
    const record: Delivery = {
      ts: new Date().toISOString(),
      url: n.hook.url,
      event: n.event,
      proposal: n.proposal,
      attempt: n.attempt,
      ok: false,
    };
    try {
      if (typeof n.body !== "string") n.body = n.body();
      const body = n.body;
      const key = this.keys.get(n.hook);
      // Signed at each attempt: the timestamp is when this one was sent.
      const signed = key ? signatureHeaders(key, n.id, body) : {};
      const res = await fetch(n.hook.url, {
        method: "POST",
        headers: { "content-type": "application/json", "user-agent": "mewgate", ...n.hook.headers, ...signed },
        body,
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      record.status = res.status;
      record.ok = res.ok;
      await res.body?.cancel().catch(() => {});
    } catch (err) {
      record.error = (err as Error).name === "TimeoutError" ? `no answer within ${TIMEOUT_MS} ms` : (err as Error).message;
    }
    this.remember(record);
    if (record.ok) return this.logger.info({ url: n.hook.url, proposal: n.proposal, event: n.event }, "webhook delivered");
    const retryIn = BACKOFF_MS[n.attempt - 1];
    // A client error will not get better by trying again; a server error or no answer may.
    const retry = retryIn !== undefined && !this.closed && (record.status === undefined || record.status >= 500 || record.status === 429);
    this.logger.warn(
      { url: n.hook.url, proposal: n.proposal, status: record.status, err: record.error, retry: retry ? retryIn : false },
      "webhook delivery failed",
    );
    if (retry) setTimeout(() => this.enqueue(n), retryIn).unref();
  }

  private remember(d: Delivery): void {
    this.log.push(d);
    if (this.log.length > LOG_SIZE) this.log.shift();
  }
}

/** Most approvers a Slack message shows buttons for (Slack allows 25 elements per actions block). */
const SLACK_APPROVERS = 10;

/**
 * A Slack message in Block Kit: the notice as plain text (never mrkdwn: participant text
 * must not format or link), and for a proposal waiting for a decision, Approve / Reject url
 * buttons per approver that open the link's page. `text` stays as the notification's fallback.
 */
function slackBody(space: string, p: Proposal, event: string, tool: string, consoleUrl: string | undefined, links: ApproverLink[]): string {
  const verb: Record<string, string> = {
    answered: `called (outcome: ${p.outcome ?? "?"})`,
    failed: `could not call (outcome: ${p.outcome ?? p.reason ?? "?"})`,
    escalated: "still waits for a decision (escalated) to call",
    proposed: "wants to call",
    approved: "was approved to call",
    rejected: "was refused",
    withdrawn: "withdrew",
    expired: "got no decision for",
    interrupted: "needs a new decision (the gateway stopped after it was approved; it may or may not have run) for",
  };
  const who = event === "approved" || event === "rejected" ? ` by ${p.decidedBy ?? "?"}` : "";
  const asks = event === "proposed" || event === "interrupted" || event === "escalated";
  const text = `[${space}] ${p.proposer} ${verb[event] ?? event} ${tool}${who}${p.reason && event !== "proposed" && event !== "approved" ? ` (${p.reason})` : ""}${asks && consoleUrl ? ` — decide at ${consoleUrl}` : ""}`;
  const blocks: unknown[] = [{ type: "section", text: { type: "plain_text", text: clipText(text, 2900), emoji: false } }];
  if (asks) {
    let args = JSON.stringify(runningParams(p)["arguments"] ?? {});
    if (args.length > 1000) args = `${args.slice(0, 1000)}…`;
    blocks.push({ type: "context", elements: [{ type: "plain_text", text: clipText(`arguments: ${args}`, 2000), emoji: false }] });
    for (const l of links.slice(0, SLACK_APPROVERS)) {
      const mine = links.length > 1 ? ` (${l.approver})` : "";
      blocks.push({
        type: "actions",
        block_id: clipText(`decide-${p.id}-${l.approver}`, 255),
        elements: [
          {
            type: "button",
            action_id: `approve-${l.approver}`.slice(0, 255),
            style: "primary",
            text: { type: "plain_text", text: clipText(`Approve${mine}`, 75) },
            url: `${l.url}&do=approve`,
          },
          {
            type: "button",
            action_id: `reject-${l.approver}`.slice(0, 255),
            style: "danger",
            text: { type: "plain_text", text: clipText(`Reject${mine}`, 75) },
            url: `${l.url}&do=reject`,
          },
        ],
      });
    }
  }
  return JSON.stringify({ text, blocks });
}

function clipText(s: string, n: number): string {
  // What a person reads in the channel: hidden and bidi characters shown as ⟨U+…⟩ (wire/text.ts).
  s = revealText(s);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}
