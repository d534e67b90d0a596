/**
 * Fatigue, measured (gateway/policy/learn/fatigue.ts and GET policy/fatigue, /metrics):
 * time to decide and decisions per hour per person, approvals within 2 s on a card whose
 * preview was never opened, rejection and edit rates per proposer and tool — against a
 * real gateway, the quick approvals made through its API.
 */
import { afterEach, describe, expect, it } from "vitest";
import { fatigue } from "../gateway/policy/learn/fatigue.js";
import type { PastCall } from "../gateway/policy/learn/history.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const at = (s: number) => new Date(Date.UTC(2026, 10, 28, 9, 0, 0) + s * 1000).toISOString();
const call = (id: string, said: PastCall["said"], ts: number, decided: number, by = "alice", tool = "write_file"): PastCall => ({
  id,
  ts: at(ts),
  decidedAt: at(decided),
  proposer: "agent",
  owner: "fs",
  tool,
  args: {},
  said,
  by,
});

describe("fatigue figures", () => {
  it("counts quick approvals only where the preview was never opened; rates per proposer and tool", () => {
    const calls = [
      call("a", "approved", 0, 1),
      call("b", "approved", 10, 11),
      call("c", "approved", 20, 60),
      call("d", "rejected", 30, 31),
      call("e", "edited", 40, 41),
      { ...call("f", "undecided", 50, 50), by: undefined, decidedAt: undefined },
    ];
    const f = fatigue(calls, (id, person) => id === "b" && person === "alice");
    expect(f.people).toEqual([
      { person: "alice", decisions: 5, approvals: 4, per_hour: 5, median_seconds: 1, p90_seconds: 40, quick_unopened: 2 },
    ]);
    expect(f.tools).toEqual([
      { proposer: "agent", tool: "fs/write_file", decided: 5, approved: 3, rejected: 1, edited: 1, rejection_rate: 0.2, edit_rate: 0.2 },
    ]);
    // A date that is not one is skipped, not NaN.
    expect(fatigue([{ ...call("x", "approved", 0, 1), ts: "nonsense" }], () => false).people).toEqual([]);
  });
});

const T = (id: string) => `${id}-token-0123456789abcdef`;
const SPACE = `space: {id: fg}
participants:
  alice: {kind: human, token: ${T("alice")}}
  agent: {kind: agent, token: ${T("agent")}}
  fs: {kind: mcp, token: ${T("fs")}}
`;
let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function api(who: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/${path.startsWith("/") ? path.slice(1) : `api/spaces/fg/${path}`}`, {
    method,
    headers: { authorization: `Bearer ${T(who)}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text };
}

describe("fatigue over the API and /metrics", () => {
  it("an approval after opening the preview is not quick-unopened; the figures are in /metrics; an agent may not read them", async () => {
    gw = await startGateway(SPACE);
    clients.push(await toolOwner(gw, "fg", T("fs"), [{ name: "write_file", inputSchema: { type: "object" } }]));
    const agent = await TestClient.join(gw, "fg", T("agent"));
    clients.push(agent);
    for (const [i, look] of [
      [1, false],
      [2, true],
      [3, false],
    ] as const) {
      const id = `f-${i}`;
      agent.send({
        id,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { path: `notes/${i}.md` } } },
      });
      await waitFor(async () => (await api("alice", "GET", `proposals/${id}`)).status === 200);
      if (look) await api("alice", "GET", `proposals/${id}/preview`);
      expect(
        (
          await api(
            "alice",
            "POST",
            `proposals/${id}/${i === 3 ? "reject" : "approve"}`,
            i === 3 ? { reason: "unsafe" } : { scope: "once" },
          )
        ).status,
      ).toBe(200);
    }
    const f = await api("alice", "GET", "policy/fatigue");
    expect(f.status).toBe(200);
    expect(f.body.people).toMatchObject([{ person: "alice", decisions: 3, approvals: 2, quick_unopened: 1 }]);
    expect(f.body.tools).toMatchObject([{ proposer: "agent", tool: "fs/write_file", decided: 3, rejected: 1, rejection_rate: 0.333 }]);
    expect((await api("agent", "GET", "policy/fatigue")).status).toBe(403);
    const metrics = await api("alice", "GET", "/metrics");
    expect(metrics.text).toContain('mewgate_person_quick_unopened_approvals{space="fg",person="alice"} 1');
    expect(metrics.text).toContain('mewgate_tool_rejection_rate{space="fg",proposer="agent",tool="fs/write_file"} 0.333');
    expect(metrics.text).toMatch(/\nmewgate_connections \d+\n/);
  });
});
