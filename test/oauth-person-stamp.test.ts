/**
 * The person a call acts for reaches a server signing in with each person's own identity
 * (`oauth: {as: caller}`) only as the gateway's stamp, `_meta["mewgate/person"]`
 * (gateway/calls/person.ts): the final approver of a held call, the calling person of an
 * unheld one, nobody for an agent's unheld call; a participant's own stamp never arrives.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway, parseSpaceConfig } from "../gateway/index.js";
import { type Env, TestClient, toolOwner } from "./helpers.js";

const T = {
  alice: "alice-token-000001",
  bob: "bob-token-00000002",
  agent: "agent-token-000003",
  gh: "gh-token-000000004",
  plain: "plain-token-000005",
};
const SPACE = `
space: {id: per}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}}
  agent: {kind: agent, token: ${T.agent}, capabilities: [{kind: mcp/proposal}, {kind: mcp/request, to: [gh], payload: {method: tools/call}}]}
  gh: {kind: mcp, token: ${T.gh}}
  plain: {kind: mcp, token: ${T.plain}}
`;
const KEY = "mewgate/person";

let stop: (() => Promise<void>) | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await stop?.();
  stop = undefined;
});

/** A gateway where `gh` is a server signing in as each caller's person (set on the parsed config: the bridge side is not here). */
async function start(): Promise<{ port: number }> {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-person-"));
  const config = parseSpaceConfig(SPACE, { file: join(dir, "space.yaml"), env: {} });
  (config.participants["gh"] as { mcp?: unknown }).mcp = {
    url: "http://127.0.0.1:9/mcp",
    oauth: { as: "caller", consent: "link", grant: "authorization_code" },
  };
  const gateway = new Gateway({ spaces: [config], host: "127.0.0.1", port: 0, env: {} });
  const { port } = await gateway.listen();
  stop = async () => {
    await gateway.close();
    rmSync(dir, { recursive: true, force: true });
  };
  return { port };
}

const forged = (id: string, to: string, person: unknown) => ({
  id,
  kind: "mcp/request",
  to: [to],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "whoami", arguments: {}, _meta: { [KEY]: person, other: 1 } } },
});

describe("the person stamp on a routed call", () => {
  it("drops a participant's forged stamp: an unheld call from a person carries that person, an approved proposal its final approver, and a server not signing in per person gets no stamp at all", async () => {
    const gw = await start();
    const seen: Array<{ server: string; id: string; meta: unknown }> = [];
    const serve = (server: string) => (env: Env, reply: (r: unknown) => void) => {
      seen.push({ server, id: env.correlation_id?.[0] ?? env.id, meta: env.payload.params?._meta });
      reply({ content: [{ type: "text", text: "ok" }] });
    };
    const gh = await toolOwner(gw, "per", T.gh, [{ name: "whoami", inputSchema: { type: "object" } }], { onCall: serve("gh") });
    const plain = await toolOwner(gw, "per", T.plain, [{ name: "whoami", inputSchema: { type: "object" } }], { onCall: serve("plain") });
    const alice = await TestClient.join(gw, "per", T.alice);
    const bob = await TestClient.join(gw, "per", T.bob);
    const agent = await TestClient.join(gw, "per", T.agent);
    clients.push(gh, plain, alice, bob, agent);

    // Alice calls directly, claiming to be bob: the call carries alice.
    alice.send(forged("a1", "gh", "bob"));
    await alice.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "a1");
    // Odd shapes of the forged stamp change nothing.
    alice.send(forged("a2", "gh", { id: "bob" }));
    await alice.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "a2");

    // The agent proposes, claiming alice; bob approves: the call carries bob.
    agent.send({
      id: "p1",
      kind: "mcp/proposal",
      to: ["gh"],
      payload: { method: "tools/call", params: { name: "whoami", arguments: {}, _meta: { [KEY]: "alice" } } },
    });
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "p1");
    bob.send({ kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "p1");

    // The agent calls directly, claiming alice: the call acts for nobody (an agent is not a person).
    agent.send(forged("g1", "gh", "alice"));
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "g1");

    // A server that does not sign in per person never sees the key, forged or not.
    alice.send(forged("a3", "plain", "bob"));
    await alice.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "a3");

    const metaOf = (id: string) => seen.find((s) => s.id === id)?.meta;
    expect(metaOf("a1")).toEqual({ other: 1, [KEY]: "alice" });
    expect(metaOf("a2")).toEqual({ other: 1, [KEY]: "alice" });
    // An approved call also carries its signed receipt (proposals/receipts.ts; test/receipts.test.ts).
    expect(metaOf("p1")).toEqual({ [KEY]: "bob", "mewgate/receipt": expect.stringMatching(/^[\w-]+\.[\w-]+\.[\w-]+$/) });
    expect(metaOf("g1")).toEqual({ other: 1 });
    expect(metaOf("a3")).toEqual({ other: 1 });
    expect(seen.map((s) => s.server)).toEqual(["gh", "gh", "gh", "gh", "plain"]);
  });
});
