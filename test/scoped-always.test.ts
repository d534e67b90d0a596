/**
 * Scoped "always" (policy/scope.ts), hostile first: a grant limited to a directory must not
 * stretch to a path that only looks as if it were under it, a grant limited to exact
 * arguments must not cover others, and both hold across a restart. Then the happy path with
 * a real MCP server (server-filesystem) writing under the approved directory.
 */
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { conditionFor, conditionHolds, normalisePath } from "../gateway/policy/scope.js";
import { GATEWAY_ID } from "../gateway/wire/envelope.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ParticipantClient } from "../participants/index.js";
import { alwaysLimit, runGrants, runProposals } from "../cli/commands.js";
import { errorFor, failure, startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const require = createRequire(import.meta.url);
const FILESYSTEM = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: scoped}
gateway: {state_dir: .mewgate}
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent: {kind: agent, token: ${TOKEN("agent")}, tools: {ask: ["fs/write_file"]}}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const sdk: ParticipantClient[] = [];
const bridges: Bridge[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(sdk.splice(0).map((c) => c.close()));
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function join(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "scoped", TOKEN(id));
  clients.push(c);
  return c;
}

async function owner(g: { port: number }, runs: Env[]): Promise<TestClient> {
  const c = await toolOwner(g, "scoped", TOKEN("fs"), TOOLS, {
    onCall: (env, reply) => {
      runs.push(env);
      reply({ content: [{ type: "text", text: "ok" }] });
    },
  });
  clients.push(c);
  return c;
}

const call = (id: string, args: unknown) => ({
  id,
  kind: "mcp/request",
  to: ["fs"],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "write_file", arguments: args } },
});
const propose = (id: string, args: Record<string, unknown>) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: args } },
});

/** Whether `agent` may call with `args` directly now: routed (true) or told it needs a proposal (false). */
async function direct(agent: TestClient, id: string, args: unknown): Promise<boolean> {
  agent.send(call(id, args));
  const e = await agent.next(
    (x) => (x.kind === "system/error" && x.correlation_id?.[0] === id) || (x.kind === "mcp/response" && x.correlation_id?.[0] === id),
  );
  if (e.kind === "system/error") {
    expect(e.payload.code).toBe("proposal_required");
    return false;
  }
  return true;
}

async function approvedAlways(
  g: TestGateway,
  args: Record<string, unknown>,
  limit: unknown,
): Promise<{ agent: TestClient; alice: TestClient }> {
  const agent = await join(g, "agent");
  const alice = await join(g, "alice");
  agent.send(propose("p", args));
  await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p");
  alice.send({ kind: "mcp/approve", correlation_id: ["p"], payload: { scope: "always", limit } });
  await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "p");
  return { agent, alice };
}

describe("scoped always: hostile", () => {
  it("a prefix scope does not stretch to paths that only look as if they were under it", async () => {
    const g = await startGateway(SPACE);
    gateways.push(g);
    const runs: Env[] = [];
    await owner(g, runs);
    const { agent } = await approvedAlways(g, { path: "notes/a.md", text: "x" }, { field: "path" });
    expect(await direct(agent, "in", { path: "notes/b.md", text: "y" })).toBe(true);
    expect(await direct(agent, "dbl", { path: "notes//c.md" })).toBe(true);
    for (const [i, path] of [
      "notes/../secrets/key",
      "notes/./../secrets",
      "notes-private/x",
      "notes",
      "notes/",
      "/notes/b.md",
      "notes/%2e%2e/secrets",
      "notes\\..\\secrets",
      "notes\uff0f..\uff0fsecrets",
      "notes/\u2025/secrets",
      "notes/a\u0000",
      "secrets/notes/x",
    ].entries()) {
      expect(await direct(agent, `out-${i}`, { path }), JSON.stringify(path)).toBe(false);
    }
    // Not a string, missing, or smuggled through the prototype: asks.
    expect(await direct(agent, "arr", { path: ["notes/x"] })).toBe(false);
    expect(await direct(agent, "none", { text: "x" })).toBe(false);
    expect(await direct(agent, "proto", JSON.parse('{"__proto__": {"path": "notes/x"}}'))).toBe(false);
    // The catalogue still says write_file needs a proposal: the grant holds only for some arguments.
    const list = await askList(agent);
    expect(list.find((t) => t.name === "fs/write_file")?.policy).toBe("proposal");
    expect(runs.filter((r) => r.correlation_id?.[0] !== "p").map((r) => r.payload.params.arguments.path)).toEqual([
      "notes/b.md",
      "notes//c.md",
    ]);
  });

  it("an exact scope covers the approved arguments only, and both survive a restart", async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-scoped-"));
    dirs.push(dir);
    let g = await startGateway(SPACE, { dir });
    await owner(g, []);
    await approvedAlways(g, { path: "a.txt", text: "hi" }, "exact");
    for (const c of clients.splice(0)) c.ws.terminate();
    await g.gateway.close();
    g = await startGateway(SPACE, { dir });
    gateways.push(g);
    await owner(g, []);
    const agent = await join(g, "agent");
    expect(await direct(agent, "same", { text: "hi", path: "a.txt" })).toBe(true);
    expect(await direct(agent, "other", { path: "a.txt", text: "bye" })).toBe(false);
    expect(await direct(agent, "more", { path: "a.txt", text: "hi", mode: "append" })).toBe(false);
    // The grant is listed as limited, by the API and the CLI.
    const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/scoped/grants`, {
      headers: { authorization: `Bearer ${TOKEN("alice")}` },
    });
    const { grants } = (await res.json()) as { grants: Array<Record<string, unknown>> };
    expect(grants).toHaveLength(1);
    expect(grants[0]).toMatchObject({
      condition: { op: "exact", args: { path: "a.txt", text: "hi" } },
      limited_to: expect.stringMatching(/^only with exactly these arguments/),
    });
    let out = "";
    const io = {
      stdout: {
        write: (s: string) => {
          out += s;
          return true;
        },
      },
      stderr: {
        write: (s: string) => {
          out += s;
          return true;
        },
      },
      env: {},
    } as never;
    const code = await runGrants("list", undefined, { gateway: `ws://127.0.0.1:${g.port}`, space: "scoped", token: TOKEN("alice") }, io);
    expect(code).toBe(0);
    expect(out).toMatch(/\[only with exactly these arguments: \{"path":"a\.txt","text":"hi"\}\]/);
  });

  it("refuses a prefix scope it cannot make safely, and offers the scopes on the card", async () => {
    const g = await startGateway(SPACE);
    gateways.push(g);
    await owner(g, []);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("q", { path: "top.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "q");
    const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/scoped/proposals/q`, {
      headers: { authorization: `Bearer ${TOKEN("alice")}` },
    });
    const view = (await res.json()) as { always_limits: Array<{ limit: unknown; text: string }> };
    expect(view.always_limits.map((o) => o.limit)).toEqual(["tool", "exact"]);
    alice.send({ id: "a1", kind: "mcp/approve", correlation_id: ["q"], payload: { scope: "always", limit: { field: "path" } } });
    expect((await errorFor(alice, "a1")).payload.message).toMatch(/has no directory/);
    alice.send({
      id: "a2",
      kind: "mcp/approve",
      correlation_id: ["q"],
      payload: { scope: "always", limit: { field: "path", prefix: "/" } },
    });
    expect((await errorFor(alice, "a2")).payload.code).toBe("invalid_payload");
    alice.send({ id: "a3", kind: "mcp/approve", correlation_id: ["q"], payload: { scope: "once", limit: "exact" } });
    expect((await errorFor(alice, "a3")).payload.message).toMatch(/only/);
    agent.send(propose("r", { path: "notes/../etc/passwd" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "r");
    alice.send({ id: "a4", kind: "mcp/approve", correlation_id: ["r"], payload: { scope: "always", limit: { field: "path" } } });
    expect((await errorFor(alice, "a4")).payload.message).toMatch(/not a plain path/);
  });

  it("`mewgate proposals approve --always --scope prefix:path` makes a scoped grant; a bad --scope approves nothing", async () => {
    const g = await startGateway(SPACE);
    gateways.push(g);
    await owner(g, []);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("c1", { path: "docs/a.md" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "c1");
    let out = "";
    const io = {
      stdout: {
        write: (s: string) => {
          out += s;
          return true;
        },
      },
      stderr: {
        write: (s: string) => {
          out += s;
          return true;
        },
      },
      env: {},
    } as never;
    const common = { gateway: `ws://127.0.0.1:${g.port}`, space: "scoped", token: TOKEN("alice"), waitMs: 5000 };
    expect(await runProposals("approve", "c1", { ...common, always: true, scope: "prefix" }, io)).toBe(1);
    expect(await runProposals("approve", "c1", { ...common, scope: "exact" }, io)).toBe(1);
    expect(out).toMatch(/--scope limits an --always approval/);
    expect(await runProposals("approve", "c1", { ...common, always: true, scope: "prefix:path" }, io)).toBe(0);
    expect(out).toMatch(/\(always, path under its directory only\)/);
    expect(await direct(agent, "under", { path: "docs/b.md" })).toBe(true);
    expect(await direct(agent, "beside", { path: "docs2/b.md" })).toBe(false);
    expect(alwaysLimit("prefix:path=docs/", true)).toEqual({ field: "path", prefix: "docs/" });
  });

  it("normalises or refuses path tricks (unit)", () => {
    expect(normalisePath("notes//a/./b")).toBe("notes/a/b");
    expect(normalisePath("notes/../x")).toBeUndefined();
    expect(normalisePath("a/b/")).toBe("a/b/");
    expect(conditionFor({ field: "path", prefix: "notes" }, { path: "notes/a" }).condition).toEqual({
      op: "prefix",
      field: "path",
      value: "notes/",
    });
    expect(conditionFor({ field: "path", prefix: "other" }, { path: "notes/a" }).error).toMatch(/not under other\//);
    const c = { op: "prefix" as const, field: "path", value: "notes/" };
    expect(conditionHolds(c, { path: "notes/x" })).toBe(true);
    expect(conditionHolds(c, { path: "notesx/y" })).toBe(false);
    expect(conditionHolds(c, undefined)).toBe(false);
  });
});

async function askList(c: TestClient): Promise<Array<{ name: string; policy: string }>> {
  c.send({ id: "list", kind: "mcp/request", to: ["system:gateway"], payload: { jsonrpc: "2.0", id: 1, method: "tools/list" } });
  const res = await c.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "list");
  return res.payload.result.tools;
}

describe("scoped always: happy path with a real MCP server", () => {
  it("an agent writes under the approved directory without asking, and asks again outside it", { timeout: 30_000 }, async () => {
    const root = realpathSync(mkdtempSync(pathJoin(tmpdir(), "mewgate-scoped-fs-")));
    dirs.push(root);
    mkdirSync(pathJoin(root, "notes"));
    const g = await startGateway(SPACE);
    gateways.push(g);
    const b = await startBridge({
      id: "fs",
      server: { command: process.execPath, args: [FILESYSTEM, root] },
      client: { url: g.url, space: "scoped", token: TOKEN("fs") },
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    });
    bridges.push(b);
    const agent = await ParticipantClient.connect({ url: g.url, space: "scoped", token: TOKEN("agent") });
    const alice = await ParticipantClient.connect({ url: g.url, space: "scoped", token: TOKEN("alice") });
    sdk.push(agent, alice);
    await waitFor(async () => (await agent.listTools()).some((t) => t.name === "fs/write_file"), 10_000, "fs/write_file");
    const seen = new Promise<string>((resolve) => alice.on("proposal", (p) => resolve(p.id)));
    const first = agent.propose(
      "fs",
      "tools/call",
      { name: "write_file", arguments: { path: pathJoin(root, "notes", "a.md"), content: "one" } },
      { schema: CallToolResultSchema },
    );
    await seen;
    alice.approve(first.id, { scope: "always", limit: { field: "path" } });
    expect((await first).isError).toBeFalsy();
    const second = await agent.request(
      GATEWAY_ID,
      "tools/call",
      { name: "fs/write_file", arguments: { path: pathJoin(root, "notes", "b.md"), content: "two" } },
      { schema: CallToolResultSchema },
    );
    expect(second.isError).toBeFalsy();
    expect(readFileSync(pathJoin(root, "notes", "b.md"), "utf8")).toBe("two");
    const outside = await failure(
      agent.request("fs", "tools/call", {
        name: "write_file",
        arguments: { path: pathJoin(root, "notes", "..", "c.md"), content: "three" },
      }),
    );
    expect(outside.code).toBe("proposal_required");
    expect(existsSync(pathJoin(root, "c.md"))).toBe(false);
  });
});
