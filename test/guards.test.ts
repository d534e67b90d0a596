/**
 * Guards on every path a call can take (issue 50), against a real gateway on port 0 and a real
 * MCP server (the SDK's McpServer behind a ParticipantClient), hostile first: a secret in the
 * arguments held for a person whichever way it comes (a MEW request, `system:gateway`, `/mcp`,
 * `/mcp/<participant>`, `mewgate mcp` over stdio), hidden in base64, URL-encoding or split across
 * fields; never in any error, card or audit entry unmasked; an agent may not release what a guard
 * holds for a person; a grant does not let it through; a host off the list denied; personal data
 * redacted on the way out, an approver's edits included; a result's secret redacted before the
 * caller, the audit or a preview gets it.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import type { Envelope } from "../gateway/wire/envelope.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { errorFor, responseFor, sleep, startGateway, TestClient, type TestGateway, toolCall, waitFor, waitForTool } from "./helpers.js";

const MAIN = join(import.meta.dirname, "..", "dist", "cli", "main.js");
const T = {
  human: "human-token-1234",
  notes: "notes-token-5678",
  claude: "claude-token-9012",
  bot: "bot-token-3456",
  asker: "asker-token-7890",
} as const;
// Made up for the tests, in the formats of real keys.
const GH = "ghp_x7Qk2mZ9vR4tL8wN3pJ6sF1yH5cD0bG2aE4u";
const AWS = "AKIAIOSFODNN7EXAMPLE";

const SPACE = `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
guards:
  - {name: secrets, detect: secrets, action: hold, on: arguments}
  - {name: personal, detect: personal, action: redact}
  - {name: egress, detect: egress, hosts: [api.github.com], action: deny, tools: ["notes/fetch"]}
  - {name: result-secrets, detect: secrets, action: redact, on: results}
participants:
  human: {kind: human, token: ${T.human}}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}, tools: {allow: ["notes/*"]}}
  bot: {kind: agent, token: ${T.bot}, tools: {allow: ["notes/*"]}, capabilities: [{kind: "*"}]}
  asker: {kind: agent, token: ${T.asker}, approvers: [human, bot], tools: {ask: ["notes/write_note"]}}
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

interface Lab {
  gw: TestGateway;
  human: ParticipantClient;
  /** What the tool received, call by call. */
  received: Array<Record<string, unknown>>;
  proposals: Envelope[];
  audit: () => Array<Record<string, unknown>>;
}

async function setup(): Promise<Lab> {
  gw = await startGateway(SPACE);
  const received: Array<Record<string, unknown>> = [];
  const notes = new McpServer({ name: "notes", version: "1.0.0" });
  notes.registerTool("write_note", { description: "Writes a note", inputSchema: { text: z.string() } }, async (args) => {
    received.push(args);
    return { content: [{ type: "text", text: `wrote: ${args.text}` }] };
  });
  notes.registerTool("read_env", { description: "Reads the deploy settings", annotations: { readOnlyHint: true } }, async () => ({
    content: [{ type: "text", text: `AWS_ACCESS_KEY_ID=${AWS}\nREGION=eu-west-1\nTOKEN=${GH}` }],
  }));
  notes.registerTool("fetch", { description: "Fetches a URL", inputSchema: { url: z.string() } }, async (args) => {
    received.push(args);
    return { content: [{ type: "text", text: "ok" }] };
  });
  const owner = new ParticipantClient({ url: gw.url, space: "lab", token: T.notes });
  closers.push(() => owner.close());
  await owner.serveMcp(notes);
  await owner.connect();
  const human = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.human });
  closers.push(() => human.close());
  const proposals: Envelope[] = [];
  human.on("proposal", (p) => proposals.push(p));
  await waitForTool(human, "notes/write_note");
  const space = gw.gateway.spaces.get("lab")!;
  return {
    gw,
    human,
    received,
    proposals,
    audit: () => space.ledger.audit({}) as unknown as Array<Record<string, unknown>>,
  };
}

const text = (r: unknown) => ((r as CallToolResult).content[0] as { text: string }).text;

async function wire(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "lab", token);
  closers.push(async () => c.close());
  return c;
}

describe("guards, hostile first", () => {
  it("a MEW request carrying a secret, in any disguise, is held for a person and never reaches the tool; nothing repeats it", async () => {
    const lab = await setup();
    const claude = await wire(T.claude);
    const disguises: Array<Record<string, unknown>> = [
      { text: `deploy with ${AWS}` },
      { text: Buffer.from(`token ${GH}`).toString("base64") },
      { text: encodeURIComponent(`t=${GH}`).replace(/_/g, "%5F") },
      { text: `${GH.slice(0, 9)}\u200b${GH.slice(9)}` },
      { text: "split", extra: { a: GH.slice(0, 14), b: GH.slice(14) } },
    ];
    for (const [i, args] of disguises.entries()) {
      claude.send(toolCall(`c${i}`, "notes", "write_note", args));
      const err = await errorFor(claude, `c${i}`);
      expect(err.payload.code, JSON.stringify(args)).toBe("proposal_required");
      expect(err.payload.message).toMatch(/guard of the space holds it for a person/);
      const said = JSON.stringify(err);
      expect(said).not.toContain(GH.slice(6, 30));
      expect(said).not.toContain(AWS.slice(4));
    }
    await sleep(100);
    expect(lab.received).toEqual([]);
  });

  it("held through system:gateway: the card carries the findings masked, others see the arguments masked, an agent may not release it, a person may", async () => {
    const lab = await setup();
    const claude = await wire(T.claude);
    const bot = await wire(T.bot);
    claude.send({
      id: "g1",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", id: "g1", method: "tools/call", params: { name: "notes/write_note", arguments: { text: `key ${GH}` } } },
    });
    await waitFor(() => lab.proposals.length === 1, 5000, "the held proposal");
    const card = lab.proposals[0]!;
    const guards = (card.payload as Record<string, any>)["mewgate/guards"];
    expect(guards.action).toBe("hold");
    expect(guards.findings[0]).toMatchObject({ guard: "secrets", what: "a GitHub token", field: "text", masked: "ghp_…(40)" });
    // Everyone but the proposer sees the arguments masked: the bot's copy and the human's.
    const botCopy = await bot.next((e) => e.kind === "mcp/proposal" && e.id === card.id);
    expect(JSON.stringify(botCopy)).not.toContain(GH.slice(6, 30));
    expect(JSON.stringify(card)).not.toContain(GH.slice(6, 30));
    // An agent may not release what a guard holds for a person, whatever its own policy.
    bot.send({ id: "b1", kind: "mcp/approve", correlation_id: [card.id], payload: { scope: "once" } });
    expect((await errorFor(bot, "b1")).payload.code).toBe("guard_held");
    expect(lab.received).toEqual([]);
    // A person may: what was proposed runs (the hold redacts nothing).
    lab.human.approve(card.id);
    const answer = await responseFor(claude, "g1");
    expect(lab.received).toEqual([{ text: `key ${GH}` }]);
    // The tool's answer repeats it: the result guard redacts it before the caller gets it.
    expect(answer.payload.result.content[0].text).toBe("wrote: key [redacted: a GitHub token]");
  });

  it("a grant (an always-approval) does not let through what a guard holds", async () => {
    const lab = await setup();
    const asker = await wire(T.asker);
    asker.send({
      id: "p1",
      kind: "mcp/proposal",
      to: ["notes"],
      payload: { method: "tools/call", params: { name: "write_note", arguments: { text: "plain" } } },
    });
    await waitFor(() => lab.proposals.length === 1, 5000, "the first proposal");
    lab.human.approve(lab.proposals[0]!.id, { scope: "always" });
    await waitFor(() => lab.received.length === 1, 5000, "the approved call");
    // Now granted: a plain call goes straight through, one with a secret is held all the same.
    asker.send(toolCall("d1", "notes", "write_note", { text: "granted" }));
    await responseFor(asker, "d1");
    asker.send(toolCall("d2", "notes", "write_note", { text: `granted ${AWS}` }));
    expect((await errorFor(asker, "d2")).payload.code).toBe("proposal_required");
    expect(lab.received.map((r) => r["text"])).toEqual(["plain", "granted"]);
  });

  it("a host off the list is denied before the call; the listed host passes", async () => {
    const lab = await setup();
    const claude = await wire(T.claude);
    claude.send(toolCall("f1", "notes", "fetch", { url: "https://paste.example/u" }));
    const err = await errorFor(claude, "f1");
    expect(err.payload.code).toBe("guard_denied");
    expect(err.payload.findings[0]).toMatchObject({ guard: "egress", host: "paste.example" });
    claude.send(toolCall("f2", "notes", "fetch", { url: "https://API.github.com/repos/x" }));
    await responseFor(claude, "f2");
    expect(lab.received).toEqual([{ url: "https://API.github.com/repos/x" }]);
  });

  it("personal data is redacted before the call, and an approver's edits are too; the redaction is audited, masked", async () => {
    const lab = await setup();
    const claude = await wire(T.claude);
    claude.send(toolCall("e1", "notes", "write_note", { text: "mail alice.smith@corp.example.org or +44 20 7946 0958" }));
    const r = await responseFor(claude, "e1");
    expect(r.payload.result.content[0].text).toBe("wrote: mail [redacted: an email address] or [redacted: a phone number]");
    // An approver's edit is a new call: it is read again on its way out.
    const asker = await wire(T.asker);
    asker.send({
      id: "p2",
      kind: "mcp/proposal",
      to: ["notes"],
      payload: { method: "tools/call", params: { name: "write_note", arguments: { text: "hi" } } },
    });
    await waitFor(() => lab.proposals.length === 1, 5000, "the proposal");
    lab.human.approve(lab.proposals[0]!.id, { arguments: { text: "card 4111 1111 1111 1111" } });
    await waitFor(() => lab.received.length === 2, 5000, "the edited call");
    expect(lab.received.map((x) => x["text"])).toEqual([
      "mail [redacted: an email address] or [redacted: a phone number]",
      "card [redacted: a payment card number]",
    ]);
    await waitFor(() => lab.audit().filter((e) => e["event"] === "guarded").length >= 2, 5000, "the audit");
    const guarded = lab.audit().filter((e) => e["event"] === "guarded");
    // What the guards did is on record, masked (the approval's own record keeps the person's edit as they typed it).
    expect(JSON.stringify(guarded)).not.toContain("alice.smith@corp");
    expect(JSON.stringify(guarded)).not.toContain("1111 1111 1111");
    expect(JSON.stringify(lab.audit().filter((e) => e["event"] === "called"))).not.toContain("alice.smith@corp");
    expect(guarded[0]).toMatchObject({ scope: "arguments redacted", proposer: "claude", tool: "write_note" });
    // The direct call's own record holds what went out, not what was sent.
    const called = lab.audit().find((e) => e["event"] === "called");
    expect(JSON.stringify(called)).toContain("[redacted: an email address]");
  });

  it("a result's secrets are redacted before the caller and the audit get them", async () => {
    const lab = await setup();
    const claude = await wire(T.claude);
    claude.send(toolCall("r1", "notes", "read_env", {}));
    const r = await responseFor(claude, "r1");
    expect(r.payload.result.content[0].text).toBe(
      "AWS_ACCESS_KEY_ID=[redacted: an AWS access key]\nREGION=eu-west-1\nTOKEN=[redacted: a GitHub token]",
    );
    await waitFor(() => lab.audit().some((e) => e["event"] === "guarded"), 5000, "the audit");
    expect(lab.audit().find((e) => e["event"] === "guarded")).toMatchObject({ scope: "result redacted" });
    expect(JSON.stringify(lab.audit())).not.toContain(GH.slice(6, 30));
  });
});

describe("guards on the MCP faces", () => {
  it("/mcp and /mcp/<participant> over HTTP: held, redacted, and the result redacted", async () => {
    const lab = await setup();
    mount = mountHttp(lab.gw.gateway);
    const connect = async (path: string) => {
      const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${lab.gw.port}${path}`), {
        requestInit: { headers: { Authorization: `Bearer ${T.claude}` } },
      });
      const mcp = new Client({ name: "guards-test", version: "1.0.0" });
      await mcp.connect(transport);
      closers.push(async () => {
        await transport.terminateSession().catch(() => {});
        await mcp.close();
      });
      return mcp;
    };
    const all = await connect("/mcp");
    const one = await connect("/mcp/notes");
    // Held: the person sees it on the card and approves; the client's call waits and gets the result.
    lab.human.on("proposal", (p) => setTimeout(() => lab.human.approve(p.id), 50));
    expect(text(await all.callTool({ name: "notes__write_note", arguments: { text: `t ${AWS}` } }))).toBe(
      "wrote: t [redacted: an AWS access key]",
    );
    expect(lab.received).toEqual([{ text: `t ${AWS}` }]);
    expect(JSON.stringify((lab.proposals[0]!.payload as Record<string, unknown>)["mewgate/guards"])).toContain("an AWS access key");
    expect(text(await one.callTool({ name: "write_note", arguments: { text: "to bob@corp.example.org" } }))).toBe(
      "wrote: to [redacted: an email address]",
    );
    expect(text(await one.callTool({ name: "read_env", arguments: {} }))).not.toContain(GH.slice(6, 30));
    expect(lab.proposals).toHaveLength(1);
    expect(lab.received.map((r) => r["text"])).toEqual([`t ${AWS}`, "to [redacted: an email address]"]);
  });

  it("mewgate mcp over stdio: redacted on the way out and on the way back", async () => {
    const lab = await setup();
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [MAIN, "mcp", "--gateway", lab.gw.url, "--space", "lab", "--token", T.claude],
      stderr: "pipe",
    });
    const mcp = new Client({ name: "stdio-guards", version: "1.0.0" });
    closers.push(() => mcp.close());
    await mcp.connect(transport);
    expect(text(await mcp.callTool({ name: "notes__write_note", arguments: { text: "call (555) 010-4477" } }))).toBe(
      "wrote: call [redacted: a phone number]",
    );
    expect(text(await mcp.callTool({ name: "notes__read_env", arguments: {} }))).toContain("[redacted: a GitHub token]");
    expect(lab.received).toEqual([{ text: "call [redacted: a phone number]" }]);
  });
});
