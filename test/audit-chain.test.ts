/**
 * An audit trail that holds: every record is chained to the one before it by digest, and
 * `mewgate audit verify` names the first record that was altered, removed or slipped in;
 * a torn tail (a crash mid-write) is told apart from tampering. Retention is per
 * participant: a hostile agent flooding propose/withdraw only pushes out its own records,
 * never a person's decisions, and the chain still checks across what was dropped.
 */
import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import { runAuditVerify } from "../cli/audit-verify.js";
import { runAudit } from "../cli/commands.js";
import { isHistoryRecord, readAudit } from "../gateway/space/ledger.js";
import { verifyHistory } from "../gateway/store/verify.js";
import {
  killGateway,
  spawnGateway,
  startGateway,
  TestClient,
  toolOwner,
  waitFor,
  type GatewayProcess,
  type TestGateway,
} from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = (extra = "") => `
space: {id: chain}
gateway: {state_dir: .mewgate, limits: {rate_per_second: 100000, rate_burst: 100000, max_payload_bytes: 1048576}}
${extra}
participants:
  human: {kind: human, token: ${TOKEN("human")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent: {kind: agent, token: ${TOKEN("agent")}, tools: {ask: ["fs/write_file"]}}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];

const gateways: TestGateway[] = [];
const procs: GatewayProcess[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const p of procs.splice(0)) await killGateway(p);
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-chain-"));
  dirs.push(dir);
  return dir;
}

async function space(dir: string, extra = ""): Promise<{ g: TestGateway; human: TestClient; agent: TestClient }> {
  const g = await startGateway(SPACE(extra), { dir });
  gateways.push(g);
  const fs = await toolOwner(g, "chain", TOKEN("fs"), TOOLS);
  clients.push(fs);
  const human = await TestClient.join(g, "chain", TOKEN("human"));
  const agent = await TestClient.join(g, "chain", TOKEN("agent"));
  clients.push(human, agent);
  await waitFor(() => g.gateway.spaces.get("chain")!.registry.get("fs", "write_file") !== undefined, 5000, "the tool registered");
  return { g, human, agent };
}

const pending = (g: TestGateway) => g.gateway.spaces.get("chain")!.proposals.pending().length;

/** A few proposals: approved, rejected, withdrawn; then the gateway stops (its journal flushed). */
async function someHistory(dir: string): Promise<void> {
  const { g, human, agent } = await space(dir);
  for (const [i, what] of ["approve", "reject", "withdraw"].entries()) {
    const id = `p${i}`;
    agent.send({
      id,
      kind: "mcp/proposal",
      to: ["fs"],
      payload: {
        method: "tools/call",
        params: { name: "write_file", arguments: { path: `notes/${i}.md`, text: `secret plan number ${i}` } },
      },
    });
    await waitFor(() => pending(g) === 1, 5000, "the proposal pending");
    if (what === "withdraw") agent.send({ kind: "mcp/withdraw", correlation_id: [id], payload: {} });
    else
      human.send({ kind: `mcp/${what}`, correlation_id: [id], payload: what === "approve" ? { scope: "once" } : { reason: "disagree" } });
    await waitFor(() => pending(g) === 0, 5000, "the decision");
  }
  await waitFor(() => readAudit(join(dir, ".mewgate")).some((e) => e.event === "answered"), 5000, "the answer recorded");
  gateways.splice(gateways.indexOf(g), 1);
  await g.stop();
}

/** The journal's frames: [offset, length] of each payload. */
function framesOf(file: string): Array<{ offset: number; length: number }> {
  const b = readFileSync(file);
  const out = [];
  for (let at = 8; at + 8 <= b.length; ) {
    const length = b.readUInt32LE(at);
    out.push({ offset: at, length });
    at += 8 + length;
  }
  return out;
}

/** Rewrites the payload of the frame at `offset` with `edit` and a checksum that matches: a careful forger. */
function forge(file: string, offset: number, edit: (payload: { n: number; r: any[] }) => void): void {
  const b = readFileSync(file);
  const length = b.readUInt32LE(offset);
  const payload = JSON.parse(b.subarray(offset + 8, offset + 8 + length).toString("utf8"));
  edit(payload);
  const next = Buffer.from(JSON.stringify(payload), "utf8");
  const head = Buffer.alloc(8);
  head.writeUInt32LE(next.length, 0);
  head.writeUInt32LE(crc32(next), 4);
  writeFileSync(file, Buffer.concat([b.subarray(0, offset), head, next, b.subarray(offset + 8 + length)]));
}

function io() {
  let out = "";
  let err = "";
  return {
    io: {
      stdout: {
        write: (s: string) => {
          out += s;
          return true;
        },
      } as any,
      stderr: {
        write: (s: string) => {
          err += s;
          return true;
        },
      } as any,
      env: {},
    },
    out: () => out,
    err: () => err,
  };
}

describe("audit chain: tampering is named", () => {
  it("one byte changed in a record: verify names that record and exits 1", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const state = join(dir, ".mewgate");
    const before = verifyHistory(state, isHistoryRecord);
    expect(before.ok).toBe(true);
    expect(before.records).toBeGreaterThanOrEqual(7);
    const journal = join(state, "journal");
    const bytes = readFileSync(journal);
    // Not the proposal's live state (which holds the arguments too): its audit record.
    const at = bytes.indexOf("secret plan number 1", bytes.indexOf('"event":"proposed","proposal":"p1"'));
    expect(at).toBeGreaterThan(0);
    // "1" → "7": one byte, inside the proposal p1's arguments.
    bytes[at + "secret plan number ".length] = "7".charCodeAt(0);
    writeFileSync(journal, bytes);
    const out = io();
    expect(await runAuditVerify({ stateDir: state }, out.io)).toBe(1);
    const r = verifyHistory(state, isHistoryRecord);
    expect(r.ok).toBe(false);
    expect(r.break!.record).toMatchObject({ proposal: "p1", event: "proposed" });
    expect(r.break!.reason).toMatch(/altered/);
    expect(out.out()).toMatch(new RegExp(`BROKEN at record #${r.break!.index} `));
    expect(out.out()).toContain('"proposal":"p1"');
  });

  it("one byte changed in a live-state record beside the audit: the frame's checksum names where", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const state = join(dir, ".mewgate");
    const journal = join(state, "journal");
    const bytes = readFileSync(journal);
    const at = bytes.indexOf("secret plan number 1");
    bytes[at] = "S".charCodeAt(0);
    writeFileSync(journal, bytes);
    const r = verifyHistory(state, isHistoryRecord);
    expect(r.ok).toBe(false);
    expect(r.break!.reason).toMatch(/checksum fails although its history records hold/);
    expect(r.break!.offset).toBeLessThan(at);
  });

  it("a record altered with its frame's checksum made to match: the digest still names it", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const journal = join(dir, ".mewgate", "journal");
    const frame = framesOf(journal).find((f) =>
      readFileSync(journal)
        .subarray(f.offset, f.offset + 8 + f.length)
        .includes('"event":"rejected"'),
    )!;
    // The forger turns the rejection into an approval by someone else.
    forge(journal, frame.offset, (p) => {
      for (const r of p.r)
        if (r.type === "audit" && r.entry.event === "rejected") Object.assign(r.entry, { event: "approved", by: "agent" });
    });
    const r = verifyHistory(join(dir, ".mewgate"), isHistoryRecord);
    expect(r.ok).toBe(false);
    expect(r.break).toMatchObject({
      reason: expect.stringMatching(/content does not match its digest/),
      record: { proposal: "p1", event: "approved" },
    });
  });

  it("a record removed (checksum fixed): verify names the record after the gap as unlinked", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const journal = join(dir, ".mewgate", "journal");
    const frame = framesOf(journal).find((f) =>
      readFileSync(journal)
        .subarray(f.offset, f.offset + 8 + f.length)
        .includes('"event":"rejected"'),
    )!;
    forge(journal, frame.offset, (p) => {
      p.r = p.r.filter((r) => !(r.type === "audit" && r.entry.event === "rejected"));
    });
    const r = verifyHistory(join(dir, ".mewgate"), isHistoryRecord);
    expect(r.ok).toBe(false);
    expect(r.break!.reason).toMatch(/does not link to the one before it/);
    expect(r.break!.record).toMatchObject({ proposal: "p2", event: "proposed" });
  });

  it("a torn tail (a process killed between two writes) is no break; the gateway cuts it and the chain goes on", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const state = join(dir, ".mewgate");
    const journal = join(state, "journal");
    const frames = framesOf(journal);
    const last = frames.at(-1)!;
    // What a crash mid-write leaves: the header and part of a frame.
    const bytes = readFileSync(journal);
    appendFileSync(journal, bytes.subarray(last.offset, last.offset + 8 + Math.floor(last.length / 2)));
    const r = verifyHistory(state, isHistoryRecord);
    expect(r.ok).toBe(true);
    expect(r.torn).toMatchObject({ file: journal });
    const out = io();
    expect(await runAuditVerify({ stateDir: state }, out.io)).toBe(0);
    expect(out.out()).toMatch(/torn frame/);
    // The gateway starts (cutting the tail) and writes on: the chain still holds after it.
    const { g, agent } = await space(dir);
    agent.send({
      id: "p9",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "x" } } },
    });
    await waitFor(() => pending(g) === 1, 5000, "the proposal pending");
    await g.stop();
    gateways.splice(gateways.indexOf(g), 1);
    const after = verifyHistory(state, isHistoryRecord);
    expect(after).toMatchObject({ ok: true });
    expect(after.torn).toBeUndefined();
    expect(after.records).toBe(r.records + 1);
  });

  it("an audit from before digests (no chain) still loads and verifies as unchained", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const journal = join(dir, ".mewgate", "journal");
    // Strip every chain: what a gateway of the previous release wrote.
    for (const f of framesOf(journal).reverse())
      forge(journal, f.offset, (p) => {
        for (const r of p.r) delete r.chain;
      });
    const r = verifyHistory(join(dir, ".mewgate"), isHistoryRecord);
    expect(r).toMatchObject({ ok: true, records: r.unchained });
    expect(r.unchained).toBeGreaterThanOrEqual(7);
    const { g, agent } = await space(dir);
    agent.send({
      id: "p9",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "x" } } },
    });
    await waitFor(() => pending(g) === 1, 5000, "the proposal pending");
    await g.stop();
    gateways.splice(gateways.indexOf(g), 1);
    const after = verifyHistory(join(dir, ".mewgate"), isHistoryRecord);
    expect(after).toMatchObject({ ok: true, unchained: r.unchained, records: r.records + 1 });
    expect(
      readAudit(join(dir, ".mewgate"))
        .filter((e) => e.proposal === "p0")
        .map((e) => e.event),
    ).toEqual(["proposed", "approved", "routed", "answered"]);
  });
});

describe("audit chain: a process killed between two writes", () => {
  it("a gateway killed with SIGKILL in the middle of a flood of writes: the chain checks, and goes on after a restart", {
    timeout: 60_000,
  }, async () => {
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE());
    const state = join(dir, ".mewgate");
    const p1 = await spawnGateway(file);
    procs.push(p1);
    const fs = await toolOwner(p1, "chain", TOKEN("fs"), TOOLS);
    const agent = await TestClient.join(p1, "chain", TOKEN("agent"));
    clients.push(fs, agent);
    // Proposals and withdrawals as fast as the socket takes them; killed once some are written.
    let sent = 0;
    const pump = setInterval(() => {
      for (let i = 0; i < 20; i++, sent++) {
        agent.send({
          id: `k${sent}`,
          kind: "mcp/proposal",
          to: ["fs"],
          payload: { method: "tools/call", params: { name: "write_file", arguments: { path: `k${sent}`, pad: "y".repeat(2000) } } },
        });
        agent.send({ kind: "mcp/withdraw", correlation_id: [`k${sent}`], payload: {} });
      }
    }, 1);
    try {
      await waitFor(
        () => existsSync(join(state, "journal")) && readFileSync(join(state, "journal")).length > 200_000,
        20_000,
        "writes under way",
      );
    } finally {
      await killGateway(p1);
      clearInterval(pump);
    }
    const after = verifyHistory(state, isHistoryRecord);
    expect(after.ok, JSON.stringify(after.break)).toBe(true);
    expect(after.records).toBeGreaterThan(10);
    // A restart cuts a torn tail, if there is one, and the chain goes on from the last record written.
    const p2 = await spawnGateway(file);
    procs.push(p2);
    const again = await TestClient.join(p2, "chain", TOKEN("agent"));
    clients.push(again);
    // One of the proposals left pending by the kill (its welcome lists them), withdrawn now.
    const left = (again.received.find((e) => e.kind === "system/welcome")!.payload.proposals as Array<{ id: string }>)[0];
    expect(left).toBeDefined();
    again.send({ kind: "mcp/withdraw", correlation_id: [left!.id], payload: {} });
    await waitFor(
      () => readAudit(state).some((e) => e.proposal === left!.id && e.event === "withdrawn"),
      10_000,
      "the withdrawal recorded",
    );
    await killGateway(p2);
    const final = verifyHistory(state, isHistoryRecord);
    expect(final.ok, JSON.stringify(final.break)).toBe(true);
    expect(final.torn).toBeUndefined();
    expect(final.records).toBe(after.records + 1);
  });
});

describe("audit: kept once, exported as JSON lines", () => {
  it("a withdrawn proposal's arguments are recorded once, the withdrawal carries their digest", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const trail = readAudit(join(dir, ".mewgate")).filter((e) => e.proposal === "p2");
    expect(trail.map((e) => e.event)).toEqual(["proposed", "withdrawn"]);
    expect(trail[0]!.arguments).toEqual({ path: "notes/2.md", text: "secret plan number 2" });
    expect(trail[1]!.arguments).toBeUndefined();
    expect(trail[1]!.arguments_digest).toMatch(/^[0-9a-f]{64}$/);
    const journal = join(dir, ".mewgate", "journal");
    const withdrawal = framesOf(journal)
      .map((f) =>
        readFileSync(journal)
          .subarray(f.offset, f.offset + 8 + f.length)
          .toString("utf8"),
      )
      .find((t) => t.includes('"event":"withdrawn"'))!;
    expect(withdrawal).not.toContain("secret plan number 2");
  });

  it("audit --json --since: JSON lines of the entries since then", async () => {
    const dir = tempDir();
    await someHistory(dir);
    const out = io();
    expect(await runAudit({ stateDir: join(dir, ".mewgate"), json: true, since: "1h" }, out.io)).toBe(0);
    const lines = out
      .out()
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.length).toBeGreaterThanOrEqual(7);
    expect(lines.every((l) => typeof l.ts === "string" && typeof l.event === "string")).toBe(true);
    const none = io();
    expect(
      await runAudit({ stateDir: join(dir, ".mewgate"), json: true, since: new Date(Date.now() + 3600_000).toISOString() }, none.io),
    ).toBe(0);
    expect(none.out()).toBe("");
  });
});

describe("audit retention per participant", () => {
  it("a propose/withdraw flood of a hostile agent does not push out a person's decisions", { timeout: 120_000 }, async () => {
    const dir = tempDir();
    const { g, human, agent } = await space(dir, "quotas: {audit_max_bytes: 1048576, argument_bytes: 200000}");
    // The person decides first: these are the oldest records of the trail.
    for (let i = 0; i < 3; i++) {
      agent.send({
        id: `h${i}`,
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "write_file", arguments: { path: `h${i}` } } },
      });
      await waitFor(() => pending(g) === 1, 5000, "the proposal pending");
      human.send({ kind: "mcp/reject", correlation_id: [`h${i}`], payload: { reason: "disagree", text: `no, ${i}` } });
      await waitFor(() => pending(g) === 0, 5000, "the rejection");
    }
    // Then the flood: about 4 MiB of proposals withdrawn at once, four times the budget.
    const big = "x".repeat(20_000);
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 10; i++)
        agent.send({
          id: `f${round}-${i}`,
          kind: "mcp/proposal",
          to: ["fs"],
          payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "flood", big } } },
        });
      await waitFor(() => pending(g) === 10, 10_000, "the flood's proposals pending");
      for (let i = 0; i < 10; i++) agent.send({ kind: "mcp/withdraw", correlation_id: [`f${round}-${i}`], payload: {} });
      await waitFor(() => pending(g) === 0, 10_000, "the flood withdrawn");
    }
    const state = join(dir, ".mewgate");
    await waitFor(() => existsSync(join(state, "history")) && readdirSync(join(state, "history")).length > 0, 10_000, "history archived");
    await g.stop();
    gateways.splice(gateways.indexOf(g), 1);
    const trail = readAudit(state);
    // The person's three rejections are all there, with their words.
    expect(trail.filter((e) => e.event === "rejected" && e.by === "human").map((e) => e.text)).toEqual(["no, 0", "no, 1", "no, 2"]);
    // The flood's oldest went first.
    const flood = trail.filter((e) => e.proposal.startsWith("f") && e.event === "proposed");
    expect(flood.some((e) => e.proposal === "f0-0")).toBe(false);
    expect(flood.some((e) => e.proposal === "f19-9")).toBe(true);
    const r = verifyHistory(state, isHistoryRecord);
    expect(r.ok).toBe(true);
    expect(r.checkpoints).toBeGreaterThan(0);
    expect(r.dropped).toBeGreaterThan(0);
    // The archive is within its budget.
    const archived = readdirSync(join(state, "history")).reduce((n, f) => n + readFileSync(join(state, "history", f)).length, 0);
    expect(archived).toBeLessThanOrEqual(1048576);
  });
});
