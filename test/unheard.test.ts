/**
 * What became of a proposal its proposer could not hear (gateway/proposals/unheard.ts): an
 * approved call answered, failed, or a proposal rejected while its proposer had no
 * connection is kept for the proposer alone, and `proposals/get` on `system:gateway` gives
 * it back — durable across a restart and a compaction of the journal, bounded in count,
 * bytes and time. Hostile first: nobody else reads it (not the approver who sees everything,
 * not the tool's owner, not another agent), forged and odd ids get the same answer as an
 * unknown one, and a proposer that was connected has nothing kept.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { Proposal } from "../gateway/proposals/book.js";
import { MAX_ANSWER_BYTES, MAX_BYTES, MAX_PER_PROPOSER, Unheard, UNHEARD_DEFAULT_MS } from "../gateway/proposals/unheard.js";
import { readAudit } from "../gateway/space/ledger.js";
import { askGateway, type Env, startGateway, TestClient, type TestGateway, toolOwner, waitFor } from "./helpers.js";

const T = { human: "human-token-0001", notes: "notes-token-0002", claude: "claude-token-003", other: "other-token-0004" };
const SPACE = `
space: {id: lab}
gateway: {state_dir: .mewgate}
quotas: {audit_max_bytes: 1048576}
participants:
  human: {kind: human, token: ${T.human}, visibility: all}
  notes: {kind: mcp, token: ${T.notes}}
  claude: {kind: agent, token: ${T.claude}}
  other: {kind: agent, token: ${T.other}}
`;
const WRITE = {
  name: "write_note",
  description: "Writes a note",
  inputSchema: { type: "object", properties: { text: { type: "string" } } },
};

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface Lab {
  g: TestGateway;
  human: TestClient;
  notes: TestClient;
  /** Each call that reached the tool, by its text. */
  calls: string[];
  /** Calls whose text starts with `hold` wait here until answered by the test. */
  held: Map<string, (result: unknown) => void>;
}

async function lab(dir: string, port?: number): Promise<Lab> {
  const g = await startGateway(SPACE, { dir, ...(port === undefined ? {} : { port }) });
  gateways.push(g);
  const calls: string[] = [];
  const held = new Map<string, (result: unknown) => void>();
  const notes = await toolOwner(g, "lab", T.notes, [WRITE], {
    onCall: (env, reply) => {
      const text = String(env.payload.params.arguments?.text ?? "");
      calls.push(text);
      if (text.startsWith("hold")) return void held.set(text, reply);
      reply({ content: [{ type: "text", text: text.startsWith("big") ? "x".repeat(300_000) : `wrote: ${text}` }] });
    },
  });
  const human = await TestClient.join(g, "lab", T.human);
  clients.push(notes, human);
  await waitFor(async () => JSON.stringify((await askGateway(human, "tools/list")).payload).includes("notes/write_note"), 5000, "the tool");
  return { g, human, notes, calls, held };
}

/** `claude` asks the gateway to call write_note; it becomes a proposal whose id is the request's. */
function propose(c: TestClient, id: string, text: string, ttl?: number): void {
  c.send({
    id,
    kind: "mcp/request",
    to: ["system:gateway"],
    payload: {
      jsonrpc: "2.0",
      id,
      method: "tools/call",
      params: { name: "notes/write_note", arguments: { text }, ...(ttl === undefined ? {} : { _meta: { "mewgate/task_ttl_ms": ttl } }) },
    },
  });
}

async function enter(g: TestGateway, token: string): Promise<TestClient> {
  const c = await TestClient.join(g, "lab", token);
  clients.push(c);
  return c;
}

/** Proposes as a fresh `claude`, waits until the human sees it, then claude leaves and the human sees it go. */
async function proposeAndLeave(l: Lab, id: string, text: string, ttl?: number): Promise<void> {
  const claude = await enter(l.g, T.claude);
  propose(claude, id, text, ttl);
  await l.human.next((e) => e.kind === "mcp/proposal" && e.id === id);
  const gone = l.human.nextNew((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "claude");
  claude.ws.close();
  await gone;
}

const trail = (dir: string, id: string) =>
  readAudit(join(dir, ".mewgate"))
    .filter((e) => e.proposal === id)
    .map((e) => e.event);

const getIt = async (c: TestClient, id: unknown): Promise<Env> => askGateway(c, "proposals/get", { id });

function fresh(): string {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-unheard-"));
  dirs.push(dir);
  return dir;
}

describe("what became of a proposal its proposer could not hear", () => {
  it("is its proposer's alone: the approver who sees everything, the tool's owner, another agent and forged ids get what an unknown id gets", async () => {
    const dir = fresh();
    const l = await lab(dir);
    await proposeAndLeave(l, "p-away-1", "while away");
    l.human.send({ kind: "mcp/approve", correlation_id: ["p-away-1"], payload: { scope: "once" } });
    await waitFor(() => trail(dir, "p-away-1").at(-1) === "answered", 5000, "the answer written");

    const other = await enter(l.g, T.other);
    const unknown = (await getIt(other, "never-was")).payload.error;
    expect(unknown.message).toMatch(/no pending proposal "never-was" that you may see/);
    for (const c of [other, l.human, l.notes]) {
      const res = await getIt(c, "p-away-1");
      expect(res.payload.result).toBeUndefined();
      expect(res.payload.error.code).toBe(unknown.code);
      expect(res.payload.error.message).toMatch(/no pending proposal "p-away-1" that you may see/);
    }
    // Odd ids: the same answer, and the gateway serves on.
    for (const id of [12345, { id: "p-away-1" }, ["p-away-1"], "", "p".repeat(10_000), "p-away-1\u0000", null]) {
      const res = await getIt(other, id);
      expect(res.payload.result).toBeUndefined();
      expect(res.payload.error.code).toBe(unknown.code);
      expect(JSON.stringify(res.payload.error.message).length).toBeLessThan(400);
    }
    expect((await askGateway(other, "ping")).payload.result).toEqual({});

    // Its proposer, back: how it ended, with the tool's own answer, and nothing of its arguments.
    const claude = await enter(l.g, T.claude);
    const mine = (await getIt(claude, "p-away-1")).payload.result;
    expect(mine.proposal).toMatchObject({ id: "p-away-1", from: "claude", to: ["notes"], payload: { params: { name: "write_note" } } });
    expect(JSON.stringify(mine.proposal)).not.toContain("while away");
    expect(mine.ended).toMatchObject({ state: "answered", by: "human", outcome: "ok" });
    expect(mine.ended.answer).toEqual({ result: { content: [{ type: "text", text: "wrote: while away" }] } });
    // Asked again (another session), the same.
    expect((await getIt(claude, "p-away-1")).payload.result).toEqual(mine);
  });

  it("keeps nothing for a proposer that was connected to hear it", async () => {
    const dir = fresh();
    const l = await lab(dir);
    const claude = await enter(l.g, T.claude);
    propose(claude, "p-here", "while here");
    await l.human.next((e) => e.kind === "mcp/proposal" && e.id === "p-here");
    l.human.send({ kind: "mcp/approve", correlation_id: ["p-here"], payload: { scope: "once" } });
    const answer = await claude.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("p-here") === true);
    expect(answer.payload.result.content[0].text).toBe("wrote: while here");
    expect((await getIt(claude, "p-here")).payload.error.message).toMatch(/no pending proposal/);
  });

  it("keeps a rejection, and a call cut off because its proposer left, each saying how it ended", async () => {
    const dir = fresh();
    const l = await lab(dir);
    await proposeAndLeave(l, "p-refused", "refused");
    l.human.send({ kind: "mcp/reject", correlation_id: ["p-refused"], payload: { reason: "not_now", text: "ask tomorrow" } });
    await waitFor(() => trail(dir, "p-refused").at(-1) === "rejected", 5000, "the rejection written");

    // Approved while claude is there; claude goes while its call runs: the gateway cancels it at the tool.
    const claude = await enter(l.g, T.claude);
    propose(claude, "p-cut", "hold-cut");
    await l.human.next((e) => e.kind === "mcp/proposal" && e.id === "p-cut");
    l.human.send({ kind: "mcp/approve", correlation_id: ["p-cut"], payload: { scope: "once" } });
    await waitFor(() => l.held.has("hold-cut"), 5000, "the call reaches the tool");
    claude.ws.close();
    await waitFor(() => trail(dir, "p-cut").at(-1) === "failed", 5000, "the cut call written failed");
    // The tool's late answer goes to nobody and changes nothing.
    l.held.get("hold-cut")!({ content: [{ type: "text", text: "too late" }] });

    const back = await enter(l.g, T.claude);
    const refused = (await getIt(back, "p-refused")).payload.result;
    expect(refused.ended).toMatchObject({ state: "rejected", by: "human", reason: "not_now", text: "ask tomorrow" });
    expect(refused.ended.answer).toBeUndefined();
    const cut = (await getIt(back, "p-cut")).payload.result;
    expect(cut.ended).toMatchObject({ state: "failed", reason: "cancelled", outcome: "cancelled" });
    expect(cut.ended.answer.error.data.reason).toBe("cancelled");
    expect(JSON.stringify(cut)).not.toContain("too late");
  });

  it("survives a restart and a compaction of the journal, whole", { timeout: 30_000 }, async () => {
    const dir = fresh();
    let l = await lab(dir);
    await proposeAndLeave(l, "p-big", "big answer", 600_000);
    l.human.send({ kind: "mcp/approve", correlation_id: ["p-big"], payload: { scope: "once" } });
    await waitFor(() => trail(dir, "p-big").at(-1) === "answered", 5000, "the answer written");
    // More big answers nobody hears push the journal past its compaction size.
    const store = () =>
      (l.g.gateway.spaces.get("lab")!.ledger as unknown as { opened: { store: { stats: { compactions: number } } } }).opened.store;
    for (let i = 0; i < 3 && store().stats.compactions === 0; i++) {
      await proposeAndLeave(l, `p-more-${i}`, `big ${i}`);
      l.human.send({ kind: "mcp/approve", correlation_id: [`p-more-${i}`], payload: { scope: "once" } });
      await waitFor(() => trail(dir, `p-more-${i}`).at(-1) === "answered", 5000, "the answer written");
    }
    await waitFor(() => store().stats.compactions > 0, 5000, "a compaction");

    const port = l.g.port;
    for (const c of clients.splice(0)) c.ws.terminate();
    await gateways.splice(0)[0]!.stop();
    l = await lab(dir, port);
    const claude = await enter(l.g, T.claude);
    const kept = (await getIt(claude, "p-big")).payload.result;
    expect(kept.ended).toMatchObject({ state: "answered", outcome: "ok" });
    expect(kept.ended.answer.result.content[0].text).toBe("x".repeat(300_000));
    // The call is not run again by any of this.
    expect(l.calls).toEqual([]);
  });
});

describe("the unheard ends kept (bounds)", () => {
  const proposal = (id: string, proposer = "claude", meta?: unknown): Proposal =>
    ({
      id,
      proposer,
      owner: "notes",
      method: "tools/call",
      tool: "write_note",
      params: { name: "write_note", arguments: { text: "secret" }, ...(meta === undefined ? {} : { _meta: meta }) },
      rpcId: 1,
      chain: [],
      state: "answered",
      createdAt: new Date(0).toISOString(),
      expiresAt: 0,
      envelope: { big: "envelope" },
    }) as Proposal;
  const answer = { result: { content: [{ type: "text", text: "ok" }] } };

  it("keeps each for as long as its proposer asked, within a minute and a day, and then forgets it", () => {
    const u = new Unheard<Proposal>();
    const now = 1_000_000;
    const cases: Array<[unknown, number]> = [
      [undefined, UNHEARD_DEFAULT_MS],
      [{ "mewgate/task_ttl_ms": 1 }, 60_000],
      [{ "mewgate/task_ttl_ms": 1e15 }, 24 * 60 * 60_000],
      [{ "mewgate/task_ttl_ms": "600000" }, UNHEARD_DEFAULT_MS],
      [{ "mewgate/task_ttl_ms": Number.NaN }, UNHEARD_DEFAULT_MS],
      [{ "mewgate/task_ttl_ms": 600_000 }, 600_000],
    ];
    for (const [meta, ms] of cases) {
      const p = proposal(`p-${ms}-${JSON.stringify(meta)}`, "claude", meta);
      p.unheard = u.mark(p, answer, now);
      expect(p.unheard!.until - now).toBe(ms);
      u.keep(p, now);
      expect(u.of(p.id, "claude", now + ms - 1)).toBeDefined();
      expect(u.of(p.id, "someone else", now)).toBeUndefined();
      expect(u.of(p.id, "claude", now + ms)).toBeUndefined();
    }
    // Kept slim: never the arguments nor the envelope.
    const p = proposal("slim");
    p.unheard = u.mark(p, answer, now);
    u.keep(p, now);
    expect(JSON.stringify(u.of("slim", "claude", now))).not.toMatch(/secret|envelope/);
    // One already past its time is not kept at all.
    const old = proposal("old");
    old.unheard = u.mark(old, answer, now);
    u.keep(old, now + 2 * UNHEARD_DEFAULT_MS);
    expect(u.of("old", "claude", now)).toBeUndefined();
  });

  it("keeps at most so many per proposer, and so many bytes of answers, saying so for one past them", () => {
    const u = new Unheard<Proposal>();
    const now = 5_000_000;
    for (let i = 0; i < MAX_PER_PROPOSER; i++) {
      const p = proposal(`a-${i}`);
      p.unheard = u.mark(p, answer, now);
      u.keep(p, now);
    }
    const past = proposal("a-past");
    expect(u.mark(past, answer, now)).toBeUndefined();
    // Another proposer is not held back by the first.
    const theirs = proposal("b-0", "other");
    expect(u.mark(theirs, answer, now)?.answer).toEqual(answer);

    const tooBig = { result: { content: [{ type: "text", text: "y".repeat(MAX_ANSWER_BYTES) }] } };
    const big = proposal("b-big", "other");
    const mark = u.mark(big, tooBig, now)!;
    expect(mark.answer).toBeUndefined();
    expect(mark.dropped).toMatch(/bytes, more than the gateway keeps/);

    // Answers just under the per-answer bound fill the byte budget; the next is kept without its answer.
    const fits = { result: { content: [{ type: "text", text: "z".repeat(MAX_ANSWER_BYTES - 10_000) }] } };
    const n = Math.floor(MAX_BYTES / MAX_ANSWER_BYTES);
    for (let i = 0; i < n; i++) {
      const p = proposal(`c-${i}`, `p${i}`);
      p.unheard = u.mark(p, fits, now);
      expect(p.unheard!.answer).toBeDefined();
      u.keep(p, now);
    }
    const over = proposal("c-over", "late");
    const overMark = u.mark(over, fits, now)!;
    expect(overMark.answer).toBeUndefined();
    expect(overMark.dropped).toMatch(/keeps no more answers/);
    // Once those expire, room again.
    expect(u.mark(over, fits, now + UNHEARD_DEFAULT_MS + 1)!.answer).toBeDefined();
  });
});
