/**
 * Decision telemetry: every decision on a call — approved by a person or a reviewer, rejected,
 * withdrawn, expired, allowed by a learned rule — leaves a `mewgate.decision` event with one
 * opaque decision id, the same in the audit entry (and, for an approval, in its receipt), with
 * who decided by kind, the rule and the risk; /metrics counts them by outcome and decider.
 * Spans go to a real OTLP/HTTP receiver on loopback. A server's SEP-2793 risk annotations
 * reach the card's risk, only ever raising it.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { newDecisionId } from "../gateway/audit/entry.js";
import { riskOf, serverRisk } from "../gateway/policy/learn/risk.js";
import { startGateway, TestClient, type TestGateway, toolOwner, waitFor } from "./helpers.js";

const T = (id: string) => `${id}-token-telemetry-0001`;

interface Span {
  name: string;
  spanId: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
  events?: Array<{ name: string; attributes: Array<{ key: string; value: Record<string, unknown> }> }>;
}

let gw: TestGateway | undefined;
let receiver: Server | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  receiver?.closeAllConnections();
  await new Promise((r) => (receiver ? receiver.close(r) : r(undefined)));
  receiver = undefined;
});

async function otlpReceiver(): Promise<{ url: string; spans: Span[] }> {
  const got = { url: "", spans: [] as Span[] };
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Span[] }> }> };
      for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) got.spans.push(...ss.spans);
      res.setHeader("content-type", "application/json");
      res.end("{}");
    });
  });
  await new Promise<void>((r) => receiver!.listen(0, "127.0.0.1", r));
  got.url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`;
  return got;
}

const attrs = (list: Span["attributes"] | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((a) => [a.key, a.value["stringValue"] ?? a.value["intValue"] ?? a.value["boolValue"]]));
/** The `mewgate.decision` event of the span that has one with this decision id. */
const decisionEvent = (spans: Span[], id: string): (Record<string, unknown> & { span: Span }) | undefined =>
  spans
    .flatMap((s) =>
      (s.events ?? [])
        .filter((e) => e.name === "mewgate.decision")
        .map((e): Record<string, unknown> & { span: Span } => ({ ...attrs(e.attributes), span: s })),
    )
    .find((e) => e["mewgate.decision.id"] === id);

const SPACE = (url: string, ttl = 600_000) => `space: {id: dt}
gateway: {telemetry: {otlp_endpoint: "${url}"}}
policy: {proposal_ttl_ms: ${ttl}}
groups:
  reviewers: [bot]
participants:
  alice: {kind: human, token: ${T("alice")}}
  bot: {kind: agent, token: ${T("bot")}, capabilities: [{kind: "mcp/approve"}, {kind: "mcp/reject"}, {kind: "mcp/request"}], tools: {allow: [srv/*]}}
  agent:
    kind: agent
    token: ${T("agent")}
    review: {by: "@reviewers", may_approve: medium}
    tools: {ask: [srv/*], except: [{tool: srv/write_file, when: 'args.path.startsWith("notes/")'}]}
  srv: {kind: mcp, token: ${T("srv")}}
`;

async function api(who: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/dt/${path}`, {
    method,
    headers: { authorization: `Bearer ${T(who)}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

async function ready(ttl?: number) {
  const otlp = await otlpReceiver();
  gw = await startGateway(SPACE(otlp.url, ttl));
  clients.push(
    await toolOwner(gw, "dt", T("srv"), [
      { name: "write_file", inputSchema: { type: "object" }, annotations: { destructiveHint: false, openWorldHint: false } },
      // SEP-2793's graded risk: the server says it is critical and cannot be undone.
      {
        name: "drop",
        inputSchema: { type: "object" },
        annotations: { destructiveHint: false, openWorldHint: false, riskLevel: "critical", reversibility: "none", blastRadius: "global" },
      },
    ]),
  );
  const agent = await TestClient.join(gw, "dt", T("agent"));
  const alice = await TestClient.join(gw, "dt", T("alice"));
  clients.push(agent, alice);
  return { otlp, agent, alice };
}

let n = 0;
async function propose(agent: TestClient, tool: string, path: string): Promise<string> {
  const id = `q-${++n}`;
  agent.send({ id, kind: "mcp/proposal", to: ["srv"], payload: { method: "tools/call", params: { name: tool, arguments: { path } } } });
  await waitFor(async () => (await api("alice", "GET", `proposals/${id}`)).status === 200);
  return id;
}

const auditOf = (proposal: string, event: string) =>
  gw!.gateway.spaces
    .get("dt")!
    .ledger.audit({})
    .find((e) => e.proposal === proposal && e.event === event);

describe("decision telemetry", () => {
  it("decision ids stay unique and opaque across refills of their random pool", () => {
    // 1,000 ids: the pool (256 ids) is refilled three times on the way.
    const ids = Array.from({ length: 1000 }, () => newDecisionId());
    for (const id of ids) expect(id).toMatch(/^dec_[A-Za-z0-9_-]{22}$/);
    expect(new Set(ids).size).toBe(1000);
  });

  it("a rejected, a withdrawn, a reviewer's and a learned rule's decision each leave one id in the audit entry, the span and the receipt; /metrics counts them", async () => {
    const { otlp, agent } = await ready();

    // Allowed by a learned rule (an `except` a person accepted): the call's span carries the decision.
    agent.send({
      id: "d-1",
      kind: "mcp/request",
      to: ["srv"],
      payload: { jsonrpc: "2.0", id: "d-1", method: "tools/call", params: { name: "write_file", arguments: { path: "notes/a.md" } } },
    });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "d-1");
    await waitFor(() =>
      gw!.gateway.spaces
        .get("dt")!
        .ledger.audit({})
        .some((e) => e.event === "called"),
    );
    const called = gw!.gateway.spaces
      .get("dt")!
      .ledger.audit({})
      .find((e) => e.event === "called")!;
    expect(called.decision).toMatch(/^dec_/);

    // Rejected by a person.
    const rejected = await propose(agent, "write_file", "src/x.ts");
    expect((await api("alice", "POST", `proposals/${rejected}/reject`, { reason: "disagree" })).status).toBe(200);
    // Withdrawn by its proposer.
    const withdrawn = await propose(agent, "write_file", "src/y.ts");
    agent.send({ kind: "mcp/withdraw", correlation_id: [withdrawn], payload: { reason: "no_longer_needed" } });
    await waitFor(() => auditOf(withdrawn, "withdrawn") !== undefined);
    // Approved by a reviewer within its bound (a first use: medium).
    const reviewed = await propose(agent, "write_file", "src/z.ts");
    expect((await api("bot", "POST", `proposals/${reviewed}/approve`, {})).status).toBe(200);
    await waitFor(() => auditOf(reviewed, "answered") !== undefined);
    // Approved by a person.
    const approved = await propose(agent, "write_file", "src/w.ts");
    expect((await api("alice", "POST", `proposals/${approved}/approve`, {})).status).toBe(200);
    await waitFor(() => auditOf(approved, "answered") !== undefined);

    const want: Array<[string, string, string, string | undefined]> = [
      [rejected, "rejected", "person", "alice"],
      [withdrawn, "withdrawn", "proposer", "agent"],
      [reviewed, "approved", "reviewer", "bot"],
      [approved, "approved", "person", "alice"],
    ];
    for (const [id, outcome] of want) expect(auditOf(id, outcome)?.decision, `${id} ${outcome}`).toMatch(/^dec_/);
    const ids = [called.decision!, ...want.map(([id, outcome]) => auditOf(id, outcome)!.decision!)];
    expect(new Set(ids).size).toBe(ids.length);
    await waitFor(() => ids.every((d) => decisionEvent(otlp.spans, d) !== undefined), 15_000, "every decision exported");

    const learned = decisionEvent(otlp.spans, called.decision!)!;
    expect(learned).toMatchObject({ "mewgate.decision.outcome": "allowed", "mewgate.decision.decider": "learned_rule" });
    expect(String(learned["mewgate.decision.rule"])).toContain("except");
    expect(learned.span.name).toBe("tools/call write_file");
    for (const [id, outcome, decider, by] of want) {
      const e = decisionEvent(otlp.spans, auditOf(id, outcome)!.decision!)!;
      expect(e, id).toMatchObject({ "mewgate.decision.outcome": outcome, "mewgate.decision.decider": decider, "mewgate.decision.by": by });
      // The wait's span, a rejected or withdrawn call's too, with the rule that asked and the risk.
      expect(e.span.name).toBe("await approval srv/write_file");
      expect(attrs(e.span.attributes)["mewgate.proposal.id"]).toBe(id);
      expect(String(e["mewgate.decision.rule"])).toMatch(/ask/);
      expect(["low", "medium", "high"]).toContain(e["mewgate.decision.risk"]);
    }
    // The receipt of an approval names the same decision.
    const receipt = auditOf(reviewed, "approved")!.receipt!;
    const claims = JSON.parse(Buffer.from(receipt.split(".")[1]!, "base64url").toString());
    expect(claims).toMatchObject({ decision: auditOf(reviewed, "approved")!.decision, decider: "reviewer", approvers: ["bot"] });

    const metrics = await fetch(`http://127.0.0.1:${gw!.port}/metrics`).then((r) => r.text());
    for (const [outcome, decider] of [
      ["allowed", "learned_rule"],
      ["rejected", "person"],
      ["withdrawn", "proposer"],
      ["approved", "reviewer"],
      ["approved", "person"],
    ])
      expect(metrics).toContain(`mewgate_decisions_total{space="dt",outcome="${outcome}",decider="${decider}"} 1`);
  });

  it("an expiry is a decision too: its id, decider `timeout`, its span and its count", async () => {
    const { otlp, agent } = await ready(800);
    const id = await propose(agent, "write_file", "src/late.ts");
    await waitFor(() => auditOf(id, "expired") !== undefined, 10_000, "the expiry");
    const decision = auditOf(id, "expired")!.decision!;
    expect(decision).toMatch(/^dec_/);
    await waitFor(() => decisionEvent(otlp.spans, decision) !== undefined, 15_000, "the expiry exported");
    expect(decisionEvent(otlp.spans, decision)).toMatchObject({
      "mewgate.decision.outcome": "expired",
      "mewgate.decision.decider": "timeout",
    });
    const metrics = await fetch(`http://127.0.0.1:${gw!.port}/metrics`).then((r) => r.text());
    expect(metrics).toContain(`mewgate_decisions_total{space="dt",outcome="expired",decider="timeout"} 1`);
  });

  it("a server's SEP-2793 risk reaches the card and holds a reviewer back; it raises risk, never lowers it, and junk is ignored", async () => {
    const { agent } = await ready();
    const id = await propose(agent, "drop", "db/main");
    const card = (await api("alice", "GET", `proposals/${id}`)).body;
    expect(card.risk.level).toBe("high");
    const codes = card.risk.reasons.map((r: { code: string }) => r.code);
    expect(codes).toEqual(expect.arrayContaining(["server_risk", "irreversible", "blast_radius"]));
    // A reviewer bounded to medium may not approve what the server calls critical.
    const r = await api("bot", "POST", `proposals/${id}/approve`, {});
    expect(r.status).toBe(403);
    expect((await api("alice", "GET", `proposals/${id}`)).body.state).toBe("pending");

    // A server calling a destructive tool low-risk lowers nothing; values outside the vocabulary say nothing.
    const facts = { proposer: "a", tool: "t", args: {}, byProposer: [], byTool: [], id: "x" };
    const destructive = riskOf({ ...facts, annotations: { destructiveHint: true, riskLevel: "low", reversibility: "auto" } });
    expect(destructive.level).toBe("high");
    expect(destructive.reasons.map((r) => r.code)).not.toContain("server_risk");
    for (const junk of [
      { riskLevel: { level: "critical" } },
      { riskLevel: "CRITICAL" },
      { reversibility: ["none"] },
      { blastRadius: "x".repeat(100_000) },
      { approvalRecommendation: 5 },
    ])
      expect(serverRisk("t", junk)).toEqual([]);
    expect(serverRisk("t", { approvalRecommendation: "multi", reversibility: "manual" }).map((r) => [r.code, r.level])).toEqual([
      ["irreversible", "medium"],
      ["multi_approval", "medium"],
    ]);
  });
});
