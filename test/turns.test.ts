/**
 * One agent turn, one card: the agent loop marks the calls a model asked for in one reply
 * (`_meta["mewgate/turn"]`), the gateway shows the mark on each proposal (strictly read:
 * a malformed mark is no mark), and the console draws them as one unit (its heading, then its
 * cards in order), where a person selects them together and approves them in one action,
 * each recorded on its own.
 */
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Conversation } from "../participants/agent/context.js";
import { type CallTool, runTurn } from "../participants/agent/loop.js";
import { ScriptedProvider } from "../participants/agent/providers/scripted.js";
import { buildToolSet } from "../participants/agent/tools.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", agent: "agent-token-2", fs: "fs-token-3" };
const SPACE = `space: {id: tn}
participants:
  human: {kind: human, token: ${T.human}}
  agent: {kind: agent, token: ${T.agent}}
  fs: {kind: mcp, token: ${T.fs}}
`;

let browser: Browser | undefined;
let gw: TestGateway | undefined;
let page: Page | undefined;
const clients: TestClient[] = [];
beforeAll(async () => {
  browser = await launchChromium();
}, 30_000);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  await page?.close();
  page = undefined;
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/tn/${path}`, {
    method,
    headers: { authorization: `Bearer ${T.human}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

let n = 0;
/** A tools/call through the gateway, as the agent makes one, with `_meta`. */
function call(agent: TestClient, path: string, meta: Record<string, unknown>): string {
  const id = `t-${++n}`;
  agent.send({
    id,
    kind: "mcp/request",
    to: ["system:gateway"],
    payload: {
      jsonrpc: "2.0",
      id,
      method: "tools/call",
      params: { name: "fs/write_file", arguments: { path, content: path }, _meta: meta },
    },
  });
  return id;
}

async function ready(): Promise<TestClient> {
  gw = await startGateway(SPACE);
  // Hinted neither destructive nor open-world (a tool with no hints is both, by MCP's defaults, and so high).
  clients.push(
    await toolOwner(gw, "tn", T.fs, [
      { name: "write_file", inputSchema: { type: "object" }, annotations: { destructiveHint: false, openWorldHint: false } },
    ]),
  );
  const agent = await TestClient.join(gw, "tn", T.agent);
  clients.push(agent);
  return agent;
}

describe("one agent turn, one card", () => {
  it("the loop marks the calls of one reply as one turn, and a lone call not at all", async () => {
    const tools = buildToolSet(
      [{ name: "fs/write_file", participant: "fs", tool: "write_file", description: "Write", policy: "proposal" }],
      { self: "agent" },
    );
    const provider = new ScriptedProvider([
      {
        text: "Both.",
        tool_calls: [
          { name: "fs/write_file", arguments: { path: "a" } },
          { name: "fs/write_file", arguments: { path: "b" } },
        ],
      },
      { when: { after_tool_result: true }, text: "One more.", tool_calls: [{ name: "fs/write_file", arguments: { path: "c" } }] },
      { when: { after_tool_result: true }, text: "Done." },
    ]);
    const seen: Array<{ path: unknown; turn: unknown }> = [];
    const callTool: CallTool = async (_name, args, ctx) => {
      seen.push({ path: args["path"], turn: ctx.turn });
      return { type: "result", content: "ok" };
    };
    const conversation = new Conversation({ budgetTokens: 10_000 });
    conversation.append({ role: "user", text: "human: write" });
    await runTurn({ provider, conversation, context: { system: "s", tools }, callTool, options: { model: "t" } });
    expect(seen).toHaveLength(3);
    const [a, b, c] = seen as Array<{ turn?: { id: string; index: number; count: number } }>;
    expect(a!.turn).toMatchObject({ index: 0, count: 2 });
    expect(b!.turn).toMatchObject({ id: a!.turn!.id, index: 1, count: 2 });
    expect(c!.turn).toBeUndefined();
  });

  it("hostile marks are no marks: a bad id, a count of 1 or 100, an index past the count, a string", async () => {
    const agent = await ready();
    const bad = [
      { id: "has space", index: 0, count: 2 },
      { id: "x".repeat(65), index: 0, count: 2 },
      { id: "ok", index: 0, count: 1 },
      { id: "ok", index: 0, count: 100 },
      { id: "ok", index: 2, count: 2 },
      { id: "ok", index: -1, count: 2 },
      "ok",
      { id: "<b>", index: 0, count: 2 },
    ];
    bad.forEach((turn, i) => {
      call(agent, `notes/${i}.md`, { "mewgate/turn": turn });
    });
    await waitFor(async () => (await api("GET", "proposals")).body.proposals.length === bad.length);
    for (const p of (await api("GET", "proposals")).body.proposals) expect(p.turn, JSON.stringify(p.arguments)).toBeUndefined();
  });

  it("the console shows one turn under one heading; selected together, approved in one action, each recorded", async () => {
    const agent = await ready();
    const t = { id: "turn-1", count: 2 };
    call(agent, "notes/a.md", { "mewgate/turn": { ...t, index: 0 } });
    call(agent, "other/x.md", {});
    call(agent, "notes/b.md", { "mewgate/turn": { ...t, index: 1 } });
    await waitFor(async () => (await api("GET", "proposals")).body.proposals.length === 3);
    const listed = (await api("GET", "proposals")).body.proposals;
    expect(
      listed
        .filter((p: any) => p.turn?.id === "turn-1")
        .map((p: any) => p.turn.index)
        .sort(),
    ).toEqual([0, 1]);
    page = await browser!.newPage({ viewport: { width: 1100, height: 900 } });
    page.setDefaultTimeout(6000);
    await openConsoleAs(page, gw!.port, "tn", T.human);
    const heading = page.locator("#inbox li.turn");
    await heading.waitFor();
    // The tool says it is neither destructive nor open-world; a first use is medium.
    expect(await heading.locator(".turn-head").textContent()).toBe(
      "One turn of agent: 2 calls, in the order it asked for them — highest risk medium. Select these 2",
    );
    // The two cards of the turn are inside it, in the order the model asked for them; the other call is not.
    const pathOf = new Map<string, string>(listed.map((p: any) => [p.id, p.arguments.path]));
    const inTurn = await heading.locator("li.card").evaluateAll((xs) => xs.map((x) => x.getAttribute("data-id") ?? "?"));
    expect(inTurn.map((id) => pathOf.get(id))).toEqual(["notes/a.md", "notes/b.md"]);
    expect(await heading.locator("li.card .turn-step").allTextContents()).toEqual(["Call 1 of 2 in this turn", "Call 2 of 2 in this turn"]);
    expect(await page.locator("#inbox > li.card").count()).toBe(1);
    await heading.locator("button.select-turn").click();
    await page.locator("#batch button.approve", { hasText: "Approve 2 selected" }).click();
    await waitFor(async () => (await api("GET", "proposals")).body.proposals.length === 1);
    const approved = (await api("GET", "audit")).body.entries.filter((e: any) => e.event === "approved");
    expect(approved).toHaveLength(2);
    expect(approved.map((e: any) => (e.arguments as { path: string }).path).sort()).toEqual(["notes/a.md", "notes/b.md"]);
  });
});
