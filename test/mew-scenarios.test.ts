/**
 * The wire facts MEW's own e2e scenarios check (capabilities, errors, grants), written
 * from those scenarios' checks: the same requests — over MEW's HTTP injection and a
 * WebSocket — and the same observable outcomes, against a mewgate space. No MEW code runs
 * here; where mewgate differs on purpose, the comment says so.
 */
import { afterEach, describe, expect, it } from "vitest";
import { startGateway, TestClient, toolOwner, type Env, type TestGateway } from "./helpers.js";

const T = {
  coord: "admin-token-1",
  limited: "limited-token",
  calc: "calc-token-01",
  client: "test-token-01",
  agent: "agent-token-01",
  files: "files-token-1",
};
let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

const CALC_TOOLS = [{ name: "add", inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } } }];
const addReply = (env: Env, reply: (r: unknown) => void) =>
  reply({ content: [{ type: "text", text: String(env.payload.params.arguments.a + env.payload.params.arguments.b) }] });

/** MEW's HTTP injection: POST /participants/<id>/messages with the participant's token. */
async function inject(id: string, token: string, body: string | object): Promise<{ status: number; json: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/participants/${id}/messages`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json };
}
const alive = async () => (await fetch(`http://127.0.0.1:${gw!.port}/health`)).status === 200;

describe("MEW scenario 4: capabilities", () => {
  it("refuses system/register in MEW's words, lists and calls with a grant, and stops at the revoke", async () => {
    gw = await startGateway(`
space: {id: s4}
participants:
  coordinator: {kind: human, token: ${T.coord}}
  limited-agent: {kind: agent, token: ${T.limited}, capabilities: [{kind: "mcp/request", payload: {method: "tools/list"}}, {kind: chat}]}
  calculator-agent: {kind: mcp, token: ${T.calc}}
`);
    const calc = await toolOwner(gw, "s4", T.calc, CALC_TOOLS, { onCall: addReply });
    // The helper answers the gateway's tools/list; MEW's calculator answers anyone's.
    calc.ws.on("message", (data) => {
      const env = JSON.parse(data.toString()) as Env;
      if (env.kind === "mcp/request" && env.payload.method === "tools/list" && env.from !== "system:gateway") {
        calc.send({
          kind: "mcp/response",
          to: [env.from],
          correlation_id: [env.id],
          payload: { jsonrpc: "2.0", id: env.payload.id, result: { tools: CALC_TOOLS } },
        });
      }
    });
    const limited = await TestClient.join(gw, "s4", T.limited);
    const coord = await TestClient.join(gw, "s4", T.coord);
    clients.push(calc, limited, coord);
    expect(await alive()).toBe(true);

    const reg = await inject("limited-agent", T.limited, { id: "reg-1", kind: "system/register", payload: { capabilities: [] } });
    expect(reg.status).toBe(400);
    expect(JSON.stringify(reg.json)).toContain("system/register is reserved for the gateway");
    // The participant's own connection hears it too, as on MEW's gateway.
    const heard = await limited.next((e) => e.kind === "system/error" && e.correlation_id?.includes("reg-1") === true);
    expect(heard.payload.message).toContain("system/register is reserved for the gateway");

    expect(
      (
        await inject("limited-agent", T.limited, {
          id: "list-1",
          kind: "mcp/request",
          to: ["calculator-agent"],
          payload: { method: "tools/list", params: {} },
        })
      ).status,
    ).toBe(200);
    const listed = await limited.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("list-1") === true);
    expect(JSON.stringify(listed.payload)).toContain('"tools"');

    const call = (id: string) => ({
      id,
      kind: "mcp/request",
      to: ["calculator-agent"],
      payload: { method: "tools/call", params: { name: "add", arguments: { a: 5, b: 3 } } },
    });
    const before = await inject("limited-agent", T.limited, call("add-0"));
    expect(before.status).toBe(403);
    coord.send({
      id: "grant-1",
      kind: "capability/grant",
      to: ["limited-agent"],
      payload: {
        recipient: "limited-agent",
        capabilities: [{ kind: "mcp/request", payload: { method: "tools/call", params: { name: "add" } } }],
      },
    });
    await limited.next((e) => e.kind === "capability/grant");
    expect((await inject("limited-agent", T.limited, call("add-1"))).status).toBe(200);
    const added = await limited.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("add-1") === true);
    expect(JSON.stringify(added.payload)).toContain('"text":"8"');

    coord.send({ kind: "capability/revoke", to: ["limited-agent"], payload: { recipient: "limited-agent", grant_id: "grant-1" } });
    await limited.next((e) => e.kind === "capability/revoke");
    expect((await inject("limited-agent", T.limited, call("add-2"))).status).toBe(403);
  });
});

describe("MEW scenario 6: errors", () => {
  it("answers bad input with 4xx and stays up; takes large, bursty and unusual messages", async () => {
    gw = await startGateway(`
space: {id: s6}
participants:
  test-client: {kind: human, token: ${T.client}}
  watcher: {kind: human, token: ${T.coord}}
`);
    const watcher = await TestClient.join(gw, "s6", T.coord);
    clients.push(watcher);
    const cases: Array<[string, string | object, string?]> = [
      ["invalid JSON", "This is not valid JSON"],
      ["missing kind", { payload: { text: "Missing kind field" } }],
      ["empty body", ""],
      ["malformed JSON", '{"kind": "chat", "payload": {"text": "unclosed"'],
    ];
    for (const [what, body] of cases) {
      const r = await inject("test-client", T.client, body);
      expect(r.status, what).toBeGreaterThanOrEqual(400);
      expect(r.status, what).toBeLessThan(500);
      expect(await alive(), `alive after ${what}`).toBe(true);
    }
    const ghost = await inject("ghost", T.client, { id: "ghost-msg", kind: "chat", payload: { text: "hello" } });
    expect(ghost.status).toBeGreaterThanOrEqual(400);
    expect(await alive()).toBe(true);

    const large = await inject("test-client", T.client, { id: "large-1", kind: "chat", payload: { text: "A".repeat(10_000) } });
    expect(large.status).toBe(200);
    expect((await watcher.next((e) => e.id === "large-1")).payload.text).toHaveLength(10_000);

    const burst = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        inject("test-client", T.client, { id: `burst-${i}`, kind: "chat", payload: { text: `Message ${i}` } }),
      ),
    );
    expect(burst.every((r) => r.status === 200)).toBe(true);
    await watcher.next((e) => e.id === "burst-19");

    const special = `Special chars: "quotes" 'apostrophes' \\ backslash \n newline \t tab émoji 🎉 <html> & ampersand \u0000 null`;
    expect((await inject("test-client", T.client, { id: "special-1", kind: "chat", payload: { text: special } })).status).toBe(200);
    expect((await watcher.next((e) => e.id === "special-1")).payload.text).toBe(special);
    expect(await alive()).toBe(true);
  });
});

describe("MEW scenario 8: grant", () => {
  it("fulfils a proposal, grants the proposer, and the recipient — never the gateway — acknowledges", async () => {
    gw = await startGateway(`
space: {id: s8}
participants:
  test-client: {kind: human, token: ${T.client}}
  test-agent: {kind: agent, token: ${T.agent}}
  file-server: {kind: mcp, token: ${T.files}}
`);
    const written: string[] = [];
    const files = await toolOwner(gw, "s8", T.files, [{ name: "write_file", inputSchema: { type: "object" } }], {
      onCall: (env, reply) => {
        written.push(env.payload.params.arguments.path);
        reply({ content: [{ type: "text", text: `Wrote file ${env.payload.params.arguments.path}` }] });
      },
    });
    const client = await TestClient.join(gw, "s8", T.client);
    const agent = await TestClient.join(gw, "s8", T.agent);
    clients.push(files, client, agent);

    agent.send({
      id: "prop-1",
      kind: "mcp/proposal",
      to: ["file-server"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "foo.txt", content: "foo" } } },
    });
    const proposal = await client.next((e) => e.kind === "mcp/proposal");
    client.send({
      id: "grant-1",
      kind: "capability/grant",
      to: ["test-agent"],
      payload: {
        recipient: "test-agent",
        capabilities: [{ kind: "mcp/request", to: ["file-server"], payload: { method: "tools/call", params: { name: "write_file" } } }],
      },
    });
    // Fulfilled MEW's way: the approver makes the call, correlated to the proposal.
    client.send({
      id: "fulfil-1",
      kind: "mcp/request",
      to: ["file-server"],
      correlation_id: [proposal.id],
      payload: {
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "write_file", arguments: { path: "foo.txt", content: "foo" } },
      },
    });
    const outcome = await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "prop-1");
    expect(JSON.stringify(outcome.payload)).toContain("Wrote file foo.txt");

    const grant = await agent.next((e) => e.kind === "capability/grant");
    agent.send({ kind: "capability/grant-ack", correlation_id: [grant.id], payload: { status: "accepted" } });
    const ack = await client.next((e) => e.kind === "capability/grant-ack");
    expect(ack.from).toBe("test-agent");
    agent.send({
      id: "direct-1",
      kind: "mcp/request",
      to: ["file-server"],
      payload: {
        jsonrpc: "2.0",
        id: 2,
        method: "tools/call",
        params: { name: "write_file", arguments: { path: "bar.txt", content: "bar" } },
      },
    });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("direct-1") === true);
    expect(written).toEqual(["foo.txt", "bar.txt"]);
    expect(client.received.some((e) => e.kind === "capability/grant-ack" && e.from === "system:gateway")).toBe(false);
  });
});

describe("MEW scenario 17: space invite", () => {
  it("answers an injected invite with the token to the inviter alone, and refuses duplicates and bad ids in MEW's words", async () => {
    gw = await startGateway(`
space: {id: s17}
participants:
  admin: {kind: human, token: ${T.coord}}
  observer: {kind: agent, token: ${T.agent}}
`);
    const admin = await TestClient.join(gw, "s17", T.coord);
    const observer = await TestClient.join(gw, "s17", T.agent);
    clients.push(admin, observer);
    const invite = (participant_id: unknown, extra: object = {}) => ({
      kind: "space/invite",
      payload: {
        participant_id,
        initial_capabilities: [{ kind: "chat" }, { kind: "mcp/proposal" }, { kind: "mcp/response" }],
        reason: "testing",
      },
      ...extra,
    });
    const made = await inject("admin", T.coord, invite("new-agent", { id: "inv-1" }));
    expect(made.status).toBe(200);
    expect(made.json).toMatchObject({ status: "created", participant_id: "new-agent" });
    const token = made.json.token as string;
    expect(token).toMatch(/^[A-Za-z0-9_-]{20,}$/);
    // The inviter's own connection gets the ack with the token; the observer gets presence, never the token.
    expect((await admin.next((e) => e.kind === "space/invite-ack")).payload.token).toBe(token);
    await observer.next((e) => e.kind === "system/presence" && e.payload.event === "invited");
    expect(JSON.stringify(observer.received)).not.toContain('"token"');
    expect(observer.received.some((e) => e.kind === "space/invite-ack")).toBe(false);

    expect(
      (await inject("new-agent", token, { kind: "chat", payload: { text: "Hello from newly invited agent!", format: "plain" } })).json
        .status,
    ).toBe("accepted");
    expect(
      (
        await inject("new-agent", token, {
          kind: "mcp/proposal",
          to: ["admin"],
          payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "test_tool", arguments: {} } },
        })
      ).json.status,
    ).toBe("accepted");

    expect(JSON.stringify((await inject("admin", T.coord, invite("new-agent"))).json)).toContain('"already_exists"');
    expect(JSON.stringify((await inject("admin", T.coord, invite("observer"))).json)).toContain('"already_exists"');
    expect(JSON.stringify((await inject("admin", T.coord, invite("../../../etc/passwd"))).json)).toContain("invalid characters");
    expect(JSON.stringify((await inject("admin", T.coord, invite("foo/bar"))).json)).toContain("invalid characters");
    expect((await inject("admin", T.coord, { kind: "space/invite" })).status).toBe(400);
  });
});

describe("MEW scenarios 15, 16 and 18: streams", () => {
  it("opens with the gateway's owner and writers whatever the request says, names targets, and reports transfers MEW's way", async () => {
    gw = await startGateway(`
space: {id: s18}
participants:
  publisher: {kind: agent, token: ${T.agent}, capabilities: [{kind: "*"}]}
  aggregator: {kind: agent, token: ${T.calc}, capabilities: [{kind: "*"}]}
  observer: {kind: human, token: ${T.coord}}
`);
    const publisher = await TestClient.join(gw, "s18", T.agent);
    const aggregator = await TestClient.join(gw, "s18", T.calc);
    clients.push(publisher, aggregator);
    publisher.send({
      id: "req-1",
      kind: "stream/request",
      to: ["gateway"],
      payload: {
        direction: "upload",
        target: ["aggregator"],
        authorized_writers: ["observer", "attacker"],
        owner: "attacker",
        description: "positions",
      },
    });
    const open = await publisher.next((e) => e.kind === "stream/open");
    expect(open.payload).toMatchObject({ owner: "publisher", authorized_writers: ["publisher"], target: ["aggregator"] });
    const id = open.payload.stream_id as string;
    // A late joiner's welcome lists it, with when it was created.
    const observer = await TestClient.join(gw, "s18", T.coord);
    clients.push(observer);
    const welcome = observer.received.find((e) => e.kind === "system/welcome")!;
    expect(welcome.payload.active_streams[0]).toMatchObject({
      stream_id: id,
      owner: "publisher",
      created: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
    });
    publisher.send({ id: "xfer", kind: "stream/transfer-ownership", payload: { stream_id: id, new_owner: "aggregator" } });
    const moved = await observer.next((e) => e.kind === "stream/ownership-transferred");
    expect(moved.payload).toMatchObject({ stream_id: id, new_owner: "aggregator", previous_owner: "publisher", owner: "aggregator" });
  });
});
