/**
 * Interactive delegation, the agent's side (the gateway's is gateway/conversations.ts).
 *
 * An agent whose `offer.interactive` is on, asked for a person, takes that person's
 * conversation over: it talks with them directly — each reply goes to them as chat, each
 * of their messages comes back as the next user turn — until its model calls
 * `complete(result)`, whose result answers the call it was asked with. The caller waits
 * meanwhile, its own state intact; nested takeovers stack, and the person's messages go to
 * the top (`HeldConversations` reads the stacks the gateway announces).
 */
import type { Envelope } from "../../gateway/index.js";
import type { ParticipantClient } from "../client.js";
import type { Conversation } from "./context.js";
import type { CallTool, TurnContext, TurnResult } from "./loop.js";
import { ToolNameMap } from "./names.js";
import type { ToolSet } from "./tools.js";
import { isRecord } from "../../gateway/index.js";

export const COMPLETE = "complete";
/** Turns (a reply and the person's answer) one takeover may take. */
const MAX_EXCHANGES = 100;

export const COMPLETE_NOTE =
  "\n\n## You hold the conversation\nThe person is now talking with you directly: your replies go to them, their answers come back to you. Ask what you need. When the task is done, call the function `complete` with the result; it goes back to whoever handed you the task, and the conversation returns to them. Do not call `complete` before the task is done, unless the person asks to stop.";

/** The tool set of a turn, with `complete` added. */
export function withComplete(tools: ToolSet): ToolSet {
  const names = new ToolNameMap([...[...tools.names.entries()].map(([real]) => real), COMPLETE]);
  return {
    ...tools,
    names,
    definitions: [
      ...tools.definitions,
      {
        name: COMPLETE,
        description: "Hand the task back: the result goes to whoever asked, and the conversation returns to them.",
        parameters: {
          type: "object",
          properties: { result: { type: "string", description: "The complete answer to the task." } },
          required: ["result"],
        },
      },
    ],
  };
}

/** Who holds each person's conversation, as the gateway announced it. */
export class HeldConversations {
  private readonly holders = new Map<string, string>();

  /** From the welcome (`conversations`) after every (re)join. */
  reset(welcome: Envelope | undefined): void {
    this.holders.clear();
    const list =
      welcome && typeof welcome.payload === "object" && welcome.payload !== null
        ? (welcome.payload as Record<string, unknown>)["conversations"]
        : undefined;
    if (!Array.isArray(list)) return;
    for (const c of list)
      if (isRecord(c) && typeof c["human"] === "string" && typeof c["holder"] === "string") this.holders.set(c["human"], c["holder"]);
  }

  /** A `space/conversation` from the gateway. */
  apply(env: Envelope): void {
    if (!isRecord(env.payload) || typeof env.payload["human"] !== "string") return;
    const holder = env.payload["holder"];
    if (typeof holder === "string") this.holders.set(env.payload["human"], holder);
    else this.holders.delete(env.payload["human"]);
  }

  holder(human: string): string | undefined {
    return this.holders.get(human);
  }
}

/** A person's messages, waiting for the agent that holds their conversation. */
export class Inbox {
  private readonly queued: string[] = [];
  private waiter: ((text: string) => void) | undefined;

  push(text: string): void {
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w(text);
    } else if (this.queued.length < 64) this.queued.push(text);
  }

  next(signal: AbortSignal): Promise<string> {
    const text = this.queued.shift();
    if (text !== undefined) return Promise.resolve(text);
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const onAbort = () => {
        this.waiter = undefined;
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.waiter = (t) => {
        signal.removeEventListener("abort", onAbort);
        resolve(t);
      };
    });
  }
}

export interface InteractiveDeps {
  client: ParticipantClient;
  human: string;
  conversation: Conversation;
  inbox: Inbox;
  signal: AbortSignal;
  /** Wait for the person's message before the first turn (a conversation taken up again mid-question). */
  waitFirst?: boolean | undefined;
  context: () => TurnContext;
  callTool: CallTool;
  /** Runs one model turn. */
  turn: (opts: { context: () => TurnContext; callTool: CallTool; signal: AbortSignal }) => Promise<TurnResult>;
  /** Says something to the person. */
  say: (text: string) => void;
}

export type InteractiveEnd =
  | { how: "complete"; result: string; last: TurnResult | undefined }
  | { how: "ended"; last: TurnResult | undefined; why: "aborted" | "error" | "max_iterations" | "exchanges" };

/** Talks with the person until the model calls `complete`, the call ends, or a turn fails. */
export async function converse(deps: InteractiveDeps): Promise<InteractiveEnd> {
  let last: TurnResult | undefined;
  if (deps.waitFirst) {
    try {
      deps.conversation.append({ role: "user", text: `${deps.human}: ${await deps.inbox.next(deps.signal)}` });
    } catch {
      return { how: "ended", last, why: "aborted" };
    }
  }
  for (let exchange = 0; exchange < MAX_EXCHANGES; exchange++) {
    let completed: string | undefined;
    const stop = new AbortController();
    const onOuter = () => stop.abort(deps.signal.reason);
    deps.signal.addEventListener("abort", onOuter, { once: true });
    const callTool: CallTool = async (name, args, ctx) => {
      if (name !== COMPLETE) return deps.callTool(name, args, ctx);
      completed = typeof args["result"] === "string" ? args["result"] : JSON.stringify(args["result"] ?? "");
      stop.abort("complete");
      return { type: "result", content: "Handed back." };
    };
    try {
      last = await deps.turn({
        context: () => ({ ...deps.context(), tools: withComplete(deps.context().tools) }),
        callTool,
        signal: stop.signal,
      });
    } finally {
      deps.signal.removeEventListener("abort", onOuter);
    }
    if (completed !== undefined) return { how: "complete", result: completed, last };
    if (last.status !== "done") return { how: "ended", last, why: last.status === "aborted" ? "aborted" : last.status };
    if (last.text.trim()) deps.say(last.text.trim());
    let answer: string;
    try {
      answer = await deps.inbox.next(deps.signal);
    } catch {
      return { how: "ended", last, why: "aborted" };
    }
    deps.conversation.append({ role: "user", text: `${deps.human}: ${answer}` });
  }
  return { how: "ended", last, why: "exchanges" };
}
