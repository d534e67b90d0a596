/**
 * Approvals pushed out: webhooks (generic JSON and Slack's text) against real loopback
 * HTTP servers — retries, a delivery log, and a webhook that never answers not slowing
 * the space; `expires_action`; and `/metrics`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { errorFor, sleep, startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", agent: "agent-token-3", fs: "fs-token-4444" };

interface Hook {
  url: string;
  received: Array<{ headers: IncomingMessage["headers"]; body: any }>;
  server: Server;
}

/** A webhook receiver; `answer` decides each response (or never answers). */
async function hook(answer: (n: number, res: ServerResponse) => void = (_n, res) => res.end("ok")): Promise<Hook> {
  const received: Hook["received"] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      received.push({ headers: req.headers, body: JSON.parse(body) });
      answer(received.length, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, received, server };
}

let gw: TestGateway | undefined;
const hooks: Hook[] = [];
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  for (const h of hooks.splice(0)) {
    h.server.closeAllConnections();
    await new Promise((r) => h.server.close(r));
  }
});

const space = (extra: string) => `
space: {id: push}
${extra}
participants:
  human: {kind: human, token: ${T.human}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["fs/*"]}}
  fs: {kind: mcp, token: ${T.fs}}
`;

async function setup(yaml: string): Promise<{ human: TestClient; agent: TestClient }> {
  gw = await startGateway(yaml);
  const fs = await toolOwner(gw, "push", T.fs, [{ name: "write_file", inputSchema: { type: "object" } }]);
  const human = await TestClient.join(gw, "push", T.human);
  const agent = await TestClient.join(gw, "push", T.agent);
  clients.push(fs, human, agent);
  await sleep(50);
  return { human, agent };
}

const propose = (id: string) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "x.txt" } } },
});

describe("webhooks", () => {
  it("sends each new proposal and its outcome as JSON and as Slack text, retries a failing hook, and logs every delivery", {
    timeout: 20_000,
  }, async () => {
    const json = await hook();
    const slack = await hook();
    const flaky = await hook((n, res) => {
      res.statusCode = n === 1 ? 503 : 200;
      res.end();
    });
    hooks.push(json, slack, flaky);
    const { human, agent } = await setup(
      space(
        `gateway:\n  notify:\n    - {url: "${json.url}", headers: {Authorization: "Bearer hook-secret"}}\n    - {url: "${slack.url}", format: slack}\n    - {url: "${flaky.url}", events: [proposed]}`,
      ),
    );
    agent.send(propose("w1"));
    await waitFor(() => json.received.length >= 1 && slack.received.length >= 1, 5000, "the webhooks");
    expect(json.received[0]!.headers.authorization).toBe("Bearer hook-secret");
    expect(json.received[0]!.body).toMatchObject({
      event: "proposal.proposed",
      space: "push",
      proposal: {
        id: "w1",
        proposer: "agent",
        tool: "fs/write_file",
        why: "an ask rule matches fs/write_file",
        arguments: '{"path":"x.txt"}',
      },
    });
    expect(json.received[0]!.body.console).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/ui\/$/);
    expect(slack.received[0]!.body.text).toMatch(/^\[push\] agent wants to call fs\/write_file — decide at http/);

    human.send({ kind: "mcp/reject", correlation_id: ["w1"], payload: { reason: "unsafe", text: "no" } });
    await waitFor(() => json.received.length >= 2 && slack.received.length >= 2, 5000, "the outcome");
    expect(json.received[1]!.body).toMatchObject({
      event: "proposal.rejected",
      proposal: { decided_by: "human", reason: "unsafe", text: "no" },
    });
    expect(slack.received[1]!.body.text).toBe("[push] agent was refused fs/write_file by human (unsafe)");

    // The flaky hook failed once (503) and got it on the retry; the log says both.
    await waitFor(() => flaky.received.length >= 2, 8000, "the retry");
    const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/push/notify`, { headers: { authorization: `Bearer ${T.human}` } });
    const { deliveries } = (await res.json()) as { deliveries: Array<{ url: string; ok: boolean; status: number; attempt: number }> };
    const tries = deliveries.filter((d) => d.url === flaky.url);
    expect(tries.map((d) => [d.attempt, d.status, d.ok])).toEqual([
      [1, 503, false],
      [2, 200, true],
    ]);
    // It only wanted new proposals.
    expect(flaky.received.every((r) => r.body.event === "proposal.proposed")).toBe(true);
  });

  it("never slows the space: a hook that does not answer holds up nothing", async () => {
    const silent = await hook(() => {
      // never answers
    });
    hooks.push(silent);
    const { human, agent } = await setup(space(`gateway:\n  notify: [{url: "${silent.url}"}]`));
    agent.send(propose("s1"));
    await waitFor(() => silent.received.length === 1, 5000, "the hook to be called");
    agent.send(propose("s2"));
    await human.next((e) => e.id === "s2");
    human.send({ id: "ok", kind: "mcp/approve", correlation_id: ["s1"], payload: {} });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("s1") === true);
    // Still waiting on the first notice meanwhile.
    expect(silent.received.length).toBeLessThanOrEqual(4);
  });
});

describe("expires_action", () => {
  it("keep: an unanswered proposal stays pending past its TTL; reject (the default) ends it", async () => {
    const { human, agent } = await setup(space("policy: {proposal_ttl_ms: 150, expires_action: keep}"));
    agent.send(propose("k1"));
    await human.next((e) => e.id === "k1");
    await sleep(400);
    expect(agent.received.some((e) => e.kind === "mcp/reject")).toBe(false);
    human.send({ id: "late-ok", kind: "mcp/approve", correlation_id: ["k1"], payload: {} });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("k1") === true);
    for (const c of clients.splice(0)) c.ws.terminate();
    await gw!.stop();

    const again = await setup(space("policy: {proposal_ttl_ms: 150}"));
    again.agent.send(propose("r1"));
    const expired = await again.agent.next((e) => e.kind === "mcp/reject");
    expect(expired.payload.reason).toBe("timeout");
    again.human.send({ id: "too-late", kind: "mcp/approve", correlation_id: ["r1"], payload: {} });
    expect((await errorFor(again.human, "too-late")).payload.code).toBe("proposal_not_pending");
  });
});

describe("/metrics", () => {
  it("exposes connections, envelopes, proposals, decision and store-write times in Prometheus text", async () => {
    const { human, agent } = await setup(space(""));
    agent.send(propose("m1"));
    await human.next((e) => e.id === "m1");
    human.send({ kind: "mcp/approve", correlation_id: ["m1"], payload: {} });
    await agent.next((e) => e.kind === "mcp/response");
    const res = await fetch(`http://127.0.0.1:${gw!.port}/metrics`);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    expect(text).toMatch(/^mewgate_connections 3$/m);
    expect(text).toMatch(/^mewgate_members\{space="push"\} 3$/m);
    expect(text).toMatch(/^mewgate_proposals_pending\{space="push"\} 0$/m);
    expect(text).toMatch(/^mewgate_proposals_total\{space="push",state="approved"\} 1$/m);
    expect(text).toMatch(/^mewgate_calls_total\{space="push",outcome="ok"\} 1$/m);
    expect(text).toMatch(/^mewgate_decision_seconds_count\{space="push"\} 1$/m);
    expect(Number(/^mewgate_store_write_seconds_count\{space="push"\} (\d+)$/m.exec(text)?.[1])).toBeGreaterThan(0);
    expect(Number(/^mewgate_envelopes_in_total\{space="push"\} (\d+)$/m.exec(text)?.[1])).toBeGreaterThan(2);
    // A web page cannot read it: the Origin check stands first.
    expect((await fetch(`http://127.0.0.1:${gw!.port}/metrics`, { headers: { origin: "https://evil.example" } })).status).toBe(403);
  });
});
