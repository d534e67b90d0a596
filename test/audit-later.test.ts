/**
 * The records of calls that went straight through are written behind the calls, coalesced
 * (gateway/space/ledger.ts `later`, docs/state.md): a real gateway process killed with
 * SIGKILL while calls stream through it, then the real CLI's `audit verify` and `audit`.
 * What must hold, whatever the moment of the kill: the chain verifies; the records that
 * are there are whole and form an unbroken prefix of the calls in the order they were
 * routed (a batch is never half there, and none is skipped); every call routed before a
 * change that was acknowledged as durable is there (they go to the disk first); and the
 * timer alone, with nothing else written, gets them to disk.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanEnv, run, tempDir } from "./fixtures/cli/harness.js";
import { type Env, type GatewayProcess, killGateway, spawnGateway, TestClient, toolOwner, waitFor } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: later}
gateway: {state_dir: .mewgate, limits: {rate_per_second: 100000, rate_burst: 100000}}
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  runner:
    kind: agent
    token: ${TOKEN("runner")}
    capabilities: [{kind: "mcp/*"}]
    tools: {allow: ["fs/write_file"]}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    capabilities: [{kind: "mcp/*"}]
    tools: {ask: ["fs/write_file"]}
    approvers: [alice]
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const call = (id: string) => ({
  id,
  kind: "mcp/request",
  to: ["fs"],
  payload: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "write_file", arguments: { path: `${id}.txt`, n: id } } },
});

const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const p of procs.splice(0)) await killGateway(p);
});

async function up(file: string): Promise<{ g: GatewayProcess; runner: TestClient; alice: TestClient; agent: TestClient }> {
  const g = await spawnGateway(file);
  procs.push(g);
  const fs = await toolOwner(g, "later", TOKEN("fs"), TOOLS, {
    onCall: (_env: Env, reply) => reply({ content: [{ type: "text", text: "ok" }] }),
  });
  const [runner, alice, agent] = await Promise.all(["runner", "alice", "agent"].map((id) => TestClient.join(g, "later", TOKEN(id))));
  clients.push(fs, runner!, alice!, agent!);
  return { g, runner: runner!, alice: alice!, agent: agent! };
}

/** Sends `ids` as calls with up to `inFlight` unanswered at once; resolves when each is answered. */
async function calls(runner: TestClient, ids: string[], inFlight = 16): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < ids.length) {
      const id = ids[next++]!;
      runner.send(call(id));
      await runner.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes(id) === true, 15_000);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
}

/** The request ids of the `called` records `mewgate audit` lists, in the trail's order; fails if it reports a broken chain. */
async function calledIds(state: string): Promise<string[]> {
  const r = await run(["audit", "--json", "--state-dir", state], { env: cleanEnv() });
  expect(r.stderr).not.toContain("BROKEN");
  return r.stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { event: string; outcome?: string })
    .filter((e) => e.event === "called")
    .map((e) => String(e.outcome).replace(/^request /, ""));
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe("direct calls' records written behind, coalesced", () => {
  it("killed mid-stream: the chain verifies, nothing routed before an acknowledged change is lost, and what is there is an unbroken prefix", {
    timeout: 120_000,
  }, async () => {
    const dir = tempDir("mewgate-later-");
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    const state = join(dir, ".mewgate");
    mkdirSync(state, { recursive: true });

    const first = await up(file);
    // 1. With nothing else written, the timer alone brings a wave of records to disk.
    const a = ids("a-", 120);
    await calls(first.runner, a);
    await waitFor(async () => (await calledIds(state)).length === a.length, 15_000, "the first wave's records on disk");
    expect(await calledIds(state)).toEqual(a);

    // 2. A change acknowledged after calls were routed is never on disk before them: kill at once after it.
    const b = ids("b-", 120);
    await calls(first.runner, b);
    first.agent.send({
      id: "p-1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: {} } },
    });
    // Shown to its approver only once durable.
    await first.alice.next((e) => e.kind === "mcp/proposal" && e.id === "p-1", 10_000);
    await killGateway(first.g);
    expect(await calledIds(state)).toEqual([...a, ...b]);
    expect((await run(["audit", "verify", "--state-dir", state], { env: cleanEnv() })).code).toBe(0);

    // 3. Killed while calls stream through with many in flight: whatever the moment, the
    // records there are whole, chained, and a prefix of the calls in the order they went.
    const second = await up(file);
    const c = ids("c-", 3000);
    const streaming = calls(second.runner, c, 32).catch(() => undefined);
    await second.runner.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("c-1500") === true, 60_000);
    await killGateway(second.g);
    await streaming;
    const verify = await run(["audit", "verify", "--state-dir", state], { env: cleanEnv() });
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
    const after = await calledIds(state);
    expect(after.slice(0, a.length + b.length)).toEqual([...a, ...b]);
    const got = after.slice(a.length + b.length);
    // One runner's calls are routed in the order it sent them: the records kept are c-0 … c-k, no gaps.
    expect(got).toEqual(c.slice(0, got.length));

    // 4. The gateway starts again on what was left (a torn tail cut off), and the chain goes on from there.
    const third = await up(file);
    await calls(third.runner, ["d-0", "d-1"]);
    // A clean stop writes what waits behind before it exits.
    const exited = new Promise((r) => third.g.child.once("exit", r));
    third.g.child.kill("SIGTERM");
    await exited;
    const end = await calledIds(state);
    expect(end.slice(-2)).toEqual(["d-0", "d-1"]);
    expect((await run(["audit", "verify", "--state-dir", state], { env: cleanEnv() })).code).toBe(0);
  });
});
