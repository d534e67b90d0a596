/**
 * The last places where a MEW v0.4 client, written to the spec in MEW's repository
 * (`spec/protocol/SPEC.md`), found mewgate different: joining on `/` with the token in a
 * header, stream frames and stream/close, loose JSON-RPC errors, untargeted proposals and
 * their fulfilment, no-op revokes, and the welcome's `active_streams`. Each test is written
 * from the spec's words, hostile variants first; none runs MEW code.
 */
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { sleep, startGateway, TestClient, waitFor, type Env, type TestGateway } from "./helpers.js";

const T = {
  human: "human-token-01",
  prop: "proposer-tok-1",
  calc: "calc-token-001",
  ful: "fulfiller-tok1",
  other: "other-token-01",
  limited: "limited-token1",
};

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

const SPACE = `
space: {id: compat}
participants:
  human: {kind: human, token: ${T.human}}
  proposer: {kind: agent, token: ${T.prop}, capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: mcp/withdraw}, {kind: "stream/*"}]}
  calculator: {kind: agent, token: ${T.calc}, capabilities: [{kind: "*"}], tools: {allow: ["*"]}}
  fulfiller: {kind: agent, token: ${T.ful}, capabilities: [{kind: "*"}], tools: {allow: ["*"]}}
  stranger: {kind: agent, token: ${T.other}, capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: "stream/*"}]}
  limited: {kind: agent, token: ${T.limited}, capabilities: [{kind: chat}, {kind: capability/revoke, payload: {recipient: stranger}}]}
`;

/** A MEW client as the spec has it: `GET /` with the token in a header, then a join frame naming the space. */
async function rootJoin(token: string, join: Record<string, unknown>): Promise<TestClient> {
  const c = new TestClient(new WebSocket(`ws://127.0.0.1:${gw!.port}/`, { headers: { authorization: `Bearer ${token}` } }));
  clients.push(c);
  await c.opened;
  c.send({ type: "join", ...join });
  return c;
}

async function join(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "compat", token);
  clients.push(c);
  return c;
}

/** The calculator as MEW's example agents are: answers any tools/call, echoing the request's ids. */
function calculator(c: TestClient): void {
  c.ws.on("message", (data) => {
    const text = data.toString();
    if (text.startsWith("#")) return;
    const env = JSON.parse(text) as Env;
    if (env.kind !== "mcp/request" || env.payload?.method !== "tools/call") return;
    const { name, arguments: args } = env.payload.params;
    const reply =
      name === "add"
        ? { result: { content: [{ type: "text", text: String(args.a + args.b) }] } }
        : { error: { code: "NOT_FOUND", message: `Tool not found: ${name}` } };
    c.send({ kind: "mcp/response", to: [env.from], correlation_id: [env.id], payload: { jsonrpc: "2.0", id: env.payload.id, ...reply } });
  });
}

describe("joining on / with the token in a header (spec §2)", () => {
  it("refuses a join frame naming a space the header's token does not belong to, and one with no space at all", async () => {
    gw = await startGateway(`${SPACE}\n`);
    const wrong = await rootJoin(T.human, { space: "no-such-space" });
    expect((await wrong.closed).code).toBe(4404);
    const none = await rootJoin(T.human, { participantId: "human" });
    const closed = await none.closed;
    expect(closed.code).toBe(4400);
    expect(closed.reason).toContain("missing space");
    // A join frame cannot swap the identity the connection presented at the door.
    const swapped = await rootJoin(T.human, { space: "compat", token: T.prop, participantId: "proposer" });
    expect((await swapped.closed).code).toBe(4403);
  });

  it("admits a client that names its space only in the join frame", async () => {
    gw = await startGateway(SPACE);
    const c = await rootJoin(T.human, { space: "compat", participantId: "human", token: T.human });
    const welcome = await c.next((e) => e.kind === "system/welcome");
    expect(welcome.payload.you.id).toBe("human");
    const bare = await rootJoin(T.prop, { space: "compat" });
    expect((await bare.next((e) => e.kind === "system/welcome")).payload.you.id).toBe("proposer");
  });
});

describe("streams (spec §3.10)", () => {
  it("refuses a stream/close by correlation for someone else's stream, and a target that does not exist", async () => {
    gw = await startGateway(SPACE);
    const [owner, stranger] = [await join(T.prop), await join(T.other)];
    owner.send({ id: "req-s", kind: "stream/request", to: ["gateway"], payload: { direction: "upload" } });
    const opened = await owner.next((e) => e.kind === "stream/open");
    stranger.send({ id: "close-x", kind: "stream/close", correlation_id: [opened.id], payload: { reason: "complete" } });
    const err = await stranger.next((e) => e.kind === "system/error" && e.correlation_id?.includes("close-x") === true);
    expect(err.payload.error).toBe("unauthorized");
    expect(err.payload.message).toContain(`only "proposer", its owner`);
    // Neither an id nor a correlation: the message says how to name it, not "undefined".
    owner.send({ id: "close-none", kind: "stream/close", payload: { reason: "complete" } });
    const none = await owner.next((e) => e.kind === "system/error" && e.correlation_id?.includes("close-none") === true);
    expect(none.payload.message).not.toContain("undefined");
    expect(none.payload.error).toBe("stream_not_found");
    owner.send({ id: "req-t", kind: "stream/request", to: ["gateway"], payload: { direction: "upload", target: ["ghost\u202e"] } });
    const missing = await owner.next((e) => e.kind === "system/error" && e.correlation_id?.includes("req-t") === true);
    expect(missing.payload.error).toBe("target_not_found");
  });

  it("closes a stream named by its stream/open's id alone, as §3.10.4's example does", async () => {
    gw = await startGateway(SPACE);
    const [owner, reader] = [await join(T.prop), await join(T.human)];
    owner.send({ id: "req-c", kind: "stream/request", to: ["gateway"], payload: { direction: "upload" } });
    const opened = await owner.next((e) => e.kind === "stream/open");
    owner.send({ id: "close-1", kind: "stream/close", correlation_id: [opened.id], payload: { reason: "complete" } });
    const closed = await reader.next((e) => e.kind === "stream/close");
    expect(closed.payload).toMatchObject({ reason: "complete", stream_id: opened.payload.stream_id });
    // The stream is gone: a frame to it is refused.
    owner.ws.send(`#${opened.payload.stream_id}#late`);
    const late = await owner.next((e) => e.kind === "system/error" && e.payload.error === "stream_not_found");
    expect(late.payload.message).toContain(String(opened.payload.stream_id));
    // By the stream/request's id too.
    owner.send({ id: "req-d", kind: "stream/request", to: ["gateway"], payload: { direction: "upload" } });
    const second = await owner.next((e) => e.kind === "stream/open" && e.correlation_id?.includes("req-d") === true);
    owner.send({ id: "close-2", kind: "stream/close", correlation_id: ["req-d"], payload: { reason: "cancelled" } });
    expect((await reader.next((e) => e.kind === "stream/close" && e.id === "close-2")).payload.stream_id).toBe(second.payload.stream_id);
  });
});

describe("a response whose JSON-RPC error code is not a number (spec §4.2)", () => {
  it("reaches the caller at once as an error it can read, with the original code kept", async () => {
    gw = await startGateway(SPACE);
    const calc = await join(T.calc);
    const caller = await join(T.ful);
    caller.send({
      id: "call-1",
      kind: "mcp/request",
      to: ["calculator"],
      payload: { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "invalid" } },
    });
    const req = await calc.next((e) => e.kind === "mcp/request" && e.id === "call-1");
    // Hostile: control characters and a huge string in the code.
    calc.send({
      kind: "mcp/response",
      correlation_id: [req.id],
      payload: { jsonrpc: "2.0", id: 7, error: { code: `NOT\u001b[2J_FOUND${"x".repeat(5000)}`, message: "Tool not found: invalid" } },
    });
    const res = await caller.next((e) => e.kind === "mcp/response", 3000);
    expect(res.payload.error.code).toBe(-32000);
    expect(res.payload.error.message).toBe("Tool not found: invalid");
    expect(String(res.payload.error.data.code).startsWith("NOT\u001b[2J_FOUND")).toBe(true);
    expect(String(res.payload.error.data.code).length).toBe(256);
    expect(calc.received.some((e) => e.kind === "system/error")).toBe(false);
    // An error that is no object at all is still refused, to its sender.
    caller.send({
      id: "call-2",
      kind: "mcp/request",
      to: ["calculator"],
      payload: { jsonrpc: "2.0", id: 8, method: "tools/call", params: { name: "x" } },
    });
    const req2 = await calc.next((e) => e.kind === "mcp/request" && e.id === "call-2");
    calc.send({ id: "bad-answer", kind: "mcp/response", correlation_id: [req2.id], payload: { jsonrpc: "2.0", id: 8, error: [1, 2] } });
    expect((await calc.next((e) => e.kind === "system/error" && e.correlation_id?.includes("bad-answer") === true)).payload.error).toBe(
      "invalid_payload",
    );
  });
});

describe("untargeted proposals and their fulfilment (spec §3.2, §3.2.1)", () => {
  it("refuses a fulfilment by a participant whose policy denies the tool, and one of a proposal whose proposer's policy denies it there", async () => {
    gw = await startGateway(
      SPACE.replace('tools: {allow: ["*"]}}\n  stranger', 'tools: {allow: ["*"], deny: ["calculator/add"]}}\n  stranger').replace(
        `stranger: {kind: agent, token: ${T.other}, capabilities`,
        `stranger: {kind: agent, token: ${T.other}, tools: {deny: ["calculator/*"]}, capabilities`,
      ),
    );
    const calc = await join(T.calc);
    calculator(calc);
    const [ful, stranger] = [await join(T.ful), await join(T.other)];
    const proposer = await join(T.prop);
    proposer.send({
      id: "p-deny",
      kind: "mcp/proposal",
      payload: { method: "tools/call", params: { name: "add", arguments: { a: 1, b: 2 } } },
    });
    await ful.next((e) => e.id === "p-deny");
    // The fulfiller may not call calculator/add itself.
    ful.send({
      id: "f-1",
      kind: "mcp/request",
      to: ["calculator"],
      correlation_id: ["p-deny"],
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "add", arguments: { a: 1, b: 2 } } },
    });
    const refused = await ful.next((e) => e.kind === "system/error" && e.correlation_id?.includes("f-1") === true);
    expect(refused.payload.error).toBe("approver_lacks_capability");
    // The stranger's own proposal, open: its policy denies every calculator tool.
    stranger.send({
      id: "p-str",
      kind: "mcp/proposal",
      payload: { method: "tools/call", params: { name: "add", arguments: { a: 1, b: 2 } } },
    });
    await sleep(50);
    const human = await join(T.human);
    human.send({
      id: "f-2",
      kind: "mcp/request",
      to: ["calculator"],
      correlation_id: ["p-str"],
      payload: { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "add", arguments: { a: 1, b: 2 } } },
    });
    const denied = await human.next((e) => e.kind === "system/error" && e.correlation_id?.includes("f-2") === true);
    expect(denied.payload.message).toContain(`policy of "stranger"`);
    expect(calc.received.filter((e) => e.kind === "mcp/request")).toEqual([]);
  });

  it("holds a proposal for a tool the gateway knows no owner of; the fulfiller picks the target and hears the answer under its own ids", async () => {
    gw = await startGateway(SPACE);
    const calc = await join(T.calc);
    calculator(calc);
    const [ful, proposer] = [await join(T.ful), await join(T.prop)];
    proposer.send({
      id: "p-add",
      kind: "mcp/proposal",
      payload: { method: "tools/call", params: { name: "add", arguments: { a: 10, b: 5 } } },
    });
    const seen = await ful.next((e) => e.id === "p-add");
    expect(seen.to).toBeUndefined();
    ful.send({
      id: "fulfil-1",
      kind: "mcp/request",
      to: ["calculator"],
      correlation_id: ["p-add"],
      payload: { jsonrpc: "2.0", id: 200, method: "tools/call", params: { name: "add", arguments: { a: 10, b: 5 } } },
    });
    // The target receives the fulfiller's own request: its envelope id, its JSON-RPC id.
    const req = await calc.next((e) => e.kind === "mcp/request");
    expect(req).toMatchObject({ id: "fulfil-1", from: "fulfiller", correlation_id: ["p-add"], payload: { id: 200 } });
    // The fulfiller matches correlation_id[0] against its request (§3.2.1).
    const mine = await ful.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "fulfil-1");
    expect(mine.payload).toMatchObject({ id: 200, result: { content: [{ text: "15" }] } });
    expect(mine.correlation_id).toEqual(["fulfil-1", "p-add"]);
    // The proposer hears it too, correlated to its proposal first.
    const theirs = await proposer.next((e) => e.kind === "mcp/response");
    expect(theirs.correlation_id?.[0]).toBe("p-add");
    expect(theirs.payload.result.content[0].text).toBe("15");
    // One fulfilment: a second one is refused.
    ful.send({
      id: "fulfil-2",
      kind: "mcp/request",
      to: ["calculator"],
      correlation_id: ["p-add"],
      payload: { jsonrpc: "2.0", id: 201, method: "tools/call", params: { name: "add", arguments: { a: 10, b: 5 } } },
    });
    const again = await ful.next((e) => e.kind === "system/error" && e.correlation_id?.includes("fulfil-2") === true);
    expect(again.payload.error).toBe("proposal_not_pending");
    // A target without the tool answers with its own error, which reaches the fulfiller at once.
    proposer.send({ id: "p-bad", kind: "mcp/proposal", payload: { method: "tools/call", params: { name: "not-a-tool", arguments: {} } } });
    await ful.next((e) => e.id === "p-bad");
    ful.send({
      id: "fulfil-3",
      kind: "mcp/request",
      to: ["calculator"],
      correlation_id: ["p-bad"],
      payload: { jsonrpc: "2.0", id: 300, method: "tools/call", params: { name: "not-a-tool", arguments: {} } },
    });
    const bad = await ful.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "fulfil-3", 3000);
    expect(bad.payload.error).toMatchObject({ code: -32000, message: "Tool not found: not-a-tool", data: { code: "NOT_FOUND" } });
    // The audit trail keeps the proposal's link: fulfilled, at the target the fulfiller named.
    const audit = await fetch(`http://127.0.0.1:${gw.port}/api/spaces/compat/audit`, {
      headers: { authorization: `Bearer ${T.human}` },
    }).then((r) => r.json() as Promise<{ entries: Array<Record<string, unknown>> }>);
    const approved = audit.entries.find((e) => e["proposal"] === "p-add" && e["event"] === "approved");
    expect(approved).toMatchObject({ by: "fulfiller", owner: "calculator", reason: "fulfilled" });
    // It carried out the arguments proposed: not an edit.
    expect(approved!["edited"]).toBeUndefined();
  });
});

describe("a revoke that takes nothing away (spec §3.6.2)", () => {
  it("is delivered as the no-op it is; one that would take away what the revoker does not hold is still refused", async () => {
    gw = await startGateway(SPACE);
    const [limited, stranger, human] = [await join(T.limited), await join(T.other), await join(T.human)];
    limited.send({
      id: "rv-0",
      kind: "capability/revoke",
      to: ["stranger"],
      payload: { recipient: "stranger", capabilities: [{ kind: "mcp/request" }] },
    });
    const heard = await stranger.next((e) => e.kind === "capability/revoke" && e.id === "rv-0");
    expect(heard.from).toBe("limited");
    // Hostile: aimed at a participant the revoker's capability does not cover.
    limited.send({
      id: "rv-1",
      kind: "capability/revoke",
      to: ["proposer"],
      payload: { recipient: "proposer", capabilities: [{ kind: "chat" }] },
    });
    expect((await limited.next((e) => e.kind === "system/error" && e.correlation_id?.includes("rv-1") === true)).payload.error).toBe(
      "capability_violation",
    );
    // Once the stranger holds a grant, taking it away needs what the revoker lacks.
    human.send({
      id: "g-1",
      kind: "capability/grant",
      to: ["stranger"],
      payload: { recipient: "stranger", capabilities: [{ kind: "mcp/withdraw" }] },
    });
    await stranger.next((e) => e.kind === "capability/grant");
    limited.send({
      id: "rv-2",
      kind: "capability/revoke",
      to: ["stranger"],
      payload: { recipient: "stranger", capabilities: [{ kind: "mcp/withdraw" }] },
    });
    expect((await limited.next((e) => e.kind === "system/error" && e.correlation_id?.includes("rv-2") === true)).payload.error).toBe(
      "revoke_not_allowed",
    );
    await waitFor(
      async () => {
        const grants = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/compat/grants`, {
          headers: { authorization: `Bearer ${T.human}` },
        }).then((r) => r.json() as Promise<{ grants: unknown[] }>);
        return grants.grants.length === 1;
      },
      3000,
      "the grant still standing",
    );
  });
});
