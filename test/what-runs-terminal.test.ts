/**
 * What runs, in the interactive terminal under tmux against a real gateway process: after the
 * first approver edits a two-approval proposal, the second approver's terminal shows the edited
 * arguments, and its `a` confirms exactly those, so the call runs with what the screen showed.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanEnv, MAIN, tempDir, Tmux } from "./fixtures/cli/harness.js";
import { killGateway, spawnGateway, TestClient, toolOwner, waitFor, type Env, type GatewayProcess } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: wrt}
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    tools: {ask: ["fs/write_file"]}
    approvers: [alice, bob]
    approvals: 2
`;

let gateway: GatewayProcess | undefined;
let pane: Tmux | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  pane?.kill();
  pane = undefined;
  for (const c of clients.splice(0)) c.ws.terminate();
  if (gateway) await killGateway(gateway);
  gateway = undefined;
});

describe("what runs in the terminal", () => {
  it("shows the first approver's edit and approves exactly it with a", { timeout: 40_000 }, async () => {
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    gateway = await spawnGateway(file);
    const runs: Env[] = [];
    clients.push(
      await toolOwner(gateway, "wrt", TOKEN("fs"), [{ name: "write_file", inputSchema: { type: "object" } }], {
        onCall: (env, reply) => {
          runs.push(env);
          return reply({ content: [{ type: "text", text: "ok" }] });
        },
      }),
    );
    const agent = await TestClient.join(gateway, "wrt", TOKEN("agent"));
    const alice = await TestClient.join(gateway, "wrt", TOKEN("alice"));
    clients.push(agent, alice);
    const tokenFile = join(dir, "bob.token");
    writeFileSync(tokenFile, `${TOKEN("bob")}\n`, { mode: 0o600 });
    pane = new Tmux(
      [process.execPath, MAIN, "connect", "--gateway", `ws://127.0.0.1:${gateway.port}`, "--space", "wrt", "--token-file", tokenFile],
      { env: cleanEnv({ EDITOR: "true" }), width: 100, height: 40 },
    );
    await pane.waitFor(/bob>/);
    agent.send({
      id: "t1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "original-a.txt" } } },
    });
    await pane.waitFor(/1 proposal waiting/);
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "t1");
    alice.send({ kind: "mcp/approve", correlation_id: ["t1"], payload: { arguments: { path: "edited-b.txt" } } });
    await agent.next((e) => e.kind === "system/approval" && e.correlation_id?.[0] === "t1");
    // The card is drawn again from the client's proposal, which followed the edit.
    await pane.waitFor(/edited-b\.txt/);
    pane.keys("a");
    await waitFor(() => runs.length === 1, 10_000, "bob's approval runs the call");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "edited-b.txt" });
  });
});
