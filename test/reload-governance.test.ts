/**
 * A reload is a start: the same parse and compile (a `when:` that does not compile is
 * refused with file:line:col, the old rules kept); every pending proposal re-checked with
 * the arguments that would run (a new `deny … when:` cancels it, saying why); an approval
 * given by someone the reload removes no longer counts (one remaining person cannot route a
 * two-approval call); a revoked token ends the event stream and the MCP session it opened,
 * not only the WebSocket. Against a real gateway on loopback, with real sockets and HTTP.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { runToken } from "../cli/token.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { readAudit } from "../gateway/space/ledger.js";
import { Cli, poll } from "./fixtures/cli/harness.js";
import { startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];
const clis: Cli[] = [];
const aborts: AbortController[] = [];
afterEach(async () => {
  for (const a of aborts.splice(0)) a.abort();
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const c of clis.splice(0)) c.kill("SIGKILL");
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

const T = (id: string) => `${id}-token-0123456789abcdef`;
const SPACE = (port: number, o: { rules?: string; approvals?: number; withoutBob?: boolean } = {}) => `
space: {id: rg}
gateway: {port: ${port}, state_dir: .mewgate, limits: {rate_per_second: 5000, rate_burst: 5000}}
participants:
  human: {kind: human, token: ${T("human")}, tools: {allow: ["fs/*"]}}
${o.withoutBob ? "" : `  bob: {kind: human, token: ${T("bob")}, tools: {allow: ["fs/*"]}}\n`}  carol: {kind: human, token: ${T("carol")}, tools: {allow: ["fs/*"]}}
  fs: {kind: mcp, token: ${T("fs")}}
  agent:
    kind: agent
    token: ${T("agent")}
    tools: {${o.rules ?? 'ask: ["fs/*"]'}}
${o.approvals ? `    approvals: ${o.approvals}\n` : ""}`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const propose = (id: string, path: string) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: { path } } },
});

async function setup(o: Parameters<typeof SPACE>[1] = {}) {
  const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-rg-"));
  dirs.push(dir);
  const port = await freePort();
  const g = await startGateway(SPACE(port, o), { dir, port });
  gateways.push(g);
  return { g, port, file: pathJoin(dir, "space.yaml") };
}

async function join(g: { port: number }, token: string): Promise<TestClient> {
  const c = await TestClient.join(g, "rg", token);
  clients.push(c);
  return c;
}

async function api(
  g: { port: number },
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/rg/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

const space = (g: TestGateway) => g.gateway.spaces.get("rg")!;

/** Opens a streamed HTTP response and collects its text until it ends. */
function stream(url: string, init: RequestInit): { text: () => string; ended: Promise<void>; opened: Promise<Response> } {
  const ac = new AbortController();
  aborts.push(ac);
  let text = "";
  let resolveOpened!: (r: Response) => void;
  const opened = new Promise<Response>((r) => (resolveOpened = r));
  const ended = (async () => {
    const res = await fetch(url, { ...init, signal: ac.signal });
    resolveOpened(res);
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      text += Buffer.from(value).toString("utf8");
    }
  })();
  ended.catch(() => {});
  return { text: () => text, ended, opened };
}

describe("reload is a start: hostile first", () => {
  it("a when: that does not compile is refused with file:line:col, as at a start, and the old rules stay", async () => {
    const { g, port, file } = await setup({ rules: 'ask: ["fs/*"]' });
    const agent = await join(g, T("agent"));
    writeFileSync(file, SPACE(port, { rules: 'deny: [{tool: "fs/write_file", when: "args.path.contians(\\"x\\")"}], allow: ["fs/*"]' }));
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status).toBe(422);
    expect(r.body.error.message).toMatch(
      /^nothing changed: .*space\.yaml:12:\d+: participants\.agent\.tools\.deny\[0\]: when: unknown function "contians"/,
    );
    expect(r.body.error.message).toMatch(/contians/);
    // Nothing changed: the agent's calls are still proposals, not allowed nor denied.
    expect(space(g).authority.tool("agent", "fs", "write_file")).toBe("proposal");
    expect(readAudit(pathJoin(g.dir, ".mewgate")).some((e) => e.event === "reloaded")).toBe(false);
    expect(agent.closeCode).toBeUndefined();
    // A fresh start refuses the same file with the same words.
    const start = await startGateway(readFileSync(file, "utf8").replace(`port: ${port}`, "port: 0")).catch((e: Error) => e);
    expect(start).toBeInstanceOf(Error);
    expect((start as Error).message).toMatch(
      /space\.yaml:12:\d+: participants\.agent\.tools\.deny\[0\]: when: unknown function "contians"/,
    );
  });

  it("a reload adding a deny with when: cancels the pending proposal it denies, by its arguments, saying why; another stays", async () => {
    const { g, port, file } = await setup();
    clients.push(await toolOwner(g, "rg", T("fs"), TOOLS));
    const agent = await join(g, T("agent"));
    await waitFor(() => space(g).registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("secret", "secret/x"));
    agent.send(propose("plain", "notes.txt"));
    await waitFor(() => space(g).proposals.pending().length === 2, 5000, "two proposals");
    writeFileSync(
      file,
      SPACE(port, { rules: 'deny: [{tool: "fs/write_file", when: "args.path.startsWith(\\"secret/\\")"}], ask: ["fs/*"]' }),
    );
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.reloaded[0].cancelled).toEqual(["secret"]);
    const reject = await agent.next((e) => e.kind === "mcp/reject" && e.correlation_id?.[0] === "secret");
    expect(reject.payload).toMatchObject({
      reason: "policy_changed",
      text: expect.stringMatching(/deny agent fs\/write_file.*args\.path\.startsWith/),
    });
    expect(
      space(g)
        .proposals.pending()
        .map((p) => p.id),
    ).toEqual(["plain"]);
  });

  it("a reload removing an approver between the first and second approval: that approval is dropped, and one remaining person cannot route it", async () => {
    const { g, port, file } = await setup({ approvals: 2 });
    const runs: Env[] = [];
    clients.push(await toolOwner(g, "rg", T("fs"), TOOLS, { onCall: (e: Env) => runs.push(e) } as never));
    const agent = await join(g, T("agent"));
    const bob = await join(g, T("bob"));
    const carol = await join(g, T("carol"));
    await waitFor(() => space(g).registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("two", "a.txt"));
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "two");
    bob.send({ kind: "mcp/approve", correlation_id: ["two"], payload: { scope: "once", arguments: { path: "edited-by-bob.txt" } } });
    await agent.next((e) => e.kind === "system/approval" && e.correlation_id?.[0] === "two");
    expect(
      space(g)
        .proposals.pending()[0]!
        .approvals?.map((a) => a.by),
    ).toEqual(["bob"]);
    // Bob is removed from the space.
    writeFileSync(file, SPACE(port, { approvals: 2, withoutBob: true }));
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status).toBe(200);
    expect(r.body.reloaded[0].approvals_dropped).toEqual([expect.stringMatching(/^two: bob \(bob is no longer a participant/)]);
    const told = await agent.next((e) => e.kind === "system/approval" && Array.isArray(e.payload.dropped));
    expect(told.payload).toMatchObject({
      approvals: 0,
      required: 2,
      by: [],
      text: expect.stringMatching(/^0 of 2; the approval of bob no longer counts/),
    });
    // The card says so, and Bob's edit went with his approval.
    const card = (await api(g, T("human"), "GET", "proposals")).body.proposals.find((p: any) => p.id === "two");
    expect(card.approvals).toMatchObject({ count: 0, required: 2, dropped: [expect.objectContaining({ by: "bob" })] });
    expect(space(g).proposals.pending()[0]!.editedArguments).toBeUndefined();
    // Carol approves: one of two now, nothing runs.
    carol.send({ kind: "mcp/approve", correlation_id: ["two"], payload: { scope: "once" } });
    await waitFor(
      () =>
        space(g)
          .proposals.pending()[0]
          ?.approvals?.some((a) => a.by === "carol") === true,
      5000,
      "carol's approval",
    );
    expect(
      space(g)
        .proposals.pending()
        .map((p) => p.id),
    ).toEqual(["two"]);
    // The audit says what was dropped and why.
    const trail = readAudit(pathJoin(g.dir, ".mewgate"))
      .filter((e) => e.proposal === "two")
      .map((e) => `${e.event}:${e.by ?? ""}`);
    expect(trail).toEqual(["proposed:", "approval:bob", "approval_dropped:bob", "approval:carol"]);
    // A second remaining person routes it, with the original arguments.
    const human = await join(g, T("human"));
    human.send({ kind: "mcp/approve", correlation_id: ["two"], payload: { scope: "once" } });
    await waitFor(() => space(g).proposals.pending().length === 0, 5000, "routed");
    expect(readAudit(pathJoin(g.dir, ".mewgate")).find((e) => e.proposal === "two" && e.event === "approved")).toMatchObject({
      by: "human",
      arguments: { path: "a.txt" },
    });
  });

  it("a reload that demotes an approver (a deny of its own now) drops its approval too", async () => {
    const { g, port, file } = await setup({ approvals: 2 });
    clients.push(await toolOwner(g, "rg", T("fs"), TOOLS));
    const agent = await join(g, T("agent"));
    const bob = await join(g, T("bob"));
    await waitFor(() => space(g).registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("demo", "a.txt"));
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "demo");
    bob.send({ kind: "mcp/approve", correlation_id: ["demo"], payload: { scope: "once" } });
    await agent.next((e) => e.kind === "system/approval" && e.correlation_id?.[0] === "demo");
    writeFileSync(
      file,
      SPACE(port, { approvals: 2 }).replace(
        `bob: {kind: human, token: ${T("bob")}, tools: {allow: ["fs/*"]}}`,
        `bob: {kind: human, token: ${T("bob")}, tools: {deny: ["fs/*"]}}`,
      ),
    );
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.body.reloaded[0].approvals_dropped).toEqual([expect.stringMatching(/^demo: bob \(bob may no longer make this call/)]);
    expect(space(g).proposals.pending()[0]!.approvals ?? []).toEqual([]);
  });
});

describe("a revoked or rotated token ends every session opened with it", () => {
  it("the event stream and the MCP session opened with a revoked token close (the WebSocket: reload.test.ts)", {
    timeout: 30_000,
  }, async () => {
    const { g, file } = await setup();
    mountHttp(g.gateway);
    // The event stream, opened with Carol's token.
    const events = stream(`http://127.0.0.1:${g.port}/api/spaces/rg/events`, { headers: { authorization: `Bearer ${T("carol")}` } });
    expect((await events.opened).status).toBe(200);
    await poll("the stream's hello", () => events.text().includes("event: hello"));
    // An MCP session, opened with it too, and its standalone GET stream.
    const mcpUrl = `http://127.0.0.1:${g.port}/mcp?space=rg`;
    const headers = {
      authorization: `Bearer ${T("carol")}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    };
    const init = await fetch(mcpUrl, {
      method: "POST",
      headers,
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } },
      }),
    });
    expect(init.status).toBe(200);
    const sid = init.headers.get("mcp-session-id")!;
    await init.text();
    await fetch(mcpUrl, {
      method: "POST",
      headers: { ...headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18" },
      body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
    }).then((r) => r.text());
    const get = stream(mcpUrl, { headers: { ...headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18" } });
    expect((await get.opened).status).toBe(200);
    // Revoke Carol's token (a reload follows).
    expect(
      await runToken(
        "revoke",
        "carol",
        { config: file, as: "human" },
        { stdout: { write: () => true } as never, stderr: { write: () => true } as never, env: {} },
      ),
    ).toBe(0);
    await events.ended;
    expect(events.text()).toMatch(/event: closed\ndata: .*token_revoked/);
    await get.ended;
    // The MCP session is gone: a request on it is refused.
    const after = await fetch(mcpUrl, {
      method: "POST",
      headers: { ...headers, authorization: `Bearer ${T("human")}`, "mcp-session-id": sid },
      body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
    });
    expect(after.status).toBe(404);
    // What the reload closed says so; and a stream with another's token is untouched.
    const trail = readAudit(pathJoin(g.dir, ".mewgate")).find((e) => e.event === "reloaded");
    expect(trail?.changes?.join(" ")).toMatch(/tokens changed: carol/);
  });

  it("a WebSocket and an event stream opened with a token that is rotated close; one opened with another token keeps streaming", {
    timeout: 30_000,
  }, async () => {
    const { g, port, file } = await setup();
    const carol = stream(`http://127.0.0.1:${g.port}/api/spaces/rg/events`, { headers: { authorization: `Bearer ${T("carol")}` } });
    const human = stream(`http://127.0.0.1:${g.port}/api/spaces/rg/events`, { headers: { authorization: `Bearer ${T("human")}` } });
    await poll("both hellos", () => carol.text().includes("hello") && human.text().includes("hello"));
    const ws = await join(g, T("carol"));
    // Carol's token changes in the file (rotated by hand) and the gateway reloads.
    writeFileSync(
      file,
      SPACE(port).replace(`carol: {kind: human, token: ${T("carol")}`, `carol: {kind: human, token: carol-new-token-0123456789abcdef`),
    );
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.body.reloaded[0].closed).toContain("carol (event stream)");
    await carol.ended;
    expect(await ws.closed).toMatchObject({ code: 4412 });
    // The other stream still gets what happens.
    const agent = await join(g, T("agent"));
    agent.send({ kind: "chat", payload: { text: "still here" } });
    await poll("the chat on the human's stream", () => human.text().includes("still here"));
  });
});

describe("load-time findings are printed where the operator looks", () => {
  it("mewgate gateway prints a deny naming an unknown participant on stderr; a reload's report lists it", { timeout: 30_000 }, async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-rg-"));
    dirs.push(dir);
    const port = await freePort();
    const file = pathJoin(dir, "space.yaml");
    writeFileSync(file, SPACE(port, { rules: 'deny: ["fz/*"], ask: ["fs/*"]' }));
    const cli = new Cli(["gateway", "--config", file]);
    clis.push(cli);
    await poll("the warning", () => /warning: .*space\.yaml:\d+:\d+: .*no participant "fz".*did you mean "fs"/.test(cli.stderr));
    const r = await api({ port }, T("human"), "POST", "reload");
    expect(r.body.reloaded[0].findings).toEqual([expect.stringMatching(/no participant "fz"/)]);
  });
});

describe("a tool rule that still matches nothing once its owner's tools register", () => {
  it("is printed by mewgate gateway (and up) when the owner registers, not only logged", { timeout: 30_000 }, async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-rg-"));
    dirs.push(dir);
    const port = await freePort();
    const file = pathJoin(dir, "space.yaml");
    // A misspelt deny: at load the owner's tools are unknown, so only their registration shows it matches nothing.
    writeFileSync(file, SPACE(port, { rules: 'deny: ["fs/wirte_file"], ask: ["fs/*"]' }));
    const cli = new Cli(["gateway", "--config", file]);
    clis.push(cli);
    await poll("listening", () => cli.stdout.includes("listening"));
    expect(cli.stderr).not.toContain("wirte_file");
    const owner = await toolOwner({ port }, "rg", T("fs"), TOOLS);
    clients.push(owner);
    await poll("the finding", () => /space\.yaml:\d+:\d+: .*fs has no tool "wirte_file".*did you mean "fs\/write_file"/.test(cli.stderr));
  });
});
