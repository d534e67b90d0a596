/**
 * Specialists switched off and on at runtime (space/disable, space/enable): only those
 * allowed may, people and the primary agent cannot be, a switched-off participant's tools
 * leave every catalogue and prompt at once and no path reaches it, and the switch
 * survives a restart.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startAgent, type AgentHandle } from "../participants/agent/index.js";
import { ModelServer, openaiReply } from "./fixtures/agent/model-server.js";
import { askGateway, errorFor, startGateway, TestClient, toolCall, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { alice: "alice-token-01", main: "main-token-002", spec: "spec-token-003", fs: "fs-token-00004" };
let gw: TestGateway | undefined;
const raw: TestClient[] = [];
const agents: AgentHandle[] = [];
const servers: ModelServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
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
  const h = await startAgent({ id, config: gw!.gateway.spaces.get("sw")!.config.participants[id]!.agent!, client: { url: gw!.url, space: "sw", token: T[id], reconnect: false }, env: {} });
  agents.push(h);
  return h;
}

const names = async (c: TestClient) => ((await askGateway(c, "tools/list")).payload.result.tools as Array<{ name: string }>).map((t) => t.name);
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

  it("takes a specialist's tools out of every catalogue and prompt at once, blocks every path to it, and keeps the switch across a restart", { timeout: 30_000 }, async () => {
    const mainModel = await new ModelServer().reply(openaiReply({ content: "one" }), openaiReply({ content: "two" }), openaiReply({ content: "three" })).start();
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
    const tools = (i: number) => ((mainModel.requests[i]!.body.tools ?? []) as Array<{ function: { name: string } }>).map((t) => t.function.name);
    const system = (i: number) => mainModel.requests[i]!.body.messages[0].content as string;

    alice.send({ kind: "chat", payload: { text: "hello" } });
    await alice.next((e) => e.kind === "chat" && e.from === "main");
    expect(tools(0)).toContain("spec__ask");
    expect(system(0)).toContain("spec");

    // Through the operator API, as the CLI and the console do.
    const res = await fetch(`http://127.0.0.1:${gw.port}/api/spaces/sw/participants/spec/disable`, { method: "POST", headers: { authorization: `Bearer ${T.alice}`, "content-type": "application/json" }, body: JSON.stringify({ reason: "too slow today" }) });
    expect(res.status).toBe(200);
    await alice.nextNew((e) => e.kind === "mcp/request" && e.payload.method === "notifications/tools/list_changed");
    expect(await names(alice)).toEqual(["fs/read"]);
    const people = (await (await fetch(`http://127.0.0.1:${gw.port}/api/spaces/sw/participants`, { headers: { authorization: `Bearer ${T.alice}` } })).json()) as { participants: Array<{ id: string; disabled?: boolean }> };
    expect(people.participants.find((p) => p.id === "spec")?.disabled).toBe(true);

    // Every path: through the gateway by name, straight to it, as an approved proposal.
    alice.send(toolCall("via-gw", "system:gateway", "spec/ask", { message: "x" }));
    expect((await errorFor(alice, "via-gw")).payload.error).toBe("unknown_tool");
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
