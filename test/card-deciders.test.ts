/**
 * "Who may decide" on a card lists only those who can decide it now, against a real gateway:
 * never the proposer; approvers with their groups expanded, each able to make the call
 * itself with the arguments that will run (an approver's edit included); a reviewer only
 * within its bound (proposals/reviewer-bound.ts) and then as one who approves, never rejects;
 * nobody switched off. The list comes from the same bar the decision itself meets
 * (decisions.ts `whyNotDecide`), so what the card says is what the gateway does: each one
 * left off is refused when it tries, and the viewer's buttons follow.
 */
import { afterEach, describe, expect, it } from "vitest";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = (id: string) => `${id}-token-0123456789abcdef`;
const AGENT_CAPS = `capabilities: [{kind: "mcp/approve"}, {kind: "mcp/reject"}, {kind: "mcp/request"}, {kind: "chat"}]`;
const SPACE = `space: {id: dc}
groups:
  reviewers: [rev]
  ops: [alice, bob, carol, erin, helper, agent, pair]
participants:
  alice: {kind: human, token: ${T("alice")}}
  bob: {kind: human, token: ${T("bob")}}
  carol: {kind: human, token: ${T("carol")}, tools: {deny: ["fs/*"]}}
  dave: {kind: human, token: ${T("dave")}}
  erin: {kind: human, token: ${T("erin")}, tools: {deny: [{tool: "fs/write_file", when: "args.path.startsWith('secret/')"}]}}
  helper: {kind: agent, token: ${T("helper")}, ${AGENT_CAPS}, tools: {allow: ["fs/*"]}}
  rev: {kind: agent, token: ${T("rev")}, ${AGENT_CAPS}, tools: {allow: ["fs/*"]}}
  fs: {kind: mcp, token: ${T("fs")}}
  agent:
    kind: agent
    token: ${T("agent")}
    approvers: ["@ops"]
    review: {by: "@reviewers", may_approve: low}
  pair:
    kind: agent
    token: ${T("pair")}
    approvers: ["@ops"]
    approvals: 2
    review: {by: "@reviewers", may_approve: low}
`;

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function api(who: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/dc/${path}`, {
    method,
    headers: { authorization: `Bearer ${T(who)}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

let n = 0;
async function propose(from: TestClient, tool: string, path: string): Promise<string> {
  const id = `d-${++n}`;
  from.send({ id, kind: "mcp/proposal", to: ["fs"], payload: { method: "tools/call", params: { name: tool, arguments: { path } } } });
  await waitFor(async () => (await api("alice", "GET", `proposals/${id}`)).status === 200);
  return id;
}

async function ready(): Promise<{ agent: TestClient; pair: TestClient }> {
  gw = await startGateway(SPACE);
  clients.push(
    await toolOwner(gw, "dc", T("fs"), [
      { name: "write_file", inputSchema: { type: "object" }, annotations: { destructiveHint: false, openWorldHint: false } },
      { name: "delete_file", inputSchema: { type: "object" }, annotations: { destructiveHint: true } },
    ]),
  );
  const agent = await TestClient.join(gw, "dc", T("agent"));
  const pair = await TestClient.join(gw, "dc", T("pair"));
  clients.push(agent, pair);
  return { agent, pair };
}

/** What `who` is told when it tries to approve `id` over the wire (its error code), or "ok". */
async function tryApprove(who: string, id: string): Promise<string> {
  const c = await TestClient.join(gw!, "dc", T(who));
  clients.push(c);
  const mine = `a-${++n}`;
  c.send({ id: mine, kind: "mcp/approve", correlation_id: [id], payload: { scope: "once" } });
  const answer = await Promise.race([
    c.next((e) => e.kind === "system/error" && e.correlation_id?.includes(mine) === true).then((e) => String((e.payload as any).code)),
    waitFor(async () => (await api("alice", "GET", `proposals/${id}`)).status === 404, 3000).then(() => "ok"),
  ]);
  return answer;
}

describe("who may decide, on the card: hostile first", () => {
  it("a destructive call: not the proposer, not one outside the group, not one denied the call, not a reviewer bound below its risk", async () => {
    const { agent } = await ready();
    const del = await propose(agent, "delete_file", "notes/all");
    const card = (await api("alice", "GET", `proposals/${del}`)).body;
    expect(card.risk.level).toBe("high");
    // Groups expanded to their members, in space.yaml's order; nobody else.
    expect(card.deciders).toEqual(["alice", "bob", "erin", "helper"]);
    expect(card.reviewers ?? []).toEqual([]);
    expect(card).toMatchObject({ mayDecide: true });
    // Each left off, as a viewer, is told why, in the gateway's words for the decision itself.
    expect((await api("carol", "GET", `proposals/${del}`)).body).toMatchObject({
      mayDecide: false,
      mayNotDecide: expect.stringMatching(/you may not make this call yourself/),
    });
    expect((await api("dave", "GET", `proposals/${del}`)).body).toMatchObject({
      mayDecide: false,
      mayNotDecide: expect.stringMatching(/decided by @ops/),
    });
    expect((await api("agent", "GET", `proposals/${del}`)).body).toMatchObject({
      mayDecide: false,
      mayNotDecide: "it is your own proposal (you may withdraw it)",
    });
    const rev = (await api("rev", "GET", `proposals/${del}`)).body;
    expect(rev.mayDecide).toBe(false);
    expect(rev.mayNotDecide).toMatch(/rates it high; this reviewer may approve up to low/);
    // And the card is right: each of them is refused when it tries.
    expect(await tryApprove("rev", del)).toBe("reviewer_bound");
    expect(await tryApprove("carol", del)).toBe("approver_lacks_capability");
  });

  it("someone switched off is not listed, and its approval is refused on the wire", async () => {
    const { agent } = await ready();
    const del = await propose(agent, "delete_file", "notes/x");
    expect((await api("alice", "GET", `proposals/${del}`)).body.deciders).toContain("helper");
    expect((await api("alice", "POST", "participants/helper/disable", {})).status).toBe(200);
    const card = (await api("alice", "GET", `proposals/${del}`)).body;
    expect(card.deciders).toEqual(["alice", "bob", "erin"]);
    const seen = (await api("helper", "GET", `proposals/${del}`)).body;
    expect(seen).toMatchObject({ mayDecide: false, mayNotDecide: expect.stringMatching(/switched off/) });
    expect(await tryApprove("helper", del)).toBe("participant_disabled");
    expect((await api("alice", "GET", `proposals/${del}`)).body.state).toBe("pending");
  });

  it("a low-risk call lists the reviewer, who may approve it and never reject it; not on a two-person rule", async () => {
    const { agent, pair } = await ready();
    const warm = await propose(agent, "write_file", "notes/a.md");
    expect((await api("alice", "POST", `proposals/${warm}/approve`, { scope: "once" })).status).toBe(200);
    const low = await propose(agent, "write_file", "notes/b.md");
    await waitFor(async () => (await api("alice", "GET", `proposals/${low}`)).body.risk?.level === "low", 5000, "a low risk");
    const card = (await api("alice", "GET", `proposals/${low}`)).body;
    expect(card.deciders).toEqual(["alice", "bob", "erin", "helper", "rev"]);
    expect(card.reviewers).toEqual(["rev"]);
    // The reviewer, viewing: it may approve, only.
    expect((await api("rev", "GET", `proposals/${low}`)).body).toMatchObject({ mayDecide: true, mayOnly: "approve" });
    expect((await api("rev", "POST", `proposals/${low}/reject`, { reason: "unsafe" })).status).toBe(403);

    // Two approvals needed: a reviewer never stands for one of them, so it is not listed.
    const two = await propose(pair, "write_file", "notes/a.md");
    const twoCard = (await api("alice", "GET", `proposals/${two}`)).body;
    expect(twoCard.deciders).not.toContain("rev");
    expect(twoCard.deciders).not.toContain("pair");
    expect((await api("rev", "GET", `proposals/${two}`)).body.mayNotDecide).toMatch(/needs 2 approvals/);
  });

  it("with the arguments that will run: an approver's edit drops one who may not make the edited call; one who approved waits", async () => {
    const { pair } = await ready();
    const id = await propose(pair, "write_file", "notes/p.md");
    expect((await api("alice", "GET", `proposals/${id}`)).body.deciders).toEqual(["alice", "bob", "erin", "helper"]);
    const r = await api("bob", "POST", `proposals/${id}/approve`, { scope: "once", arguments: { path: "secret/p.md" } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const card = (await api("alice", "GET", `proposals/${id}`)).body;
    expect(card.arguments).toEqual({ path: "secret/p.md" });
    // bob approved already; erin may not write under secret/: neither is listed.
    expect(card.deciders).toEqual(["alice", "helper"]);
    expect((await api("erin", "GET", `proposals/${id}`)).body.mayNotDecide).toMatch(/with the arguments that will run/);
    expect((await api("bob", "GET", `proposals/${id}`)).body.mayNotDecide).toBe("you approved it already; it waits for another approver");
    expect(await tryApprove("erin", id)).toBe("approver_lacks_capability");
  });
});
