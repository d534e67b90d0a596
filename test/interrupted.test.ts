/**
 * Nothing approved is forgotten: an approval acknowledged before the gateway stops, whose
 * call may or may not have reached the tool, comes back `interrupted` — told to the
 * proposer, listed to everyone who may see proposals, never routed again until a person
 * decides again — against a real gateway process killed with SIGKILL within a millisecond
 * of the acknowledgement, and in-process gateways stopped with a call in flight.
 *
 * The tool owner counts executions per proposal: nothing may run twice.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { readAudit } from "../gateway/space/ledger.js";
import { ParticipantClient, ParticipantError } from "../participants/index.js";
import { runProposals } from "../cli/commands.js";
import {
  askGateway,
  errorFor,
  killGateway,
  spawnGateway,
  startGateway,
  TestClient,
  toolOwner,
  waitFor,
  type Env,
  type GatewayProcess,
  type TestGateway,
} from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = (ttlMs = 600_000) => `
space: {id: intr}
gateway: {state_dir: .mewgate, limits: {rate_per_second: 5000, rate_burst: 5000}}
policy: {proposal_ttl_ms: ${ttlMs}}
participants:
  human: {kind: human, token: ${TOKEN("human")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent: {kind: agent, token: ${TOKEN("agent")}, tools: {ask: ["fs/write_file"]}}
  carol: {kind: human, token: ${TOKEN("carol")}, tools: {ask: ["fs/write_file"]}}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const propose = (id: string, args: Record<string, unknown> = {}) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: args } },
});

const procs: GatewayProcess[] = [];
const gateways: TestGateway[] = [];
const clients: Array<TestClient | ParticipantClient> = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) {
    if (c instanceof TestClient) c.ws.terminate();
    else await c.close();
  }
  for (const p of procs.splice(0)) await killGateway(p);
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-intr-"));
  dirs.push(dir);
  return dir;
}

async function join(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "intr", TOKEN(id));
  clients.push(c);
  return c;
}

/**
 * A tool owner that counts what it is asked to run, per proposal (the routed request's
 * correlation_id[0]); `hold` keeps it from answering, so the call stays in flight.
 */
async function counter(
  g: { port: number },
  runs: Map<string, number>,
  opts: { hold?: boolean; args?: Map<string, unknown> } = {},
): Promise<TestClient> {
  const c = await toolOwner(g, "intr", TOKEN("fs"), TOOLS, {
    onCall: (env, reply) => {
      const proposal = env.correlation_id?.[0] ?? env.id;
      runs.set(proposal, (runs.get(proposal) ?? 0) + 1);
      opts.args?.set(proposal, env.payload.params.arguments);
      if (!opts.hold) reply({ content: [{ type: "text", text: `ran ${proposal}` }] });
    },
  });
  clients.push(c);
  return c;
}

/** The interrupted mark of proposal `id` in a welcome's list, if it is there. */
function markIn(welcome: Env, id: string): Record<string, unknown> | undefined {
  const p = (welcome.payload.proposals as Env[]).find((e) => e.id === id);
  return p?.payload["mewgate/interrupted"];
}

/** The gateway's word to the proposer that `id` was interrupted. */
const toldInterrupted = (id: string) => (e: Env) =>
  e.kind === "mcp/response" &&
  e.from === "system:gateway" &&
  e.correlation_id?.[0] === id &&
  e.payload.error?.data?.reason === "interrupted";

/** An in-process gateway with `id` approved and its call held in flight, then stopped and started again over the same state. */
async function interruptedSpace(
  id: string,
  opts: { ttlMs?: number; args?: Record<string, unknown>; edited?: Record<string, unknown>; proposer?: string } = {},
): Promise<{ g: TestGateway; dir: string; runs: Map<string, number> }> {
  const dir = tempDir();
  const runs = new Map<string, number>();
  const g1 = await startGateway(SPACE(opts.ttlMs), { dir });
  const owner = await counter(g1, runs, { hold: true });
  const human = await join(g1, "human");
  const agent = await join(g1, opts.proposer ?? "agent");
  agent.send(propose(id, opts.args ?? { path: "a.txt" }));
  await human.next((e) => e.kind === "mcp/proposal" && e.id === id);
  human.send({ kind: "mcp/approve", correlation_id: [id], payload: { scope: "once", ...(opts.edited ? { arguments: opts.edited } : {}) } });
  await agent.next((e) => e.kind === "mcp/approve" && e.correlation_id?.[0] === id);
  await waitFor(() => runs.get(id) === 1, 5000, "the call reaches the tool");
  for (const c of [owner, human, agent]) c.ws.terminate();
  await g1.gateway.close();
  const g = await startGateway(SPACE(opts.ttlMs), { dir });
  gateways.push(g);
  return { g, dir, runs };
}

describe("kill -9 within a millisecond of an approval", () => {
  it("every acknowledged approval ends answered, or interrupted and told — never failed, never run twice", {
    timeout: 300_000,
  }, async () => {
    const TRIES = 30;
    const deadline = Date.now() + 240_000;
    const dir = tempDir();
    const file = pathJoin(dir, "space.yaml");
    writeFileSync(file, SPACE());
    const runs = new Map<string, number>();
    const outcome = new Map<string, string>();
    let g = await spawnGateway(file);
    procs.push(g);
    for (let t = 0; t < TRIES && Date.now() < deadline; t++) {
      const id = `try-${t}`;
      await counter(g, runs);
      const human = await join(g, "human");
      const agent = await join(g, "agent");
      // The kill lands in the proposer's own message handler, the moment the approval is acknowledged to it.
      const victim = g;
      let acknowledgedAt = 0;
      agent.ws.on("message", (data) => {
        const env = JSON.parse(data.toString()) as Env;
        if (acknowledgedAt === 0 && env.kind === "mcp/approve" && env.correlation_id?.[0] === id) {
          acknowledgedAt = performance.now();
          victim.child.kill("SIGKILL");
        }
      });
      agent.send(propose(id, { n: t }));
      await human.next((e) => e.kind === "mcp/proposal" && e.id === id, 10_000);
      human.send({ kind: "mcp/approve", correlation_id: [id], payload: { scope: "once" } });
      if (victim.child.exitCode === null && victim.child.signalCode === null) await new Promise((r) => victim.child.once("exit", r));
      expect(acknowledgedAt, `try ${t}: the approval was acknowledged before the kill`).toBeGreaterThan(0);
      for (const c of clients.splice(0)) (c as TestClient).ws.terminate();
      const ranBefore = runs.get(id) ?? 0;

      g = await spawnGateway(file);
      procs.push(g);
      await counter(g, runs);
      const watcher = await join(g, "human");
      const proposer = await join(g, "agent");
      // The restart marks what was in flight behind its start: wait until the trail has moved on.
      const trail = () =>
        readAudit(pathJoin(dir, ".mewgate"))
          .filter((e) => e.proposal === id)
          .map((e) => e.event);
      await waitFor(() => !["approved", "routed"].includes(trail().at(-1) ?? ""), 5000, `try ${t}: the restart settles ${id}`);
      const events = trail();
      const last = events[events.length - 1];
      outcome.set(id, last ?? "none");
      expect(events, `try ${t}`).toContain("approved");
      expect(last, `try ${t}: ${events.join(" → ")}`).not.toBe("failed");
      if (last === "interrupted") {
        // Told: the proposer's call ends with `interrupted`, the approver sees it marked.
        const told = await proposer.next(toldInterrupted(id), 5000);
        expect(told.payload.error.message).toContain("may or may not have run");
        const welcome = watcher.received.find((e) => e.kind === "system/welcome")!;
        expect(markIn(welcome, id)?.["approved_by"], `try ${t}`).toBe("human");
      } else {
        expect(last, `try ${t}: ${events.join(" → ")}`).toBe("answered");
        expect(runs.get(id), `try ${t}: answered once`).toBe(1);
      }
      // Whatever came before the kill, the restart itself runs nothing.
      await askGateway(watcher, "ping");
      expect(runs.get(id) ?? 0, `try ${t}: not routed again by the restart`).toBe(ranBefore);
      for (const c of clients.splice(0)) (c as TestClient).ws.terminate();
    }
    // Interrupted proposals stayed interrupted through every later restart, and nothing ran twice.
    const watcher = await join(g, "human");
    const listed = new Map(((await askGateway(watcher, "proposals/list")).payload.result.proposals as Env[]).map((p) => [p.id, p]));
    for (const [id, last] of outcome) {
      expect(runs.get(id) ?? 0, `${id} ran at most once`).toBeLessThanOrEqual(1);
      if (last === "interrupted") expect(listed.get(id)?.payload["mewgate/interrupted"], `${id} is still interrupted`).toBeDefined();
    }
    expect(outcome.size, "every try ran within the time bound").toBe(TRIES);
    const counts = [...outcome.values()].reduce<Record<string, number>>((acc, s) => {
      acc[s] = (acc[s] ?? 0) + 1;
      return acc;
    }, {});
    console.log(
      `kill -9 after approval, ${TRIES} tries: ${JSON.stringify(counts)}; ran at the tool before the kill: ${[...runs.values()].filter((n) => n > 0).length}`,
    );
  });
});

describe("an interrupted proposal", () => {
  it("is not routed on its own; the proposer cannot approve it again; another approver's one step runs it exactly once", {
    timeout: 30_000,
  }, async () => {
    // A human proposer: one that could send an mcp/approve at all.
    const { g, dir, runs } = await interruptedSpace("p1", { proposer: "carol" });
    await counter(g, runs);
    const agent = await join(g, "carol");
    const human = await join(g, "human");
    const bob = await join(g, "bob");
    await agent.next(toldInterrupted("p1"));
    expect(markIn(human.received[0]!, "p1")).toMatchObject({
      approved_by: "human",
      message: "the gateway stopped after it was approved; it may or may not have run",
    });
    // The proposer may not decide on its own proposal, interrupted or not.
    agent.send({ id: "self", kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    expect((await errorFor(agent, "self")).payload.code).toBe("self_approval");
    await askGateway(human, "ping");
    expect(runs.get("p1")).toBe(1);
    // Two approvers at once: one decision routes it, the other hears it is being decided or already approved.
    bob.send({ id: "b1", kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    human.send({ id: "h1", kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    const answer = await agent.next((e) => e.kind === "mcp/response" && e.from === "fs" && e.correlation_id?.[0] === "p1");
    expect(answer.payload.result.content[0].text).toBe("ran p1");
    // Two sockets: either may reach the gateway first. Exactly one approval wins; the other is told.
    // (The other wait times out unanswered; it is caught, so it fails nothing.)
    const told = (c: TestClient, id: string, by: string) =>
      errorFor(c, id).then(
        (e) => ({ by, e }),
        () => undefined,
      );
    const lost = await Promise.race([told(human, "h1", "human"), told(bob, "b1", "bob")]);
    expect(lost?.e.payload.code).toBe("proposal_not_pending");
    const winner = lost!.by === "human" ? "bob" : "human";
    expect(
      (winner === "human" ? human : bob).received.some(
        (e) => e.kind === "system/error" && e.correlation_id?.includes(winner === "human" ? "h1" : "b1"),
      ),
    ).toBe(false);
    expect(runs.get("p1")).toBe(2);
    // Once answered it is over: a late approval routes nothing.
    human.send({ id: "h2", kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    expect((await errorFor(human, "h2")).payload).toMatchObject({ code: "proposal_not_pending", state: "answered" });
    expect(runs.get("p1")).toBe(2);
    await waitFor(
      () => readAudit(pathJoin(dir, ".mewgate")).some((e) => e.proposal === "p1" && e.event === "answered"),
      5000,
      "the answer in the audit trail",
    );
    const trail = readAudit(pathJoin(dir, ".mewgate")).filter((e) => e.proposal === "p1");
    expect(trail.map((e) => e.event)).toEqual(["proposed", "approved", "routed", "interrupted", "approved", "routed", "answered"]);
    expect(trail[3]).toMatchObject({ reason: "gateway_restarted" });
    expect(trail[3]!.by).toBeUndefined();
    expect(trail[4]!.by).toBe(winner);
  });

  it("is closed by a rejection, which the proposer hears; nothing runs", { timeout: 30_000 }, async () => {
    const { g, dir, runs } = await interruptedSpace("p2");
    await counter(g, runs);
    const agent = await join(g, "agent");
    const human = await join(g, "human");
    human.send({ kind: "mcp/reject", correlation_id: ["p2"], payload: { reason: "unsafe", text: "it may have run already" } });
    const rejected = await agent.next((e) => e.kind === "mcp/reject" && e.correlation_id?.[0] === "p2");
    expect(rejected.payload).toMatchObject({ reason: "unsafe" });
    human.send({ id: "late", kind: "mcp/approve", correlation_id: ["p2"], payload: { scope: "once" } });
    expect((await errorFor(human, "late")).payload).toMatchObject({ code: "proposal_not_pending", state: "rejected" });
    expect(runs.get("p2")).toBe(1);
    expect((await askGateway(human, "proposals/list")).payload.result.proposals).toEqual([]);
    const events = readAudit(pathJoin(dir, ".mewgate"))
      .filter((e) => e.proposal === "p2")
      .map((e) => `${e.event}${e.by ? `:${e.by}` : ""}`);
    expect(events).toEqual(["proposed", "approved:human", "routed:human", "interrupted", "rejected:human"]);
  });

  it("stays interrupted across a second restart, and keeps the approver's edited arguments for the next approval", {
    timeout: 30_000,
  }, async () => {
    const { g, dir, runs } = await interruptedSpace("p3", { args: { path: "a.txt" }, edited: { path: "edited.txt" } });
    await g.gateway.close();
    gateways.splice(gateways.indexOf(g), 1);
    const g3 = await startGateway(SPACE(), { dir });
    gateways.push(g3);
    const args = new Map<string, unknown>();
    await counter(g3, runs, { args });
    const human = await join(g3, "human");
    const bob = await join(g3, "bob");
    const agent = await join(g3, "agent");
    expect(markIn(human.received[0]!, "p3")).toMatchObject({ approved_by: "human", arguments: { path: "edited.txt" } });
    await agent.next(toldInterrupted("p3"));
    const got = await askGateway(human, "proposals/get", { id: "p3" });
    expect(got.payload.result.proposal.payload["mewgate/interrupted"].reason).toBe("gateway_restarted");
    await askGateway(human, "ping");
    expect(runs.get("p3")).toBe(1);
    const events = readAudit(pathJoin(dir, ".mewgate"))
      .filter((e) => e.proposal === "p3")
      .map((e) => e.event);
    expect(events.filter((e) => e === "interrupted")).toHaveLength(1);
    // Approved again as shown: with the earlier approver's edits.
    bob.send({ kind: "mcp/approve", correlation_id: ["p3"], payload: { scope: "once" } });
    await agent.next((e) => e.kind === "mcp/response" && e.from === "fs" && e.correlation_id?.[0] === "p3");
    expect(args.get("p3")).toEqual({ path: "edited.txt" });
    expect(runs.get("p3")).toBe(2);
  });

  it("expires after the space's TTL, counted from the restart, and the proposer hears it", { timeout: 30_000 }, async () => {
    const { g, dir, runs } = await interruptedSpace("p4", { ttlMs: 3000 });
    await counter(g, runs);
    const agent = await join(g, "agent");
    const human = await join(g, "human");
    expect(markIn(human.received[0]!, "p4")).toBeDefined();
    const expired = await agent.next((e) => e.kind === "mcp/reject" && e.correlation_id?.[0] === "p4", 10_000);
    expect(expired.payload.reason).toBe("timeout");
    expect(runs.get("p4")).toBe(1);
    expect(
      readAudit(pathJoin(dir, ".mewgate"))
        .filter((e) => e.proposal === "p4")
        .map((e) => e.event),
    ).toContain("expired");
  });

  it("is listed by the operator API and `mewgate proposals`, and approved again from there", { timeout: 30_000 }, async () => {
    const { g, runs } = await interruptedSpace("p5");
    await counter(g, runs);
    const agent = await join(g, "agent");
    const api = await fetch(`http://127.0.0.1:${g.port}/api/spaces/intr/proposals`, {
      headers: { authorization: `Bearer ${TOKEN("human")}` },
    });
    const body = (await api.json()) as { proposals: Array<Record<string, any>> };
    expect(body.proposals).toHaveLength(1);
    expect(body.proposals[0]).toMatchObject({
      id: "p5",
      state: "interrupted",
      interrupted: { approvedBy: "human", reason: "gateway_restarted" },
    });
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
    const common = { gateway: `ws://127.0.0.1:${g.port}`, space: "intr", token: TOKEN("human") };
    expect(await runProposals("list", undefined, common, io)).toBe(0);
    expect(out.join("")).toMatch(
      /\[p5\] INTERRUPTED \(approved by human; the gateway stopped after it was approved; it may or may not have run\) agent → fs\/write_file/,
    );
    out.length = 0;
    expect(await runProposals("approve", "p5", { ...common, waitMs: 5000 }, io)).toBe(0);
    expect(out.join("")).toContain("approved fs/write_file again [p5]");
    await agent.next((e) => e.kind === "mcp/response" && e.from === "fs" && e.correlation_id?.[0] === "p5");
    expect(runs.get("p5")).toBe(2);
  });
});

describe("the proposer's SDK across the restart", () => {
  it("a proposer still waiting when the gateway stops hears `interrupted` after it reconnects, not a silent failure", {
    timeout: 30_000,
  }, async () => {
    const dir = tempDir();
    const runs = new Map<string, number>();
    const g1 = await startGateway(SPACE(), { dir });
    await counter(g1, runs, { hold: true });
    const human = await join(g1, "human");
    const client = new ParticipantClient({
      url: g1.url,
      space: "intr",
      token: TOKEN("agent"),
      reconnect: { initialDelayMs: 50, maxDelayMs: 200 },
      proposalTimeoutMs: 20_000,
      requestTimeoutMs: 20_000,
    });
    clients.push(client);
    await client.connect();
    const call = client.propose("fs", "tools/call", { name: "write_file", arguments: { path: "b.txt" } });
    const settled = call.then(
      () => undefined,
      (err: unknown) => err,
    );
    await human.next((e) => e.kind === "mcp/proposal" && e.id === call.id);
    human.send({ kind: "mcp/approve", correlation_id: [call.id], payload: { scope: "once" } });
    await waitFor(() => runs.get(call.id) === 1, 5000, "the call reaches the tool");
    for (const c of clients.splice(0, clients.length - 1)) (c as TestClient).ws.terminate();
    await g1.gateway.close();
    const g2 = await startGateway(SPACE(), { dir, port: g1.port });
    gateways.push(g2);
    const err = await settled;
    expect(err).toBeInstanceOf(ParticipantError);
    expect((err as ParticipantError).code).toBe("interrupted");
    expect((err as ParticipantError).message).toContain("may or may not have run");
    expect(runs.get(call.id)).toBe(1);
  });
});
