/**
 * At the approval that would complete a quorum, every earlier approval must still come from
 * someone who may decide (gateway/proposals/still-count.ts). Runtime groups from the identity
 * provider can shrink without a reload (space/bearer.ts `adopt`, called when a person's token
 * is read): an approval given while in @ops no longer counts once the provider says otherwise.
 * Against a real gateway with real WebSocket clients; hostile first (a fulfilment as the
 * last approval, then an approval).
 */
import { afterEach, describe, expect, it } from "vitest";
import { adopt } from "../gateway/space/bearer.js";
import { errorFor, startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: still}
groups:
  ops: [bob, dave]
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  dave: {kind: human, token: ${TOKEN("dave")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {ask: ["fs/write_file"]}
    approvers: ['@ops']
    approvals: 2
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object", properties: { path: { type: "string" } } } }];

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const g of gateways.splice(0)) await g.stop();
});

async function join(g: TestGateway, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "still", TOKEN(id));
  clients.push(c);
  return c;
}

describe("a quorum counts only approvals that still stand when it completes", () => {
  it("an approver whose runtime @ops membership ended is dropped at the last approval or fulfilment, the call waits, and runs only once two who may decide approved", {
    timeout: 30_000,
  }, async () => {
    const g = await startGateway(SPACE);
    gateways.push(g);
    const space = g.gateway.spaces.get("still")!;
    const runs: Env[] = [];
    clients.push(
      await toolOwner(g, "still", TOKEN("fs"), TOOLS, {
        onCall: (env, reply) => {
          runs.push(env);
          return reply({ content: [{ type: "text", text: "ok" }] });
        },
      }),
    );
    const identity = (groups: string[]) => ({ participant: "alice", groups, subject: "https://idp.invalid/alice" });
    adopt(space, identity(["ops"]));
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    const bob = await join(g, "bob");
    const dave = await join(g, "dave");
    agent.send({
      id: "q-1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a.txt" } } },
    });
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "q-1");
    alice.send({ id: "a1", kind: "mcp/approve", correlation_id: ["q-1"], payload: {} });
    const first = await alice.next((e) => e.kind === "system/approval" && e.correlation_id?.[0] === "q-1");
    expect(first.payload).toMatchObject({ approvals: 1, required: 2, by: ["alice"] });

    // The provider no longer puts alice in @ops (no reload). Bob's fulfilment would be the second approval.
    adopt(space, identity([]));
    bob.send({
      id: "f1",
      kind: "mcp/request",
      to: ["fs"],
      correlation_id: ["q-1"],
      payload: { jsonrpc: "2.0", id: "f1", method: "tools/call", params: { name: "write_file", arguments: { path: "a.txt" } } },
    });
    expect((await errorFor(bob, "f1")).payload.code).toBe("approvals_needed");
    const dropped = await agent.next(
      (e) => e.kind === "system/approval" && e.correlation_id?.[0] === "q-1" && Array.isArray(e.payload.dropped),
    );
    expect(dropped.payload).toMatchObject({ approvals: 0, required: 2, by: [] });
    expect(dropped.payload.dropped[0]).toMatchObject({ by: "alice" });
    expect(dropped.payload.dropped[0].why).toContain("@ops");
    expect(runs).toHaveLength(0);

    // Alice is back in @ops and approves again; then she leaves it once more before dave's approval completes it.
    adopt(space, identity(["ops"]));
    alice.send({ id: "a2", kind: "mcp/approve", correlation_id: ["q-1"], payload: {} });
    await alice.next(
      (e) => e.kind === "system/approval" && e.correlation_id?.[0] === "q-1" && e.payload.approvals === 1 && e.id !== first.id,
    );
    adopt(space, identity([]));
    dave.send({ id: "d1", kind: "mcp/approve", correlation_id: ["q-1"], payload: {} });
    const waiting = await dave.next(
      (e) =>
        e.kind === "system/approval" &&
        e.correlation_id?.[0] === "q-1" &&
        e.payload.approvals === 1 &&
        e.payload.by?.includes("dave") === true,
    );
    expect(waiting.payload.by).toEqual(["dave"]);
    expect(runs).toHaveLength(0);
    const droppedAgain = await agent.next(
      (e) => e.kind === "system/approval" && e.correlation_id?.[0] === "q-1" && Array.isArray(e.payload.dropped) && e.id !== dropped.id,
    );
    expect(droppedAgain.payload.dropped.map((d: { by: string }) => d.by)).toEqual(["alice"]);
    // Each drop is in the audit trail (read through its once-a-second cache).
    await waitFor(
      () => space.ledger.audit({}, 100).filter((e) => e.event === "approval_dropped" && e.by === "alice").length === 2,
      5000,
      "both drops audited",
    );

    // Two who may decide: it runs, once.
    bob.send({ id: "b1", kind: "mcp/approve", correlation_id: ["q-1"], payload: {} });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("q-1") === true);
    await waitFor(() => runs.length === 1, 5000, "the call ran");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "a.txt" });
  });
});
