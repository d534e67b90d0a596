import { describe, expect, it } from "vitest";
import { Conversation, estimateRequestTokens } from "../participants/agent/context.js";
import { buildSystemPrompt, type PromptInput } from "../participants/agent/prompt.js";
import type { Message } from "../participants/agent/providers/types.js";
import { buildToolSet, type SpaceTool } from "../participants/agent/tools.js";

const participants: PromptInput["participants"] = [
  { id: "alice", kind: "human", description: "The operator; approves changes" },
  { id: "fs", kind: "mcp", description: "Files of the project (read-only unless approved)" },
  { id: "helper", kind: "agent", description: "Me" },
  { id: "researcher", kind: "agent", description: "Finds things on the web\nand summarizes them" },
  { id: "web-search", kind: "mcp" },
  { id: "bob", kind: "human" },
];

const schema = { type: "object", properties: { path: { type: "string" } }, required: ["path"] };
const tools: SpaceTool[] = [
  {
    name: "fs/read_file",
    participant: "fs",
    tool: "read_file",
    description: "Read a text file",
    inputSchema: schema,
    annotations: { readOnlyHint: true },
    policy: "direct",
  },
  {
    name: "fs/list_directory",
    participant: "fs",
    tool: "list_directory",
    description: "List a directory",
    inputSchema: schema,
    annotations: { readOnlyHint: true },
    policy: "direct",
  },
  {
    name: "fs/write_file",
    participant: "fs",
    tool: "write_file",
    description: "Write a file.\n  Overwrites it if it exists.",
    inputSchema: schema,
    policy: "proposal",
  },
  { name: "fs/delete_file", participant: "fs", tool: "delete_file", description: "Delete a file", inputSchema: schema, policy: "denied" },
  { name: "web-search/search", participant: "web-search", tool: "search", description: "Search the web", policy: "direct" },
  {
    name: "researcher/ask",
    participant: "researcher",
    tool: "ask",
    description: "Ask the researcher; returns its answer",
    policy: "proposal",
  },
  { name: "helper/summarize", participant: "helper", tool: "summarize", description: "Summarize a text", policy: "direct" },
];

const input: PromptInput = {
  self: { id: "helper", description: "A careful coding assistant", instructions: "Answer in English.\nPrefer small changes." },
  space: { id: "demo", name: "Demo space", description: "A human and two agents working on a repository" },
  participants,
  tools,
};

function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe("system prompt", () => {
  it("describes the agent, the others, the tools by policy, rejections and timeouts", () => {
    expect(buildSystemPrompt(input)).toMatchInlineSnapshot(`
      "You are helper, an AI agent participant in the shared workspace "Demo space" (space id: demo).
      Your role: A careful coding assistant
      About this space: A human and two agents working on a repository
      Everything said in this space can be watched by every participant: humans, other agents and tool servers.

      ## Participants
      - alice (human): The operator; approves changes
      - bob (human)
      - fs (mcp): Files of the project (read-only unless approved)
      - researcher (agent): Finds things on the web and summarizes them
      - web-search (mcp)

      ## Conversation
      Messages reach you as "sender: text". Your reply text is posted to the space as a chat message from you.
      To address a participant, mention them as @id (for example @alice). Answer what is asked of you;
      do not reply only to acknowledge another agent, and stop once the task is done.

      ## Tools
      Tools belong to participants and are named participant/tool. Each one is offered to you as a function
      whose description starts with the tool's name in brackets, for example [fs/read_file].
      Call several tools in one turn when the calls do not depend on each other: they run in parallel.

      Call directly:
      - fs/list_directory: List a directory
      - fs/read_file: Read a text file
      - web-search/search: Search the web

      Needs approval (each call becomes a proposal that a human may approve or reject; the call waits for the decision):
      - fs/write_file: Write a file. Overwrites it if it exists.
      - researcher/ask: Ask the researcher; returns its answer

      1 more tool exists in this space that you may not use; it is not offered to you.

      Your own tools, which others may call: helper/summarize.

      ## When a tool call does not succeed
      - Rejected: the result says the proposal was rejected, by whom and why. Read the reason and adapt: change the
        arguments, take another way, or ask in chat. Do not repeat the same call unchanged.
      - Timed out: no answer or no decision came in time. The call may or may not have taken effect: check before
        repeating anything that changes state, and say so when you cannot.
      - Other errors (unknown tool, invalid arguments, the tool failed): fix the call if you can, otherwise explain
        the problem in chat.

      ## Instructions
      Answer in English.
      Prefer small changes."
    `);
  });

  it("is the same for the same space whatever the order", () => {
    const expected = buildSystemPrompt(input);
    for (let seed = 1; seed <= 20; seed++) {
      expect(buildSystemPrompt({ ...input, participants: shuffled(participants, seed), tools: shuffled(tools, seed * 7) })).toBe(expected);
    }
  });

  it("says so when there are no tools and nobody else", () => {
    const prompt = buildSystemPrompt({
      self: { id: "solo" },
      space: { id: "empty" },
      participants: [{ id: "solo", kind: "agent" }],
      tools: [],
    });
    expect(prompt).toContain('You are solo, an AI agent participant in the shared workspace "empty".');
    expect(prompt).toContain("Nobody else is here right now.");
    expect(prompt).toContain("No tools are available to you right now.");
    expect(prompt).not.toContain("## Instructions");
  });

  it("mentions denied tools without listing them, and cuts long descriptions", () => {
    const prompt = buildSystemPrompt({
      ...input,
      tools: [
        { name: "fs/delete_file", participant: "fs", tool: "delete_file", policy: "denied" },
        { name: "fs/read_file", participant: "fs", tool: "read_file", description: `${"x".repeat(299)}😀 and more`, policy: "direct" },
      ],
    });
    expect(prompt).toContain("1 more tool exists in this space that you may not use; it is not offered to you.");
    expect(prompt).not.toContain("delete_file");
    expect(prompt).toContain(`- fs/read_file: ${"x".repeat(299)}…`);
    expect(prompt).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/); // no lone surrogate
  });
});

describe("tool set", () => {
  it("offers what the agent may call, sorted, with real names and approval in the descriptions", () => {
    const set = buildToolSet(tools, { self: "helper" });
    expect(set.definitions.map((d) => d.name)).toEqual([
      "fs__list_directory",
      "fs__read_file",
      "fs__write_file",
      "researcher__ask",
      "web-search__search",
    ]);
    expect(set.denied).toBe(1);
    expect(set.collisions).toEqual([]);
    expect(set.definitions[2]).toEqual({
      name: "fs__write_file",
      description:
        "[fs/write_file] Needs approval: the call becomes a proposal that a human may reject. Write a file.\n  Overwrites it if it exists.",
      parameters: schema,
    });
    // A tool without a schema still gets an object schema.
    expect(set.definitions[4]!.parameters).toEqual({ type: "object", properties: {} });
    expect(set.names.toolName("researcher__ask")).toBe("researcher/ask");
    expect(set.byName.get("fs/read_file")?.policy).toBe("direct");
    expect(set.names.functionName("helper/summarize")).toBeUndefined();
  });
});

describe("context budget", () => {
  const user = (text: string): Message => ({ role: "user", text });
  const call = (id: string, text = ""): Message => ({
    role: "assistant",
    text,
    toolCalls: [{ id, name: "fs__read_file", arguments: { path: "x" } }],
  });
  const result = (id: string, content: string): Message => ({ role: "tool", callId: id, name: "fs__read_file", content, isError: false });

  it("estimates tokens as chars/4 and reports them with the messages in context", () => {
    const c = new Conversation({ budgetTokens: 1000 });
    c.append(user("a".repeat(84))); // 84 chars + 16 overhead = 100 chars
    expect(c.stats()).toEqual({ tokens: 25, max_tokens: 1000, messages_in_context: 1 });
  });

  it("drops the oldest whole units first, never a tool call without its results", () => {
    const c = new Conversation({ budgetTokens: 100 });
    c.append(user("x".repeat(184))); // 50 tokens
    c.append(call("c1"), result("c1", "y".repeat(100))); // 44 tokens, as one unit
    expect(c.messagesInContext).toBe(3);
    expect(c.append(user("z".repeat(84)))).toBe(1); // 25 more: the oldest unit goes
    expect(c.messages.map((m) => m.role)).toEqual(["assistant", "tool", "user"]);
    expect(c.append(user("w".repeat(184)))).toBe(2); // the call goes with its result
    expect(c.messages.map((m) => m.role)).toEqual(["user", "user"]);
    expect(c.tokens).toBeLessThanOrEqual(100);

    const d = new Conversation({ budgetTokens: 120 });
    d.append(user("q".repeat(40)));
    // The newest unit alone is over budget: it stays whole, everything older goes.
    expect(d.append(call("c2"), result("c2", "r".repeat(400)))).toBe(1);
    expect(d.messages.map((m) => m.role)).toEqual(["assistant", "tool"]);
  });

  it("refuses a tool result that answers no call", () => {
    const c = new Conversation({ budgetTokens: 1000 });
    expect(() => c.append(result("c9", "orphan"))).toThrow(/does not follow/);
    c.append(user("hi"), call("c1"));
    expect(() => c.append(result("c2", "wrong id"))).toThrow(/c2/);
    expect(() => c.append(user("x"), call("c3"), result("c3", "ok"), result("c1", "too late"))).toThrow(/c1/);
    expect(c.messagesInContext).toBe(2); // nothing of the bad batch got in
    c.append(result("c1", "ok"));
    expect(c.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
  });

  it("forgets the oldest or newest entries, rounded to whole units, and clears", () => {
    const c = new Conversation({ budgetTokens: 10_000 });
    c.append(user("one"), call("c1"), result("c1", "r1"), user("two"), call("c2"), result("c2", "r2"), user("three"));
    expect(c.messagesInContext).toBe(7);
    expect(c.forget("oldest", 2)).toBe(3); // "one", then the call with its result
    expect(c.messages[0]).toEqual(user("two"));
    expect(c.forget("newest", 1)).toBe(1);
    expect(c.forget("newest", 1)).toBe(2); // c2 and its result together
    expect(c.messages).toEqual([user("two")]);
    expect(c.clear()).toBe(1);
    expect(c.stats()).toEqual({ tokens: 0, max_tokens: 10_000, messages_in_context: 0 });
  });

  it("compacts the oldest half into one summary message", async () => {
    const c = new Conversation({ budgetTokens: 10_000 });
    c.append(user("one"), call("c1"), result("c1", "r1"), user("two"), user("three"));
    let seen: readonly Message[] = [];
    const replaced = await c.compact(async (messages) => {
      seen = messages;
      return "  alice asked for one and two; fs returned r1  ";
    });
    expect(seen.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
    expect(replaced).toBe(3);
    expect(c.messages).toEqual([
      user("Summary of the earlier conversation:\nalice asked for one and two; fs returned r1"),
      user("two"),
      user("three"),
    ]);
    expect(await new Conversation({ budgetTokens: 10 }).compact(async () => "x")).toBe(0);
  });

  it("does not compact what was forgotten while the summary was being written", async () => {
    const c = new Conversation({ budgetTokens: 10_000 });
    c.append(user("one"), user("two"), user("three"), user("four"));
    const replaced = await c.compact(async () => {
      c.forget("oldest", 1);
      c.append(user("five"));
      return "summary";
    });
    expect(replaced).toBe(0);
    expect(c.messages.map((m) => (m.role === "user" ? m.text : ""))).toEqual(["two", "three", "four", "five"]);
  });

  it("follows the provider's count once usage was reported", () => {
    const c = new Conversation({ budgetTokens: 100 });
    c.append(user("a".repeat(184))); // 200 chars: 50 estimated tokens
    expect(c.tokens).toBe(50);
    const estimate = estimateRequestTokens({ system: "", tools: [], messages: c.messages });
    c.calibrate(2 * estimate, estimate); // the real tokenizer counts twice as many
    expect(c.tokens).toBe(100);
    c.append(user("b".repeat(184)));
    // 200 tokens now: over budget, so the oldest goes.
    expect(c.messagesInContext).toBe(1);
    expect(c.tokens).toBe(100);
    c.calibrate(0, 10); // nonsense is ignored
    expect(c.tokens).toBe(100);
  });
});
