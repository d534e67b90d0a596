/**
 * The terminal for scripts (stdin not a TTY, or --json): JSON lines in and out.
 *
 * Out: every envelope this participant receives, one JSON object per line, exactly as the
 * gateway sent it; the program's own events as `{"event": ..., ...}` (no `kind`, so the two
 * never mix up).
 *
 * In, one JSON object per line:
 *   {"chat": "hi", "to": ["assistant"]}
 *   {"approve": "<proposal id or unique prefix>", "scope": "once"|"always", "arguments": {...}}
 *   {"reject": "<id>", "reason": "unsafe", "text": "..."}
 *   {"pause": "<participant>"} / {"resume": "<participant>"}
 *   {"answer": "<form request id>", "action": "accept"|"decline"|"cancel", "content": {...}}
 *       answers a form asked of this person (the request is on stdout as an mcp/request
 *       with method elicitation/create; an `{"event": "form"}` line follows it)
 *   {"quit": true}
 *   {"kind": "...", ...}   any envelope, sent as is (the gateway fills in the rest)
 */
import { createInterface, type Interface } from "node:readline";
import type { Envelope } from "../../gateway/index.js";
import type { OutboundEnvelope, WelcomeInfo } from "../../participants/index.js";
import { isRecord } from "../../gateway/index.js";
import { TerminalSession, type Ask, type TerminalOptions } from "./session.js";

export class JsonTerminal extends TerminalSession {
  private rl: Interface | undefined;
  // Scripts ask for tools/list themselves; a refresh of ours would only add lines to stdout.
  protected override readonly watchesTools = false;

  constructor(opts: TerminalOptions) {
    super(opts);
  }

  /** One JSON line of our own. */
  event(name: string, fields: Record<string, unknown> = {}): void {
    this.write({ event: name, ...fields });
  }

  notice(text: string, level: "info" | "error" = "info"): void {
    this.event(level === "error" ? "error" : "notice", { message: text });
  }

  private write(value: unknown): void {
    this.opts.output.write(`${JSON.stringify(value)}\n`);
  }

  protected showEnvelope(env: Envelope): void {
    this.write(env);
  }

  protected showWelcome(info: WelcomeInfo, _first: boolean, _missed: Envelope[]): void {
    // The welcome itself carries the history; scripts get it whole.
    this.write(info.envelope);
  }

  protected queueChanged(): void {}

  protected formAsked(ask: Ask): void {
    this.event("form", { id: ask.id, from: ask.from, ...(ask.about ? { about: ask.about } : {}), mode: ask.form.mode });
  }

  protected formEnded(ask: Ask, why: string): void {
    this.event("form_ended", { id: ask.id, why });
  }

  /** Scripts know what they sent. */
  protected echoChat(): void {}

  protected startInput(): void {
    const rl = createInterface({ input: this.opts.input, crlfDelay: Infinity, terminal: false });
    this.rl = rl;
    rl.on("line", (line) => this.line(line));
    rl.on("close", () => {
      if (this.rl === rl && this.opts.exitOnEof) this.finish({ reason: "eof" });
    });
  }

  protected stopInput(): void {
    const rl = this.rl;
    this.rl = undefined;
    rl?.close();
  }

  private line(line: string): void {
    if (this.ended || !line.trim()) return;
    let cmd: unknown;
    try {
      cmd = JSON.parse(line);
    } catch (err) {
      return this.notice(`input is not JSON: ${(err as Error).message}`, "error");
    }
    if (!isRecord(cmd)) return this.notice("input must be a JSON object", "error");
    try {
      this.run(cmd);
    } catch (err) {
      this.notice((err as Error).message, "error");
    }
  }

  private run(cmd: Record<string, unknown>): void {
    const str = (k: string) => (typeof cmd[k] === "string" ? (cmd[k] as string) : undefined);
    if (cmd["quit"] !== undefined) return this.finish({ reason: "quit" });
    if (typeof cmd["kind"] === "string") {
      const env: OutboundEnvelope = { kind: cmd["kind"], payload: cmd["payload"] };
      if (Array.isArray(cmd["to"])) env.to = cmd["to"].map(String);
      if (Array.isArray(cmd["correlation_id"])) env.correlation_id = cmd["correlation_id"].map(String);
      else if (typeof cmd["correlation_id"] === "string") env.correlation_id = [cmd["correlation_id"]];
      if (str("context")) env.context = str("context");
      if (str("id")) env.id = str("id");
      const id = this.client.send(env);
      return this.event("sent", { id, kind: env.kind });
    }
    if (cmd["chat"] !== undefined) {
      const to = Array.isArray(cmd["to"]) ? cmd["to"].map(String) : typeof cmd["to"] === "string" ? [cmd["to"]] : undefined;
      this.chat(String(cmd["chat"]), to);
      return;
    }
    if (str("approve") !== undefined) {
      const r = this.queue.resolve(str("approve"));
      const proposal = r.ok ? r.proposal.id : str("approve")!;
      const scope = cmd["scope"] === "always" ? "always" : "once";
      if (cmd["scope"] !== undefined && cmd["scope"] !== "once" && cmd["scope"] !== "always")
        throw new Error(`scope must be "once" or "always"`);
      const args = cmd["arguments"];
      if (args !== undefined && !isRecord(args)) throw new Error("arguments must be a JSON object");
      const id = this.approve(proposal, { scope, arguments: args as Record<string, unknown> | undefined });
      return this.event("sent", { id, kind: "mcp/approve", proposal });
    }
    if (str("reject") !== undefined) {
      const r = this.queue.resolve(str("reject"));
      const proposal = r.ok ? r.proposal.id : str("reject")!;
      const id = this.reject(proposal, str("reason") ?? "disagree", str("text"));
      return this.event("sent", { id, kind: "mcp/reject", proposal });
    }
    if (str("answer") !== undefined) {
      const ask = this.forms.find((f) => f.id === str("answer"));
      if (!ask) throw new Error(`no form "${str("answer")}" is waiting`);
      const action = cmd["action"];
      if (action === "accept") {
        const content = cmd["content"];
        if (content !== undefined && !isRecord(content)) throw new Error("content must be a JSON object");
        this.answer(ask, { action, ...(content === undefined ? {} : { content }) });
      } else if (action === "decline" || action === "cancel") this.answer(ask, { action });
      else throw new Error('action must be "accept", "decline" or "cancel"');
      return this.event("answered", { id: ask.id, action });
    }
    for (const verb of ["pause", "resume"] as const) {
      const target = str(verb);
      if (target !== undefined) {
        this.control(verb, target);
        return;
      }
    }
    throw new Error(
      'unknown input: expected {"chat":…}, {"approve":…}, {"reject":…}, {"pause":…}, {"resume":…}, {"answer":…}, {"quit":true} or an envelope {"kind":…}',
    );
  }
}
