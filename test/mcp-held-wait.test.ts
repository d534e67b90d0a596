/**
 * A held call at MCP 2026-07-28 over HTTP waits like any other (issue 47): a plain SDK v2
 * client (`@modelcontextprotocol/client`, pinned to 2026-07-28) calling a tool that needs a
 * person's approval through `/mcp/<participant>` and `/mcp` gets the tool's result once the
 * person approves, however long they take within the proposal's expiry, without spending
 * its `input_required` rounds while they decide; a client that takes URL elicitation is
 * shown the card once. Hostile first: a client that drops its request mid-hold, one that
 * never asks again, a flood of resumes of one state and a flood of held calls.
 */
import { Client as V2Client, StreamableHTTPClientTransport as V2Http } from "@modelcontextprotocol/client";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import type { HoldOptions } from "../participants/mcp-server/held/held.js";
import { startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = { human: "human-token-1234", notes: "notes-token-5678", claude: "claude-token-9012" } as const;
const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 120000}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}}
`;

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  await mount?.close();
  mount = undefined;
  await gw?.stop();
  gw = undefined;
});

async function setup(hold: HoldOptions = {}) {
  gw = await startGateway(SPACE);
  let runs = 0;
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    runs++;
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  closers.push(() => owner.close());
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  closers.push(() => human.close());
  const proposals: Envelope[] = [];
  const withdrawn: Envelope[] = [];
  human.on("proposal", (p) => proposals.push(p));
  human.on("envelope", (e) => e.kind === "mcp/withdraw" && withdrawn.push(e));
  await waitForTool(human, "notes/write_note");
  mount = mountHttp(gw.gateway, { hold });
  const base = `http://127.0.0.1:${gw.port}`;
  /** A plain SDK v2 client at 2026-07-28, as a developer would write one; counts the HTTP requests it makes. */
  const client = async (path: string, opts: { urlElicitation?: (url: string) => void } = {}) => {
    let posts = 0;
    const c = new V2Client(
      { name: "plain", version: "1.0.0" },
      {
        versionNegotiation: { mode: { pin: "2026-07-28" } },
        ...(opts.urlElicitation ? { capabilities: { elicitation: { url: {} } } } : {}),
      },
    );
    if (opts.urlElicitation) {
      const shown = opts.urlElicitation;
      c.setRequestHandler("elicitation/create", async (req) => {
        shown(String((req.params as { url?: string }).url));
        return { action: "accept" };
      });
    }
    const transport = new V2Http(new URL(`${base}${path}`), {
      requestInit: { headers: { authorization: `Bearer ${T.claude}` } },
      fetch: (input: string | URL | Request, init?: RequestInit) => {
        if (init?.method === "POST") posts++;
        return fetch(input, init);
      },
    });
    await c.connect(transport);
    closers.push(() => c.close());
    return { c, posts: () => posts };
  };
  /** One raw 2026-07-28 tools/call, aborted by `signal` if given. */
  const raw = async (body: Record<string, unknown>, signal?: AbortSignal, caps: Record<string, unknown> = {}) =>
    fetch(`${base}/mcp/notes`, {
      method: "POST",
      signal,
      headers: {
        authorization: `Bearer ${T.claude}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "write_note",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: {
          name: "write_note",
          ...body,
          _meta: {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
            "io.modelcontextprotocol/clientCapabilities": caps,
          },
        },
      }),
    });
  const answerOf = async (res: Response) => {
    const text = await res.text();
    const data = [...text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as { id?: unknown; result?: Record<string, unknown> });
    return { text, final: text.startsWith("{") ? JSON.parse(text) : data.find((d) => d.id !== undefined) };
  };
  return { human, proposals, withdrawn, client, raw, answerOf, runs: () => runs };
}

describe("a held call at 2026-07-28 over HTTP: hostile first", () => {
  it("withdraws the proposal when the client drops its request while it waits, and nothing runs", { timeout: 20_000 }, async () => {
    const s = await setup({ legMs: 10_000 });
    const drop = new AbortController();
    const pending = s.raw({ arguments: { text: "dropped" } }, drop.signal).catch((e: Error) => e);
    await waitFor(() => s.proposals.length === 1, 5000, "the proposal");
    drop.abort();
    await pending;
    await waitFor(() => s.withdrawn.length === 1, 5000, "the withdrawal");
    expect(s.withdrawn[0]!.correlation_id).toEqual([s.proposals[0]!.id]);
    // Too late to approve: nothing runs for nobody to read.
    s.human.approve(s.proposals[0]!.id);
    await new Promise((r) => setTimeout(r, 200));
    expect(s.runs()).toBe(0);
  });

  it("withdraws the proposal of a client that was told to ask again and never did", { timeout: 20_000 }, async () => {
    const s = await setup({ legMs: 350, abandonMs: 600, keepAliveMs: 100 });
    const res = await s.raw({ arguments: { text: "left" } });
    // Held as a stream, kept alive while it waits.
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const first = await s.answerOf(res);
    expect(first.text).toContain(": keepalive");
    expect(first.final.result.resultType).toBe("input_required");
    expect(first.final.result.inputRequests).toBeUndefined();
    expect(s.withdrawn).toHaveLength(0);
    await waitFor(() => s.withdrawn.length === 1, 5000, "the withdrawal after the client went quiet");
    expect(s.runs()).toBe(0);
  });

  it("holds at most a few requests on one proposal: a flood of resumes of one state answers at once, and the tool runs once", {
    timeout: 30_000,
  }, async () => {
    const s = await setup({ legMs: 20_000 });
    // A client that takes URL elicitation is answered at once (the card), with the state.
    const first = await s.answerOf(await s.raw({ arguments: { text: "flood" } }, undefined, { elicitation: { url: {} } }));
    const state = first.final.result.requestState as string;
    let approved = false;
    let settled = 0;
    const flood = Array.from({ length: 40 }, () =>
      s
        .raw({ arguments: { text: "flood" }, requestState: state })
        .then(async (r) => ({ ...(await s.answerOf(r)), early: !approved }))
        .finally(() => settled++),
    );
    // All but the few held are answered without waiting for the decision.
    await waitFor(() => settled >= 36, 15_000, "all but the held requests answered");
    approved = true;
    s.human.approve(s.proposals[0]!.id);
    const answers = await Promise.all(flood);
    const quick = answers.filter((a) => a.final.result?.resultType === "input_required");
    const waited = answers.filter((a) => JSON.stringify(a.final.result?.content ?? "").includes("wrote: flood"));
    expect(waited.length).toBeGreaterThanOrEqual(1);
    expect(waited.length).toBeLessThanOrEqual(4);
    expect(quick.length + waited.length).toBe(40);
    for (const q of quick) expect(q.early).toBe(true);
    expect(s.runs()).toBe(1);
    expect(s.proposals).toHaveLength(1);
  });
});

describe("a held call at 2026-07-28 over HTTP waits like any other", () => {
  it("a plain SDK v2 client at /mcp/<participant> gets the result after the person approves, seconds later, in its one request", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const { c, posts } = await s.client("/mcp/notes");
    const before = posts();
    const result = c.callTool({ name: "write_note", arguments: { text: "waited" } });
    await waitFor(() => s.proposals.length === 1, 5000, "the proposal");
    // Longer than the 10 rounds a client used to spend in about 3 s.
    await new Promise((r) => setTimeout(r, 4000));
    const approvedAt = Date.now();
    s.human.approve(s.proposals[0]!.id);
    const r = (await result) as { content: Array<{ text: string }> };
    const after = Date.now() - approvedAt;
    expect(r.content[0]!.text).toBe("wrote: waited");
    // One request: held open until the decision.
    expect(posts() - before).toBe(1);
    expect(s.runs()).toBe(1);
    console.log(`held call at /mcp/notes: result ${after} ms after the approval, ${posts() - before} request(s)`);
  });

  it("at /mcp, held in bounded legs: the client asks again after each and still gets the result; a URL-elicitation client is shown the card once", {
    timeout: 30_000,
  }, async () => {
    const s = await setup({ legMs: 500 });
    const shown: string[] = [];
    const { c, posts } = await s.client("/mcp", { urlElicitation: (url) => shown.push(url) });
    const before = posts();
    const result = c.callTool({ name: "notes__write_note", arguments: { text: "legs" } });
    await waitFor(() => s.proposals.length === 1, 5000, "the proposal");
    await new Promise((r) => setTimeout(r, 3000));
    s.human.approve(s.proposals[0]!.id);
    const r = (await result) as { content: Array<{ text: string }> };
    expect(r.content[0]!.text).toBe("wrote: legs");
    expect(shown).toHaveLength(1);
    expect(new URL(shown[0]!).pathname).toBe("/ui/link.html");
    // The first answer (the card) and a few legs of 500 ms, well within the client's 10 rounds.
    expect(posts() - before).toBeGreaterThanOrEqual(3);
    expect(posts() - before).toBeLessThanOrEqual(10);
    expect(s.runs()).toBe(1);
  });

  it("a rejection reaches the waiting client as the tool error a 2025 session gets", { timeout: 20_000 }, async () => {
    const s = await setup();
    const { c } = await s.client("/mcp/notes");
    const result = c.callTool({ name: "write_note", arguments: { text: "no" } });
    await waitFor(() => s.proposals.length === 1, 5000, "the proposal");
    s.human.reject(s.proposals[0]!.id, "unsafe", "not today");
    const r = (await result) as { isError?: boolean; content: Array<{ text: string }> };
    expect(r.isError).toBe(true);
    expect(r.content[0]!.text).toMatch(/rejected by human: unsafe/);
    expect(s.runs()).toBe(0);
  });

  it("several held calls of one client wait side by side and each gets its own result", { timeout: 30_000 }, async () => {
    const s = await setup();
    const { c } = await s.client("/mcp/notes");
    const calls = Array.from({ length: 8 }, (_, i) => c.callTool({ name: "write_note", arguments: { text: `n${i}` } }));
    await waitFor(() => s.proposals.length === 8, 10_000, "eight proposals");
    for (const p of s.proposals) s.human.approve(p.id);
    const results = (await Promise.all(calls)) as Array<{ content: Array<{ text: string }> }>;
    expect(results.map((r) => r.content[0]!.text).sort()).toEqual(Array.from({ length: 8 }, (_, i) => `wrote: n${i}`).sort());
    expect(s.runs()).toBe(8);
  });
});
