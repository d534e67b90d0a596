/**
 * The tool-approval extension (the community's draft SEP-2848) and structured denials (draft
 * SEP-2643) at MCP 2026-07-28 on /mcp and /mcp/<participant> (participants/mcp-server/
 * tasks/task-ext.ts, held/denials.ts). Hostile first: a retry with another operation under a denial's
 * context id, one from another seat, an altered id; then a held call answered as a `working`
 * task with the denial envelope and whom it waits for (two approvers: the multi-party
 * profile), approved and run once with its disposition, one rejected that says it did not
 * run, one the client cancelled. A real gateway on port 0, real HTTP, a real MCP server.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { startGateway, type TestGateway, waitFor, waitForTool } from "./helpers.js";

const T = {
  human: "human-token-ta-1234",
  bob: "bob-token-ta-567890",
  notes: "notes-token-ta-5678",
  claude: "claude-token-ta-9012",
  other: "other-token-ta-3456",
} as const;
const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
participants:
  human: {kind: human, token: ${T.human}}
  bob: {kind: human, token: ${T.bob}}
  notes: {kind: mcp, token: ${T.notes}}
  claude:
    kind: agent
    token: ${T.claude}
    tools: {allow: ["notes/read_note"], deny: [{tool: notes/write_note, when: 'args.text == "forbidden"'}]}
    approvals: {"notes/transfer": 2}
  other: {kind: agent, token: ${T.other}}
`;
const TASKS = "io.modelcontextprotocol/tasks";
const APPROVAL = "io.modelcontextprotocol/tool-approval";
const AUTHZ = "io.modelcontextprotocol/authorization";
const CTX = "io.modelcontextprotocol/authorization-context-id";
const DISPOSITION = "io.modelcontextprotocol/tool-approval-disposition";

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

const envelope = (caps: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": caps,
  ...extra,
});
const WITH_APPROVAL = { extensions: { [TASKS]: {}, [APPROVAL]: {} } };
const URL_ONLY = { elicitation: { url: {} } };
type Answer = { status: number; result?: Record<string, any>; error?: { code: number; message: string; data?: any } };

async function setup() {
  gw = await startGateway(SPACE);
  let runs = 0;
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async ({ text }) => {
    runs++;
    return { content: [{ type: "text", text: `wrote: ${text}` }] };
  });
  notes.registerTool("transfer", { description: "Moves money", inputSchema: { amount: z.number() } }, async ({ amount }) => {
    runs++;
    return { content: [{ type: "text", text: `moved ${amount}` }] };
  });
  notes.registerTool("read_note", { description: "Reads a note", inputSchema: { n: z.number() } }, async ({ n }) => ({
    content: [{ type: "text", text: `note ${n}` }],
  }));
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  clients.push(owner);
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  const bob = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.bob });
  clients.push(human, bob);
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => proposals.push(p));
  await waitForTool(human, "notes/write_note");
  mount = mountHttp(gw.gateway);
  let id = 0;
  const rpc = async (
    method: string,
    params: Record<string, unknown>,
    opts: { token?: string; caps?: Record<string, unknown>; meta?: Record<string, unknown>; path?: string } = {},
  ): Promise<Answer> => {
    const { token = T.claude, caps = WITH_APPROVAL, path = "/mcp" } = opts;
    const name = typeof params["taskId"] === "string" ? params["taskId"] : (params["name"] as string | undefined);
    const res = await fetch(`http://127.0.0.1:${gw!.port}${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": method,
        ...(name !== undefined ? { "mcp-name": name } : {}),
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: ++id, method, params: { ...params, _meta: envelope(caps, opts.meta) } }),
    });
    const text = await res.text();
    return { status: res.status, ...(JSON.parse(text.startsWith("{") ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? "{}")) as object) };
  };
  return { human, bob, proposals, rpc, runs: () => runs };
}

const untilStatus = async (s: Awaited<ReturnType<typeof setup>>, taskId: string, status: string, path = "/mcp"): Promise<Answer> => {
  let got: Answer | undefined;
  await waitFor(
    async () => {
      got = await s.rpc("tasks/get", { taskId }, { path });
      return got.result?.["status"] === status;
    },
    10_000,
    `task ${status}`,
  );
  return got!;
};

describe("structured denials: hostile first", () => {
  it("a held call's denial carries a context id bound to the call; a retry with another operation under it is refused, an altered one ignored", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    // A client that takes URL elicitation is shown the card, with the denial envelope beside it.
    const held = await s.rpc("tools/call", { name: "notes__write_note", arguments: { text: "a" } }, { caps: URL_ONLY });
    expect(held.result?.["resultType"]).toBe("input_required");
    const env = held.result?.["_meta"]?.[AUTHZ];
    expect(env).toMatchObject({ reason: "insufficient_authorization", remediation: "available", "mewgate/why": "held" });
    expect(env.remediationHints).toEqual([{ type: "url", url: held.result?.["inputRequests"]?.approval?.params?.url }]);
    const ctx = env.authorizationContextId as string;
    expect(ctx).toMatch(/^authzctx_/);
    await waitFor(() => s.proposals.length === 1);

    // Another operation under the same id: other arguments, another tool, another seat.
    for (const [params, token] of [
      [{ name: "notes__write_note", arguments: { text: "rm -rf /" } }, T.claude],
      [{ name: "notes__read_note", arguments: { n: 1 } }, T.claude],
      [{ name: "notes__write_note", arguments: { text: "a" } }, T.other],
    ] as const) {
      const r = await s.rpc("tools/call", params, { caps: URL_ONLY, token, meta: { [CTX]: ctx } });
      expect(r.error?.code, JSON.stringify(params)).toBe(-32602);
      expect(r.error?.data?.reason).toBe("authorization_context_mismatch");
    }
    // Nothing new was proposed for them, and nothing ran.
    expect(s.proposals).toHaveLength(1);
    expect(s.runs()).toBe(0);
    // An altered, foreign or oversized id is no authority and no refusal: the call is decided as ever (held again).
    for (const junk of [`${ctx}x`, "authzctx_e30.AAAA", "x".repeat(10_000), 42]) {
      const r = await s.rpc("tools/call", { name: "notes__read_note", arguments: { n: 2 } }, { caps: URL_ONLY, meta: { [CTX]: junk } });
      expect(JSON.stringify(r.result?.["content"])).toContain("note 2");
    }
    // The same operation under its id is decided as ever: held, a new proposal (the id is never authority).
    const same = await s.rpc(
      "tools/call",
      { name: "notes__write_note", arguments: { text: "a" } },
      { caps: URL_ONLY, meta: { [CTX]: ctx } },
    );
    expect(same.result?.["resultType"]).toBe("input_required");
    expect(s.runs()).toBe(0);
  });

  it("a rejection and a policy's denial come back as results carrying the envelope, unavailable, with their context", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const created = await s.rpc("tools/call", { name: "notes__write_note", arguments: { text: "no" } });
    const taskId = created.result!["taskId"] as string;
    s.human.reject(taskId, "disagree");
    const done = await untilStatus(s, taskId, "completed");
    expect(done.result?.["result"]).toMatchObject({ isError: true });
    expect(done.result?.["result"]?._meta?.[DISPOSITION]).toBe("denied-not-executed");
    expect(done.result?.["result"]?._meta?.[AUTHZ]).toMatchObject({ remediation: "unavailable", "mewgate/why": "rejected" });
    expect(done.result?.["result"]?.content?.[0]?.text).toMatch(/was not run: rejected by human/);
    // The policy denies these arguments: an error result with the envelope, unavailable, bound to this call.
    const denied = await s.rpc("tools/call", { name: "notes__write_note", arguments: { text: "forbidden" } }, { caps: URL_ONLY });
    expect(denied.result?.["isError"]).toBe(true);
    expect(denied.result?.["_meta"]?.[AUTHZ]).toMatchObject({ remediation: "unavailable", "mewgate/why": "denied" });
    expect(denied.result?.["_meta"]?.[AUTHZ]?.authorizationContextId).toMatch(/^authzctx_/);
    expect(s.runs()).toBe(0);
  });
});

describe("the tool-approval extension at 2026-07-28", () => {
  it("discover names it; a held call is a working task with the envelope and whom it waits for; approved, it runs once with its disposition", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    for (const path of ["/mcp", "/mcp/notes"]) {
      const discover = await s.rpc("server/discover", {}, { path });
      expect(discover.result?.["capabilities"]?.extensions).toMatchObject({ [TASKS]: {}, [APPROVAL]: {} });
    }
    const created = await s.rpc("tools/call", { name: "write_note", arguments: { text: "hello" } }, { path: "/mcp/notes" });
    expect(created.result).toMatchObject({ resultType: "task", status: "working" });
    const taskId = created.result!["taskId"] as string;
    const meta = created.result?.["_meta"];
    expect(meta[AUTHZ]).toMatchObject({ reason: "insufficient_authorization", remediation: "available", "mewgate/why": "held" });
    expect(meta[AUTHZ].remediationHints[0]).toEqual({ type: "task" });
    expect(new URL(meta[AUTHZ].remediationHints[1].url).pathname).toMatch(/^\/ui\//);
    expect(meta["mewgate/approval"]).toMatchObject({ proposal: taskId, required: 1, approved_by: [] });
    expect(meta["mewgate/approval"].waiting_for).toEqual(expect.arrayContaining(["human", "bob"]));
    expect(created.result?.["statusMessage"]).toMatch(/waits for approval by .*human/);
    expect(meta["io.modelcontextprotocol/model-immediate-response"]).toMatch(/has not run/);

    // While it waits, every tasks/get repeats the envelope; nothing ran.
    const waiting = await s.rpc("tasks/get", { taskId }, { path: "/mcp/notes" });
    expect(waiting.result).toMatchObject({ status: "working", taskId });
    expect(waiting.result?.["_meta"]?.[AUTHZ]?.remediation).toBe("available");
    expect(waiting.result?.["inputRequests"]).toBeUndefined();
    expect(s.runs()).toBe(0);

    s.human.approve(taskId);
    const done = await untilStatus(s, taskId, "completed", "/mcp/notes");
    expect(done.result?.["result"]?.content?.[0]?.text).toBe("wrote: hello");
    expect(done.result?.["result"]?._meta?.[DISPOSITION]).toBe("approved-executed");
    expect(done.result?.["_meta"]?.[AUTHZ]).toBeUndefined();
    expect(s.runs()).toBe(1);
    // Asked again, the same end: it ran once.
    expect((await s.rpc("tasks/get", { taskId }, { path: "/mcp/notes" })).result?.["result"]?._meta?.[DISPOSITION]).toBe(
      "approved-executed",
    );
    expect(s.runs()).toBe(1);
  });

  it("two approvers: the profile says who approved and who may still; one approval runs nothing; the second does", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const created = await s.rpc("tools/call", { name: "notes__transfer", arguments: { amount: 5 } });
    const taskId = created.result!["taskId"] as string;
    expect(created.result?.["_meta"]?.["mewgate/approval"]).toMatchObject({ required: 2, approved_by: [] });
    s.human.approve(taskId);
    await waitFor(
      async () => (await s.rpc("tasks/get", { taskId })).result?.["_meta"]?.["mewgate/approval"]?.approved_by?.length === 1,
      10_000,
      "one approval",
    );
    const half = await s.rpc("tasks/get", { taskId });
    expect(half.result).toMatchObject({ status: "working" });
    expect(half.result?.["_meta"]?.["mewgate/approval"]).toMatchObject({ required: 2, approved_by: ["human"], waiting_for: ["bob"] });
    expect(half.result?.["statusMessage"]).toMatch(/1 more approval of 2 \(approved by human\), from bob/);
    expect(s.runs()).toBe(0);
    s.bob.approve(taskId);
    const done = await untilStatus(s, taskId, "completed");
    expect(done.result?.["result"]?.content?.[0]?.text).toBe("moved 5");
    expect(s.runs()).toBe(1);
  });

  it("a client that cancels gets cancelled and nothing runs; a client of the tasks extension alone keeps the earlier behaviour", {
    timeout: 30_000,
  }, async () => {
    const s = await setup();
    const created = await s.rpc("tools/call", { name: "notes__write_note", arguments: { text: "never" } });
    const taskId = created.result!["taskId"] as string;
    await s.rpc("tasks/cancel", { taskId });
    await untilStatus(s, taskId, "cancelled");
    s.human.approve(taskId);
    await new Promise((r) => setTimeout(r, 300));
    expect(s.runs()).toBe(0);

    const plain = await s.rpc(
      "tools/call",
      { name: "notes__write_note", arguments: { text: "p" } },
      { caps: { extensions: { [TASKS]: {} } } },
    );
    expect(plain.result).toMatchObject({ resultType: "task", status: "input_required" });
    expect(plain.result?.["_meta"]?.[AUTHZ]).toBeUndefined();
    expect(plain.result?.["_meta"]?.["mewgate/approval"]).toBeUndefined();
  });
});
