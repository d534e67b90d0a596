/**
 * An approval checked apart from its commit (proposals/approval.ts), against a real gateway,
 * hostile first: approvals that must be refused (malformed, no proposal named, a stranger's
 * id, the proposer's own, an approver who may not make the call, "always" where it cannot be,
 * a huge and control-character reason) each get exactly one error, correlated to what was
 * sent, and leave the proposal pending with nothing routed; two approvers racing route one
 * call; a reload landing while an approval waits writes nothing; then the decision point is
 * asked once per approval, and the approved call runs.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Authority } from "../gateway/policy/authority.js";
import { ReceiptKeys } from "../gateway/proposals/receipts.js";
import { type Env, errorFor, sleep, startGateway, TestClient, type TestGateway, toolOwner, waitFor } from "./helpers.js";

const T = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: ac}
gateway: {state_dir: .mewgate}
participants:
  alice: {kind: human, token: ${T("alice")}}
  bob: {kind: human, token: ${T("bob")}}
  weak:
    kind: human
    token: ${T("weak")}
    tools: {deny: ["fs/*"]}
  fs: {kind: mcp, token: ${T("fs")}}
  agent:
    kind: agent
    token: ${T("agent")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {ask: ["fs/write_file"]}
`;
const TOOLS = [
  {
    name: "write_file",
    inputSchema: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path"] },
  },
];

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const c of clients.splice(0)) c.close();
  await gw?.stop();
  gw = undefined;
});

async function setup() {
  gw = await startGateway(SPACE);
  const calls: Env[] = [];
  const fs = await toolOwner(gw, "ac", T("fs"), TOOLS, {
    onCall: (env, reply) => {
      calls.push(env);
      reply({ content: [{ type: "text", text: "written" }] });
    },
  });
  const join = async (id: string) => {
    const c = await TestClient.join(gw!, "ac", T(id));
    clients.push(c);
    return c;
  };
  clients.push(fs);
  const [agent, alice, bob, weak] = [await join("agent"), await join("alice"), await join("bob"), await join("weak")];
  await waitFor(() => gw!.gateway.spaces.get("ac")!.mcp.registry.get("fs", "write_file") !== undefined, 5000, "fs's tools");
  return { calls, agent, alice, bob, weak };
}

function propose(agent: TestClient, id: string, args: Record<string, unknown> = { path: "notes.txt", content: "hi" }): void {
  agent.send({
    id,
    kind: "mcp/proposal",
    to: ["fs"],
    payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "write_file", arguments: args } },
  });
}

function proposalState(id: string): string | undefined {
  const book = gw!.gateway.spaces.get("ac")!.proposals;
  return book.get(id)?.state ?? book.endedAs(id);
}

describe("an approval refused by its check", () => {
  it("answers each refused approval once, correlated to what was sent, and leaves the proposal pending with nothing routed", async () => {
    const { calls, agent, alice, weak } = await setup();
    propose(agent, "p1");
    await waitFor(() => proposalState("p1") === "pending", 5000, "the proposal held");
    const refused: Array<[TestClient, Record<string, unknown>, string]> = [
      [alice, { id: "r1", kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "sometimes" } }, "invalid_payload"],
      [alice, { id: "r2", kind: "mcp/approve", payload: {} }, "invalid_envelope"],
      [alice, { id: "r3", kind: "mcp/approve", correlation_id: ["no-such"], payload: {} }, "unknown_proposal"],
      [agent, { id: "r4", kind: "mcp/approve", correlation_id: ["p1"], payload: {} }, "self_approval"],
      [weak, { id: "r5", kind: "mcp/approve", correlation_id: ["p1"], payload: {} }, "approver_lacks_capability"],
      [alice, { id: "r6", kind: "mcp/approve", correlation_id: ["p1"], payload: { limit: "exact" } }, "invalid_payload"],
      [alice, { id: "r7", kind: "mcp/approve", correlation_id: ["p1"], payload: { arguments: { path: 7 } } }, "invalid_payload"],
      [
        alice,
        { id: "r8", kind: "mcp/approve", correlation_id: ["p1"], payload: { reason: `\u0000\u202e${"x".repeat(5000)}` } },
        "invalid_payload",
      ],
    ];
    for (const [c, frame, code] of refused) {
      c.send(frame);
      expect((await errorFor(c, frame["id"] as string)).payload.code, String(frame["id"])).toBe(code);
    }
    // A frame sent after them is answered after them: any second error would be here by now.
    alice.send({ id: "r9", kind: "mcp/approve", correlation_id: ["no-such"], payload: {} });
    await errorFor(alice, "r9");
    for (const [c, frame] of refused) {
      const errors = c.received.filter((e) => e.kind === "system/error" && e.correlation_id?.includes(frame["id"] as string));
      expect(errors.length, String(frame["id"])).toBe(1);
    }
    expect(proposalState("p1")).toBe("pending");
    expect(calls).toEqual([]);
  });

  it("routes one call when two approvers race, and tells the other the proposal was decided", async () => {
    const { calls, agent, alice, bob } = await setup();
    propose(agent, "p2");
    await waitFor(() => proposalState("p2") === "pending", 5000, "the proposal held");
    alice.send({ id: "a1", kind: "mcp/approve", correlation_id: ["p2"], payload: {} });
    bob.send({ id: "b1", kind: "mcp/approve", correlation_id: ["p2"], payload: {} });
    await waitFor(() => calls.length === 1, 5000, "the routed call");
    const errorsOf = () => [
      ...alice.received.filter((e) => e.kind === "system/error" && e.correlation_id?.includes("a1")),
      ...bob.received.filter((e) => e.kind === "system/error" && e.correlation_id?.includes("b1")),
    ];
    await waitFor(() => errorsOf().length > 0, 5000, "the second approver's answer");
    await sleep(200);
    expect(calls.length).toBe(1);
    const refusedOnes = errorsOf();
    expect(refusedOnes.length).toBe(1);
    expect(refusedOnes[0]!.payload.code).toBe("proposal_not_pending");
  });

  it("writes nothing when the space's rules change while the approval is on its way, and takes it when sent again", async () => {
    const { calls, agent, alice } = await setup();
    propose(agent, "p4");
    await waitFor(() => proposalState("p4") === "pending", 5000, "the proposal held");
    // A reload lands while the approval's receipt is being signed (a wait between check and record).
    writeFileSync(join(gw!.dir, "space.yaml"), `${SPACE}  dave: {kind: human, token: ${T("dave")}}\n`);
    const sign = ReceiptKeys.prototype.sign;
    let reloaded = false;
    vi.spyOn(ReceiptKeys.prototype, "sign").mockImplementation(async function (
      this: ReceiptKeys,
      ...args: Parameters<ReceiptKeys["sign"]>
    ) {
      if (!reloaded) {
        reloaded = true;
        await gw!.gateway.reload({ space: "ac", by: "test" });
      }
      return sign.apply(this, args);
    });
    alice.send({ id: "w1", kind: "mcp/approve", correlation_id: ["p4"], payload: {} });
    const refused = await errorFor(alice, "w1");
    expect(refused.payload.code).toBe("policy_changed");
    expect(reloaded).toBe(true);
    expect(proposalState("p4")).toBe("pending");
    expect(calls).toEqual([]);
    alice.send({ id: "w2", kind: "mcp/approve", correlation_id: ["p4"], payload: {} });
    await waitFor(() => calls.length === 1, 5000, "the call, approved again");
  });
});

describe("an approval let through", () => {
  it("asks the decision point once, then records and routes the call with what was approved", async () => {
    const { calls, agent, alice } = await setup();
    propose(agent, "p3", { path: "a.txt", content: "one" });
    await waitFor(() => proposalState("p3") === "pending", 5000, "the proposal held");
    const approval = vi.spyOn(Authority.prototype, "approval");
    let inApproval = 0;
    let outside = 0;
    const call = Authority.prototype.call;
    vi.spyOn(Authority.prototype, "call").mockImplementation(function (this: Authority, ...args: Parameters<Authority["call"]>) {
      const stack = new Error().stack ?? "";
      if (stack.includes("Authority.approval")) inApproval++;
      else outside++;
      return call.apply(this, args);
    });
    alice.send({ id: "ok", kind: "mcp/approve", correlation_id: ["p3"], payload: { arguments: { path: "a.txt", content: "two" } } });
    await waitFor(() => calls.length === 1 || alice.received.some((e) => e.kind === "system/error"), 5000, "the routed call");
    expect(alice.received.filter((e) => e.kind === "system/error").map((e) => e.payload)).toEqual([]);
    expect(approval).toHaveBeenCalledTimes(1);
    // The proposer's rules and the approver's standing, each once, inside the one ask.
    expect(inApproval).toBe(2);
    expect(outside).toBe(0);
    expect(calls[0]!.payload.params.arguments).toEqual({ path: "a.txt", content: "two" });
    expect(calls[0]!.from).toBe("agent");
    await waitFor(() => ["routed", "answered"].includes(proposalState("p3") ?? ""), 5000, "the proposal routed");
    expect(alice.received.some((e) => e.kind === "system/error" && e.correlation_id?.includes("ok"))).toBe(false);
  });
});
