/**
 * A call's preview knows the earlier calls of its turn (proposals/turn-preview.ts), against a
 * real gateway and the real `@modelcontextprotocol/server-filesystem`: an edit of a file the
 * turn's first call writes is shown against what that write would leave, not against a disk
 * where the file does not exist yet. Hostile first: another proposer's call under the same
 * turn id is not part of it; an earlier call refused is not replayed; an edit that cannot be
 * replayed word for word says so; an earlier call that may change files and is not replayed
 * is named; malformed edits never throw.
 */
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { applyEdits } from "../gateway/proposals/turn-preview.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { startGateway, TestClient, waitFor, type TestGateway } from "./helpers.js";

const FILESYSTEM = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const T = (id: string) => `${id}-token-0123456789abcdef`;

let gw: TestGateway | undefined;
let dir = "";
const clients: TestClient[] = [];
const bridges: Bridge[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await gw?.stop();
  gw = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = "";
});

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/tp/${path}`, {
    method,
    headers: { authorization: `Bearer ${T("alice")}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

async function ready(): Promise<{ agent: TestClient; other: TestClient }> {
  dir = realpathSync(mkdtempSync(join(tmpdir(), "mewgate-turn-fs-")));
  writeFileSync(join(dir, "old.md"), "alpha\nbeta\ngamma\n");
  gw = await startGateway(`space: {id: tp}
policy: {proposal_ttl_ms: 600000}
participants:
  alice: {kind: human, token: ${T("alice")}}
  agent: {kind: agent, token: ${T("agent")}, tools: {ask: ["fs/*"]}}
  other: {kind: agent, token: ${T("other")}, tools: {ask: ["fs/*"]}}
  fs: {kind: mcp, token: ${T("fs")}}
`);
  bridges.push(
    await startBridge({
      id: "fs",
      server: { command: process.execPath, args: [FILESYSTEM, dir] },
      client: { url: gw.url, space: "tp", token: T("fs") },
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    }),
  );
  await waitFor(async () => (await api("GET", "tools")).body.tools.some((t: any) => t.name === "fs/edit_file"), 10_000, "fs tools");
  const agent = await TestClient.join(gw, "tp", T("agent"));
  const other = await TestClient.join(gw, "tp", T("other"));
  clients.push(agent, other);
  return { agent, other };
}

let n = 0;
/** A proposal marked as call `index` of turn `turn` (of `count`). */
async function call(
  from: TestClient,
  tool: string,
  args: Record<string, unknown>,
  turn: string,
  index: number,
  count = 3,
): Promise<string> {
  const id = `t-${++n}`;
  from.send({
    id,
    kind: "mcp/proposal",
    to: ["fs"],
    payload: { method: "tools/call", params: { name: tool, arguments: args, _meta: { "mewgate/turn": { id: turn, index, count } } } },
  });
  await waitFor(async () => (await api("GET", `proposals/${id}`)).status === 200);
  return id;
}

const preview = async (id: string) => (await api("GET", `proposals/${id}/preview`)).body;

describe("a turn's preview after its earlier calls: hostile first", () => {
  it("another proposer's call under the same turn id is no part of it; a refused earlier call is not replayed", async () => {
    const { agent, other } = await ready();
    const path = join(dir, "new.md");
    // The other agent claims the same turn id, with a lower index: ignored.
    await call(other, "write_file", { path, content: "EVIL\n" }, "turn-1", 0);
    const write = await call(agent, "write_file", { path, content: "one\ntwo\n" }, "turn-1", 1);
    const edit = await call(agent, "edit_file", { path, edits: [{ oldText: "two", newText: "three" }] }, "turn-1", 2);
    const p = await preview(edit);
    expect(p, JSON.stringify(p)).toMatchObject({
      status: "ok",
      render: "diff",
      after_turn: [{ call: 2, tool: "write_file", proposal: write }],
    });
    expect(p.text).toContain("-two");
    expect(p.text).toContain("+three");
    expect(p.text).not.toContain("EVIL");
    expect(p.text.split("\n")[0]).toBe(`--- ${path}\tafter call 2 (write_file) of this turn`);
    // Rejected, the write never happens: the edit meets the disk, where the file is not.
    expect((await api("POST", `proposals/${write}/reject`, { reason: "unsafe" })).status).toBe(200);
    const alone = await preview(edit);
    expect(alone.after_turn).toBeUndefined();
    expect(alone.status).toBe("will_fail");
  });

  it("an earlier edit not there word for word, and malformed edits, say why; nothing throws", async () => {
    const { agent } = await ready();
    const path = join(dir, "old.md");
    await call(agent, "edit_file", { path, edits: [{ oldText: "not in the file", newText: "x" }] }, "t2", 0);
    const later = await call(agent, "edit_file", { path, edits: [{ oldText: "beta", newText: "BETA" }] }, "t2", 1);
    const p = await preview(later);
    expect(p.status).toBe("failed");
    expect(p.message).toMatch(
      /call 1 of this turn \(edit_file\) cannot be replayed: the old text of its edit 1 is not there word for word/,
    );
    for (const [i, edits] of [
      "not a list",
      [{ oldText: 1, newText: "x" }],
      [null],
      Array.from({ length: 500 }, () => ({ oldText: "a", newText: "a" })),
    ].entries()) {
      await call(agent, "edit_file", { path, edits }, `bad-${i}`, 0, 2);
      const q = await call(agent, "write_file", { path, content: "z" }, `bad-${i}`, 1, 2);
      const r = await preview(q);
      expect(r.status, JSON.stringify(r)).toBe("failed");
      expect(r.message).toMatch(/cannot be replayed: (its edits are not a list|its edit 1 is not \{oldText, newText\}|it makes 500 edits)/);
    }
  });

  it("an earlier call that may change files and is not replayed is named as not reflected; a read-only one is not", async () => {
    const { agent } = await ready();
    await call(agent, "read_text_file", { path: join(dir, "old.md") }, "t3", 0);
    await call(agent, "move_file", { source: join(dir, "old.md"), destination: join(dir, "moved.md") }, "t3", 1);
    const edit = await call(agent, "edit_file", { path: join(dir, "old.md"), edits: [{ oldText: "beta", newText: "BETA" }] }, "t3", 2);
    const p = await preview(edit);
    // The server's own dry run against the disk, with the move named.
    expect(p).toMatchObject({ status: "ok", render: "patch", not_reflected: [{ call: 2, tool: "move_file" }] });
    expect(p.after_turn).toBeUndefined();
  });
});

describe("a turn's preview after its earlier calls", () => {
  it("edits after edits of a file on disk, and a write after a write, each against what the earlier calls leave", async () => {
    const { agent } = await ready();
    const path = join(dir, "old.md");
    const first = await call(agent, "edit_file", { path, edits: [{ oldText: "beta", newText: "BETA" }] }, "t4", 0);
    const second = await call(agent, "edit_file", { path, edits: [{ oldText: "BETA\ngamma", newText: "BETA\nGAMMA" }] }, "t4", 1);
    const p = await preview(second);
    expect(p, JSON.stringify(p)).toMatchObject({ status: "ok", after_turn: [{ call: 1, tool: "edit_file", proposal: first }] });
    expect(p.text).toContain(" BETA");
    expect(p.text).toContain("-gamma");
    expect(p.text).toContain("+GAMMA");
    expect(p.text).not.toContain("-beta");
    // The same text written twice: the second changes nothing after the first.
    const w = join(dir, "w.md");
    await call(agent, "write_file", { path: w, content: "same\n" }, "t5", 0, 2);
    const again = await call(agent, "write_file", { path: w, content: "same\n" }, "t5", 1, 2);
    expect(await preview(again)).toMatchObject({ status: "ok", unchanged: true, after_turn: [{ call: 1 }] });
  });

  it("applyEdits: first match only, CRLF read as LF, replacement patterns taken literally", () => {
    expect(applyEdits("a b a", [{ oldText: "a", newText: "c" }])).toEqual({ text: "c b a" });
    expect(applyEdits("x\r\ny\r\n", [{ oldText: "x\ny", newText: "z" }])).toEqual({ text: "z\n" });
    expect(applyEdits("cost", [{ oldText: "cost", newText: "$& $1 $$" }])).toEqual({ text: "$& $1 $$" });
    expect(applyEdits("abc", [{ oldText: "", newText: "x" }])).toMatchObject({ error: expect.stringMatching(/not there/) });
  });
});
