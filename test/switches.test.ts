/**
 * Specialists switched off and on at runtime (space/disable, space/enable): only those
 * allowed may, people and the primary agent cannot be, a switched-off participant's tools
 * leave every catalogue and prompt at once and no path reaches it, and the switch
 * survives a restart.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { startAgent, type AgentHandle } from "../participants/agent/index.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { ModelServer, openaiReply } from "./fixtures/agent/model-server.js";
import { askGateway, type Env, errorFor, startGateway, TestClient, toolCall, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { alice: "alice-token-01", main: "main-token-002", spec: "spec-token-003", fs: "fs-token-00004" };
let gw: TestGateway | undefined;
const raw: TestClient[] = [];
const agents: AgentHandle[] = [];
const servers: ModelServer[] = [];
const dirs: string[] = [];
const mcpSessions: Array<{ mcp: Client; transport: StreamableHTTPClientTransport }> = [];
let mount: McpHttpMount | undefined;
afterEach(async () => {
  await Promise.all(
    mcpSessions.splice(0).map(async (s) => {
      await s.transport.terminateSession().catch(() => {});
      await s.mcp.close().catch(() => {});
    }),
  );
  await mount?.close();
  mount = undefined;
  await Promise.all(agents.splice(0).map((a) => a.stop()));
  for (const c of raw.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  await Promise.all(servers.splice(0).map((s) => s.stop()));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const SPACE = (main: string, spec: string) => `
space: {id: sw}
participants:
  alice: {kind: human, token: ${T.alice}}
  main: {kind: agent, token: ${T.main}, tools: {allow: ["spec/*", "fs/*"]}, agent: {provider: openai, model: test-model, base_url: "${main}/v1", primary: true}}
  spec: {kind: agent, token: ${T.spec}, agent: {provider: openai, model: test-model, base_url: "${spec}/v1", offer: {}}}
  fs: {kind: mcp, token: ${T.fs}}
`;

async function agent(id: "main" | "spec"): Promise<AgentHandle> {
  const h = await startAgent({
    id,
    config: gw!.gateway.spaces.get("sw")!.config.participants[id]!.agent!,
    client: { url: gw!.url, space: "sw", token: T[id], reconnect: false },
    env: {},
  });
  agents.push(h);
  return h;
}

const names = async (c: TestClient) =>
  ((await askGateway(c, "tools/list")).payload.result.tools as Array<{ name: string }>).map((t) => t.name);
const disable = (c: TestClient, id: string, who: string, kind = "space/disable") => c.send({ id, kind, payload: { participant_id: who } });

describe("switching specialists off and on", () => {
  it("refuses who may not, and what may not be switched off", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-sw-"));
    dirs.push(dir);
    gw = await startGateway(SPACE("http://127.0.0.1:9", "http://127.0.0.1:9"), { dir });
    const alice = await TestClient.join(gw, "sw", T.alice);
    const spec = await TestClient.join(gw, "sw", T.spec);
    raw.push(alice, spec);
    disable(spec, "s1", "fs");
    expect((await errorFor(spec, "s1")).payload.error).toBe("capability_violation");
    disable(alice, "s2", "alice");
    expect((await errorFor(alice, "s2")).payload.message).toMatch(/is a person/);
    disable(alice, "s3", "main");
    expect((await errorFor(alice, "s3")).payload.message).toMatch(/primary agent and is always on/);
    disable(alice, "s4", "nobody");
    expect((await errorFor(alice, "s4")).payload.error).toBe("unknown_recipient");
  });

  it("takes a specialist's tools out of every catalogue and prompt at once, blocks every path to it, and keeps the switch across a restart", {
    timeout: 30_000,
  }, async () => {
    const mainModel = await new ModelServer()
      .reply(openaiReply({ content: "one" }), openaiReply({ content: "two" }), openaiReply({ content: "three" }))
      .start();
    const specModel = await new ModelServer().start();
    servers.push(mainModel, specModel);
    const dir = mkdtempSync(join(tmpdir(), "mewgate-sw-"));
    dirs.push(dir);
    gw = await startGateway(SPACE(mainModel.url, specModel.url), { dir });
    const fs = await toolOwner(gw, "sw", T.fs, [{ name: "read", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } }]);
    const alice = await TestClient.join(gw, "sw", T.alice);
    raw.push(fs, alice);
    await agent("spec");
    await waitFor(async () => (await names(alice)).includes("spec/ask"), 5000, "spec/ask");
    await agent("main");
    const tools = (i: number) =>
      ((mainModel.requests[i]!.body.tools ?? []) as Array<{ function: { name: string } }>).map((t) => t.function.name);
    const system = (i: number) => mainModel.requests[i]!.body.messages[0].content as string;

    alice.send({ kind: "chat", payload: { text: "hello" } });
    await alice.next((e) => e.kind === "chat" && e.from === "main");
    expect(tools(0)).toContain("spec__ask");
    expect(system(0)).toContain("spec");

    // Through the operator API, as the CLI and the console do.
    const res = await fetch(`http://127.0.0.1:${gw.port}/api/spaces/sw/participants/spec/disable`, {
      method: "POST",
      headers: { authorization: `Bearer ${T.alice}`, "content-type": "application/json" },
      body: JSON.stringify({ reason: "too slow today" }),
    });
    expect(res.status).toBe(200);
    await alice.nextNew((e) => e.kind === "mcp/request" && e.payload.method === "notifications/tools/list_changed");
    expect(await names(alice)).toEqual(["fs/read"]);
    const people = (await (
      await fetch(`http://127.0.0.1:${gw.port}/api/spaces/sw/participants`, { headers: { authorization: `Bearer ${T.alice}` } })
    ).json()) as { participants: Array<{ id: string; disabled?: boolean }> };
    expect(people.participants.find((p) => p.id === "spec")?.disabled).toBe(true);

    // Every path: through the gateway by name, straight to it (the next describe has them all).
    alice.send(toolCall("via-gw", "system:gateway", "spec/ask", { message: "x" }));
    expect((await errorFor(alice, "via-gw")).payload.error).toBe("participant_disabled");
    alice.send(toolCall("direct", "spec", "ask", { message: "x" }));
    expect((await errorFor(alice, "direct")).payload.error).toBe("participant_disabled");
    expect(specModel.requests).toHaveLength(0);

    // The next turn of the primary: no spec in its tools or its prompt.
    alice.send({ kind: "chat", payload: { text: "again" } });
    await alice.nextNew((e) => e.kind === "chat" && e.from === "main");
    await waitFor(() => mainModel.requests.length === 2, 3000, "main's second turn");
    expect(tools(1)).not.toContain("spec__ask");
    expect(system(1)).not.toMatch(/\bspec\b/);

    // A restart keeps it off.
    await gw.stop();
    await Promise.all(agents.splice(0).map((a) => a.stop()));
    gw = await startGateway(SPACE(mainModel.url, specModel.url), { dir });
    const back = await TestClient.join(gw, "sw", T.alice);
    raw.push(back);
    await agent("spec");
    await new Promise((r) => setTimeout(r, 300));
    expect(await names(back)).not.toContain("spec/ask");
    disable(back, "on", "spec", "space/enable");
    await back.nextNew((e) => e.kind === "mcp/request" && e.payload.method === "notifications/tools/list_changed");
    expect(await names(back)).toContain("spec/ask");
  });
});

const P = { alice: "alice-paths-tok1", bot: "bot-paths-token1", fs: "fs-paths-token01" };
const PATHS = `
space: {id: paths}
policy: {proposal_ttl_ms: 60000}
participants:
  alice: {kind: human, token: ${P.alice}}
  bot: {kind: agent, token: ${P.bot}, tools: {allow: ["fs/read"]}}
  fs: {kind: mcp, token: ${P.fs}}
`;
const FS_TOOLS = [
  { name: "read", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
  { name: "write", inputSchema: { type: "object" } },
];

/** Switches fs off or on and waits for the catalogue's change to be announced. */
async function switched(c: TestClient, id: string, kind: "space/disable" | "space/enable"): Promise<void> {
  const changed = c.nextNew((e) => e.kind === "mcp/request" && e.payload.method === "notifications/tools/list_changed");
  disable(c, id, "fs", kind);
  await changed;
}

describe("participant_disabled on every path", () => {
  it("refuses a call to a switched-off participant the same way however it comes, and no call reaches it", {
    timeout: 20_000,
  }, async () => {
    gw = await startGateway(PATHS);
    const calls: Env[] = [];
    const fs = await toolOwner(gw, "paths", P.fs, FS_TOOLS, {
      onCall: (env, reply) => {
        calls.push(env);
        return reply({ content: [] });
      },
    });
    const alice = await TestClient.join(gw, "paths", P.alice);
    const bot = await TestClient.join(gw, "paths", P.bot);
    raw.push(fs, alice, bot);
    await waitFor(async () => (await names(alice)).length === 2, 5000, "fs's tools");
    // Proposed while fs was on: one to approve, one to fulfil, once it is off.
    const proposal = (id: string, extra: Record<string, unknown> = {}) => ({
      id,
      kind: "mcp/proposal",
      to: ["fs"],
      ...extra,
      payload: { method: "tools/call", params: { name: "write", arguments: { id } } },
    });
    bot.send(proposal("held-1"));
    bot.send(proposal("held-2"));
    await alice.next((e) => e.id === "held-2");

    await switched(alice, "off", "space/disable");
    const refused = async (c: TestClient, id: string) => {
      const err = await errorFor(c, id);
      expect([id, err.payload.code]).toEqual([id, "participant_disabled"]);
      expect(err.correlation_id).toEqual([id]);
    };

    // Straight to it: a call policy allows, and one that would need approval.
    bot.send(toolCall("direct", "fs", "read"));
    await refused(bot, "direct");
    bot.send(toolCall("direct-ask", "fs", "write"));
    await refused(bot, "direct-ask");
    // Proposed: to it, through the gateway by name, and to nobody in particular.
    bot.send(proposal("propose"));
    await refused(bot, "propose");
    bot.send({
      id: "propose-gw",
      kind: "mcp/proposal",
      to: ["system:gateway"],
      payload: { method: "tools/call", params: { name: "fs/write", arguments: {} } },
    });
    await refused(bot, "propose-gw");
    bot.send({ id: "propose-any", kind: "mcp/proposal", payload: { method: "tools/call", params: { name: "write", arguments: {} } } });
    await refused(bot, "propose-any");
    // Through the gateway's endpoint: called directly or proposed for the caller.
    bot.send(toolCall("gw-read", "system:gateway", "fs/read"));
    await refused(bot, "gw-read");
    bot.send(toolCall("gw-write", "system:gateway", "fs/write"));
    await refused(bot, "gw-write");
    // Approved after it was switched off, and fulfilled MEW-style: refused, still pending.
    alice.send({ id: "approve-1", kind: "mcp/approve", correlation_id: ["held-1"], payload: { scope: "once" } });
    await refused(alice, "approve-1");
    alice.send(toolCall("fulfil-2", "fs", "write", { id: "held-2" }, { correlation_id: ["held-2"] }));
    await refused(alice, "fulfil-2");
    const pending = () =>
      gw!.gateway.spaces
        .get("paths")!
        .proposals.pending()
        .map((p) => p.id);
    expect(pending()).toEqual(["held-1", "held-2"]);
    expect(calls).toEqual([]);
    expect(
      alice.received.some((e) => e.kind === "mcp/proposal" && ["propose", "propose-gw", "propose-any", "gw-write"].includes(e.id)),
    ).toBe(false);

    // Switched on again, the pending approval goes through.
    await switched(alice, "on", "space/enable");
    alice.send({ id: "approve-1b", kind: "mcp/approve", correlation_id: ["held-1"], payload: { scope: "once" } });
    await waitFor(() => calls.length === 1, 5000, "the approved call");
    expect(calls[0]!.payload.params.arguments).toEqual({ id: "held-1" });
  });

  it("answers participant_disabled to an MCP client calling a tool it listed before its owner was switched off", {
    timeout: 20_000,
  }, async () => {
    gw = await startGateway(PATHS);
    const calls: Env[] = [];
    const fs = await toolOwner(gw, "paths", P.fs, FS_TOOLS, {
      onCall: (env, reply) => {
        calls.push(env);
        return reply({ content: [] });
      },
    });
    const alice = await TestClient.join(gw, "paths", P.alice);
    raw.push(fs, alice);
    await waitFor(async () => (await names(alice)).length === 2, 5000, "fs's tools");
    mount = mountHttp(gw.gateway);
    const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw.port}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${P.bot}` } },
    });
    const mcp = new Client({ name: "test-client", version: "1.0.0" });
    mcpSessions.push({ mcp, transport });
    await mcp.connect(transport);
    expect((await mcp.listTools()).tools.map((t) => t.name)).toEqual(["fs__read", "fs__write"]);

    await switched(alice, "off", "space/disable");
    // Once the MCP face has heard of it, its list no longer has fs's tools…
    await waitFor(async () => (await mcp.listTools()).tools.length === 0, 5000, "the MCP face to drop fs's tools");
    // …and a client that still holds the old list is told why its call did not run.
    for (const name of ["fs__read", "fs__write"]) {
      const result = (await mcp.callTool({ name, arguments: {} })) as CallToolResult;
      expect(result.isError).toBe(true);
      expect(result.content).toEqual([{ type: "text", text: expect.stringContaining('"fs" is switched off in the space') }]);
    }
    // A name it never listed is still a protocol error, not a call.
    await expect(mcp.callTool({ name: "fs__nope", arguments: {} })).rejects.toThrow(/unknown tool/);
    expect(calls).toEqual([]);
  });
});
