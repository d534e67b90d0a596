/**
 * The audit is whole (gateway/calls/direct-audit.ts, gateway/space/repair.ts,
 * cli/audit-verify.ts), against real gateway processes and the real CLI, hostile first:
 * a byte flipped in the record of an executed two-approval call, then `state repair` (the
 * call must not come back pending); whole records cut off the end of the journal (caught
 * only by a head pinned before); `audit` over a broken chain (non-zero exit); a call run
 * directly under an "always" grant (in the trail, with the grant that allowed it).
 */
import { readFileSync, truncateSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { readFrames } from "../gateway/store/frame.js";
import { cleanEnv, run, tempDir } from "./fixtures/cli/harness.js";
import { killGateway, spawnGateway, TestClient, toolOwner, waitFor, type Env, type GatewayProcess } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: whole}
gateway: {state_dir: .mewgate}
groups:
  ops: [alice, bob]
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {ask: ["fs/write_file"]}
    approvers: ['@ops']
    approvals: 2
  helper:
    kind: agent
    token: ${TOKEN("helper")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {ask: ["fs/write_file"]}
    approvers: [alice]
  runner:
    kind: agent
    token: ${TOKEN("runner")}
    capabilities: [{kind: "mcp/*"}, {kind: chat}]
    tools: {allow: ["fs/write_file"]}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const propose = (id: string, args: Record<string, unknown>) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: args } },
});
const call = (id: string, args: Record<string, unknown>) => ({
  id,
  kind: "mcp/request",
  to: ["fs"],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "write_file", arguments: args } },
});

const viaGateway = (id: string, name: string, args: Record<string, unknown>) => ({
  id,
  kind: "mcp/request",
  to: ["system:gateway"],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } },
});

const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const p of procs.splice(0)) await killGateway(p);
});

function space(): { file: string; state: string } {
  const dir = tempDir("mewgate-whole-");
  const file = join(dir, "space.yaml");
  writeFileSync(file, SPACE);
  const state = join(dir, ".mewgate");
  mkdirSync(state, { recursive: true });
  return { file, state };
}

async function gateway(file: string): Promise<GatewayProcess> {
  const g = await spawnGateway(file);
  procs.push(g);
  return g;
}

async function join_(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "whole", TOKEN(id));
  clients.push(c);
  return c;
}

async function owner(g: { port: number }, runs: Env[]): Promise<TestClient> {
  const c = await toolOwner(g, "whole", TOKEN("fs"), TOOLS, {
    onCall: (env, reply) => {
      runs.push(env);
      reply({ content: [{ type: "text", text: "written" }] });
    },
  });
  clients.push(c);
  return c;
}

/** Frames of the journal with their offsets, sizes and records. */
function frames(state: string): Array<{ offset: number; size: number; records: Array<Record<string, unknown>> }> {
  const out: Array<{ offset: number; size: number; records: Array<Record<string, unknown>> }> = [];
  readFrames<Record<string, unknown>>(join(state, "journal"), (f) => out.push({ offset: f.offset, size: f.size, records: f.records }));
  return out;
}

describe("state repair never revives a decided or executed proposal", () => {
  it("after a byte flipped in the record of an executed two-approval call, the repaired space does not offer it again, and verify reports the repair", {
    timeout: 60_000,
  }, async () => {
    const { file, state } = space();
    const g1 = await gateway(file);
    const runs: Env[] = [];
    await owner(g1, runs);
    const agent = await join_(g1, "agent");
    const alice = await join_(g1, "alice");
    const bob = await join_(g1, "bob");
    agent.send(propose("two-1", { path: "a.txt" }));
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "two-1");
    alice.send({ id: "a1", kind: "mcp/approve", correlation_id: ["two-1"], payload: {} });
    await bob.next((e) => e.kind === "system/approval" && e.correlation_id?.[0] === "two-1");
    bob.send({ id: "b1", kind: "mcp/approve", correlation_id: ["two-1"], payload: {} });
    await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("two-1") === true);
    expect(runs).toHaveLength(1);
    // Something after it, so the damage is in the middle of the journal, not a torn tail.
    agent.send({ id: "chat-1", kind: "chat", payload: { text: "thanks" } });
    await waitFor(
      () => frames(state).some((f) => f.records.some((r) => (r["entry"] as { event?: string } | undefined)?.event === "answered")),
      5000,
      "the answer on disk",
    );
    for (const c of clients.splice(0)) c.ws.terminate();
    await killGateway(g1);

    // Flip a byte inside the frame that holds the second approval (the call's "approved").
    const all = frames(state);
    const hit = all.find((f) =>
      f.records.some((r) => r["type"] === "state" && r["id"] === "two-1" && (r["patch"] as { state?: string }).state === "approved"),
    );
    expect(hit).toBeDefined();
    expect(all.indexOf(hit!)).toBeLessThan(all.length - 1);
    const journal = join(state, "journal");
    const bytes = readFileSync(journal);
    const at = hit!.offset + 8 + Math.floor((hit!.size - 8) / 2);
    bytes.writeUInt8(bytes.readUInt8(at) ^ 0x01, at);
    writeFileSync(journal, bytes);

    // The gateway refuses to start, and its suggestion is a command that works as written.
    const refused = await spawnGateway(file).then(
      (g) => {
        procs.push(g);
        return "started";
      },
      (err: Error) => err.message,
    );
    const suggested = /`mewgate state repair ([^`]+)`/.exec(refused);
    expect(suggested, refused).not.toBeNull();
    const repaired = await run(["state", "repair", ...suggested![1]!.split(" ")], { env: cleanEnv() });
    expect(repaired.code, repaired.stderr).toBe(0);
    expect(repaired.stdout).toContain("two-1");

    const g2 = await gateway(file);
    await owner(g2, runs);
    const bob2 = await join_(g2, "bob");
    const alice2 = await join_(g2, "alice");
    // Not offered as pending: neither welcome lists it, and one more approval runs nothing.
    for (const c of [bob2, alice2])
      expect(JSON.stringify(c.received.find((e) => e.kind === "system/welcome")?.payload ?? {})).not.toMatch(
        /"id":"two-1"[^}]*"state":"pending"/,
      );
    bob2.send({ id: "b2", kind: "mcp/approve", correlation_id: ["two-1"], payload: {} });
    const err = await bob2.next((e) => e.kind === "system/error" && e.correlation_id?.includes("b2") === true);
    expect(JSON.stringify(err.payload)).toMatch(/failed|not pending|no pending/);
    alice2.send({ id: "a2", kind: "mcp/approve", correlation_id: ["two-1"], payload: {} });
    await alice2.next((e) => e.kind === "system/error" && e.correlation_id?.includes("a2") === true);
    expect(runs).toHaveLength(1);

    const verify = await run(["audit", "verify", "--state-dir", state], { env: cleanEnv() });
    expect(verify.code, verify.stdout).toBe(0);
    expect(verify.stdout).toContain("REPAIRED");
    expect(verify.stdout).toContain("two-1");
  });
});

describe("the audit trail is whole and its breaks are loud", () => {
  it("a call run directly under an always grant is audited with the grant; whole records cut off the end are caught by a pinned head; audit exits 1 at a break", {
    timeout: 60_000,
  }, async () => {
    const { file, state } = space();
    const g = await gateway(file);
    const runs: Env[] = [];
    await owner(g, runs);
    const helper = await join_(g, "helper");
    const alice = await join_(g, "alice");
    helper.send(propose("h-1", { path: "first.txt" }));
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "h-1");
    alice.send({ id: "al", kind: "mcp/approve", correlation_id: ["h-1"], payload: { scope: "always" } });
    await helper.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("h-1") === true);
    // Direct now, under alice's grant.
    helper.send(call("direct-1", { path: "second.txt" }));
    await helper.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("direct-1") === true);
    expect(runs.map((r) => r.payload.params.arguments.path)).toEqual(["first.txt", "second.txt"]);
    await waitFor(
      async () => (await run(["audit", "--json", "--state-dir", state], { env: cleanEnv() })).stdout.includes('"called"'),
      10_000,
      "the direct call in the audit",
    );
    const listed = (await run(["audit", "--json", "--state-dir", state], { env: cleanEnv() })).stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const called = listed.filter((e) => e["event"] === "called");
    expect(called).toHaveLength(1);
    expect(called[0]).toMatchObject({ proposer: "helper", owner: "fs", tool: "write_file", arguments: { path: "second.txt" } });
    expect(String(called[0]!["scope"])).toMatch(/^grant .* from alice$/);

    // Pin the head now, as a cron job would, outside the state directory.
    const pinFile = join(tempDir("mewgate-pin-"), "audit.head");
    const head = await run(["audit", "head", "--state-dir", state], { env: cleanEnv() });
    expect(head.code).toBe(0);
    expect(head.stdout).toMatch(/^[0-9a-f]{64} \d+ /);
    writeFileSync(pinFile, head.stdout);
    for (const c of clients.splice(0)) c.ws.terminate();
    await killGateway(g);
    expect((await run(["audit", "verify", "--state-dir", state, "--pinned", pinFile], { env: cleanEnv() })).code).toBe(0);

    // Cut the last frame holding audit records off the end: what is left still links.
    const all = frames(state);
    const last = [...all].reverse().find((f) => f.records.some((r) => r["type"] === "audit"))!;
    truncateSync(join(state, "journal"), last.offset);
    const plain = await run(["audit", "verify", "--state-dir", state], { env: cleanEnv() });
    expect(plain.code).toBe(0);
    const pinned = await run(["audit", "verify", "--state-dir", state, "--pinned", pinFile], { env: cleanEnv() });
    expect(pinned.code).toBe(1);
    expect(pinned.stdout).toContain("pinned head");
    const byHead = await run(["audit", "verify", "--state-dir", state, "--head", head.stdout.split(" ")[0]!], { env: cleanEnv() });
    expect(byHead.code).toBe(1);

    // Alter a record in place (its frame's checksum then fails): audit lists what it can and exits 1.
    const journal = join(state, "journal");
    const bytes = readFileSync(journal);
    const first = frames(state).find((f) => f.records.some((r) => r["type"] === "audit"))!;
    const at = first.offset + 8 + Math.floor((first.size - 8) / 2);
    bytes.writeUInt8(bytes.readUInt8(at) ^ 0x01, at);
    writeFileSync(journal, bytes);
    const audit = await run(["audit", "--state-dir", state], { env: cleanEnv() });
    expect(audit.code).toBe(1);
    expect(audit.stderr).toContain("BROKEN");
  });
});

describe("a call routed through system:gateway is audited like a direct one", () => {
  it("tools/call via the gateway leaves a called record with the rule that allowed it; a huge argument is kept as its digest; a refused one leaves none", {
    timeout: 60_000,
  }, async () => {
    const { file, state } = space();
    const g = await gateway(file);
    const runs: Env[] = [];
    await owner(g, runs);
    const runner = await join_(g, "runner");
    // Hostile first: an unknown tool, a bare name, and a call to a tool of no owner: refused, nothing recorded as called.
    runner.send(viaGateway("gw-bad", "fs/no_such_tool", { path: "x" }));
    await runner.next((e) => e.kind === "system/error" && e.correlation_id?.includes("gw-bad") === true);
    runner.send(viaGateway("gw-huge", "fs/write_file", { path: "big.txt", content: "\u202e".repeat(20_000) }));
    await runner.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("gw-huge") === true);
    runner.send(viaGateway("gw-1", "fs/write_file", { path: "via-gateway.txt" }));
    await runner.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("gw-1") === true);
    expect(runs).toHaveLength(2);
    const listed = async () =>
      (await run(["audit", "--json", "--state-dir", state], { env: cleanEnv() })).stdout
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    await waitFor(
      async () => (await listed()).filter((e) => e["event"] === "called").length >= 2,
      10_000,
      "both gateway calls in the audit",
    );
    const called = (await listed()).filter((e) => e["event"] === "called");
    expect(called).toHaveLength(2);
    const small = called.find((e) => (e["arguments"] as { path?: string } | undefined)?.path === "via-gateway.txt");
    expect(small).toMatchObject({ proposer: "runner", owner: "fs", tool: "write_file", method: "tools/call" });
    expect(String(small!["scope"])).toMatch(/^rule tools\.allow\[0\] \(fs\/write_file\) at line \d+$/);
    const big = called.find((e) => e !== small)!;
    expect(big["arguments"]).toBeUndefined();
    expect(String(big["arguments_digest"])).toMatch(/^[0-9a-f]{64}$/);
  });
});
