/**
 * Escalation (proposals/escalation.ts): a proposal nobody decides in time widens who may
 * decide and tells the webhooks again, through a real webhook receiver on loopback; the
 * timer is re-armed from the proposal's creation after a restart, and a stage that fired is
 * not told twice.
 */
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { errorFor, startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = (hook: string, afterMs: number) => `
space: {id: esc}
gateway:
  state_dir: .mewgate
  notify: [{url: "${hook}"}]
policy:
  escalate:
    - {after_ms: ${afterMs}, approvers: ["@oncall"]}
groups:
  oncall: [carol]
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  carol: {kind: human, token: ${TOKEN("carol")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent: {kind: agent, token: ${TOKEN("agent")}, approvers: [alice], tools: {ask: ["fs/write_file"]}}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const propose = (id: string) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } } },
});

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const servers: Server[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const g of gateways.splice(0)) await g.stop();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A webhook receiver on loopback that keeps every JSON body it is sent. */
async function receiver(): Promise<{ url: string; bodies: Array<Record<string, any>> }> {
  const bodies: Array<Record<string, any>> = [];
  const server = createServer((req, res) => {
    let data = "";
    req.on("data", (c) => (data += c));
    req.on("end", () => {
      bodies.push(JSON.parse(data));
      res.writeHead(204).end();
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}/hook`, bodies };
}

async function join(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "esc", TOKEN(id));
  clients.push(c);
  return c;
}

async function owner(g: { port: number }, runs: Env[]): Promise<void> {
  clients.push(
    await toolOwner(g, "esc", TOKEN("fs"), TOOLS, {
      onCall: (env, reply) => {
        runs.push(env);
        return reply({ content: [{ type: "text", text: "ok" }] });
      },
    }),
  );
}

const events = (bodies: Array<Record<string, any>>, id: string) => bodies.filter((b) => b["proposal"]?.id === id).map((b) => b["event"]);

describe("escalation", () => {
  it("refuses the escalation's approvers before the time, then widens who may decide and notifies again", async () => {
    const hook = await receiver();
    const g = await startGateway(SPACE(hook.url, 2500));
    gateways.push(g);
    const runs: Env[] = [];
    await owner(g, runs);
    const agent = await join(g, "agent");
    const carol = await join(g, "carol");
    agent.send(propose("e1"));
    await carol.next((e) => e.kind === "mcp/proposal" && e.id === "e1");
    carol.send({ id: "early", kind: "mcp/approve", correlation_id: ["e1"], payload: {} });
    const early = await errorFor(carol, "early");
    // Only when nobody has decided in time may the on-call decide.
    if (early.payload.code !== "not_an_approver")
      throw new Error(`carol was let in before the escalation: ${JSON.stringify(early.payload)}`);
    await waitFor(() => events(hook.bodies, "e1").includes("proposal.escalated"), 10_000, "the escalation webhook");
    const body = hook.bodies.find((b) => b["event"] === "proposal.escalated")!;
    expect(body["proposal"]).toMatchObject({ id: "e1", state: "pending", escalated: [0], approvers: ["@oncall"] });
    const view = await fetch(`http://127.0.0.1:${g.port}/api/spaces/esc/proposals/e1`, {
      headers: { authorization: `Bearer ${TOKEN("alice")}` },
    });
    expect(((await view.json()) as { approvers: string[] }).approvers).toEqual(["alice", "@oncall"]);
    carol.send({ id: "late", kind: "mcp/approve", correlation_id: ["e1"], payload: {} });
    await waitFor(() => runs.length === 1, 5000, "routed after carol's approval");
    expect(events(hook.bodies, "e1")).toEqual(expect.arrayContaining(["proposal.proposed", "proposal.escalated"]));
  });

  it("re-arms from the proposal's creation after a restart, and never tells a fired stage twice", { timeout: 30_000 }, async () => {
    const hook = await receiver();
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-esc-"));
    dirs.push(dir);
    const AFTER = 1500;
    let g = await startGateway(SPACE(hook.url, AFTER), { dir });
    await owner(g, []);
    const agent = await join(g, "agent");
    const alice = await join(g, "alice");
    agent.send(propose("e2"));
    const held = await alice.next((e) => e.kind === "mcp/proposal" && e.id === "e2");
    const createdAt = Date.parse(held.ts as string);
    for (const c of clients.splice(0)) c.ws.terminate();
    await g.gateway.close();
    expect(events(hook.bodies, "e2")).not.toContain("proposal.escalated");
    // Down past the stage's time: it fires on start, from the proposal's creation, not a fresh timer.
    await waitFor(() => Date.now() > createdAt + AFTER + 100, 10_000, "the stage falls due while the gateway is down");
    g = await startGateway(SPACE(hook.url, AFTER), { dir });
    await waitFor(() => events(hook.bodies, "e2").includes("proposal.escalated"), 5000, "escalated after the restart");
    await g.gateway.close();
    g = await startGateway(SPACE(hook.url, AFTER), { dir });
    gateways.push(g);
    const runs: Env[] = [];
    await owner(g, runs);
    const carol = await join(g, "carol");
    carol.send({ kind: "mcp/approve", correlation_id: ["e2"], payload: {} });
    await waitFor(() => events(hook.bodies, "e2").includes("proposal.approved"), 5000, "approved by the escalation's approver");
    expect(events(hook.bodies, "e2").filter((e) => e === "proposal.escalated")).toHaveLength(1);
    expect(runs).toHaveLength(1);
  });
});
