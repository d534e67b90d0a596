import { readFileSync, statSync } from "node:fs";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { sleep, startGateway, TestClient, type TestGateway } from "./helpers.js";

const TOKENS = { alice: "alice-token-123", bob: "bob-token-4567", agent: "agent-token-89", tool: "tool-token-000" };

const SPACE = `
space:
  id: lab
  name: Lab
gateway:
  limits:
    join_timeout_ms: 300
participants:
  alice:
    kind: human
    token: ${TOKENS.alice}
  bob:
    kind: human
    token: ${TOKENS.bob}
  agent:
    kind: agent
    description: a helpful agent
    token: ${TOKENS.agent}
  tool:
    kind: mcp
    token: ${TOKENS.tool}
`;

let gw: TestGateway;
const clients: TestClient[] = [];
async function join(id: keyof typeof TOKENS, extra = ""): Promise<TestClient> {
  const c = await TestClient.join(gw, "lab", TOKENS[id], extra);
  clients.push(c);
  return c;
}
function connect(query: string, headers: Record<string, string> = {}): TestClient {
  const c = TestClient.connect(gw, query, headers);
  clients.push(c);
  return c;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
});

describe("identity and authentication", () => {
  it("takes the identity from a bearer token and welcomes with id, capabilities and the others", async () => {
    gw = await startGateway(SPACE);
    const bob = await join("bob");
    const alice = await join("alice");
    const welcome = await alice.next((e) => e.kind === "system/welcome");
    expect(welcome.from).toBe("system:gateway");
    expect(welcome.to).toEqual(["alice"]);
    expect(welcome.payload.you.id).toBe("alice");
    expect(welcome.payload.you.capabilities).toEqual([{ kind: "*" }]);
    expect(welcome.payload.participants.map((p: { id: string }) => p.id)).toEqual(["bob"]);
    const presence = await bob.next((e) => e.kind === "system/presence" && e.payload.event === "join");
    expect(presence.payload.participant.id).toBe("alice");
  });

  it("accepts ?token= for browsers", async () => {
    gw = await startGateway(SPACE);
    const c = connect(`space=lab&token=${TOKENS.agent}`);
    const welcome = await c.next((e) => e.kind === "system/welcome");
    expect(welcome.payload.you.id).toBe("agent");
  });

  it.each([
    ["a wrong token", `space=lab&token=nope-nope-nope`, {}, 4401, /invalid token/],
    ["an unknown space", `space=attic`, { authorization: `Bearer ${TOKENS.alice}` }, 4404, /no space named "attic"/],
    [
      "a claimed id that disagrees with the token",
      `space=lab&participant=bob`,
      { authorization: `Bearer ${TOKENS.alice}` },
      4403,
      /does not belong to participant "bob"/,
    ],
    [
      "a claimed id that is not in the space",
      `space=lab&participant=mallory`,
      { authorization: `Bearer ${TOKENS.alice}` },
      4406,
      /no participant "mallory"/,
    ],
  ])("refuses %s with a distinct close code and reason", async (_what, query, headers, code, reason) => {
    gw = await startGateway(SPACE);
    const c = connect(query, headers as Record<string, string>);
    const closed = await c.closed;
    expect(closed.code).toBe(code);
    expect(closed.reason).toMatch(reason);
    expect(c.kinds()).not.toContain("system/welcome");
  });

  it("waits for a join frame naming the space when the token came in a header, and refuses any other first frame", async () => {
    gw = await startGateway(SPACE);
    const c = connect("", { authorization: `Bearer ${TOKENS.alice}` });
    await c.opened;
    c.send({ kind: "chat", payload: { text: "hi" } });
    const closed = await c.closed;
    expect(closed.code).toBe(4400);
    expect(closed.reason).toMatch(/missing space/);
    expect(c.kinds()).not.toContain("system/welcome");
  });

  it("authenticates a MEW client from its first frame, in both join shapes", async () => {
    gw = await startGateway(SPACE);
    const a = connect("space=lab");
    await a.opened;
    a.send({ type: "join", space: "lab", token: TOKENS.alice, participantId: "alice" });
    expect((await a.next((e) => e.kind === "system/welcome")).payload.you.id).toBe("alice");

    const b = connect("");
    await b.opened;
    b.send({ protocol: "mew/v0.4", kind: "system/join", payload: { space: "lab", token: TOKENS.bob } });
    expect((await b.next((e) => e.kind === "system/welcome")).payload.you.id).toBe("bob");
  });

  it("refuses a join frame whose claimed id disagrees with its token", async () => {
    gw = await startGateway(SPACE);
    const c = connect("space=lab");
    await c.opened;
    c.send({ type: "join", space: "lab", token: TOKENS.agent, participantId: "alice" });
    expect((await c.closed).code).toBe(4403);
  });

  it("closes a connection that neither authenticates nor joins in time, or whose first frame is not a join", async () => {
    gw = await startGateway(SPACE);
    const idle = connect("space=lab");
    expect((await idle.closed).code).toBe(4408);
    const chatty = connect("space=lab");
    await chatty.opened;
    chatty.send({ kind: "chat", payload: { text: "hi" } });
    expect((await chatty.closed).code).toBe(4401);
  });

  it("replaces an earlier connection of the same participant without disturbing the others", async () => {
    gw = await startGateway(SPACE);
    const bob = await join("bob");
    const first = await join("alice");
    const second = await join("alice");
    const closed = await first.closed;
    expect(closed.code).toBe(4409);
    expect(closed.reason).toMatch(/replaced/);
    bob.send({ kind: "chat", payload: { text: "still here?" } });
    await second.next((e) => e.kind === "chat" && e.payload.text === "still here?");
    await sleep(50);
    const leaves = bob.received.filter((e) => e.kind === "system/presence" && e.payload.event === "leave");
    expect(leaves).toEqual([]);
  });

  it("uses MEWGATE_TOKEN_<ID> and otherwise generates a 0600 token file in the state directory", async () => {
    const yaml = `space: {id: lab}\nparticipants:\n  web-ui: {kind: human}\n  helper_1: {kind: agent}\n`;
    gw = await startGateway(yaml, { env: { MEWGATE_TOKEN_WEB_UI: "env-token-abcdef" } });
    const c = connect("space=lab", { authorization: "Bearer env-token-abcdef" });
    expect((await c.next((e) => e.kind === "system/welcome")).payload.you.id).toBe("web-ui");
    const file = pathJoin(gw.dir, ".mewgate", "tokens", "helper_1.token");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const token = readFileSync(file, "utf8").trim();
    expect(token.length).toBeGreaterThanOrEqual(24);
    const h = connect("space=lab", { authorization: `Bearer ${token}` });
    expect((await h.next((e) => e.kind === "system/welcome")).payload.you.id).toBe("helper_1");
  });

  it("answers /healthz without naming participants or tokens", async () => {
    gw = await startGateway(SPACE);
    const res = await fetch(`http://127.0.0.1:${gw.port}/healthz`);
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(JSON.parse(text).status).toBe("ok");
    for (const word of ["alice", "bob", ...Object.values(TOKENS)]) expect(text).not.toContain(word);
  });
});

describe("envelope checks", () => {
  it("stamps from, rejects a forged from, and never routes it", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    const bob = await join("bob");
    alice.send({ kind: "chat", payload: { text: "hello" } });
    const got = await bob.next((e) => e.kind === "chat");
    expect(got.from).toBe("alice");
    expect(got.protocol).toBe("mew/v0.4");
    expect(typeof got.id).toBe("string");

    alice.send({ id: "forged-1", from: "bob", kind: "chat", payload: { text: "I am bob" } });
    const err = await alice.next((e) => e.kind === "system/error");
    expect(err.payload.code).toBe("from_mismatch");
    expect(err.correlation_id).toEqual(["forged-1"]);
    await sleep(50);
    expect(bob.received.filter((e) => e.payload?.text === "I am bob")).toEqual([]);
  });

  it("reserves system/* for the gateway", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    const bob = await join("bob");
    alice.send({ kind: "system/welcome", payload: { you: { id: "alice", capabilities: [{ kind: "*" }] } } });
    expect((await alice.next((e) => e.kind === "system/error")).payload.code).toBe("reserved_kind");
    await sleep(50);
    expect(bob.received.filter((e) => e.kind === "system/welcome" && e.from !== "system:gateway")).toEqual([]);
  });

  it("enforces capabilities and names the violation", async () => {
    gw = await startGateway(SPACE);
    const agent = await join("agent");
    const bob = await join("bob");
    agent.send({
      id: "call-1",
      kind: "mcp/request",
      to: ["tool"],
      payload: { jsonrpc: "2.0", id: 1, method: "resources/read", params: { uri: "file:///etc/passwd" } },
    });
    const err = await agent.next((e) => e.kind === "system/error");
    expect(err.payload.code).toBe("capability_violation");
    expect(err.payload.attempted_kind).toBe("mcp/request");
    expect(err.correlation_id).toEqual(["call-1"]);
    agent.send({ kind: "game/move", payload: {} });
    expect((await agent.nextNew((e) => e.kind === "system/error")).payload.code).toBe("capability_violation");
    agent.send({ kind: "mcp/proposal", to: ["tool"], payload: { method: "tools/call", params: { name: "rm" } } });
    await bob.next((e) => e.kind === "mcp/proposal" && e.from === "agent");
    expect(bob.kinds()).not.toContain("mcp/request");
  });

  it("answers malformed JSON, bad envelopes and oversized frames with an error and keeps everyone connected", async () => {
    gw = await startGateway(SPACE.replace("join_timeout_ms: 300", "join_timeout_ms: 300\n    max_payload_bytes: 2048"));
    const alice = await join("alice");
    const bob = await join("bob");
    alice.send("{not json");
    expect((await alice.nextNew((e) => e.kind === "system/error")).payload.code).toBe("invalid_json");
    alice.send({ kind: 42, payload: {} });
    const bad = await alice.nextNew((e) => e.kind === "system/error" && e.payload.code === "invalid_envelope");
    expect(bad.payload.message).toMatch(/^kind:/);
    alice.send({ kind: "chat", to: "bob", payload: {} });
    expect((await alice.nextNew((e) => e.kind === "system/error")).payload.message).toMatch(/^to:/);
    alice.send("[1,2,3]");
    expect((await alice.nextNew((e) => e.kind === "system/error")).payload.code).toBe("invalid_envelope");
    alice.send({ kind: "chat", payload: { text: "x".repeat(4096) } });
    expect((await alice.nextNew((e) => e.kind === "system/error")).payload.code).toBe("payload_too_large");
    alice.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    expect((await alice.nextNew((e) => e.kind === "system/error")).payload.message).toMatch(/binary/);
    alice.send({ kind: "chat", to: ["nobody"], payload: { text: "?" } });
    expect((await alice.nextNew((e) => e.kind === "system/error")).payload.code).toBe("unknown_recipient");

    alice.send({ kind: "chat", payload: { text: "still fine" } });
    await bob.next((e) => e.kind === "chat" && e.payload.text === "still fine");
    expect(alice.ws.readyState).toBe(WebSocket.OPEN);
    expect(bob.kinds().filter((k) => k === "system/error")).toEqual([]);
  });

  it("passes unknown but well-formed kinds through when capabilities allow", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    const bob = await join("bob");
    alice.send({ kind: "game/move", correlation_id: "m-0", context: "round-1", payload: { x: 1 } });
    const got = await bob.next((e) => e.kind === "game/move");
    expect(got.payload).toEqual({ x: 1 });
    expect(got.correlation_id).toEqual(["m-0"]);
    expect(got.context).toBe("round-1");
  });

  it("finds no handler for kinds named like an object's own properties, and passes them through as any other kind", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    const bob = await join("bob");
    // A dispatch table kept in a plain object would find Object.prototype's members here
    // and call them (or throw) instead of delivering the envelope.
    const kinds = ["constructor", "toString", "hasOwnProperty", "valueOf", "isPrototypeOf"];
    for (const kind of kinds) alice.send({ kind, payload: { kind } });
    alice.send({ kind: "chat", payload: { text: "still here" } });
    await bob.next((e) => e.kind === "chat" && e.payload.text === "still here");
    expect(bob.received.filter((e) => kinds.includes(e.kind)).map((e) => [e.kind, e.from, e.payload.kind])).toEqual(
      kinds.map((k) => [k, "alice", k]),
    );
    expect(alice.received.filter((e) => e.kind === "system/error")).toEqual([]);
  });
});

describe("routing and visibility", () => {
  it("delivers broadcasts to 'all' members only, addressed envelopes to the addressee and the watchers, and no echo", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    const bob = await join("bob");
    const tool = await join("tool"); // kind mcp: visibility 'addressed'
    alice.send({ kind: "chat", payload: { text: "broadcast" } });
    await bob.next((e) => e.payload?.text === "broadcast");
    alice.send({ kind: "chat", to: ["tool"], payload: { text: "for tool" } });
    await tool.next((e) => e.payload?.text === "for tool");
    await bob.next((e) => e.payload?.text === "for tool");
    bob.send({ kind: "chat", to: ["alice"], payload: { text: "for alice" } });
    await alice.next((e) => e.payload?.text === "for alice");
    await sleep(50);
    expect(tool.received.filter((e) => e.payload?.text === "broadcast" || e.payload?.text === "for alice")).toEqual([]);
    expect(alice.received.filter((e) => e.from === "alice")).toEqual([]);
    // An addressed participant still sees presence.
    expect(tool.received.some((e) => e.kind === "system/presence")).toBe(false);
    const agent = await join("agent");
    await tool.next((e) => e.kind === "system/presence" && e.payload.participant.id === "agent");
    agent.close();
    await tool.next((e) => e.kind === "system/presence" && e.payload.event === "leave");
  });

  it("announces a participant before anything it sends, even while presence is batched", async () => {
    gw = await startGateway(SPACE);
    const bob = await join("bob");
    const alice = await join("alice");
    alice.send({ kind: "chat", payload: { text: "first words" } });
    await bob.next((e) => e.kind === "chat" && e.payload.text === "first words");
    const kinds = bob.received
      .filter((e) => e.kind !== "system/welcome")
      .map((e) => `${e.kind}:${e.payload.participant?.id ?? e.payload.text}`);
    expect(kinds).toEqual(["system/presence:alice", "chat:first words"]);
  });

  it("echoes to a sender that asks for it", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice", "&echo=1");
    alice.send({ id: "e-1", kind: "chat", payload: { text: "me too" } });
    const echoed = await alice.next((e) => e.id === "e-1");
    expect(echoed.from).toBe("alice");
  });

  it("gives a late joiner the recent history it may see", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    alice.send({ kind: "chat", payload: { text: "one" } });
    alice.send({ kind: "chat", to: ["bob"], payload: { text: "two" } });
    await sleep(50);
    const bob = await join("bob");
    const welcome = await bob.next((e) => e.kind === "system/welcome");
    expect(
      welcome.payload.history.filter((e: { kind: string }) => e.kind === "chat").map((e: { payload: { text: string } }) => e.payload.text),
    ).toEqual(["one", "two"]);
    const tool = await join("tool");
    const toolWelcome = await tool.next((e) => e.kind === "system/welcome");
    expect(toolWelcome.payload.history.filter((e: { kind: string }) => e.kind === "chat")).toEqual([]);
  });
});

describe("capability grants", () => {
  const GRANTS = `
space: {id: lab}
participants:
  lead:
    kind: human
    token: ${TOKENS.alice}
  agent:
    kind: agent
    token: ${TOKENS.agent}
    capabilities:
      - kind: chat
      - kind: capability/grant
      - kind: capability/revoke
      - kind: mcp/request
        payload: {method: tools/call, params: {name: "read_*"}}
  newbie:
    kind: agent
    token: ${TOKENS.bob}
    capabilities: [{kind: chat}]
`;

  it("refuses to lend what the granter does not hold", async () => {
    gw = await startGateway(GRANTS);
    const agent = await TestClient.join(gw, "lab", TOKENS.agent);
    clients.push(agent);
    agent.send({ kind: "capability/grant", payload: { recipient: "newbie", capabilities: [{ kind: "mcp/request" }] } });
    const err = await agent.next((e) => e.kind === "system/error");
    expect(err.payload.code).toBe("grant_exceeds_held");
    expect(err.payload.not_held).toEqual([{ kind: "mcp/request" }]);
    agent.send({
      kind: "capability/grant",
      payload: { recipient: "newbie", capabilities: [{ kind: "mcp/request", payload: { method: "tools/call", params: { name: "*" } } }] },
    });
    expect((await agent.nextNew((e) => e.kind === "system/error")).payload.code).toBe("grant_exceeds_held");
  });

  it("grants what the granter holds, refreshes the recipient, persists across a restart, and revokes", async () => {
    gw = await startGateway(GRANTS);
    const newbie = await TestClient.join(gw, "lab", TOKENS.bob);
    const agent = await TestClient.join(gw, "lab", TOKENS.agent);
    clients.push(newbie, agent);
    const call = {
      kind: "mcp/request",
      to: ["agent"],
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "read_file" } },
    };
    newbie.send(call);
    expect((await newbie.nextNew((e) => e.kind === "system/error")).payload.code).toBe("proposal_required");

    const cap = { kind: "mcp/request", payload: { method: "tools/call", params: { name: "read_file" } } };
    agent.send({ id: "grant-1", kind: "capability/grant", payload: { recipient: "newbie", capabilities: [cap], reason: "trusted" } });
    const fresh = await newbie.nextNew((e) => e.kind === "system/welcome");
    expect(fresh.payload.you.capabilities).toContainEqual(cap);
    newbie.send(call);
    await sleep(50);
    expect(newbie.received.filter((e) => e.kind === "system/error")).toHaveLength(1);

    // Restart on the same state directory: the grant is still there.
    const dir = gw.dir;
    for (const c of clients.splice(0)) c.ws.terminate();
    await gw.gateway.close();
    gw = await startGateway(GRANTS, { dir });
    const again = await TestClient.join(gw, "lab", TOKENS.bob);
    clients.push(again);
    expect((await again.next((e) => e.kind === "system/welcome")).payload.you.capabilities).toContainEqual(cap);

    const agent2 = await TestClient.join(gw, "lab", TOKENS.agent);
    clients.push(agent2);
    agent2.send({ kind: "capability/revoke", payload: { recipient: "newbie", grant_id: "grant-1" } });
    const revoked = await again.nextNew((e) => e.kind === "system/welcome");
    expect(revoked.payload.you.capabilities).not.toContainEqual(cap);
    again.send(call);
    expect((await again.nextNew((e) => e.kind === "system/error")).payload.code).toBe("proposal_required");
  });

  it("revokes by pattern and refuses a revoke of an unknown grant", async () => {
    gw = await startGateway(GRANTS);
    const newbie = await TestClient.join(gw, "lab", TOKENS.bob);
    const lead = await TestClient.join(gw, "lab", TOKENS.alice);
    clients.push(newbie, lead);
    lead.send({
      kind: "capability/grant",
      payload: { recipient: "newbie", capabilities: [{ kind: "reasoning/*" }, { kind: "mcp/proposal" }] },
    });
    await newbie.nextNew((e) => e.kind === "system/welcome" && e.payload.you.capabilities.length === 3);
    lead.send({ kind: "capability/revoke", payload: { recipient: "newbie", capabilities: [{ kind: "reasoning/*" }] } });
    const after = await newbie.nextNew((e) => e.kind === "system/welcome");
    expect(after.payload.you.capabilities).toEqual([{ kind: "chat" }, { kind: "mcp/proposal" }]);
    lead.send({ id: "rv-1", kind: "capability/revoke", payload: { recipient: "newbie", grant_id: "nope" } });
    const unknownGrant = await lead.nextNew((e) => e.kind === "system/error");
    expect([unknownGrant.payload.code, unknownGrant.correlation_id]).toEqual(["unknown_grant", ["rv-1"]]);
    // A refused grant gets its error correlated to the frame it refuses, once.
    const refusedGrant = async (id: string, payload: Record<string, unknown>) => {
      const error = lead.nextNew((e) => e.kind === "system/error");
      lead.send({ id, kind: "capability/grant", payload });
      return await error;
    };
    const nobody = await refusedGrant("gr-1", { recipient: "nobody", capabilities: [{ kind: "chat" }] });
    expect([nobody.payload.code, nobody.payload.message, nobody.correlation_id]).toEqual([
      "unknown_recipient",
      'no participant "nobody" in the space',
      ["gr-1"],
    ]);
    const malformed = await refusedGrant("gr-2", { recipient: "newbie" });
    expect([malformed.payload.code, malformed.correlation_id]).toEqual(["invalid_payload", ["gr-2"]]);
    await sleep(100);
    expect(lead.received.filter((e) => e.kind === "system/error" && e.correlation_id?.[0]?.startsWith("gr-"))).toHaveLength(2);
  });
});

describe("staying up", () => {
  it("answers a burst over the rate with rate_limited, and disconnects a sustained flood", async () => {
    gw = await startGateway(
      SPACE.replace("join_timeout_ms: 300", "join_timeout_ms: 300\n    rate_per_second: 20\n    rate_burst: 10\n    flood_strikes: 200"),
    );
    const alice = await join("alice");
    const bob = await join("bob");
    for (let i = 0; i < 30; i++) alice.send({ kind: "chat", payload: { text: `m${i}` } });
    expect((await alice.next((e) => e.kind === "system/error")).payload.code).toBe("rate_limited");
    expect(alice.ws.readyState).toBe(WebSocket.OPEN);
    for (let i = 0; i < 400; i++) alice.send({ kind: "chat", payload: { text: `f${i}` } });
    const closed = await alice.closed;
    expect(closed.code).toBe(4429);
    const leave = await bob.next((e) => e.kind === "system/presence" && e.payload.event === "leave");
    expect(leave.payload.reason).toBe("flood");
  });

  it("frames every size of envelope the way a WebSocket client reads it (7-, 16- and 64-bit lengths)", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    const bob = await join("bob");
    const sizes = [1, 60, 125, 126, 127, 65_000, 65_535, 65_536, 70_000, 300_000];
    for (const n of sizes) alice.send({ id: `s${n}`, kind: "chat", payload: { text: "z".repeat(n) } });
    for (const n of sizes) expect((await bob.next((e) => e.id === `s${n}`)).payload.text).toHaveLength(n);
    expect(bob.ws.readyState).toBe(WebSocket.OPEN);
  });

  it("delivers every frame whole and in order to a reader that stalls while the kernel takes writes in part", async () => {
    gw = await startGateway(
      SPACE.replace(
        "join_timeout_ms: 300",
        "join_timeout_ms: 300\n    max_buffered_bytes: 67108864\n    rate_per_second: 100000\n    rate_burst: 100000",
      ),
    );
    const alice = await join("alice");
    const bob = await join("bob");
    // A reader that keeps up, whose writes reuse the buffer bob's stalled write may hold.
    const agent = await join("agent");
    const socket = (bob.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    socket.pause();
    // Many small frames a tick (copied into one write), a few large ones (written as they
    // are), across many ticks, until loopback's buffers are full and writes go in part.
    const text = (i: number) => `${i}:`.padEnd(50 + ((i * 7919) % 1500), String.fromCharCode(97 + (i % 26)));
    const total = 6000;
    for (let i = 0; i < total; i++) {
      alice.send({ id: `w${i}`, kind: "chat", payload: { text: i % 500 === 0 ? text(i).repeat(40) : text(i) } });
      if (i % 50 === 49) await sleep(1);
    }
    await sleep(200);
    socket.resume();
    for (const reader of [agent, bob]) {
      const last = await reader.next((e) => e.id === `w${total - 1}`, 20_000);
      expect(last.kind).toBe("chat");
      const chats = reader.received.filter((e) => e.kind === "chat");
      expect(chats.map((e) => e.id)).toEqual(Array.from({ length: total }, (_, i) => `w${i}`));
      for (let i = 0; i < total; i++) expect(chats[i]!.payload.text).toBe(i % 500 === 0 ? text(i).repeat(40) : text(i));
      expect(reader.ws.readyState).toBe(WebSocket.OPEN);
    }
  });

  it("drops a participant that stops reading, keeping the gateway's buffer bounded", async () => {
    gw = await startGateway(
      SPACE.replace(
        "join_timeout_ms: 300",
        "join_timeout_ms: 300\n    max_buffered_bytes: 262144\n    rate_per_second: 100000\n    rate_burst: 100000",
      ),
    );
    const alice = await join("alice");
    const bob = await join("bob");
    // bob stops reading: pause the underlying socket so the kernel buffers fill up.
    (bob.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const chunk = { kind: "chat", payload: { text: "y".repeat(60_000) } };
    const deadline = Date.now() + 10_000;
    let left: boolean = false;
    alice
      .next((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "bob")
      .then(() => (left = true));
    while (!left && Date.now() < deadline) {
      for (let i = 0; i < 20; i++) alice.send(chunk);
      await sleep(10);
    }
    expect(left).toBe(true);
    const leave = alice.received.find((e) => e.kind === "system/presence" && e.payload.event === "leave")!;
    expect(leave.payload.reason).toBe("slow_consumer");
  });

  it("drops a peer that stops answering pings", async () => {
    gw = await startGateway(SPACE.replace("join_timeout_ms: 300", "join_timeout_ms: 300\n    heartbeat_ms: 100"));
    const alice = await join("alice");
    const dead = new TestClient(
      new WebSocket(`ws://127.0.0.1:${gw.port}/ws?space=lab`, { headers: { authorization: `Bearer ${TOKENS.bob}` }, autoPong: false }),
    );
    clients.push(dead);
    await dead.next((e) => e.kind === "system/welcome");
    const leave = await alice.next((e) => e.kind === "system/presence" && e.payload.event === "leave", 3000);
    expect(leave.payload.participant.id).toBe("bob");
    // A live peer that answers pings stays.
    await sleep(300);
    expect(alice.ws.readyState).toBe(WebSocket.OPEN);
  });

  it("closes every connection with 1001 on shutdown", async () => {
    gw = await startGateway(SPACE);
    const alice = await join("alice");
    await gw.gateway.close();
    expect((await alice.closed).code).toBe(1001);
  });
});

describe("the welcome's roster", () => {
  it("lists every participant exactly as described, whatever their descriptions hold", async () => {
    const tricky = `quote " backslash \\ nul \u0000roster:00 newline \n emoji 🎉 </script>`;
    gw = await startGateway(`
space: {id: roster}
participants:
  a: {kind: human, token: roster-token-a, description: ${JSON.stringify(tricky)}}
  b: {kind: agent, token: roster-token-b, description: ${JSON.stringify(`${tricky} b`)}}
  c: {kind: service, token: roster-token-c}
`);
    const a = await TestClient.join(gw, "roster", "roster-token-a");
    const b = await TestClient.join(gw, "roster", "roster-token-b");
    const c = await TestClient.join(gw, "roster", "roster-token-c");
    try {
      const welcome = c.received.find((e) => e.kind === "system/welcome")!;
      const roster = welcome.payload.participants as Array<{ id: string; kind: string; description?: string; capabilities: unknown[] }>;
      expect(roster.map((p) => p.id).sort()).toEqual(["a", "b"]);
      const da = roster.find((p) => p.id === "a")!;
      expect(da.description).toBe(tricky);
      expect(da.kind).toBe("human");
      expect(roster.find((p) => p.id === "b")!.description).toBe(`${da.description} b`);
      expect(welcome.payload.you).toMatchObject({ id: "c", kind: "service" });
    } finally {
      for (const x of [a, b, c]) x.ws.terminate();
    }
  });
});
