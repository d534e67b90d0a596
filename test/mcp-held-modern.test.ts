/**
 * A held call at MCP 2026-07-28 on /mcp (participants/mcp-server/modern/modern-held.ts, held/held.ts):
 * the call answers `input_required` with a URL elicitation to the proposal's card and sealed
 * request state (at once to a client that takes URL elicitation, else after holding the
 * request a while); a resumed request reads what the call ended with. Hostile first: a state
 * tampered with, a state of another seat, a state for another tool, a replay after the
 * decision (the tool ran once); then approval and rejection.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = { human: "human-token-1234", notes: "notes-token-5678", claude: "claude-token-9012", other: "other-token-3456" } as const;
const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}}
  other: {kind: agent, token: ${T.other}}
`;
/** The same space with a second person who may decide: no one person to make a link for. */
const TWO_PEOPLE = `${SPACE}  bob: {kind: human, token: bob-token-000001}\n`;

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const clients: ParticipantClient[] = [];
afterEach(async () => {
  await mount?.close();
  mount = undefined;
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await gw?.stop();
  gw = undefined;
});

const envelope = (caps: Record<string, unknown> = { elicitation: { url: {} } }) => ({
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "h", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": caps,
});
type Answer = { result?: Record<string, unknown>; error?: { code: number; message: string } };

async function setup(yaml = SPACE) {
  gw = await startGateway(yaml);
  let runs = 0;
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    runs++;
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  clients.push(owner);
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  clients.push(human);
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => proposals.push(p));
  await waitForTool(human, "notes/write_note");
  // A held request waits a short while here, then answers input_required (participants/mcp-server/modern/modern-held.ts; 55 s by default).
  mount = mountHttp(gw.gateway, { hold: { legMs: 300 } });
  const port = gw.port;
  let id = 0;
  const call = async (
    args: Record<string, unknown>,
    opts: { token?: string; caps?: Record<string, unknown>; name?: string; state?: string } = {},
  ): Promise<Answer> => {
    const { token = T.claude, caps, name = "notes__write_note", state } = opts;
    const res = await fetch(`http://127.0.0.1:${port}/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": name,
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: ++id,
        method: "tools/call",
        params: { name, arguments: args, ...(state !== undefined ? { requestState: state } : {}), _meta: envelope(caps) },
      }),
    });
    const text = await res.text();
    return JSON.parse(text.startsWith("{") ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? "{}")) as Answer;
  };
  return { human, proposals, call, runs: () => runs };
}

const stateOf = (a: Answer) => String(a.result?.["requestState"]);

describe("a held call at 2026-07-28: hostile first", () => {
  it("refuses a tampered state, another seat's state and a state for another tool; a replay after approval answers the one result and runs nothing", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const first = await s.call({ text: "hello" });
    expect(first.result?.["resultType"]).toBe("input_required");
    const ask = (
      first.result!["inputRequests"] as Record<string, { method: string; params: { mode: string; url: string; message: string } }>
    )["approval"]!;
    expect(ask.method).toBe("elicitation/create");
    expect(ask.params.mode).toBe("url");
    await waitFor(() => s.proposals.length === 1);
    // The one person who may decide gets a signed link to its page: it opens for them, and for nobody else.
    const url = new URL(ask.params.url);
    expect(url.pathname).toBe("/ui/link.html");
    const link = url.hash.replace(/^#t=/, "");
    const open = (token: string) =>
      fetch(`http://127.0.0.1:${gw!.port}/api/spaces/lab/links/open`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ link }),
      });
    const byClaude = await open(T.claude);
    expect(byClaude.status).toBe(403);
    expect(((await byClaude.json()) as { error: { code: string } }).error.code).toBe("link_not_yours");
    const byHuman = await open(T.human);
    expect(byHuman.status).toBe(200);
    expect(((await byHuman.json()) as { proposal: { id: string } }).proposal.id).toBe(s.proposals[0]!.id);
    const state = stateOf(first);

    // Tampered: refused, and the call does not run.
    const tampered = state.slice(0, -2) + (state.endsWith("AA") ? "BB" : "AA");
    const t = await s.call({ text: "hello" }, { state: tampered });
    expect(t.error?.code).toBe(-32602);
    expect(t.result).toBeUndefined();
    // Another seat's state resumes nothing there.
    const o = await s.call({ text: "hello" }, { state, token: T.other });
    expect(o.error?.code).toBe(-32602);
    // A state for another tool.
    await expect(s.call({}, { state, name: "notes__other" })).resolves.toMatchObject({ error: { code: -32602 } });
    // Before the decision: input_required again, and no second proposal.
    const again = await s.call({ text: "hello" }, { state });
    expect(again.result?.["resultType"]).toBe("input_required");
    expect(s.proposals.length).toBe(1);
    expect(s.runs()).toBe(0);

    s.human.approve(s.proposals[0]!.id);
    let done: Answer | undefined;
    await waitFor(async () => {
      done = await s.call({ text: "hello" }, { state });
      return done.result?.["resultType"] !== "input_required";
    });
    expect(JSON.stringify(done?.result?.["content"])).toContain("wrote: hello");
    // A replay after the decision: the same result, and the tool ran once.
    const replay = await s.call({ text: "hello" }, { state });
    expect(replay.result?.["content"]).toEqual(done?.result?.["content"]);
    expect(s.runs()).toBe(1);
    expect(s.proposals.length).toBe(1);
  });

  it("with several people who may decide, the URL opens the console at the proposal's card", { timeout: 30_000 }, async () => {
    const s = await setup(TWO_PEOPLE);
    const first = await s.call({ text: "two" });
    const ask = (first.result!["inputRequests"] as Record<string, { params: { url: string } }>)["approval"]!;
    await waitFor(() => s.proposals.length === 1);
    const url = new URL(ask.params.url);
    expect(url.pathname).toBe("/ui/");
    expect(Object.fromEntries(new URLSearchParams(url.hash.slice(1)))).toEqual({ space: "lab", proposal: s.proposals[0]!.id });
  });

  it("a client without URL elicitation gets the request state alone; a rejection answers as the face's tool error", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const first = await s.call({ text: "rm" }, { caps: {} });
    expect(first.result?.["resultType"]).toBe("input_required");
    expect(first.result?.["inputRequests"]).toBeUndefined();
    await waitFor(() => s.proposals.length === 1);
    s.human.reject(s.proposals[0]!.id, "unsafe", "not in prod");
    let done: Answer | undefined;
    await waitFor(async () => {
      done = await s.call({ text: "rm" }, { state: stateOf(first), caps: {} });
      return done.result?.["resultType"] !== "input_required";
    });
    expect(done?.result?.["isError"]).toBe(true);
    expect(JSON.stringify(done?.result?.["content"])).toContain("rejected by human: unsafe");
    expect(s.runs()).toBe(0);
  });
});
