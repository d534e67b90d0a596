/**
 * The interactive terminal: the space scrolls by above one input line. (A file past 500 lines
 * because it is one state machine — keys and modes over one input line — that reads best whole;
 * its fixed texts live in tty-text.ts.)
 *
 * Rendering is deliberately plain: every line is printed once and scrolls with the
 * terminal; only the input line at the bottom is redrawn (clear line, print, place the
 * cursor). The proposal queue is printed again as a block whenever it changes, so the
 * latest state is always the last thing on screen. No alternate screen, no cursor
 * addressing beyond the current line: the terminal's own scrollback keeps working.
 *
 * Keys with an empty input line and a proposal waiting: a approve once, A approve always
 * (after saying what it grants and a typed "yes"), e edit the arguments then approve, R answer
 * the proposer without deciding, r reject with a reason, n/p or ↓/↑ move in the queue.
 * A form someone asks this person to fill in (elicitation) takes the input line field by
 * field (form.ts) until it is answered, declined, cancelled (Esc) or withdrawn.
 */
import { emitKeypressEvents } from "node:readline";
import type { Envelope } from "../../gateway/index.js";
import type { WelcomeInfo } from "../../participants/index.js";
import { editInEditor } from "./editor.js";
import {
  ANSI,
  callShape,
  formatEnvelope,
  interruption,
  oneLine,
  PLAIN,
  shortId,
  truncate,
  visibleLength,
  type Style,
  type ViewContext,
} from "./format.js";
import { isRecord } from "../../gateway/index.js";
import { FormWalk } from "./form.js";
import { LineEditor, type Key } from "./line.js";
import { SpaceLists } from "./lists.js";
import { allArguments, proposalLines, queueBlock, showPreview } from "./proposal-view.js";
import { schemaProblem } from "./validate.js";
import { TerminalSession, type Ask, type TerminalOptions } from "./session.js";
import { alwaysScope, HELP, onlyStyles, sanitizeId } from "./tty-text.js";
import { alwaysChoices, pickChoice, type AlwaysChoice } from "./always-scopes.js";

type Mode =
  | { kind: "chat" }
  | { kind: "edit"; proposal: string }
  | { kind: "reason"; proposal: string; label: string }
  | { kind: "always"; proposal: string; label: string; from: string; choices: AlwaysChoice[] }
  | { kind: "respond"; proposal: string; from: string }
  | { kind: "form"; walk: FormWalk };

const DEFAULT_REJECT_REASON = "disagree";

export class TtyTerminal extends TerminalSession {
  private readonly style: Style;
  private readonly view: ViewContext;
  private readonly line = new LineEditor();
  private mode: Mode = { kind: "chat" };
  /** Lines held back while an external editor owns the screen. */
  private held: string[] | undefined;
  private readonly onKey = (str: string | undefined, key: Key | undefined) => this.key(str, key ?? {});
  private lastToolCount = -1;
  private readonly lists: SpaceLists;
  /** The agent holding my conversation (interactive delegation), shown in the prompt. */
  private holder: string | undefined;

  constructor(opts: TerminalOptions) {
    super(opts);
    const env = opts.env ?? process.env;
    this.style = opts.output.isTTY && !env["NO_COLOR"] && env["TERM"] !== "dumb" ? ANSI : PLAIN;
    this.view = { me: "?", width: this.width, style: this.style, calls: new Map(), proposals: new Set() };
    this.lists = new SpaceLists({
      client: () => this.client,
      me: () => this.me,
      width: () => this.width,
      style: this.style,
      config: opts.config,
      print: (lines) => this.print(lines),
      notice: (text, level) => this.notice(text, level),
    });
  }

  private get width(): number {
    return Math.max(40, (this.opts.output.columns ?? 100) - 1);
  }

  // --- output -------------------------------------------------------------------------------

  /** Prints lines above the input line. */
  print(lines: string[]): void {
    if (lines.length === 0) return;
    if (this.held) {
      this.held.push(...lines);
      return;
    }
    this.opts.output.write(`\r\x1b[2K${lines.map(onlyStyles).join("\n")}\n`);
    this.drawPrompt();
  }

  notice(text: string, level: "info" | "error" = "info"): void {
    this.print([level === "error" ? this.style.red(`! ${text}`) : this.style.dim(`· ${text}`)]);
  }

  private drawPrompt(): void {
    if (this.ended || this.held) return;
    const prompt = this.promptText();
    const room = Math.max(10, this.width - visibleLength(prompt));
    // Show a window of the buffer that contains the cursor.
    const { shown, column } = this.line.window(room);
    const col = visibleLength(prompt) + column;
    this.opts.output.write(`\r\x1b[2K${prompt}${shown}\r${col > 0 ? `\x1b[${col}C` : ""}`);
  }

  private promptText(): string {
    const s = this.style;
    switch (this.mode.kind) {
      case "edit":
        return s.yellow("edit arguments as JSON (Enter approves, Esc cancels)> ");
      case "reason":
        return s.yellow(`why reject ${this.mode.label}? (reason "${DEFAULT_REJECT_REASON}"; Enter sends, Esc cancels)> `);
      case "always":
        return s.yellow(
          `always let ${this.mode.from} call ${this.mode.label} without asking? (yes: [1] ${truncate(this.mode.choices[0]?.text ?? "", 60)}; yes N: another; Esc cancels)> `,
        );
      case "respond":
        return s.yellow(`answer ${this.mode.from} about this proposal, without deciding (Enter sends, Esc cancels)> `);
      case "form":
        return this.mode.walk.prompt();
      case "chat": {
        const n = this.queue.size;
        const q = n > 0 ? s.yellow(`[${this.queue.position}/${n} waiting · a A e R r n p] `) : "";
        const w = this.holder ? s.yellow(`[with ${this.holder}] `) : "";
        return `${q}${w}${s.bold(this.me)}> `;
      }
    }
  }

  protected showEnvelope(env: Envelope): void {
    if (env.kind === "space/conversation" && isRecord(env.payload) && env.payload["human"] === this.me) {
      this.holder = typeof env.payload["holder"] === "string" ? sanitizeId(env.payload["holder"]) : undefined;
    }
    this.view.me = this.me;
    this.view.width = this.width;
    this.print(formatEnvelope(env, this.view));
  }

  protected showWelcome(info: WelcomeInfo, first: boolean, missed: Envelope[]): void {
    const s = this.style;
    const held =
      isRecord(info.envelope.payload) && Array.isArray(info.envelope.payload["conversations"])
        ? info.envelope.payload["conversations"]
        : [];
    const mine = held.find((c): c is Record<string, unknown> => isRecord(c) && c["human"] === info.id);
    this.holder = typeof mine?.["holder"] === "string" ? sanitizeId(mine["holder"]) : undefined;
    this.view.me = info.id;
    if (first) {
      const space =
        info.space?.name && info.space.name !== info.space.id ? `${info.space.id} (${info.space.name})` : (info.space?.id ?? "?");
      const present = info.participants.map((p) => `${p.id}${p.kind ? ` (${p.kind})` : ""}`).join(", ") || "nobody else yet";
      this.lastToolCount = info.tools.length;
      this.print([
        s.bold(`mewgate · space ${space} · you are ${info.id}`),
        s.dim(`present: ${present} · ${info.tools.length} tools · /help lists keys and commands`),
      ]);
    } else {
      this.notice(`rejoined as ${info.id}`);
    }
    const lines = missed.flatMap((e) => formatEnvelope(e, this.view));
    if (lines.length) this.print([s.dim(first ? "recent:" : "while away:"), ...lines.slice(-20)]);
  }

  protected echoChat(text: string, to: string[] | undefined): void {
    this.print([`${this.style.bold(this.me)}${to ? this.style.dim(` → ${to.join(", ")}`) : ""}: ${text}`]);
  }

  protected override toolsChanged(count: number): void {
    if (count === this.lastToolCount) return;
    this.lastToolCount = count;
    this.notice(`${count} tools in the space (/tools lists them)`);
  }

  /** Whether the last block printed showed proposals: "none waiting" is said once, after the last one goes. */
  private queueShown = false;

  protected queueChanged(): void {
    if (this.queue.size === 0) {
      if (this.queueShown) this.print([this.style.dim("── no proposals waiting ──")]);
      this.queueShown = false;
      this.drawPrompt();
      return;
    }
    this.queueShown = true;
    this.print(queueBlock(this.queue, this.style, this.width, { config: this.opts.config, tools: this.client.tools }));
    showPreview(
      this.client,
      this.queue.current,
      this.style,
      this.width,
      (lines) => this.print(lines),
      () => this.queue.current,
    );
  }

  // --- forms (elicitation) -------------------------------------------------------------------

  protected formAsked(ask: Ask): void {
    if (this.mode.kind === "form") return this.notice(`${ask.from} also asks you to fill in a form; it waits for this one`);
    this.startForm(ask);
  }

  protected formEnded(ask: Ask, why: string): void {
    if (this.mode.kind === "form" && this.mode.walk.ask === ask) {
      this.notice(`${ask.from} no longer waits for the form (${oneLine(why, 80)})`);
      this.mode = { kind: "chat" };
      return this.nextForm();
    }
    this.notice(`a waiting form from ${ask.from} was withdrawn (${oneLine(why, 80)})`);
  }

  private startForm(ask: Ask): void {
    const walk = new FormWalk(ask, this.style, this.width);
    this.print(walk.opening());
    this.setMode({ kind: "form", walk }, "");
  }

  private nextForm(): void {
    const next = this.forms[0];
    if (next) this.startForm(next);
    else this.drawPrompt();
  }

  private formLine(walk: FormWalk, line: string): void {
    const step = walk.enter(line);
    this.print(step.lines);
    if (!step.done) {
      this.mode = { kind: "form", walk };
      return;
    }
    this.answer(walk.ask, step.result);
    this.nextForm();
  }

  // --- input ---------------------------------------------------------------------------------

  protected startInput(): void {
    const input = this.opts.input;
    emitKeypressEvents(input);
    if (input.isTTY) input.setRawMode?.(true);
    input.on("keypress", this.onKey);
    input.resume();
    this.drawPrompt();
  }

  protected stopInput(): void {
    const input = this.opts.input;
    input.off("keypress", this.onKey);
    if (input.isTTY) input.setRawMode?.(false);
    input.pause();
    this.opts.output.write("\r\x1b[2K");
  }

  private key(str: string | undefined, key: Key): void {
    if (this.ended || this.held) return;
    if (this.mode.kind === "form" && (key.name === "escape" || (key.ctrl && key.name === "c"))) {
      // Leaving a form answers it: the asker hears "cancel" rather than waiting on nobody.
      const ask = this.mode.walk.ask;
      this.mode = { kind: "chat" };
      this.line.set("");
      this.answer(ask, { action: "cancel" });
      this.notice(`cancelled ${ask.from}'s form`);
      return this.nextForm();
    }
    if (key.ctrl && key.name === "c") {
      if (this.mode.kind !== "chat") return this.setMode({ kind: "chat" }, "");
      return this.finish({ reason: "quit" });
    }
    if (key.ctrl && key.name === "d" && this.line.buffer === "") {
      if (this.mode.kind === "chat") return this.finish({ reason: "quit" });
      return this.setMode({ kind: "chat" }, "");
    }
    if (key.name === "escape") {
      if (this.mode.kind !== "chat") this.notice("cancelled");
      return this.setMode({ kind: "chat" }, "");
    }
    if (key.name === "return" || key.name === "enter") {
      const line = this.line.buffer;
      this.line.set("");
      this.submit(line);
      return this.drawPrompt();
    }
    const empty = this.line.buffer === "" && this.mode.kind === "chat";
    if (empty && this.queue.size > 0 && !key.ctrl && !key.meta) {
      if (key.name === "down" || str === "n") return this.move(() => this.queue.next());
      if (key.name === "up" || str === "p") return this.move(() => this.queue.prev());
      if (str === "a") return this.approveSelected("once");
      // A standing grant is never one keystroke: it says what it allows and asks first.
      if (str === "A") return this.askAlways(undefined);
      if (str === "R") return this.startRespond(undefined);
      if (str === "e") return this.startEdit(undefined);
      if (str === "r") return this.startReject(undefined);
      if (str === "v") return this.viewAll();
    }
    if (this.line.edit(str, key)) this.drawPrompt();
  }

  private setMode(mode: Mode, buffer: string): void {
    this.mode = mode;
    this.line.set(buffer);
    this.drawPrompt();
  }

  private move(step: () => boolean): void {
    if (step()) this.queueChanged();
    else this.drawPrompt();
  }

  private submit(line: string): void {
    const mode = this.mode;
    this.mode = { kind: "chat" };
    if (mode.kind === "form") return this.formLine(mode.walk, line);
    if (mode.kind === "edit") return this.finishEdit(mode.proposal, line);
    if (mode.kind === "reason") return this.sendReject(mode.proposal, DEFAULT_REJECT_REASON, line.trim());
    if (mode.kind === "always") {
      const choice = pickChoice(line, mode.choices);
      if (choice) return this.approveSelected("always", mode.proposal, choice);
      return this.notice(`not confirmed; nothing approved (${mode.label} still waits)`);
    }
    if (mode.kind === "respond") return this.sendRespond(mode.proposal, mode.from, line.trim());
    const text = line.trim();
    if (!text) return;
    if (text.startsWith("/")) return this.command(text);
    this.safely(() => this.chat(text));
  }

  // --- proposals -------------------------------------------------------------------------------

  private approveSelected(scope: "once" | "always", ref?: string, choice?: AlwaysChoice): void {
    const r = this.queue.resolve(ref);
    if (!r.ok) return this.notice(r.message, "error");
    const label = callShape(r.proposal).label;
    this.safely(() => {
      this.approve(r.proposal.id, { scope, ...(choice && choice.limit !== "tool" ? { limit: choice.limit } : {}) });
      this.notice(
        `approved ${label}${interruption(r.proposal) ? " again" : ""} [${shortId(r.proposal.id)}]${scope === "always" ? ` — ${r.proposal.from} may now call ${label} without asking, ${choice?.text ?? "any arguments"}` : ""}`,
      );
    });
  }

  private askAlways(ref: string | undefined): void {
    const r = this.queue.resolve(ref);
    if (!r.ok) return this.notice(r.message, "error");
    const call = callShape(r.proposal);
    const label = call.label;
    const choices = alwaysChoices(isRecord(call.arguments) ? call.arguments : undefined);
    this.print(alwaysScope(r.proposal.from, label, this.style, "one of the scopes below"));
    this.print(choices.map((c, i) => `   ${this.style.bold(`[${i + 1}]`)} ${truncate(c.text, 160)}`));
    this.setMode({ kind: "always", proposal: r.proposal.id, label, from: r.proposal.from, choices }, "");
  }

  private startRespond(ref: string | undefined): void {
    const r = this.queue.resolve(ref);
    if (!r.ok) return this.notice(r.message, "error");
    this.setMode({ kind: "respond", proposal: r.proposal.id, from: r.proposal.from }, "");
  }

  /** A chat to the proposer tied to the proposal (docs/protocol.md, Respond): it stays pending. */
  private sendRespond(proposalId: string, to: string, text: string): void {
    if (!text) return this.notice("nothing sent");
    this.safely(() => {
      this.client.send({ kind: "chat", to: [to], correlation_id: [proposalId], payload: { text } });
      this.notice(`answered ${to} about [${shortId(proposalId)}]; it still waits for a decision`);
    });
  }

  private startReject(ref: string | undefined): void {
    const r = this.queue.resolve(ref);
    if (!r.ok) return this.notice(r.message, "error");
    this.setMode({ kind: "reason", proposal: r.proposal.id, label: callShape(r.proposal).label }, "");
  }

  private sendReject(proposalId: string, reason: string, text: string): void {
    this.safely(() => {
      this.reject(proposalId, reason, text);
      this.notice(`rejected [${shortId(proposalId)}] (${reason})${text ? `: ${text}` : ""}`);
    });
  }

  /** Prints the current proposal's arguments whole, wrapped, into the scrollback. */
  private viewAll(): void {
    const current = this.queue.current;
    if (!current) return;
    this.print(allArguments(current, this.style, this.width));
  }

  private startEdit(ref: string | undefined): void {
    const r = this.queue.resolve(ref);
    if (!r.ok) return this.notice(r.message, "error");
    const args = callShape(r.proposal).arguments;
    const env = this.opts.env ?? process.env;
    const editor = env["VISUAL"] || env["EDITOR"];
    if (editor && this.opts.input.isTTY) {
      void this.editExternally(editor, r.proposal.id, args);
      return;
    }
    this.setMode({ kind: "edit", proposal: r.proposal.id }, JSON.stringify(args ?? {}));
  }

  private finishEdit(proposalId: string, text: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      this.notice(`not valid JSON (${(err as Error).message}); fix it or press Esc`, "error");
      return this.setMode({ kind: "edit", proposal: proposalId }, text);
    }
    if (!isRecord(parsed)) {
      this.notice("the arguments must be a JSON object {…}", "error");
      return this.setMode({ kind: "edit", proposal: proposalId }, text);
    }
    const args = parsed;
    const proposal = this.queue.all.find((p) => p.id === proposalId);
    const call = proposal ? callShape(proposal) : undefined;
    const schema = call?.tool ? this.client.tools.find((t) => t.name === call.label)?.inputSchema : undefined;
    const problem = schemaProblem(schema, args);
    if (problem) {
      this.notice(`${problem} (the tool's input schema); fix it or press Esc`, "error");
      return this.setMode({ kind: "edit", proposal: proposalId }, text);
    }
    this.safely(() => {
      this.approve(proposalId, { scope: "once", arguments: args });
      this.notice(`approved [${shortId(proposalId)}] with edited arguments ${oneLine(args, 80)}`);
    });
  }

  /** Opens $VISUAL/$EDITOR on the arguments; the space keeps running, its lines are held back meanwhile. */
  private async editExternally(editor: string, proposalId: string, args: unknown): Promise<void> {
    const original = `${JSON.stringify(args ?? {}, null, 2)}\n`;
    const input = this.opts.input;
    const { code, text } = await editInEditor(editor, `arguments-${shortId(proposalId)}.json`, original, () => {
      input.off("keypress", this.onKey);
      if (input.isTTY) input.setRawMode?.(false);
      input.pause();
      this.opts.output.write("\r\x1b[2K");
      this.held = [];
    });
    // Set by the hand-over above, which always runs before the editor does.
    const held = this.held ?? [];
    this.held = undefined;
    if (this.ended) return;
    if (input.isTTY) input.setRawMode?.(true);
    input.on("keypress", this.onKey);
    input.resume();
    this.print(held);
    if (code !== 0) return this.notice(`${editor} exited with ${code}; nothing approved`, "error");
    // Quitting without saving (vi's :q!) leaves the file as it was: that is a cancel, not
    // an approval of the unchanged arguments. Approve with `a` for that.
    if (text === original) return this.notice("the arguments were not changed; nothing approved (press a to approve them as they are)");
    if (!text.trim()) return this.notice("empty arguments file; nothing approved");
    this.finishEdit(proposalId, text.trim().replace(/\s*\n\s*/g, " "));
  }

  // --- commands --------------------------------------------------------------------------------

  private command(line: string): void {
    const [name = "", ...args] = line.slice(1).split(/\s+/).filter(Boolean);
    switch (name) {
      case "help":
      case "?":
        return this.print(HELP.map((l) => this.style.dim(l)));
      case "quit":
      case "exit":
      case "q":
        return this.finish({ reason: "quit" });
      case "participants":
      case "who":
        return this.print(this.lists.participantLines());
      case "tools":
        void this.lists.showTools();
        return;
      case "proposals":
        return this.print(proposalLines(this.queue, this.style, this.width));
      case "grants":
        void this.lists.showGrants();
        return;
      case "revoke":
        void this.lists.revokeGrant(args[0]);
        return;
      case "approve": {
        const ref = args.find((a) => !a.startsWith("--"));
        return args.includes("--always") ? this.askAlways(ref) : this.approveSelected("once", ref);
      }
      case "respond": {
        let words = [...args];
        let ref: string | undefined;
        if (words[0] && this.queue.resolve(words[0]).ok) [ref, ...words] = words;
        const r = this.queue.resolve(ref);
        if (!r.ok) return this.notice(r.message, "error");
        return words.length ? this.sendRespond(r.proposal.id, r.proposal.from, words.join(" ")) : this.startRespond(r.proposal.id);
      }
      case "edit":
        return this.startEdit(args[0]);
      case "reject": {
        let words = [...args];
        let reason = DEFAULT_REJECT_REASON;
        const ri = words.indexOf("--reason");
        if (ri >= 0) {
          reason = words[ri + 1] ?? reason;
          words.splice(ri, 2);
        }
        // The first word is an id when it names a waiting proposal.
        let ref: string | undefined;
        if (words[0] && this.queue.resolve(words[0]).ok) [ref, ...words] = words;
        const r = this.queue.resolve(ref);
        if (!r.ok) return this.notice(r.message, "error");
        if (words.length === 0 && ri < 0) return this.startReject(r.proposal.id);
        return this.sendReject(r.proposal.id, reason, words.join(" "));
      }
      case "pause":
      case "resume":
      case "status": {
        const target = args[0];
        if (!target) return this.notice(`usage: /${name} <participant>`, "error");
        if (!this.client.participants.has(target)) return this.notice(`"${target}" is not here (/participants)`, "error");
        return this.safely(() => {
          this.control(name === "status" ? "request-status" : name, target);
          this.notice(name === "status" ? `asked ${target} for its status` : `${name === "pause" ? "paused" : "resumed"} ${target}`);
        });
      }
      case "disable":
      case "enable": {
        const target = args[0];
        if (!target) return this.notice(`usage: /${name} <participant>`, "error");
        return this.safely(() => {
          this.client.send({ kind: `space/${name}`, payload: { participant_id: target } });
          this.notice(`asked the space to ${name} ${target}`);
        });
      }
      case "cancel":
        if (!args[0]) return this.notice("usage: /cancel <proposal-or-call-id>", "error");
        return this.safely(() => this.notice(this.cancel(args[0]!, this.view.calls)));
      case "":
        return this.notice("type a command after / (/help lists them)", "error");
      default:
        return this.notice(`unknown command /${name}; /help lists them`, "error");
    }
  }

  private safely(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.notice((err as Error).message, "error");
    }
  }
}
