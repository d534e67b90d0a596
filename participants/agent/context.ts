/**
 * The agent's conversation, kept within a token budget.
 *
 * Messages are grouped into units that are only ever kept or dropped whole: a user
 * message, or an assistant message together with the tool results that answer its calls
 * (splitting them would leave a call without its result, which both APIs refuse). When
 * the budget is exceeded the oldest units go first; the newest unit always stays.
 *
 * Tokens are estimated as characters / 4. Once a provider has reported what it counted
 * for a request (`calibrate`), estimates are scaled by the observed ratio, so the figure
 * follows the model's real tokenizer without the store having to know it.
 */
import type { Message, ModelRequest } from "./providers/types.js";

export interface ConversationOptions {
  /** Tokens the messages may take. The system prompt and tool definitions are not counted here. */
  budgetTokens: number;
}

/** Named as in MEW's `participant/status` payload, so it can be sent as is. */
export interface ConversationStats {
  tokens: number;
  max_tokens: number;
  messages_in_context: number;
}

export type Summarize = (messages: readonly Message[]) => Promise<string>;

interface Unit {
  messages: Message[];
  chars: number;
}

const CHARS_PER_TOKEN = 4;
/** A per-message allowance for role markers and ids that the characters do not show. */
const MESSAGE_OVERHEAD_CHARS = 16;

export class Conversation {
  private units: Unit[] = [];
  private flat: Message[] | undefined;
  private chars = 0;
  private ratio = 1;
  private budget: number;

  constructor(opts: ConversationOptions) {
    this.budget = opts.budgetTokens;
  }

  /** Every message in context, oldest first. The array is shared until the next change. */
  get messages(): readonly Message[] {
    this.flat ??= this.units.flatMap((u) => u.messages);
    return this.flat;
  }

  get messagesInContext(): number {
    return this.messages.length;
  }

  get tokens(): number {
    return Math.ceil((this.chars / CHARS_PER_TOKEN) * this.ratio);
  }

  get budgetTokens(): number {
    return this.budget;
  }

  set budgetTokens(tokens: number) {
    this.budget = tokens;
    this.enforce();
  }

  stats(): ConversationStats {
    return { tokens: this.tokens, max_tokens: this.budget, messages_in_context: this.messagesInContext };
  }

  /**
   * Appends messages, then drops the oldest units while over budget. Append an assistant
   * message and its tool results in one call, once the results are in; a tool result
   * that does not answer a call of the assistant message before it throws. Returns how
   * many messages were dropped.
   */
  append(...messages: Message[]): number {
    // Check the whole batch first, so a bad one leaves the conversation as it was.
    let caller = this.units[this.units.length - 1]?.messages[0];
    for (const m of messages) {
      if (m.role !== "tool") caller = m;
      // A result without its call is refused by both APIs on every later request, so it
      // must never get in: this is a caller's bug, not a runtime condition.
      else if (caller?.role !== "assistant" || !caller.toolCalls.some((c) => c.id === m.callId)) {
        throw new TypeError(`tool result ${m.callId} does not follow the assistant message that made the call`);
      }
    }
    for (const m of messages) {
      const chars = messageChars(m);
      const last = this.units[this.units.length - 1];
      if (m.role === "tool" && last) {
        last.messages.push(m);
        last.chars += chars;
      } else {
        this.units.push({ messages: [m], chars });
      }
      this.chars += chars;
    }
    this.flat = undefined;
    return this.enforce();
  }

  /**
   * Forgets at least `entries` messages from one end, rounded up to whole units. Returns
   * how many messages were removed.
   */
  forget(direction: "oldest" | "newest", entries: number): number {
    let removed = 0;
    while (removed < entries && this.units.length > 0) {
      const unit = direction === "oldest" ? this.units.shift()! : this.units.pop()!;
      removed += this.remove(unit);
    }
    this.flat = undefined;
    return removed;
  }

  /** Forgets everything. Returns how many messages were removed. */
  clear(): number {
    const removed = this.messagesInContext;
    this.units = [];
    this.chars = 0;
    this.flat = undefined;
    return removed;
  }

  /**
   * Replaces the oldest half of the units with one message holding a summary of them.
   * Messages may keep arriving while `summarize` runs; if the summarized ones were
   * dropped or forgotten meanwhile, nothing is replaced. Returns how many messages were
   * replaced (0 when there was nothing to compact).
   */
  async compact(summarize: Summarize): Promise<number> {
    const count = Math.floor(this.units.length / 2);
    if (count === 0) return 0;
    const taken = this.units.slice(0, count);
    const summary = await summarize(taken.flatMap((u) => u.messages));
    if (taken.some((u, i) => this.units[i] !== u)) return 0;
    this.units.splice(0, count);
    let replaced = 0;
    for (const u of taken) replaced += this.remove(u);
    const message: Message = { role: "user", text: `Summary of the earlier conversation:\n${summary.trim()}` };
    const chars = messageChars(message);
    this.units.unshift({ messages: [message], chars });
    this.chars += chars;
    this.flat = undefined;
    this.enforce();
    return replaced;
  }

  /**
   * Tells the store what the provider counted (`reportedTokens`) for a request whose
   * chars/4 estimate was `estimatedTokens` (see `estimateRequestTokens`). Later figures
   * are scaled by that ratio, bounded to a sane range.
   */
  calibrate(reportedTokens: number, estimatedTokens: number): void {
    if (!(reportedTokens > 0) || !(estimatedTokens > 0)) return;
    this.ratio = Math.min(4, Math.max(0.25, reportedTokens / estimatedTokens));
    this.enforce();
  }

  private enforce(): number {
    let dropped = 0;
    while (this.tokens > this.budget && this.units.length > 1) dropped += this.remove(this.units.shift()!);
    if (dropped > 0) this.flat = undefined;
    return dropped;
  }

  /** Accounts for a unit already taken out of `units`; returns its message count. */
  private remove(unit: Unit): number {
    this.chars -= unit.chars;
    return unit.messages.length;
  }
}

export function messageChars(m: Message): number {
  switch (m.role) {
    case "user":
      return m.text.length + MESSAGE_OVERHEAD_CHARS;
    case "assistant":
      return (
        m.text.length +
        MESSAGE_OVERHEAD_CHARS +
        m.toolCalls.reduce(
          (n, c) => n + c.id.length + c.name.length + (c.rawArguments ?? JSON.stringify(c.arguments)).length + MESSAGE_OVERHEAD_CHARS,
          0,
        )
      );
    case "tool":
      return m.content.length + m.callId.length + MESSAGE_OVERHEAD_CHARS;
  }
}

/** chars / 4 of a whole request (system, tools, messages), to compare with reported usage. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

export function estimateRequestTokens(request: Pick<ModelRequest, "system" | "messages" | "tools">): number {
  let chars = request.system.length + toolChars(request.tools);
  for (const m of request.messages) chars += messageChars(m);
  return Math.ceil(chars / CHARS_PER_TOKEN);
}

/**
 * The tool definitions' size. A tool set is one array object until the tools change, and
 * serializing hundreds of schemas on every model call would be most of the agent's own work.
 */
const toolCharsCache = new WeakMap<readonly unknown[], number>();
function toolChars(tools: ModelRequest["tools"]): number {
  let chars = toolCharsCache.get(tools);
  if (chars === undefined) {
    chars = 0;
    for (const t of tools) chars += t.name.length + t.description.length + JSON.stringify(t.parameters).length;
    toolCharsCache.set(tools, chars);
  }
  return chars;
}
