import { rmSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { CallToolResultSchema, ListToolsResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import * as z from "zod";
import { connectInProcess } from "../gateway/space/inprocess.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { backoffDelay } from "../participants/client.js";
import { ParticipantClient, type ParticipantError, RpcError, type ClientOptions, type IncomingRequest } from "../participants/index.js";
import { failure, sleep, startGateway, type TestGateway, waitForTool } from "./helpers.js";

const TOKENS = {
  alice: "alice-token-123",
  bob: "bob-token-4567",
  carol: "carol-token-890",
  calc: "calc-token-000",
  newbie: "newbie-token-11",
  agent: "agent-token-222",
  notes: "notes-token-333",
} as const;
type Who = keyof typeof TOKENS;

const SPACE = `
space: {id: lab, name: Lab}
policy:
  proposal_ttl_ms: 60000
participants:
  alice: {kind: human, token: ${TOKENS.alice}}
  bob: {kind: human, token: ${TOKENS.bob}}
  carol: {kind: human, token: ${TOKENS.carol}}
  calc: {kind: mcp, description: a calculator, token: ${TOKENS.calc}}
  newbie:
    kind: agent
    token: ${TOKENS.newbie}
    capabilities: [{kind: chat}]
  inproc:
    kind: service
    capabilities: [{kind: "*"}]
  agent: {kind: agent, token: ${TOKENS.agent}}
  notes: {kind: service, token: ${TOKENS.notes}}
`;

let gw: TestGateway;
const clients: ParticipantClient[] = [];
const extraDirs: string[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await gw?.stop();
  for (const d of extraDirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

type Mode = "websocket" | "in-process";

function options(who: Who | "inproc", mode: Mode, extra: Partial<ClientOptions> = {}): ClientOptions {
  if (mode === "in-process" || who === "inproc") {
    const space = gw.gateway.spaces.get("lab")!;
    return { transport: () => connectInProcess(space, who), reconnect: false, ...extra } as ClientOptions;
  }
  return { url: gw.url, space: "lab", token: TOKENS[who], ...extra } as ClientOptions;
}

async function connect(who: Who | "inproc", mode: Mode = "websocket", extra: Partial<ClientOptions> = {}): Promise<ParticipantClient> {
  const c = new ParticipantClient(options(who, mode, extra));
  clients.push(c);
  await c.connect();
  return c;
}

function until<T>(register: (done: (v: T) => void) => void, timeoutMs = 5000): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timed out waiting")), timeoutMs);
    register((v) => {
      clearTimeout(timer);
      resolve(v);
    });
  });
}

// The same contract over both transports.
describe.each<Mode>(["websocket", "in-process"])("request and response over %s", (mode) => {
  it("connects, exposes the welcome and keeps participants current from presence", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    const joined = until<void>((done) => bob.on("presence", (e) => e.event === "join" && e.participant.id === "alice" && done()));
    const alice = await connect("alice", mode);
    expect(alice.id).toBe("alice");
    expect(alice.status).toBe("open");
    expect(alice.capabilities).toEqual([{ kind: "*" }]);
    expect(alice.welcome?.space?.id).toBe("lab");
    expect([...alice.participants.keys()]).toEqual(["bob"]);
    expect(Array.isArray(alice.tools)).toBe(true);
    await joined;
    expect(bob.participants.has("alice")).toBe(true);
    const left = until<void>((done) => bob.on("presence", (e) => e.event === "leave" && done()));
    await alice.close();
    await left;
    expect(bob.participants.has("alice")).toBe(false);
  });

  it("routes a request to a participant serving with onRequest and resolves with its result", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    const seen: IncomingRequest[] = [];
    bob.onRequest((req) => {
      seen.push(req);
      return { echoed: req.params };
    });
    const alice = await connect("alice", mode);
    const call = alice.request("bob", "demo/echo", { x: 1 });
    expect(typeof call.id).toBe("string");
    expect(await call).toEqual({ echoed: { x: 1 } });
    expect(seen[0]!.from).toBe("alice");
    expect(seen[0]!.method).toBe("demo/echo");
    expect(seen[0]!.envelope.id).toBe(call.id);
    expect(() => bob.onRequest(() => undefined)).toThrow(/already serves/);
  });

  it("answers concurrent calls independently and validates results against a schema", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    bob.onRequest(async ({ params }) => {
      const { n } = params as { n: number };
      await sleep(n === 1 ? 60 : 0);
      return { n };
    });
    const alice = await connect("alice", mode);
    const [one, two] = await Promise.all([
      alice.request("bob", "x", { n: 1 }),
      alice.request("bob", "x", { n: 2 }, { schema: z.object({ n: z.number() }) }),
    ]);
    expect(one).toEqual({ n: 1 });
    expect(two.n).toBe(2);
    const bad = await failure(alice.request("bob", "x", { n: 3 }, { schema: z.object({ n: z.string() }) }));
    expect(bad.code).toBe("invalid_response");
  });

  it("turns a handler's error into a typed rpc_error, and data.reason into the code", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    bob.onRequest(({ method }) => {
      if (method === "rpc") throw new RpcError(-32001, "no such file", { path: "a.txt" });
      if (method === "reason") throw new RpcError(-32000, "gone", { reason: "target_left" });
      throw new Error("boom");
    });
    const alice = await connect("alice", mode);
    const rpc = await failure(alice.request("bob", "rpc"));
    expect(rpc.code).toBe("rpc_error");
    expect(rpc.rpcCode).toBe(-32001);
    expect(rpc.message).toBe("no such file");
    expect(rpc.data).toEqual({ path: "a.txt" });
    expect((await failure(alice.request("bob", "reason"))).code).toBe("target_left");
    const plain = await failure(alice.request("bob", "plain"));
    expect(plain.code).toBe("rpc_error");
    expect(plain.rpcCode).toBe(-32603);
    expect(plain.message).toBe("boom");
  });

  it("answers method-not-found when nothing serves requests", async () => {
    gw = await startGateway(SPACE);
    await connect("bob", mode);
    const alice = await connect("alice", mode);
    const err = await failure(alice.request("bob", "anything"));
    expect(err.rpcCode).toBe(-32601);
  });

  it("rejects with the code of a correlated system/error", async () => {
    gw = await startGateway(SPACE);
    await connect("bob", mode);
    const newbie = await connect("newbie", mode);
    const err = await failure(newbie.request("bob", "demo/ping"));
    expect(err.code).toBe("capability_violation");
    expect(err.envelope?.kind).toBe("system/error");
    // Tool policy: a call that needs approval is refused when made directly.
    expect((await failure(newbie.request("bob", "tools/call", { name: "rm" }))).code).toBe("proposal_required");
    const alice = await connect("alice", mode);
    expect((await failure(alice.request("nobody", "x"))).code).toBe("unknown_recipient");
  });

  it("times out locally, and tells the target, whose handler is aborted", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    const aborted = until<unknown>((done) =>
      bob.onRequest(({ signal }) => new Promise(() => signal.addEventListener("abort", () => done(signal.reason)))),
    );
    const alice = await connect("alice", mode, { requestTimeoutMs: 150 });
    const started = Date.now();
    const err = await failure(alice.request("bob", "slow"));
    expect(err.code).toBe("timeout");
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(await aborted).toBe("timeout");
  });

  it("aborts a call through its signal", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    const aborted = until<void>((done) => bob.onRequest(({ signal }) => new Promise(() => signal.addEventListener("abort", () => done()))));
    const alice = await connect("alice", mode);
    const ctrl = new AbortController();
    const call = alice.request("bob", "slow", {}, { signal: ctrl.signal });
    await sleep(30);
    ctrl.abort();
    expect((await failure(call)).code).toBe("cancelled");
    await aborted;
  });

  it("rejects pending calls with disconnected when the connection ends", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob", mode);
    bob.onRequest(() => new Promise(() => {}));
    const alice = await connect("alice", mode);
    const call = alice.request("bob", "hang");
    await sleep(30);
    void alice.close();
    expect((await failure(call)).code).toBe("disconnected");
    expect((await failure(alice.request("bob", "after"))).code).toBe("closed");
  });
});

describe("per-call timeout hint", () => {
  it("passes timeoutMs to the gateway as params._meta['mewgate/timeout_ms']", async () => {
    gw = await startGateway(SPACE);
    const bob = await connect("bob");
    bob.onRequest(({ params }) => params);
    const alice = await connect("alice");
    const echoed = (await alice.request("bob", "x", { a: 1, _meta: { keep: true } }, { timeoutMs: 1234 })) as Record<string, unknown>;
    expect(echoed).toEqual({ a: 1, _meta: { keep: true, "mewgate/timeout_ms": 1234 } });
  });
});

describe("connection lifecycle", () => {
  it("does not reconnect after an auth refusal and says why", async () => {
    gw = await startGateway(SPACE);
    const c = new ParticipantClient({ url: gw.url, space: "lab", token: "wrong-token-zzz", reconnect: { initialDelayMs: 10 } });
    clients.push(c);
    const closes: unknown[] = [];
    c.on("close", (e) => closes.push(e));
    const err = await failure(c.connect());
    expect(err.code).toBe("unauthorized");
    expect(err.closeCode).toBe(4401);
    await sleep(100);
    expect(c.status).toBe("closed");
    expect(closes).toHaveLength(1);

    const lost = new ParticipantClient({ url: gw.url, space: "attic", token: TOKENS.alice });
    clients.push(lost);
    expect((await failure(lost.connect())).code).toBe("unknown_space");
  });

  it("gives up on a replaced connection instead of fighting for the identity", async () => {
    gw = await startGateway(SPACE);
    const first = await connect("alice", "websocket", { reconnect: { initialDelayMs: 10 } });
    const closed = until<{ code: number; reconnecting: boolean; error?: ParticipantError | undefined }>((done) => first.on("close", done));
    const second = await connect("alice");
    const ev = await closed;
    expect(ev.code).toBe(4409);
    expect(ev.reconnecting).toBe(false);
    expect(ev.error?.code).toBe("replaced");
    await sleep(150);
    expect(first.status).toBe("closed");
    expect(second.status).toBe("open");
  });

  it("fails a first connection to a dead address unless told to retry", async () => {
    gw = await startGateway(SPACE);
    const port = gw.port;
    await gw.gateway.close();
    const c = new ParticipantClient({ url: `ws://127.0.0.1:${port}`, space: "lab", token: TOKENS.alice });
    clients.push(c);
    const err = await failure(c.connect());
    expect(err.code).toBe("connect_failed");
    extraDirs.push(gw.dir);
    gw = await startGateway(SPACE);
  });

  it("reconnects after the gateway restarts, fails what was pending, and works again", async () => {
    gw = await startGateway(SPACE);
    const { port, dir } = gw;
    const bob = await connect("bob", "websocket", { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    bob.onRequest(({ method }) => (method === "hang" ? new Promise(() => {}) : { ok: method }));
    const alice = await connect("alice", "websocket", { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    const welcomes: boolean[] = [];
    alice.on("welcome", (w) => welcomes.push(w.reconnected));
    const reconnecting = until<void>((done) => alice.on("close", (e) => e.reconnecting && done()));
    const pending = failure(alice.request("bob", "hang"));
    await sleep(30);

    await gw.gateway.close();
    expect((await pending).code).toBe("disconnected");
    await reconnecting;
    expect(["reconnecting", "connecting"]).toContain(alice.status);
    await sleep(150); // a few attempts fail against the closed port

    const aliceBack = until<void>((done) => alice.on("welcome", (w) => w.reconnected && done()));
    const bobBack = until<void>((done) => bob.on("welcome", (w) => w.reconnected && done()));
    gw = await startGateway(SPACE, { dir, port });
    extraDirs.push(dir);
    await Promise.all([aliceBack, bobBack]);
    expect(welcomes).toEqual([true]);
    expect(alice.status).toBe("open");
    expect(await alice.request("bob", "again")).toEqual({ ok: "again" });
  });

  it("computes bounded full-jitter backoff", () => {
    expect(backoffDelay(0, 100, 10_000, () => 0.999)).toBe(99);
    expect(backoffDelay(3, 100, 10_000, () => 0.5)).toBe(400);
    expect(backoffDelay(20, 100, 10_000, () => 0.999)).toBe(9990);
    expect(backoffDelay(1000, 100, 10_000, () => 0)).toBe(0);
  });
});

describe("call chains", () => {
  it("lets the gateway refuse a cycle A→B→A, because the chain travels on its own", async () => {
    gw = await startGateway(SPACE);
    const alice = await connect("alice");
    alice.onRequest(() => ({ never: "reached" }));
    const bob = await connect("bob");
    bob.onRequest(async () => {
      const err = await failure(bob.request("alice", "back"));
      return { code: err.code };
    });
    expect(await alice.request("bob", "start")).toEqual({ code: "cycle_detected" });
  });

  it("carries the served request in the correlation_id of nested calls, without the caller doing anything", async () => {
    gw = await startGateway(SPACE);
    const carol = await connect("carol");
    let atCarol: Envelope | undefined;
    carol.onRequest(({ envelope }) => {
      atCarol = envelope;
      return { from: "carol" };
    });
    const bob = await connect("bob");
    bob.onRequest(async ({ method }) => {
      await sleep(5); // across an await, the context still holds
      const inner = await bob.request("carol", "inner", {}, { chain: method !== "unchained" });
      return { via: "bob", inner };
    });
    const alice = await connect("alice");
    const outer = alice.request("bob", "outer");
    expect(await outer).toEqual({ via: "bob", inner: { from: "carol" } });
    expect(atCarol?.correlation_id).toContain(outer.id);

    // Outside a handler nothing is added; chain: false opts out inside one.
    await bob.request("carol", "direct");
    expect(atCarol?.correlation_id).toBeUndefined();
    await alice.request("bob", "unchained");
    expect(atCarol?.correlation_id).toBeUndefined();
  });
});

/** An McpServer with a read-only `add` (reports progress), a `note` that needs approval, and a `wait` that waits for cancellation. */
function calculator(): { server: McpServer; cancelled: Promise<void> } {
  const server = new McpServer({ name: "calc", version: "1.0.0" });
  let onCancel!: () => void;
  const cancelled = new Promise<void>((r) => (onCancel = r));
  server.registerTool(
    "add",
    { description: "Adds two numbers", inputSchema: { a: z.number(), b: z.number() }, annotations: { readOnlyHint: true } },
    async ({ a, b }, extra) => {
      const token = extra._meta?.progressToken;
      if (token !== undefined)
        await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: 1, total: 1 } });
      return { content: [{ type: "text", text: String(a + b) }] };
    },
  );
  server.registerTool("note", { description: "Takes a note (not read-only)", inputSchema: { text: z.string() } }, async ({ text }) => ({
    content: [{ type: "text", text: `noted: ${text}` }],
  }));
  server.registerTool("wait", { description: "Waits until cancelled" }, async (extra) => {
    await new Promise<void>((resolve) =>
      extra.signal.addEventListener("abort", () => {
        onCancel();
        resolve();
      }),
    );
    return { content: [] };
  });
  return { server, cancelled };
}

describe("serveMcp", () => {
  it("serves an McpServer's tools to other participants through request()", async () => {
    gw = await startGateway(SPACE);
    const calcClient = new ParticipantClient(options("calc", "websocket"));
    clients.push(calcClient);
    const { server } = calculator();
    await calcClient.serveMcp(server);
    await calcClient.connect();
    const alice = await connect("alice");

    const list = await alice.request("calc", "tools/list", {}, { schema: ListToolsResultSchema });
    const add = list.tools.find((t) => t.name === "add")!;
    expect(add.description).toBe("Adds two numbers");
    expect(add.inputSchema.properties).toHaveProperty("a");
    expect(add.annotations?.readOnlyHint).toBe(true);

    const progress: unknown[] = [];
    const result = await alice.request(
      "calc",
      "tools/call",
      { name: "add", arguments: { a: 2, b: 3 } },
      { schema: CallToolResultSchema, onProgress: (p) => progress.push(p) },
    );
    expect(result.content).toEqual([{ type: "text", text: "5" }]);
    expect(progress).toEqual([expect.objectContaining({ progress: 1, total: 1 })]);

    // Invalid arguments: the SDK answers with a tool error, not a transport failure.
    const invalid = await alice.request("calc", "tools/call", { name: "add", arguments: { a: "two" } }, { schema: CallToolResultSchema });
    expect(invalid.isError).toBe(true);
    // Unknown methods come back as JSON-RPC errors.
    expect((await failure(alice.request("calc", "prompts/list"))).code).toBe("rpc_error");
  });

  it("maps the callers' JSON-RPC ids apart and forwards cancellation to the tool", async () => {
    gw = await startGateway(SPACE);
    const calcClient = new ParticipantClient(options("calc", "websocket"));
    clients.push(calcClient);
    const { server, cancelled } = calculator();
    await calcClient.serveMcp(server);
    await calcClient.connect();
    const alice = await connect("alice");
    const bob = await connect("bob");
    // Both callers use JSON-RPC id 1 for their first call.
    const [a, b] = await Promise.all([
      alice.request("calc", "tools/call", { name: "add", arguments: { a: 1, b: 1 } }, { schema: CallToolResultSchema }),
      bob.request("calc", "tools/call", { name: "add", arguments: { a: 10, b: 10 } }, { schema: CallToolResultSchema }),
    ]);
    expect(a.content).toEqual([{ type: "text", text: "2" }]);
    expect(b.content).toEqual([{ type: "text", text: "20" }]);

    const carol = await connect("carol", "websocket", { requestTimeoutMs: 150 });
    expect((await failure(carol.request("calc", "tools/call", { name: "wait", arguments: {} }))).code).toBe("timeout");
    await cancelled;
  });

  it("announces its tools so the gateway registers them, again when they change and after a reconnect", async () => {
    gw = await startGateway(SPACE);
    const { port, dir } = gw;
    // A service (unlike kind mcp) is asked for its tools only when it announces them.
    const notes = new ParticipantClient(options("notes", "websocket", { reconnect: { initialDelayMs: 20, maxDelayMs: 100 } }));
    clients.push(notes);
    const { server } = calculator();
    await notes.serveMcp(server);
    await notes.connect();
    const alice = await connect("alice", "websocket", { reconnect: { initialDelayMs: 20, maxDelayMs: 100 } });
    await waitForTool(alice, "notes/add");

    const changed = until<void>((done) =>
      alice.onNotification((n) => n.method === "notifications/tools/list_changed" && n.from === "system:gateway" && done()),
    );
    server.registerTool("mul", { inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({
      content: [{ type: "text", text: String(a * b) }],
    }));
    await changed;
    await waitForTool(alice, "notes/mul");
    const viaGateway = await alice.request(
      "system:gateway",
      "tools/call",
      { name: "notes/mul", arguments: { a: 6, b: 7 } },
      { schema: CallToolResultSchema },
    );
    expect(viaGateway.content).toEqual([{ type: "text", text: "42" }]);

    // A new gateway knows nothing of the old one's registry: the re-announcement restores it.
    const back = until<void>((done) => notes.on("welcome", (w) => w.reconnected && done()));
    await gw.gateway.close();
    gw = await startGateway(SPACE, { dir, port });
    extraDirs.push(dir);
    await back;
    await until<void>((done) => (alice.status === "open" ? done() : alice.on("welcome", () => done())));
    await waitForTool(alice, "notes/mul");
  });
});

describe("proposals", () => {
  async function setup(space = SPACE) {
    gw = await startGateway(space);
    const calcClient = new ParticipantClient(options("calc", "websocket"));
    clients.push(calcClient);
    const { server } = calculator();
    await calcClient.serveMcp(server);
    await calcClient.connect();
    const alice = await connect("alice");
    // echo: the agent also sees the proposal the gateway makes of its request.
    const agent = await connect("agent", "websocket", { echo: true });
    await waitForTool(agent, "calc/note");
    return { alice, agent };
  }

  it("propose → approve with edited arguments → resolves with the owner's result", async () => {
    const { alice, agent } = await setup();
    expect(agent.tools.find((t) => t.name === "calc/note")?.policy).toBe("proposal");
    const seen = until<Envelope>((done) => alice.on("proposal", done));
    const call = agent.propose("calc", "tools/call", { name: "note", arguments: { text: "draft" } }, { schema: CallToolResultSchema });
    const proposal = await seen;
    expect(proposal.id).toBe(call.id);
    expect(alice.proposals.has(call.id)).toBe(true);
    alice.approve(call.id, { arguments: { text: "final" }, reason: "edited" });
    expect((await call).content).toEqual([{ type: "text", text: "noted: final" }]);
    expect(alice.proposals.has(call.id)).toBe(false);
  });

  it("keeps a request through system:gateway waiting while it is a proposal, and fails it with the rejection's reason", async () => {
    const { alice, agent } = await setup();
    const held: Envelope[] = [];
    const call = agent.request(
      "system:gateway",
      "tools/call",
      { name: "calc/note", arguments: { text: "x" } },
      { onProposal: (p) => held.push(p) },
    );
    const seen = await until<Envelope>((done) => alice.on("proposal", done));
    expect(seen.id).toBe(call.id);
    alice.reject(call.id, "unsafe", "not today");
    const err = await failure(call);
    expect(err.code).toBe("rejected");
    expect(err.reason).toBe("unsafe");
    expect(err.text).toBe("not today");
    expect(held.map((p) => p.id)).toEqual([call.id]);

    // Approved the same way, it resolves with the owner's answer.
    const again = agent.request(
      "system:gateway",
      "tools/call",
      { name: "calc/note", arguments: { text: "y" } },
      { schema: CallToolResultSchema },
    );
    await until<void>((done) => alice.on("proposal", (p) => p.id === again.id && done()));
    alice.approve(again.id);
    expect((await again).content).toEqual([{ type: "text", text: "noted: y" }]);
    // A read-only tool goes straight through.
    const direct = await agent.request(
      "system:gateway",
      "tools/call",
      { name: "calc/add", arguments: { a: 1, b: 2 } },
      { schema: CallToolResultSchema },
    );
    expect(direct.content).toEqual([{ type: "text", text: "3" }]);
  });

  it("rejects a withdrawn proposal with withdrawn, and an `always` approval lets later calls through directly", async () => {
    const { alice, agent } = await setup();
    const call = agent.propose("calc", "tools/call", { name: "note", arguments: { text: "a" } });
    await until<void>((done) => alice.on("proposal", (p) => p.id === call.id && done()));
    const withdrawn = until<Envelope>((done) => alice.on("envelope", (e) => e.kind === "mcp/withdraw" && done(e)));
    agent.withdraw(call.id, "changed my mind");
    const err = await failure(call);
    expect(err.code).toBe("withdrawn");
    expect((await withdrawn).correlation_id).toEqual([call.id]);

    const direct = await failure(agent.request("calc", "tools/call", { name: "note", arguments: { text: "b" } }));
    expect(direct.code).toBe("proposal_required");
    const trusted = agent.propose("calc", "tools/call", { name: "note", arguments: { text: "b" } });
    await until<void>((done) => alice.on("proposal", (p) => p.id === trusted.id && done()));
    const regranted = until<void>((done) => agent.on("welcome", (w) => w.refreshed && done()));
    alice.approve(trusted.id, { scope: "always" });
    await trusted;
    await regranted;
    expect(await agent.request("calc", "tools/call", { name: "note", arguments: { text: "c" } })).toMatchObject({
      content: [{ text: "noted: c" }],
    });
  });

  it("rejects with expired when nobody decides within the space's TTL", async () => {
    await setup(SPACE.replace("proposal_ttl_ms: 60000", "proposal_ttl_ms: 150"));
    const agent = clients.find((c) => c.welcome?.id === "agent")!;
    const err = await failure(agent.propose("calc", "tools/call", { name: "note", arguments: { text: "late" } }));
    expect(err.code).toBe("expired");
    expect(err.reason).toBe("timeout");
  });
});

describe("in-process participants", () => {
  it("exchange chat and requests with WebSocket participants, both ways", async () => {
    gw = await startGateway(SPACE);
    const alice = await connect("alice");
    const inproc = await connect("inproc");
    expect(inproc.id).toBe("inproc");
    expect(inproc.participants.has("alice")).toBe(true);

    const heard = until<Envelope>((done) => alice.on("envelope", (e) => e.kind === "chat" && done(e)));
    inproc.send({ kind: "chat", payload: { text: "hello from inside" } });
    const chat = await heard;
    expect(chat.from).toBe("inproc");
    expect(chat.payload).toEqual({ text: "hello from inside" });

    const back = until<Envelope>((done) => inproc.on("envelope", (e) => e.kind === "chat" && done(e)));
    alice.send({ kind: "chat", to: ["inproc"], payload: { text: "hi back" } });
    expect((await back).from).toBe("alice");

    inproc.onRequest(({ params }) => ({ inside: params }));
    alice.onRequest(({ params }) => ({ outside: params }));
    expect(await alice.request("inproc", "x", { n: 1 })).toEqual({ inside: { n: 1 } });
    expect(await inproc.request("alice", "y", { n: 2 })).toEqual({ outside: { n: 2 } });

    const leave = until<void>((done) => alice.on("presence", (e) => e.event === "leave" && e.participant.id === "inproc" && done()));
    await inproc.close();
    await leave;
  });

  it("refuses an unknown participant and does not re-join a space that shut down", async () => {
    gw = await startGateway(SPACE);
    const space = gw.gateway.spaces.get("lab")!;
    const ghost = new ParticipantClient({ transport: () => connectInProcess(space, "ghost"), reconnect: false });
    clients.push(ghost);
    expect((await failure(ghost.connect())).code).toBe("unknown_participant");

    const inproc = await connect("inproc", "in-process", { reconnect: { initialDelayMs: 5 } });
    const final = until<{ error?: ParticipantError | undefined }>((done) => inproc.on("close", (e) => !e.reconnecting && done(e)));
    await gw.gateway.close();
    expect((await final).error?.code).toBe("unknown_space");
    extraDirs.push(gw.dir);
    gw = await startGateway(SPACE);
  });
});
