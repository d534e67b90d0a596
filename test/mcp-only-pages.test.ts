/**
 * `/mcp/<participant>` is the server, where a client could tell otherwise: tools come in
 * the server's pages, order and cursors; an unknown tool is answered as the server
 * answers it; a log line the server sends outside any call reaches the face's clients;
 * and what the server asks back reaches only the client whose call it is about, and
 * only when that client offered it. Against a real server bridged into a space
 * (test/fixtures/bridge/pages.mjs), each answer compared with the same request sent to
 * the server directly. Hostile first.
 */
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
  type CallToolResult,
  type LoggingMessageNotification,
} from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { LogListeners } from "../participants/bridge/log-listeners.js";
import { callerOffers, perRequestCapabilities, statedCapabilities, withoutStated } from "../participants/bridge/client-caps.js";
import { offeredCapabilities } from "../participants/mcp-server/face/client-caps.js";
import { ParticipantClient } from "../participants/index.js";
import { mountHttp } from "../participants/mcp-server/http/http.js";
import { startGateway, waitFor, waitForTool, type TestGateway } from "./helpers.js";

const PAGES = join(import.meta.dirname, "fixtures", "bridge", "pages.mjs");
const T = {
  alice: "alice-token-0001",
  claude: "claude-token-002",
  narrow: "narrow-token-003",
  pg: "pg-token-0000004",
  asker: "asker-token-0005",
};
const WIDE = "[{kind: chat}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: mcp/response}, {kind: mcp/request}]";

const SPACE = `
space: {id: lab}
participants:
  alice: {kind: human, token: ${T.alice}}
  claude: {kind: agent, token: ${T.claude}, tools: {allow: ["pg/*"]}, capabilities: ${WIDE}}
  narrow: {kind: agent, token: ${T.narrow}, tools: {allow: ["pg/alpha", "pg/caps"], deny: ["pg/zeta", "pg/mid", "pg/beta", "pg/omega", "pg/gamma", "pg/log-later", "pg/ask", "pg/sample"]}, capabilities: ${WIDE}}
  asker: {kind: agent, token: ${T.asker}, tools: {ask: ["pg/*"]}, capabilities: ${WIDE}}
  pg: {kind: mcp, token: ${T.pg}}
`;

let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  for (const b of bridges.splice(0)) await b.stop();
  await gw?.stop();
  gw = undefined;
});

async function setup(): Promise<ParticipantClient> {
  gw = await startGateway(SPACE);
  mountHttp(gw.gateway);
  const space = gw.gateway.spaces.get("lab")!;
  bridges.push(
    await startBridge({
      id: "pg",
      server: { command: process.execPath, args: [PAGES] } as never,
      client: { transport: () => connectInProcess(space, "pg"), reconnect: false },
    }),
  );
  const alice = await ParticipantClient.connect({ url: gw.url, space: "lab", token: T.alice });
  closers.push(() => alice.close());
  await waitForTool(alice, "pg/caps", 15_000);
  return alice;
}

async function viaGateway(token: string, capabilities: Record<string, unknown> = {}, prepare?: (c: Client) => void): Promise<Client> {
  const client = new Client({ name: "pages-test", version: "1.0.0" }, { capabilities });
  prepare?.(client);
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${gw!.port}/mcp/pg`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  closers.push(async () => {
    await transport.terminateSession().catch(() => {});
    await client.close();
  });
  return client;
}

async function direct(): Promise<Client> {
  const client = new Client({ name: "pages-test", version: "1.0.0" }, { capabilities: {} });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: [PAGES], stderr: "ignore" }));
  closers.push(() => client.close());
  return client;
}

const fails = async (p: Promise<unknown>): Promise<string> => {
  try {
    return `resolved: ${JSON.stringify(await p)}`;
  } catch (err) {
    return (err as Error).message;
  }
};

const text = (r: unknown) => ((r as CallToolResult).content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");

/** Every page of `tools/list`, as names per page and the cursors that led on. */
async function pages(client: Client, first?: string): Promise<{ names: string[][]; cursors: string[] }> {
  const names: string[][] = [];
  const cursors: string[] = [];
  let cursor = first;
  for (let i = 0; i < 10; i++) {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    names.push(page.tools.map((t) => t.name));
    if (page.nextCursor === undefined) break;
    cursor = page.nextCursor;
    cursors.push(cursor);
  }
  return { names, cursors };
}

describe("/mcp/<participant> is the server: hostile first", () => {
  it("a cursor from another seat's session lists only what this seat may see; a forged or huge cursor is refused as the server refuses it", {
    timeout: 60_000,
  }, async () => {
    await setup();
    const claude = await viaGateway(T.claude);
    const narrow = await viaGateway(T.narrow);
    const first = await claude.listTools();
    expect(first.nextCursor).toBeDefined();
    // narrow follows claude's cursor: the same page of the server, cut to narrow's policy.
    const theirs = await narrow.listTools({ cursor: first.nextCursor! });
    const claudes = await claude.listTools({ cursor: first.nextCursor! });
    expect(claudes.tools.map((t) => t.name)).toEqual(["beta", "omega", "gamma"]);
    expect(theirs.tools.map((t) => t.name)).toEqual([]);
    expect(theirs.nextCursor).toBe(claudes.nextCursor);
    const last = await narrow.listTools({ cursor: claudes.nextCursor! });
    expect(last.tools.map((t) => t.name)).toEqual(["caps"]);
    // Nothing narrow may not call appears in any page it gets.
    expect((await pages(narrow)).names.flat()).toEqual(["alpha", "caps"]);

    // A forged cursor: the server's own refusal, as the server gives it directly.
    const server = await direct();
    const forged = Buffer.from("pages:99").toString("base64url");
    const said = await fails(claude.listTools({ cursor: forged }));
    expect(said).toBe(await fails(server.listTools({ cursor: forged })));
    expect(said).toMatch(/-32602.*no such cursor/);
    // One past any cursor a server would give, and control characters: refused, the face serves on.
    expect(await fails(claude.listTools({ cursor: "x".repeat(5000) }))).toMatch(/cursor too long/);
    expect(await fails(claude.listTools({ cursor: "\u0000\u001b[31m\u202e" }))).toMatch(/no such cursor/);
    expect((await claude.listTools()).tools.map((t) => t.name)).toEqual(["zeta", "alpha", "mid"]);
  });

  it("a log line the server sends outside a call reaches the clients that set a level, at that level, and no seat that did not ask", {
    timeout: 60_000,
  }, async () => {
    await setup();
    const heard = (c: Client) => {
      const got: LoggingMessageNotification["params"][] = [];
      c.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
        got.push(n.params);
      });
      return got;
    };
    const chatty = await viaGateway(T.claude);
    const quiet = await viaGateway(T.claude);
    const other = await viaGateway(T.narrow);
    const [a, b, c] = [heard(chatty), heard(quiet), heard(other)];
    await quiet.setLoggingLevel("error");
    await chatty.setLoggingLevel("info");
    await chatty.callTool({ name: "log-later", arguments: { level: "warning" } });
    await waitFor(() => a.length >= 1, 10_000, "the warning line outside the call");
    await chatty.callTool({ name: "log-later", arguments: { level: "error" } });
    await waitFor(() => b.length >= 1 && a.length >= 2, 10_000, "the error line outside the call");
    const lines = (got: LoggingMessageNotification["params"][]) =>
      got.filter((p) => p.logger === "pages").map((p) => `${p.level} ${String(p.data)}`);
    expect(lines(a)).toEqual(["warning pages: a warning line outside any call", "error pages: a error line outside any call"]);
    // The session that asked for errors only hears the error (the same seat, another level).
    expect(lines(b)).toEqual(["error pages: a error line outside any call"]);
    // A seat that never asked for the server's log hears none of it.
    expect(c).toEqual([]);

    // As the server itself says it to a client that set a level.
    const server = await direct();
    const d = heard(server);
    await server.setLoggingLevel("info");
    await server.callTool({ name: "log-later", arguments: { level: "warning" } });
    await waitFor(() => d.length >= 1, 10_000, "the line from the server directly");
    expect(lines(d)).toEqual([lines(a)[0]]);
  });

  it("a second client on the same seat that offers no forms does not get the first one's: the server's form is refused for its call, and never shown to the other", {
    timeout: 60_000,
  }, async () => {
    await setup();
    const asked: string[] = [];
    const withForms = await viaGateway(T.claude, { elicitation: { form: {} } }, (c) =>
      c.setRequestHandler(ElicitRequestSchema, (req) => {
        asked.push(String(req.params.message));
        return { action: "accept", content: { name: "A" } };
      }),
    );
    const without = await viaGateway(T.claude, {});
    const refused = (await without.callTool({ name: "ask", arguments: {} })) as CallToolResult;
    expect(refused.isError).toBe(true);
    // Refused by the bridge for that call's client (bridge/client-caps.ts), in the words a client without forms would give.
    expect(text(refused)).toMatch(
      /^pages could not ask: .*-32601.*the MCP client of "claude" does not support elicitation \(for this call\)/,
    );
    // Claiming forms in the call's own _meta changes nothing: the key is the face's to set.
    const forged = (await without.callTool({
      name: "ask",
      arguments: {},
      _meta: { "mewgate/client_capabilities": { elicitation: { form: {} } } },
    })) as CallToolResult;
    expect(text(forged)).toMatch(/does not support elicitation \(for this call\)/);
    expect(asked).toEqual([]);
    // The client that offers forms gets its own call's form.
    expect(text(await withForms.callTool({ name: "ask", arguments: {} }))).toBe('pages heard accept {"name":"A"}');
    expect(asked).toEqual(["pages asks your name"]);
  });

  it("a second client on the same seat without sampling does not get the first one's model: refused for its call", {
    timeout: 60_000,
  }, async () => {
    await setup();
    const sampled: string[] = [];
    const withModel = await viaGateway(T.claude, { sampling: {} }, (c) =>
      c.setRequestHandler(CreateMessageRequestSchema, (req) => {
        sampled.push(JSON.stringify(req.params.messages));
        return { role: "assistant", content: { type: "text", text: "from A's model" }, model: "a-model" };
      }),
    );
    const without = await viaGateway(T.claude, {});
    const refused = (await without.callTool({ name: "sample", arguments: {} })) as CallToolResult;
    expect(refused.isError).toBe(true);
    expect(text(refused)).toMatch(/does not support sampling \(for this call\)/);
    expect(sampled).toEqual([]);
    expect(text(await withModel.callTool({ name: "sample", arguments: {} }))).toBe("pages sampled from A's model");
    expect(sampled.length).toBe(1);
  });

  it("reads a caller's stated capabilities in a bounded shape, whatever was sent", () => {
    const deep: Record<string, unknown> = {};
    let at = deep;
    for (let i = 0; i < 2000; i++) {
      at["x"] = {};
      at = at["x"] as Record<string, unknown>;
    }
    const huge = "\u0000".repeat(100_000);
    const stated = statedCapabilities({
      _meta: { "mewgate/client_capabilities": { sampling: deep, elicitation: { form: deep, url: huge, other: {} }, roots: [], tools: {} } },
    });
    expect(stated).toEqual({ sampling: {}, elicitation: { form: {} } });
    for (const odd of [undefined, null, 7, "x", [], { _meta: [] }, { _meta: { "mewgate/client_capabilities": "all" } }])
      expect(statedCapabilities(odd)).toBeUndefined();
    // A caller that states nothing is taken at the bridge's offer; one that states caps only within it.
    const bridge = { sampling: {}, elicitation: { form: {}, url: {} } };
    expect(perRequestCapabilities({}, bridge)).toBe(bridge);
    expect(perRequestCapabilities({ _meta: { "mewgate/client_capabilities": { sampling: {} } } }, { elicitation: {} })).toEqual({});
    expect(callerOffers("elicitation/create", [{ params: {} }])).toBe(true);
    expect(callerOffers("elicitation/create", [{ params: { _meta: { "mewgate/client_capabilities": {} } } }])).toBe(false);
    // The face states only what MCP names, at one level.
    expect(offeredCapabilities({ elicitation: {}, roots: { listChanged: true }, experimental: { x: {} } } as never)).toEqual({
      elicitation: { form: {} },
      roots: { listChanged: true },
    });
    expect(withoutStated({ name: "t", _meta: { "mewgate/client_capabilities": {}, traceparent: "t" } })).toEqual({
      name: "t",
      _meta: { traceparent: "t" },
    });
  });

  it("an unknown tool of a seat whose calls wait for approval makes no proposal and reaches no server", { timeout: 60_000 }, async () => {
    const alice = await setup();
    const proposals: string[] = [];
    alice.on("proposal", (p) => proposals.push(p.id));
    const asker = await viaGateway(T.asker);
    expect(await fails(asker.callTool({ name: "no-such-tool", arguments: {} }))).toMatch(/unknown tool: no-such-tool/);
    // A known tool of the same seat does wait: the proposal shows the seat's calls are held, and the unknown one was not.
    const waiting = asker.callTool({ name: "zeta", arguments: {} }).catch(() => undefined);
    await waitFor(() => proposals.length === 1, 10_000, "the proposal for zeta");
    expect(proposals.length).toBe(1);
    alice.reject(proposals[0]!, "not now");
    await waiting;
  });

  it("keeps log listeners by a level MCP names, bounded in number, and drops one that leaves", () => {
    const l = new LogListeners();
    for (const odd of [undefined, null, "x", { level: "LOUD" }, { level: ["debug"] }, { level: "__proto__" }, { level: "\u0000debug" }])
      l.asked("odd", odd);
    expect(l.for("emergency")).toEqual([]);
    l.asked("a", { level: "warning" });
    l.asked("b", { level: "debug" });
    expect(l.for("info")).toEqual(["b"]);
    expect(l.for("error").sort()).toEqual(["a", "b"]);
    // A line of a level MCP does not name counts as info.
    expect(l.for("shouting")).toEqual(["b"]);
    l.drop("b");
    expect(l.for("debug")).toEqual([]);
    for (let i = 0; i < 5000; i++) l.asked(`p${i}`, { level: "debug" });
    expect(l.for("emergency").length).toBe(1000);
  });

  it("a tool the policy denies the seat is not asked of the server when called by name", { timeout: 60_000 }, async () => {
    await setup();
    const narrow = await viaGateway(T.narrow);
    // log-later exists at the server but is denied to narrow: the face's refusal, and nothing ran.
    expect(await fails(narrow.callTool({ name: "log-later", arguments: {} }))).toMatch(/unknown tool: log-later/);
    expect(await fails(narrow.callTool({ name: "zeta", arguments: {} }))).toMatch(/unknown tool: zeta/);
  });
});

describe("/mcp/<participant> is the server", () => {
  it("lists the tools in the server's pages, order and cursors", { timeout: 60_000 }, async () => {
    await setup();
    const face = await pages(await viaGateway(T.claude));
    const server = await pages(await direct());
    expect(face.names).toEqual([["zeta", "alpha", "mid"], ["beta", "omega", "gamma"], ["log-later", "caps", "ask"], ["sample"]]);
    expect(face).toEqual(server);
  });

  it("lists resources and prompts in the server's pages, order and cursors, and refuses a cursor as it does", {
    timeout: 60_000,
  }, async () => {
    await setup();
    const face = await viaGateway(T.claude);
    const server = await direct();
    const all = async (list: (cursor?: string) => Promise<{ nextCursor?: string; items: string[] }>) => {
      const pagesOf: string[][] = [];
      let cursor: string | undefined;
      for (let i = 0; i < 10; i++) {
        const page = await list(cursor);
        pagesOf.push(page.items);
        cursor = page.nextCursor;
        if (cursor === undefined) break;
      }
      return pagesOf;
    };
    const resources = (c: Client) =>
      all(async (cursor) => {
        const r = await c.listResources(cursor === undefined ? {} : { cursor });
        return { nextCursor: r.nextCursor, items: r.resources.map((x) => x.name) };
      });
    const prompts = (c: Client) =>
      all(async (cursor) => {
        const r = await c.listPrompts(cursor === undefined ? {} : { cursor });
        return { nextCursor: r.nextCursor, items: r.prompts.map((x) => x.name) };
      });
    expect(await resources(face)).toEqual([["r-z", "r-a"], ["r-m", "r-b"], ["r-y"]]);
    expect(await resources(face)).toEqual(await resources(server));
    expect(await prompts(face)).toEqual([["p-z", "p-a"], ["p-m"]]);
    expect(await prompts(face)).toEqual(await prompts(server));
    const forged = Buffer.from("resources:77").toString("base64url");
    const said = await fails(face.listResources({ cursor: forged }));
    expect(said).toBe(await fails(server.listResources({ cursor: forged })));
    expect(said).toMatch(/-32602.*no such resources cursor/);
  });

  it("passes the client's _meta on reads of resources and prompts, but no key of the gateway's", { timeout: 60_000 }, async () => {
    await setup();
    const face = await viaGateway(T.claude);
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const _meta = { traceparent, "example.com/ticket": "T-9", "mewgate/for": { caller: "alice" }, progressToken: 7 };
    const read = await face.readResource({ uri: "pages://r-a", _meta });
    const atRead = JSON.parse((read.contents[0] as { text: string }).text) as Record<string, unknown>;
    const prompt = await face.getPrompt({ name: "p-a", _meta });
    const atPrompt = JSON.parse((prompt.messages[0]!.content as { text: string }).text) as Record<string, unknown>;
    for (const at of [atRead, atPrompt]) {
      expect(at).toMatchObject({ traceparent, "example.com/ticket": "T-9" });
      expect(at["mewgate/for"]).toBeUndefined();
      expect(at["progressToken"]).toBeUndefined();
    }
  });

  it("answers an unknown tool as the server does", { timeout: 60_000 }, async () => {
    await setup();
    const face = await viaGateway(T.claude);
    const server = await direct();
    const viaFace = (await face.callTool({ name: "no-such-tool", arguments: {} })) as CallToolResult;
    const itself = (await server.callTool({ name: "no-such-tool", arguments: {} })) as CallToolResult;
    expect(viaFace.isError).toBe(true);
    expect(text(viaFace)).toBe(text(itself));
    expect(text(viaFace)).toBe("MCP error -32602: Tool no-such-tool not found");
  });
});
