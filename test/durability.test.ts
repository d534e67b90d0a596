/**
 * Nothing acknowledged is lost, and nothing unacknowledged is half-applied — against a
 * real gateway process killed with SIGKILL in the middle of a burst, and one whose disk
 * fills up.
 *
 * "Acknowledged" is what a participant was told: a proposal is acknowledged when an
 * approver receives it, a decision when the proposer receives the approve or reject.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { readAudit } from "../gateway/space/ledger.js";
import {
  askGateway,
  errorFor,
  killGateway,
  seeded,
  sleep,
  spawnGateway,
  TestClient,
  toolOwner,
  type Env,
  type GatewayProcess,
} from "./helpers.js";

const AGENTS = ["a1", "a2", "a3", "a4"];
const TOKEN = (id: string) => `${id}-token-0123456789`;

const SPACE = (stateDir = ".mewgate") => `
space: {id: dur}
gateway: {state_dir: ${JSON.stringify(stateDir)}, limits: {rate_per_second: 5000, rate_burst: 5000}}
policy: {proposal_ttl_ms: 600000}
participants:
  human: {kind: human, token: ${TOKEN("human")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
${AGENTS.map((a) => `  ${a}: {kind: agent, token: ${TOKEN(a)}, tools: {ask: ["fs/write_file"]}}`).join("\n")}
`;

const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];

const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const p of procs.splice(0)) await killGateway(p);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function join(g: { port: number }, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "dur", TOKEN(id));
  clients.push(c);
  return c;
}

/**
 * Every pending proposal id `c` may see, following the pages. Interrupted ones (approved
 * before the kill, listed again for a new decision) are not pending: they are decided.
 */
async function pendingIds(c: TestClient): Promise<Set<string>> {
  const ids = new Set<string>();
  let cursor: string | undefined;
  for (let page = 0; page < 100; page++) {
    const res = await askGateway(c, "proposals/list", cursor ? { cursor } : {});
    for (const p of res.payload.result.proposals) {
      // Read back from the journal, each of the burst's carries the call it proposed (its id ends in the argument sent).
      const burst = /^r\d+-.+-(\d+)$/.exec(p.id);
      if (burst)
        expect(p.payload?.params, `${p.id}'s call after a restart`).toEqual({ name: "write_file", arguments: { n: Number(burst[1]) } });
      if (!p.payload?.["mewgate/interrupted"]) ids.add(p.id);
    }
    cursor = res.payload.result.nextCursor;
    if (!cursor) break;
  }
  return ids;
}

describe("kill -9 in the middle of a burst", () => {
  it("keeps every acknowledged proposal and decision, and every always-approval whole with its grant", { timeout: 120_000 }, async () => {
    const RUNS = 8;
    const rand = seeded(20261124);
    for (let run = 0; run < RUNS; run++) {
      const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-dur-"));
      dirs.push(dir);
      const file = pathJoin(dir, "space.yaml");
      writeFileSync(file, SPACE());
      const g1 = await spawnGateway(file);
      procs.push(g1);
      await toolOwner(g1, "dur", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
      const human = await join(g1, "human");
      const agents = await Promise.all(AGENTS.map((a) => join(g1, a)));

      const proposed = new Set<string>();
      const decided = new Map<string, "approved" | "rejected">();
      const always = new Set<string>();
      human.ws.on("message", (data) => {
        const env = JSON.parse(data.toString()) as Env;
        if (env.kind !== "mcp/proposal") return;
        proposed.add(env.id);
        const r = rand();
        if (r < 0.3) human.send({ kind: "mcp/reject", correlation_id: [env.id], payload: { reason: "disagree" } });
        else if (r < 0.45) human.send({ kind: "mcp/approve", correlation_id: [env.id], payload: { scope: "always" } });
        else if (r < 0.7) human.send({ kind: "mcp/approve", correlation_id: [env.id], payload: { scope: "once" } });
        // The rest stay pending.
      });
      for (const agent of agents) {
        agent.ws.on("message", (data) => {
          const env = JSON.parse(data.toString()) as Env;
          const id = env.correlation_id?.[0];
          if (id === undefined || env.from !== "human") return;
          if (env.kind === "mcp/approve") {
            decided.set(id, "approved");
            if (env.payload.scope === "always") always.add(id);
          } else if (env.kind === "mcp/reject") decided.set(id, "rejected");
        });
      }
      // The burst: each agent proposes as fast as it may, until the kill.
      let stop = false;
      const bursts = agents.map(async (agent, i) => {
        for (let n = 0; n < 200 && !stop; n++) {
          agent.send({
            id: `r${run}-${AGENTS[i]}-${n}`,
            kind: "mcp/proposal",
            to: ["fs"],
            payload: { method: "tools/call", params: { name: "write_file", arguments: { n } } },
          });
          await sleep(1);
        }
      });
      // The kill lands somewhere in the burst, once it is under way: a loaded machine may
      // take longer than the random delay to acknowledge the first proposal.
      for (let waited = 0; proposed.size === 0 && waited < 10_000; waited += 10) await sleep(10);
      await sleep(60 + Math.floor(rand() * 400));
      await killGateway(g1);
      stop = true;
      await Promise.all(bursts);
      for (const c of clients.splice(0)) c.ws.terminate();

      const g2 = await spawnGateway(file);
      procs.push(g2);
      await toolOwner(g2, "dur", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
      const watcher = await join(g2, "human");
      const pending = await pendingIds(watcher);
      const audit = readAudit(pathJoin(dir, ".mewgate"));
      const events = new Map<string, string[]>();
      for (const e of audit) events.set(e.proposal, [...(events.get(e.proposal) ?? []), e.event]);

      expect(proposed.size, `run ${run}: the burst produced proposals`).toBeGreaterThan(0);
      for (const id of proposed) {
        const ev = events.get(id) ?? [];
        expect(ev, `run ${run}: acknowledged proposal ${id} is in the audit trail`).toContain("proposed");
        expect(pending.has(id) || ev.some((e) => e !== "proposed"), `run ${run}: ${id} is pending or decided`).toBe(true);
      }
      for (const [id, decision] of decided) {
        expect(pending.has(id), `run ${run}: decided ${id} is not pending again`).toBe(false);
        expect(events.get(id), `run ${run}: acknowledged decision on ${id}`).toContain(decision);
      }
      // Whole or nothing: every recorded "always" came with its grant — the proposer may
      // now call the tool directly.
      const withGrant = new Set(audit.filter((e) => e.event === "approved" && e.scope === "always").map((e) => e.proposer));
      for (const id of always) expect(withGrant.has(audit.find((e) => e.proposal === id)!.proposer)).toBe(true);
      for (const agentId of withGrant) {
        const agent = await join(g2, agentId);
        const tools = (await askGateway(agent, "tools/list")).payload.result.tools as Array<{ name: string; policy: string }>;
        expect(tools.find((t) => t.name === "fs/write_file")?.policy, `run ${run}: ${agentId}'s always-grant survived`).toBe("direct");
      }
      for (const c of clients.splice(0)) c.ws.terminate();
      await killGateway(g2);
    }
  });
});

/** Mounts a tmpfs of `size` at `dir` when this user may; `false` otherwise. */
function tryMount(dir: string, size: string): boolean {
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Writes filler into `dir` until the disk is full; returns the filler's path. */
function fill(dir: string): string {
  const filler = pathJoin(dir, "filler");
  try {
    execFileSync("dd", ["if=/dev/zero", `of=${filler}`, "bs=4k"], { stdio: "ignore" });
  } catch {
    // dd ends with "No space left on device": that is the point.
  }
  return filler;
}

describe("a full disk", () => {
  it("refuses changes it cannot make durable with a clear error, changes nothing, and recovers when space is freed", {
    timeout: 60_000,
  }, async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-full-"));
    dirs.push(dir);
    const state = pathJoin(dir, "state");
    mkdirSync(state);
    const mounted = tryMount(state, "2m");
    // Without the right to mount, a file-size limit makes writes fail (EFBIG) the same way.
    if (!mounted) console.warn("cannot mount a tmpfs here; a file-size limit (ulimit -f) stands in for a full disk");
    try {
      const file = pathJoin(dir, "space.yaml");
      writeFileSync(file, SPACE(state));
      const g = await spawnGateway(file, mounted ? {} : { shell: "ulimit -f 256; trap '' XFSZ;" });
      procs.push(g);
      await toolOwner(g, "dur", TOKEN("fs"), TOOLS).then((c) => clients.push(c));
      const human = await join(g, "human");
      const agent = await join(g, "a1");
      const propose = (id: string, size = 100) =>
        agent.send({
          id,
          kind: "mcp/proposal",
          to: ["fs"],
          payload: { method: "tools/call", params: { name: "write_file", arguments: { d: "x".repeat(size) } } },
        });

      propose("before", 3000);
      await human.next((e) => e.id === "before");
      let filler: string | undefined;
      if (mounted) filler = fill(state);
      // The journal's last page may still have room: use it up, until a write fails.
      let full = false;
      for (let i = 0; i < 60 && !full; i++) {
        propose(`pad-${i}`, mounted ? 300 : 8000);
        // The loser of the race times out later; its rejection is expected and caught.
        const held = human
          .nextNew((e) => e.id === `pad-${i}`, 3000)
          .then(
            () => "held",
            () => "timeout",
          );
        const failed = errorFor(agent, `pad-${i}`).then(
          () => "failed",
          () => "timeout",
        );
        const outcome = await Promise.race([held, failed]);
        full = outcome === "failed";
      }
      expect(full).toBe(true);

      propose("while-full", 20_000);
      const err = await errorFor(agent, "while-full");
      expect(err.payload.code).toBe("store_failed");
      expect(err.payload.errno).toMatch(/ENOSPC|EFBIG/);
      expect(err.payload.message).not.toContain(state);
      await sleep(100);
      expect(human.received.some((e) => e.id === "while-full")).toBe(false);

      // A decision that cannot be recorded leaves the proposal pending and the call unmade.
      human.send({ id: "approve-full", kind: "mcp/approve", correlation_id: ["before"], payload: {} });
      expect((await errorFor(human, "approve-full")).payload.code).toBe("store_failed");
      expect((await pendingIds(human)).has("before")).toBe(true);
      if (!mounted) return;

      rmSync(filler!);
      propose("after");
      await human.next((e) => e.id === "after");
      human.send({ id: "approve-again", kind: "mcp/approve", correlation_id: ["before"], payload: {} });
      await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("before") === true);

      // And after a kill, exactly what was acknowledged is there.
      await killGateway(g);
      const audit = readAudit(state);
      expect(audit.filter((e) => e.proposal === "while-full")).toEqual([]);
      expect(audit.filter((e) => e.proposal === "before").map((e) => e.event)).toContain("approved");
      expect(audit.some((e) => e.proposal === "after" && e.event === "proposed")).toBe(true);
    } finally {
      for (const c of clients.splice(0)) c.ws.terminate();
      for (const p of procs.splice(0)) await killGateway(p);
      if (mounted) execFileSync("umount", ["-l", state], { stdio: "ignore" });
    }
  });
});
