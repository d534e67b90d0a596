/**
 * The proposal card as the operator API serves it (the one model the console, the terminal and
 * `mewgate proposals show` draw): the proposer's intent, bounded and carried as text; the
 * tool's title and hints; the Decided list with the call's outcome in one vocabulary; Respond;
 * the recent history a console loads on open. Hostile input first.
 */
import { afterEach, describe, expect, it } from "vitest";
import { startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const T = { human: "human-token-00001", agent: "agent-token-00002", fs: "fs-token-0000003", other: "other-token-00004" };
const SPACE = `
space: {id: cards}
participants:
  human: {kind: human, token: ${T.human}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["fs/*"]}}
  other: {kind: agent, token: ${T.other}, visibility: addressed, tools: {ask: ["fs/*"]}}
  fs: {kind: mcp, token: ${T.fs}}
`;
const HOSTILE = `<img src=x onerror="window.__x=1"> \u001b[2J\u001b]52;c;aGk=\u0007 \u202Eevil\u202C "quoted" \\n`;
const TOOLS = [
  {
    name: "write_file",
    title: "Write <b>file</b>",
    description: "Writes a file",
    annotations: { destructiveHint: true, readOnlyHint: false, idempotentHint: "yes", openWorldHint: false, title: "x" },
    inputSchema: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path"] },
  },
];

let gw: TestGateway | undefined;
const clients: TestClient[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function api(method: string, path: string, body?: unknown, token = T.human): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/cards/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}

async function setup(onCall?: (env: Env, reply: (r: unknown) => void) => void) {
  gw = await startGateway(SPACE);
  const seen: Env[] = [];
  const fs = await toolOwner(gw, "cards", T.fs, TOOLS, {
    onCall: (env, reply) => {
      seen.push(env);
      if (onCall) onCall(env, reply);
      else reply({ content: [{ type: "text", text: `line one\nline two of ${String(env.payload.params.arguments.path)}` }] });
    },
  });
  const human = await TestClient.join(gw, "cards", T.human);
  const agent = await TestClient.join(gw, "cards", T.agent);
  clients.push(fs, human, agent);
  return { fs, human, agent, seen };
}

describe("a proposal's intent", () => {
  it("is refused when too long or not text, by either way of sending it, and the gateway keeps serving", async () => {
    const { agent, human } = await setup();
    const huge = "x".repeat(4001);
    agent.send({
      id: "big",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } }, intent: huge },
    });
    const e1 = await agent.next((e) => e.kind === "system/error" && e.correlation_id?.[0] === "big");
    expect(e1.payload.code).toBe("invalid_payload");
    expect(e1.payload.message).toMatch(/intent: at most 4000 characters/);
    agent.send({
      id: "num",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } }, intent: 42 },
    });
    expect((await agent.next((e) => e.kind === "system/error" && e.correlation_id?.[0] === "num")).payload.code).toBe("invalid_payload");
    for (const [id, intent] of [
      ["meta-big", huge],
      ["meta-obj", { a: 1 }],
    ] as const) {
      agent.send({
        id,
        kind: "mcp/request",
        to: ["system:gateway"],
        payload: {
          jsonrpc: "2.0",
          id,
          method: "tools/call",
          params: { name: "fs/write_file", arguments: { path: "a" }, _meta: { "mewgate/intent": intent } },
        },
      });
      const e = await agent.next((x) => x.kind === "system/error" && x.correlation_id?.[0] === id);
      expect(e.payload.code).toBe("invalid_payload");
      expect(e.payload.message).toContain('_meta["mewgate/intent"]');
    }
    expect((await api("GET", "proposals")).body.proposals).toEqual([]);
    // Still serving: a fair one is held.
    agent.send({
      id: "fine",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } }, intent: "x".repeat(4000) },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "fine");
    expect((await api("GET", "proposals/fine")).body.intent).toEqual({ text: "x".repeat(4000), source: "proposal" });
  });

  it("carrying HTML, escapes and bidi reaches the card as the very text sent (readers sanitise), and never reaches the tool", async () => {
    const { agent, human, seen } = await setup();
    agent.send({
      id: "c1",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: {
        jsonrpc: "2.0",
        id: "c1",
        method: "tools/call",
        params: { name: "fs/write_file", arguments: { path: HOSTILE }, _meta: { "mewgate/intent": HOSTILE, other: 1 } },
      },
    });
    const proposal = await human.next((e) => e.kind === "mcp/proposal" && e.id === "c1");
    expect(proposal.payload.intent).toBe(HOSTILE);
    expect(proposal.payload.params._meta).toEqual({ other: 1 });
    const card = (await api("GET", "proposals/c1")).body;
    expect(card).toMatchObject({
      id: "c1",
      shortId: "c1",
      proposer: "agent",
      tool: "fs/write_file",
      alwaysScope: { participant: "agent", tool: "fs/write_file" },
      intent: { text: HOSTILE, source: "proposal" },
      arguments: { path: HOSTILE },
    });
    // The title is text like any other; only the four hints, and only booleans, become badges.
    expect(card.title).toBe("Write <b>file</b>");
    expect(card.hints).toEqual({ destructiveHint: true, readOnlyHint: false, openWorldHint: false });
    expect(card.why).toMatch(/ask/);
    expect(Date.parse(card.expiresAt)).toBeGreaterThan(Date.parse(card.createdAt));
    human.send({ kind: "mcp/approve", correlation_id: ["c1"], payload: { scope: "once" } });
    await waitFor(() => seen.length === 1, 5000, "the call at the tool");
    // The approved call carries the gateway's signed receipt beside the proposer's own keys (test/receipts.test.ts).
    expect(seen[0]!.payload.params._meta).toEqual({ other: 1, "mewgate/receipt": expect.any(String) });
    expect(JSON.stringify(seen[0])).not.toContain("mewgate/intent");
  });

  it("without one, the card shows the proposer's last message before it", async () => {
    const { agent, human } = await setup();
    agent.send({ kind: "chat", payload: { text: "first" } });
    agent.send({ kind: "chat", payload: { text: "I will save your notes to notes.txt" } });
    await human.next((e) => e.kind === "chat" && e.payload.text.startsWith("I will"));
    agent.send({
      id: "p2",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "notes.txt" } } },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "p2");
    expect((await api("GET", "proposals/p2")).body.intent).toMatchObject({
      text: "I will save your notes to notes.txt",
      source: "last_message",
    });
  });
});

describe("the Decided list and the outcome vocabulary", () => {
  it("shows who decided, when, edited or not, and the outcome with the result's text: ok, tool_error, error, rejected; /metrics agrees", async () => {
    const { agent, human } = await setup((env, reply) => {
      const path = env.payload.params.arguments.path as string;
      if (path === "bad") reply({ content: [{ type: "text", text: "Input validation error: content" }], isError: true });
      else if (path === "broken")
        clients[0]!.send({
          kind: "mcp/response",
          to: [env.from],
          correlation_id: [env.id],
          payload: { jsonrpc: "2.0", id: env.payload.id, error: { code: -32603, message: "disk on fire" } },
        });
      else reply({ content: [{ type: "text", text: "written\nall of it" }] });
    });
    for (const path of ["good", "bad", "broken", "nope"]) {
      agent.send({
        id: `p-${path}`,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { path } } },
      });
      await human.next((e) => e.kind === "mcp/proposal" && e.id === `p-${path}`);
    }
    expect((await api("POST", "proposals/p-good/approve", { arguments: { path: "good", content: "edited" } })).status).toBe(200);
    expect((await api("POST", "proposals/p-bad/approve", {})).status).toBe(200);
    expect((await api("POST", "proposals/p-broken/approve", {})).status).toBe(200);
    expect((await api("POST", "proposals/p-nope/reject", { reason: "unsafe", text: "not there" })).status).toBe(200);
    const decided = async () => (await api("GET", "proposals?state=decided")).body.decided as Array<Record<string, any>>;
    await waitFor(async () => (await decided()).filter((d) => d.outcome).length === 3, 5000, "three outcomes");
    const byId = Object.fromEntries((await decided()).map((d) => [d.id, d]));
    expect(byId["p-good"]).toMatchObject({
      decision: "approved",
      decidedBy: "human",
      edited: true,
      state: "answered",
      outcome: "ok",
      result: { text: "written\nall of it" },
      arguments: { path: "good", content: "edited" },
      proposedArguments: { path: "good" },
    });
    expect(byId["p-bad"]).toMatchObject({ edited: false, outcome: "tool_error", result: { text: "Input validation error: content" } });
    expect(byId["p-broken"]).toMatchObject({ outcome: "error", result: { text: "disk on fire (code -32603)" } });
    expect(byId["p-nope"]).toMatchObject({ decision: "rejected", state: "rejected", reason: "unsafe", text: "not there" });
    expect(byId["p-nope"]!.outcome).toBeUndefined();
    const audit = (await api("GET", "audit")).body.entries as Array<Record<string, any>>;
    expect(audit.filter((e) => e.event === "answered").map((e) => [e.proposal, e.outcome])).toEqual([
      ["p-good", "ok"],
      ["p-bad", "tool_error"],
      ["p-broken", "error"],
    ]);
    const metrics = await (await fetch(`http://127.0.0.1:${gw!.port}/metrics`)).text();
    for (const outcome of ["ok", "tool_error", "error"])
      expect(metrics).toMatch(new RegExp(`^mewgate_calls_total\\{space="cards",outcome="${outcome}"\\} 1$`, "m"));
  });

  it("records a call its proposer cancelled as cancelled, in the Decided list and /metrics", async () => {
    gw = await startGateway(SPACE);
    const human = await TestClient.join(gw, "cards", T.human);
    const agent = await TestClient.join(gw, "cards", T.agent);
    const fs = await toolOwner(gw, "cards", T.fs, TOOLS, { onCall: () => {} });
    clients.push(human, agent, fs);
    agent.send({
      id: "slow",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", id: "slow", method: "tools/call", params: { name: "fs/write_file", arguments: { path: "x" } } },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "slow");
    await api("POST", "proposals/slow/approve", {});
    await fs.next((e) => e.kind === "mcp/request" && e.payload.method === "tools/call");
    agent.send({
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "slow" } },
    });
    const decided = async () => (await api("GET", "proposals?state=decided")).body.decided as Array<Record<string, any>>;
    await waitFor(
      async () => (await decided()).some((d) => d.id === "slow" && d.outcome === "cancelled" && d.state === "failed"),
      5000,
      "cancelled",
    );
    const audit = (await api("GET", "audit")).body.entries as Array<Record<string, any>>;
    expect(audit.find((e) => e.proposal === "slow" && e.event === "failed")).toMatchObject({ reason: "cancelled", outcome: "cancelled" });
    const metrics = await (await fetch(`http://127.0.0.1:${gw.port}/metrics`)).text();
    expect(metrics).toMatch(/^mewgate_calls_total\{space="cards",outcome="cancelled"\} 1$/m);
  });
});

describe("Respond and history", () => {
  it("sends the proposer a chat tied to the proposal, decides nothing, and refuses what is not pending or not text", async () => {
    const { agent, human } = await setup();
    agent.send({
      id: "r1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "n" } } },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "r1");
    expect((await api("POST", "proposals/r1/respond", { text: "use notes/ instead" })).status).toBe(200);
    const chat = await agent.next((e) => e.kind === "chat" && e.from === "human");
    expect(chat).toMatchObject({ to: ["agent"], correlation_id: ["r1"], payload: { text: "use notes/ instead" } });
    expect((await api("GET", "proposals")).body.proposals.map((p: { id: string }) => p.id)).toEqual(["r1"]);
    expect((await api("POST", "proposals/r1/respond", { text: "" })).body.error.code).toBe("invalid_payload");
    expect((await api("POST", "proposals/zzz/respond", { text: "hi" })).status).toBe(404);
    // History for a console opening: what the caller may see, oldest first.
    const { envelopes } = (await api("GET", "history?limit=50")).body;
    expect(envelopes.map((e: Env) => e.kind)).toContain("mcp/proposal");
    expect(envelopes.at(-1)).toMatchObject({ kind: "chat", correlation_id: ["r1"] });
    // A participant that sees only what is addressed to it gets no more here.
    const theirs = (await api("GET", "history?limit=50", undefined, T.other)).body.envelopes as Env[];
    expect(theirs.filter((e) => e.kind === "chat" || e.kind === "mcp/proposal")).toEqual([]);
  });
});

describe("the card in the terminal", () => {
  it("shows the intent sanitised and wrapped, never cut, and the tool's hints; Always states its scope", async () => {
    const { queueBlock, allArguments } = await import("../cli/terminal/proposal-view.js");
    const { alwaysScope } = await import("../cli/terminal/tty-text.js");
    const { ProposalQueue } = await import("../cli/terminal/queue.js");
    const { PLAIN } = await import("../cli/terminal/format.js");
    const q = new ProposalQueue();
    const intent = `first \u001b[2J\u001b]52;c;aGk=\u0007line \u202Eevil\u202C\n${"long ".repeat(60)}\nthree\nfour\nfive\nsix`;
    q.sync([
      {
        protocol: "mew/v0.4",
        id: "t1",
        ts: new Date().toISOString(),
        from: "agent",
        to: ["fs"],
        kind: "mcp/proposal",
        payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } }, intent },
      },
    ] as never);
    const tools = [{ name: "fs/write_file", annotations: { destructiveHint: true, readOnlyHint: false, idempotentHint: "x" } }];
    const block = queueBlock(q, PLAIN, 80, { tools: tools as never }).join("\n");
    expect(block).toContain("tool: destructive · not read-only\n");
    expect(block).toContain("agent says why:\n  first line �evil�\n");
    expect(block).not.toMatch(/[\u001b\u0007\u202E]/);
    expect(block).toMatch(/⋯ \d+ more lines — v shows them all/);
    expect(block).toContain("A approve always… · e edit, then approve · R respond");
    // v: every line of it.
    const all = allArguments(q.current!, PLAIN, 80).join("\n");
    expect(all).toContain("  six");
    // Wrapped at words: each break took the space it stood on.
    expect(all.replace(/\n {2}↪ /g, " ")).toContain("long ".repeat(60).trim());
    expect(alwaysScope("agent", "fs/write_file", PLAIN).join("\n")).toMatch(
      /participant: agent\n\s+tool:\s+fs\/write_file\n\s+arguments:\s+any/,
    );
  });
});

describe("mewgate proposals show | decided | respond", () => {
  it("prints the card (intent sanitised, multi-line arguments numbered), the Decided list with outcomes, and answers without deciding", async () => {
    const { runProposals } = await import("../cli/commands.js");
    const { agent, human } = await setup((env, reply) => {
      if (env.payload.params.arguments.path === "bad")
        reply({ content: [{ type: "text", text: "Input validation error: content" }], isError: true });
      else reply({ content: [{ type: "text", text: "wrote it" }] });
    });
    agent.send({
      id: "s1-abcdef",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: {
        method: "tools/call",
        params: { name: "write_file", arguments: { path: "x.txt", content: "one\ntwo\u001b[2J\nthree" } },
        intent: HOSTILE,
      },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "s1-abcdef");
    const out: string[] = [];
    const io = {
      stdout: {
        write: (s: string) => {
          out.push(s);
          return true;
        },
      },
      stderr: {
        write: (s: string) => {
          out.push(s);
          return true;
        },
      },
      env: {},
    } as never;
    const common = { gateway: `ws://127.0.0.1:${gw!.port}`, space: "cards", token: T.human };
    expect(await runProposals("show", "s1", common, io)).toBe(0);
    const card = out.join("");
    expect(card).toContain("agent wants fs/write_file  #s1-abcde");
    expect(card).toContain("tool: Write <b>file</b> — destructive · not read-only · closed world");
    expect(card).toMatch(/why agent wants it:\n {2}<img src=x onerror="window.__x=1">/);
    expect(card).toMatch(/content:\n\s+1 │ one\n\s+2 │ two\n\s+3 │ three/);
    expect(card).not.toMatch(/[\u001b\u0007\u202E]/);
    out.length = 0;
    expect(await runProposals("show", "nope", common, io)).not.toBe(0);

    out.length = 0;
    expect(await runProposals("respond", "s1", { ...common, text: "why x.txt?" }, io)).toBe(0);
    expect((await agent.next((e) => e.kind === "chat" && e.from === "human")).correlation_id).toEqual(["s1-abcdef"]);
    expect((await api("GET", "proposals")).body.proposals).toHaveLength(1);

    agent.send({
      id: "s2",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "bad" } } },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "s2");
    await api("POST", "proposals/s1-abcdef/approve", {});
    await api("POST", "proposals/s2/approve", {});
    await waitFor(
      async () => (await api("GET", "proposals?state=decided")).body.decided.filter((d: { outcome?: string }) => d.outcome).length === 2,
      5000,
      "two outcomes",
    );
    out.length = 0;
    expect(await runProposals("decided", undefined, common, io)).toBe(0);
    const decided = out.join("");
    // The Decided list shows the arguments each was decided on, then the outcome.
    expect(decided).toMatch(
      /\[s2\] agent → fs\/write_file: approved by human at .* · tool error\n {2}arguments: \{"path":"bad"\}\n {4}Input validation error: content/,
    );
    expect(decided).toMatch(/\[s1-abcde\] agent → fs\/write_file: approved by human at .* · ok\n {2}arguments: .*\n {4}wrote it/);
  });
});
