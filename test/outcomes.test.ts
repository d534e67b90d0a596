/**
 * A proposal's record says what became of its call: a tool that reports its own failure
 * (`isError: true` in its result, as MCP tools do for bad input) did not succeed, even
 * though the JSON-RPC answer is a result, not an error.
 */
import { afterEach, describe, expect, it } from "vitest";
import { runProposals } from "../cli/commands.js";
import { startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const T = { human: "human-token-00001", agent: "agent-token-00002", fs: "fs-token-0000003" };
const SPACE = `
space: {id: out}
participants:
  human: {kind: human, token: ${T.human}}
  agent: {kind: agent, token: ${T.agent}}
  fs: {kind: mcp, token: ${T.fs}}
`;

let gw: TestGateway | undefined;
const clients: TestClient[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

describe("the outcome in a proposal's record", () => {
  it("is tool_error when the tool answers isError: true, error for a JSON-RPC error, and ok only when it succeeded", async () => {
    gw = await startGateway(SPACE);
    const fs = await toolOwner(gw, "out", T.fs, [{ name: "write_file", inputSchema: { type: "object" } }], {
      onCall: (env: Env, reply) => {
        const path = env.payload.params.arguments.path as string;
        if (path === "bad") reply({ content: [{ type: "text", text: "Input validation error: content is required" }], isError: true });
        else if (path === "broken")
          fs.send({
            kind: "mcp/response",
            to: [env.from],
            correlation_id: [env.id],
            payload: { jsonrpc: "2.0", id: env.payload.id, error: { code: -32603, message: "disk on fire" } },
          });
        else reply({ content: [{ type: "text", text: "written" }] });
      },
    });
    const human = await TestClient.join(gw, "out", T.human);
    const agent = await TestClient.join(gw, "out", T.agent);
    clients.push(fs, human, agent);
    for (const path of ["good", "bad", "broken"]) {
      agent.send({
        id: `p-${path}`,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { path } } },
      });
      await human.next((e) => e.kind === "mcp/proposal" && e.id === `p-${path}`);
      human.send({ kind: "mcp/approve", correlation_id: [`p-${path}`], payload: { scope: "once" } });
      await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === `p-${path}`);
    }
    const space = gw.gateway.spaces.get("out")!;
    const answered = () => space.ledger.audit({}).filter((e) => e.event === "answered");
    await waitFor(() => answered().length === 3, 5000, "three answers in the audit trail");
    expect(Object.fromEntries(answered().map((e) => [e.proposal, e.outcome]))).toEqual({
      "p-good": "ok",
      "p-bad": "tool_error",
      "p-broken": "error",
    });
  });

  it("`mewgate proposals approve --args` checks the tool's input schema before approving, and says when the tool reported a failure", async () => {
    gw = await startGateway(SPACE);
    const ran: string[] = [];
    const schema = { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path", "content"] };
    const fs = await toolOwner(gw, "out", T.fs, [{ name: "write_file", inputSchema: schema }], {
      onCall: (env: Env, reply) => {
        ran.push(env.payload.params.arguments.path as string);
        reply({ content: [{ type: "text", text: "Input validation error: \u001b[31mcontent\u001b[0m is empty" }], isError: true });
      },
    });
    const human = await TestClient.join(gw, "out", T.human);
    const agent = await TestClient.join(gw, "out", T.agent);
    clients.push(fs, human, agent);
    agent.send({
      id: "q1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "n.txt", content: "x" } } },
    });
    await human.next((e) => e.kind === "mcp/proposal" && e.id === "q1");
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
    const common = { gateway: `ws://127.0.0.1:${gw.port}`, space: "out", token: T.human };

    // A typo (no content) is refused before it uses up the proposal.
    expect(await runProposals("approve", "q1", { ...common, args: '{"path":"n2.txt"}' }, io)).not.toBe(0);
    expect(out.join("")).toMatch(/content.*nothing was approved/);
    expect(ran).toEqual([]);
    expect(
      gw.gateway.spaces
        .get("out")!
        .proposals.pending()
        .map((p) => p.id),
    ).toEqual(["q1"]);

    // Arguments that fit are approved; the tool's own failure is reported as one, its text made safe.
    out.length = 0;
    expect(await runProposals("approve", "q1", { ...common, args: '{"path":"n2.txt","content":""}', waitMs: 5000 }, io)).toBe(0);
    const text = out.join("");
    expect(text).toContain("with edited arguments");
    expect(text).toContain("call failed (the tool reported an error)");
    expect(text).not.toContain("\u001b");
    expect(ran).toEqual(["n2.txt"]);
  });
});
