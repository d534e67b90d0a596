/**
 * `subscriptions/listen` at MCP 2026-07-28 on the HTTP faces (participants/mcp-server/modern/listen.ts):
 * the changes a seat sees reach its open streams, filtered as each asked. Hostile first: a
 * listen with a bad filter, too many or too long URIs, control characters, a flood of
 * streams from one seat; then a change of the seat's tools reaching an open stream, and a
 * stream that asked for prompts only hearing nothing of tools. A real gateway on port 0,
 * real HTTP requests, a real MCP server behind a participant.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import { ParticipantClient } from "../participants/index.js";
import { MAX_STREAMS, MAX_URI, MAX_URIS } from "../participants/mcp-server/modern/listen.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = { notes: "notes-token-5678", claude: "claude-token-9012" } as const;
const SPACE = `
space: {id: lab}
participants:
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}, tools: {allow: ["notes/*"]}}
`;

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const clients: ParticipantClient[] = [];
const aborts: AbortController[] = [];
afterEach(async () => {
  for (const a of aborts.splice(0)) a.abort();
  await mount?.close();
  mount = undefined;
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await gw?.stop();
  gw = undefined;
});

const envelope = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "l", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {},
};

async function setup() {
  gw = await startGateway(SPACE);
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("read_note", { description: "Reads a note", inputSchema: { n: z.number() } }, async ({ n }) => ({
    content: [{ type: "text", text: `note ${n}` }],
  }));
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  clients.push(owner);
  await owner.serveMcp(notes);
  await owner.connect();
  const seat = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.claude });
  clients.push(seat);
  await waitForTool(seat, "notes/read_note");
  mount = mountHttp(gw.gateway);
  return { notes };
}

let rpc = 0;
/** Opens a listen stream on /mcp; returns the frames as they come (the stream stays open until the test ends). */
async function listen(notifications: unknown): Promise<{ status: number; frames: Record<string, any>[] }> {
  const abort = new AbortController();
  aborts.push(abort);
  const res = await fetch(`http://127.0.0.1:${gw!.port}/mcp`, {
    method: "POST",
    signal: abort.signal,
    headers: {
      authorization: `Bearer ${T.claude}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": "subscriptions/listen",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpc, method: "subscriptions/listen", params: { notifications, _meta: envelope } }),
  });
  const frames: Record<string, any>[] = [];
  if (!(res.headers.get("content-type") ?? "").includes("text/event-stream")) {
    frames.push((await res.json()) as Record<string, any>);
    return { status: res.status, frames };
  }
  void (async () => {
    const decoder = new TextDecoder();
    let rest = "";
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        rest += decoder.decode(chunk, { stream: true });
        const lines = rest.split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) if (line.startsWith("data: ")) frames.push(JSON.parse(line.slice(6)) as Record<string, any>);
      }
    } catch {
      // aborted at the end of the test
    }
  })();
  await waitFor(() => frames.length > 0, 10_000, "the listen stream's first frame");
  return { status: res.status, frames };
}

describe("subscriptions/listen at 2026-07-28: hostile first", () => {
  it("refuses a bad filter, too many or too long URIs and control characters, each saying why, and keeps serving", {
    timeout: 30_000,
  }, async () => {
    await setup();
    const cases: [unknown, RegExp][] = [
      [{ resourceSubscriptions: "note://1" }, /must be a list of URIs/],
      [{ resourceSubscriptions: Array.from({ length: MAX_URIS + 1 }, (_, i) => `note://${i}`) }, new RegExp(`at most ${MAX_URIS}`)],
      [{ resourceSubscriptions: [`note://${"x".repeat(MAX_URI)}`] }, /longer than 2048/],
      [{ resourceSubscriptions: ["note://a\u0007b"] }, /control character/],
      [{ resourceSubscriptions: [7] }, /non-empty string/],
    ];
    for (const [filter, why] of cases) {
      const { frames } = await listen(filter);
      expect(frames[0]?.["error"]?.code, JSON.stringify(frames[0]).slice(0, 300)).toBe(-32602);
      expect(frames[0]?.["error"]?.message).toMatch(why);
    }
    // No filter at all: the SDK's own refusal.
    const none = await listen(undefined);
    expect(none.frames[0]?.["error"]?.code).toBe(-32602);
    // And a good one is acknowledged.
    const ok = await listen({ toolsListChanged: true });
    expect(ok.frames[0]?.["method"]).toBe("notifications/subscriptions/acknowledged");
  });

  it(`holds at most ${MAX_STREAMS} open streams per seat; a stream that ends frees its place`, { timeout: 60_000 }, async () => {
    await setup();
    for (let i = 0; i < MAX_STREAMS; i++) {
      const s = await listen({ toolsListChanged: true });
      expect(s.frames[0]?.["method"]).toBe("notifications/subscriptions/acknowledged");
    }
    const over = await listen({ toolsListChanged: true });
    expect(over.frames[0]?.["error"]?.code).toBe(-32603);
    expect(over.frames[0]?.["error"]?.message).toMatch(/Subscription limit reached/);
    // The client of the first stream goes away: its place is free again.
    aborts[0]!.abort();
    await waitFor(
      async () => (await listen({ toolsListChanged: true })).frames[0]?.["method"] === "notifications/subscriptions/acknowledged",
      10_000,
      "a free place",
    );
  });
});

describe("subscriptions/listen at 2026-07-28", () => {
  it("a change of the seat's tools reaches an open stream, stamped with its subscription id; a prompts-only stream hears nothing of it", {
    timeout: 30_000,
  }, async () => {
    const { notes } = await setup();
    const tools = await listen({ toolsListChanged: true });
    const prompts = await listen({ promptsListChanged: true });
    expect(tools.frames[0]?.["params"]?.notifications).toEqual({ toolsListChanged: true });
    notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async () => ({
      content: [{ type: "text", text: "ok" }],
    }));
    await waitFor(() => tools.frames.some((f) => f["method"] === "notifications/tools/list_changed"), 10_000, "tools/list_changed");
    const change = tools.frames.find((f) => f["method"] === "notifications/tools/list_changed")!;
    expect(change["params"]?._meta?.["io.modelcontextprotocol/subscriptionId"]).toBe(
      tools.frames[0]?.["params"]?._meta?.["io.modelcontextprotocol/subscriptionId"],
    );
    expect(prompts.frames.filter((f) => f["method"] === "notifications/tools/list_changed")).toEqual([]);
  });
});
