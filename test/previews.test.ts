/**
 * Previews of a proposal's effect (gateway/proposals/preview.ts) against a real gateway:
 * hostile first — a companion the approver may not call, one that would need approval, one
 * that hangs, answers of 10 MB — then a real server-filesystem over files that exist and
 * do not, through the API.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseSpaceConfig, ConfigError } from "../gateway/config/config.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { runProposals } from "../cli/commands.js";
import { ANSI, PLAIN } from "../cli/terminal/format.js";
import { previewLines } from "../cli/terminal/preview-view.js";
import { askGateway, type Env, startGateway, TestClient, toolOwner, type TestGateway, waitFor } from "./helpers.js";

const require = createRequire(import.meta.url);
const FILESYSTEM = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");

const T = { alice: "alice-token-1111", bob: "bob-token-22222", agent: "agent-token-333", svc: "svc-token-44444", fs: "fs-token-555555" };

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
const bridges: Bridge[] = [];
const cleanups: Array<() => void> = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await gw?.stop();
  gw = undefined;
  for (const c of cleanups.splice(0)) c();
});

async function api(token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/lab/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

const SVC_TOOLS = [
  { name: "write", inputSchema: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } } } },
  { name: "secret_read", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
  { name: "asked_read", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
  { name: "slow_read", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
  { name: "huge_read", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
];

function space(extra = "", limits = ""): string {
  return `
space: {id: lab}
policy: {proposal_ttl_ms: 60000}
${limits}
participants:
  alice: {kind: human, token: ${T.alice}, tools: {allow: ["svc/*_read", "fs/*"], ask: ["svc/asked_read"], deny: ["svc/secret_read"]}}
  bob: {kind: human, token: ${T.bob}, tools: {allow: ["fs/*"], deny: ["fs/read_text_file"]}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["svc/write", "fs/write_file", "fs/edit_file"]}}
  svc: {kind: mcp, token: ${T.svc}}
  fs: {kind: mcp, token: ${T.fs}}
${extra}
`;
}

/** The svc owner: records every call; slow_read never answers; huge_read answers 10 MB. */
async function svcOwner(): Promise<{ owner: TestClient; calls: Env[] }> {
  const calls: Env[] = [];
  const owner = await toolOwner(gw!, "lab", T.svc, SVC_TOOLS, {
    onCall: (env, reply) => {
      calls.push(env);
      const name = env.payload.params.name;
      if (name === "slow_read") return;
      if (name === "huge_read") return reply({ content: [{ type: "text", text: "x".repeat(10 * 1024 * 1024) }] });
      reply({ content: [{ type: "text", text: `current text of ${env.payload.params.arguments?.path}\nline two\n` }] });
    },
  });
  clients.push(owner);
  return { owner, calls };
}

async function propose(agent: TestClient, to: string, name: string, args: Record<string, unknown>): Promise<string> {
  const id = `p-${Math.random().toString(36).slice(2)}`;
  agent.send({ id, kind: "mcp/proposal", to: [to], payload: { method: "tools/call", params: { name, arguments: args } } });
  await waitFor(async () => (await api(T.alice, "GET", `proposals/${id}`)).status === 200, 5000, "the proposal");
  return id;
}

async function withTools(token: string, n: number): Promise<void> {
  await waitFor(async () => (await api(token, "GET", "tools")).body.tools.length >= n, 10_000, `${n} tools`);
}

describe("previews that must not work", () => {
  it("a companion the approver is denied is refused and never called; one that would need approval is refused, not proposed", async () => {
    gw = await startGateway(
      space(`previews:
  "svc/write": {call: secret_read, arguments: {path: path}}
  "svc/wri*": {call: asked_read, arguments: {path: path}}`),
    );
    const { calls } = await svcOwner();
    const agent = await TestClient.join(gw, "lab", T.agent);
    clients.push(agent);
    await withTools(T.alice, SVC_TOOLS.length);
    const id = await propose(agent, "svc", "write", { path: "/etc/shadow", content: "x" });
    const denied = (await api(T.alice, "GET", `proposals/${id}/preview`)).body;
    expect(denied).toMatchObject({ status: "refused", code: "denied", tool: "svc/secret_read", source: "config" });
    expect(denied.text).toBeUndefined();
    expect(calls.filter((c) => c.payload.params.name === "secret_read")).toHaveLength(0);
    await gw.stop();

    gw = await startGateway(
      space(`previews:
  "svc/*": {call: asked_read, arguments: {path: path}}`),
    );
    const second = await svcOwner();
    const agent2 = await TestClient.join(gw, "lab", T.agent);
    clients.push(agent2);
    await withTools(T.alice, SVC_TOOLS.length);
    const id2 = await propose(agent2, "svc", "write", { path: "a.txt", content: "x" });
    const asked = (await api(T.alice, "GET", `proposals/${id2}/preview`)).body;
    expect(asked).toMatchObject({ status: "refused", code: "approval_required" });
    // Nothing new waits for anyone: the preview did not become a proposal.
    expect((await api(T.alice, "GET", "proposals")).body.proposals.map((p: any) => p.id)).toEqual([id2]);
    expect(second.calls).toHaveLength(0);
  });

  it("a companion that hangs times out, the target is told to cancel, and the decision never waits for it", async () => {
    gw = await startGateway(
      space(`previews:
  "svc/write": {call: slow_read, arguments: {path: path}, timeout_ms: 400}`),
    );
    const { owner, calls } = await svcOwner();
    const agent = await TestClient.join(gw, "lab", T.agent);
    clients.push(agent);
    await withTools(T.alice, SVC_TOOLS.length);
    const id = await propose(agent, "svc", "write", { path: "a.txt", content: "x" });
    const started = Date.now();
    let previewDone = 0;
    const preview = api(T.alice, "GET", `proposals/${id}/preview`).then((r) => {
      previewDone = Date.now();
      return r;
    });
    await waitFor(() => calls.some((c) => c.payload.params.name === "slow_read"), 5000, "the slow read");
    // Approving while the preview hangs: decided at once.
    const approved = await api(T.alice, "POST", `proposals/${id}/approve`, {});
    expect(approved.status).toBe(200);
    expect(previewDone).toBe(0);
    const r = (await preview).body;
    expect(r).toMatchObject({ status: "timeout", tool: "svc/slow_read" });
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect(Date.now() - started).toBeLessThan(4000);
    const slow = calls.find((c) => c.payload.params.name === "slow_read")!;
    await owner.next(
      (e) => e.kind === "mcp/request" && e.payload.method === "notifications/cancelled" && e.payload.params?.requestId === slow.payload.id,
    );
  });

  it("an answer of 10 MB is cut to max_bytes as text and refused as too large for a diff; the owner stays connected", async () => {
    gw = await startGateway(
      space(
        `previews:
  "svc/write": {call: huge_read, arguments: {path: path}, render: text, max_bytes: 65536}
  "svc/*": {call: huge_read, arguments: {path: path}, render: diff, field: content}`,
        "gateway: {limits: {max_payload_bytes: 16777216}}",
      ),
    );
    const { owner } = await svcOwner();
    const agent = await TestClient.join(gw, "lab", T.agent);
    clients.push(agent);
    await withTools(T.alice, SVC_TOOLS.length);
    const id = await propose(agent, "svc", "write", { path: "big.txt", content: "x" });
    const text = (await api(T.alice, "GET", `proposals/${id}/preview`)).body;
    expect(text).toMatchObject({ status: "ok", render: "text", truncated: true });
    expect(Buffer.byteLength(text.text)).toBeLessThanOrEqual(65536);
    // The diff rule, through a proposal the second entry matches.
    const id2 = await propose(agent, "svc", "huge_read", { path: "big.txt", content: "y" });
    const diff = (await api(T.alice, "GET", `proposals/${id2}/preview`)).body;
    expect(diff).toMatchObject({ status: "too_large", render: "diff" });
    expect(JSON.stringify(diff).length).toBeLessThan(4096);
    expect(owner.closeCode).toBeUndefined();
  });
});

describe("previews that must not work, at the default frame limit", () => {
  it("an answer of 10 MB never reaches memory whole: the frame limit cuts the owner off, the preview fails at once, the gateway serves on", async () => {
    gw = await startGateway(
      space(`previews:
  "svc/write": {call: huge_read, arguments: {path: path}, render: text}`),
    );
    const { owner } = await svcOwner();
    const agent = await TestClient.join(gw, "lab", T.agent);
    clients.push(agent);
    await withTools(T.alice, SVC_TOOLS.length);
    const id = await propose(agent, "svc", "write", { path: "big.txt", content: "x" });
    const started = Date.now();
    const r = (await api(T.alice, "GET", `proposals/${id}/preview`)).body;
    expect(r).toMatchObject({ status: "failed", tool: "svc/huge_read" });
    // Not the 5 s timeout: the owner's connection ended, and with it the call.
    expect(Date.now() - started).toBeLessThan(4000);
    await owner.closed;
    expect(owner.closeCode).toBe(1009);
    // The proposal still waits, and the gateway answers as before.
    expect((await api(T.alice, "GET", `proposals/${id}`)).status).toBe(200);
  });
});

describe("config", () => {
  it("points at the line and column of a bad preview entry", () => {
    const yaml = `space: {id: lab}
participants:
  a: {kind: human}
previews:
  "no-slash": {call: read}
  "fs/write_file":
    call: read_text_file
    render: diff
  "fs/x": {call: "a/b/c", rendr: text}
`;
    let err: ConfigError | undefined;
    try {
      parseSpaceConfig(yaml, { file: "space.yaml" });
    } catch (e) {
      err = e as ConfigError;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const text = err!.message;
    expect(text).toMatch(/space\.yaml:5:\d+.*participant\/tool/);
    expect(text).toMatch(/space\.yaml:\d+:\d+.*render: diff needs field/);
    expect(text).toMatch(/space\.yaml:9:\d+.*call/);
    expect(text).toMatch(/space\.yaml:9:\d+.*unknown key; did you mean "render"/);
  });
});

describe("server-filesystem, built in", () => {
  async function fsSpace(): Promise<{ dir: string; agent: TestClient }> {
    const dir = realpathSync(mkdtempSync(join(tmpdir(), "mewgate-preview-")));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    gw = await startGateway(space());
    const b = await startBridge({
      id: "fs",
      server: { command: process.execPath, args: [FILESYSTEM, dir] },
      client: { url: gw.url, space: "lab", token: T.fs },
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    });
    bridges.push(b);
    const agent = await TestClient.join(gw, "lab", T.agent);
    clients.push(agent);
    await waitFor(
      async () => (await api(T.alice, "GET", "tools")).body.tools.some((t: any) => t.name === "fs/write_file"),
      10_000,
      "fs tools",
    );
    return { dir, agent };
  }

  it("says what will happen, not what a header suggests: a path with a newline forges no line, `..` and a missing directory will fail, an identical write changes nothing", async () => {
    const { dir, agent } = await fsSpace();
    writeFileSync(join(dir, "same.txt"), "exactly this\n");
    mkdirSync(join(dir, "notes"));
    writeFileSync(join(dir, "plain.txt"), "x");
    const preview = async (args: Record<string, unknown>, tool = "write_file") =>
      (await api(T.alice, "GET", `proposals/${await propose(agent, "fs", tool, args)}/preview`)).body;

    // A newline and an escape in the name: the header keeps them on its own line, escaped.
    const forged = await preview({ path: "notes/a\n+rm -rf ~\x1b[2J.txt", content: "hi\n" });
    expect(forged).toMatchObject({ status: "ok", render: "diff", new_file: true });
    const lines = forged.text.split("\n");
    expect(lines.filter((l: string) => l.startsWith("+") && !l.startsWith("+++"))).toEqual(["+hi"]);
    expect(lines.slice(0, 2)).toEqual(["--- /dev/null\t(new file)", '+++ "notes/a\\n+rm -rf ~\\033[2J.txt"\tproposed']);
    expect(forged.text).not.toMatch(/\x1b/);

    // Out of the sandbox: the server refuses the path, so the write will fail; no sandbox path is shown.
    const out = await preview({ path: "../outside.txt", content: "x" });
    expect(out).toMatchObject({ status: "will_fail", tool: "fs/get_file_info" });
    expect(out.message).toBe("the server refuses this path (path outside allowed directories), so the write will fail");
    expect(out.text).toBeUndefined();

    // A directory that is not there, at one level and two, relative and absolute.
    for (const [path, shown] of [
      ["drafts/hello.txt", "drafts"],
      ["drafts/deeper/hello.txt", "drafts/deeper"],
      [join(dir, "gone", "x.txt"), join(dir, "gone")],
    ] as const) {
      const r = await preview({ path, content: "hello\n" });
      expect(r).toMatchObject({ status: "will_fail", message: `the directory "${shown}" does not exist, so the write will fail` });
      expect(r.new_file).toBeUndefined();
    }
    // A file where a directory should be.
    for (const path of ["plain.txt/x.txt", "plain.txt/deeper/x.txt"]) {
      expect(await preview({ path, content: "y" })).toMatchObject({
        status: "will_fail",
        message: `the directory ${JSON.stringify(path.slice(0, path.lastIndexOf("/")))} is, or goes through, a file, so the write will fail`,
      });
    }
    // A new file in a directory that exists is still a new file.
    expect(await preview({ path: "notes/new.txt", content: "n\n" })).toMatchObject({ status: "ok", new_file: true });

    // The same text again: no change, and no bare headers.
    const same = await preview({ path: "same.txt", content: "exactly this\n" });
    expect(same).toMatchObject({ status: "ok", render: "diff", unchanged: true, text: "" });
    // An edit whose new text is the old one: no change either.
    const noop = await preview({ path: "same.txt", edits: [{ oldText: "exactly this", newText: "exactly this" }] }, "edit_file");
    expect(noop).toMatchObject({ status: "ok", render: "patch", unchanged: true, text: "" });

    // An edit that cannot apply: its dry run's error is what the edit will do, the file named as the call did.
    for (const [args, message] of [
      [{ path: "gone.txt", edits: [{ oldText: "a", newText: "b" }] }, `the file "gone.txt" does not exist, so the edit will fail`],
      [
        { path: "../../etc/hosts", edits: [{ oldText: "a", newText: "b" }] },
        "the server refuses this path (path outside allowed directories), so the edit will fail",
      ],
      [
        { path: "same.txt", edits: [{ oldText: "not there", newText: "b" }] },
        /^the edit will fail: Could not find exact match for edit:\s+not there/,
      ],
    ] as const) {
      const r = await preview(args, "edit_file");
      expect(r).toMatchObject({ status: "will_fail", tool: "fs/edit_file" });
      if (typeof message === "string") expect(r.message).toBe(message);
      else expect(r.message).toMatch(message);
      expect(r.message).not.toContain(dir);
    }

    // Nothing was written by any preview.
    expect(readdirSync(dir).sort()).toEqual(["notes", "plain.txt", "same.txt"]);
    expect(readdirSync(join(dir, "notes"))).toEqual([]);
    // The terminal says the same in a line each.
    expect(previewLines(same, PLAIN, 100)).toEqual(["preview: no change — the file already holds exactly this (fs/read_text_file)"]);
    expect(previewLines(out, PLAIN, 200)[0]).toBe(
      "this call will fail (fs/get_file_info): the server refuses this path (path outside allowed directories), so the write will fail",
    );
  });

  it("edit_file's dry run names the file as the call did, never the server's sandbox path, even for a file holding a code fence", async () => {
    const { dir, agent } = await fsSpace();
    writeFileSync(join(dir, "README.md"), "# Title\n\n```sh\nnpm test\n```\n");
    const id = await propose(agent, "fs", "edit_file", { path: "README.md", edits: [{ oldText: "npm test", newText: "npm run check" }] });
    const e = (await api(T.alice, "GET", `proposals/${id}/preview`)).body;
    expect(e).toMatchObject({ status: "ok", render: "patch" });
    expect(e.unchanged).toBeUndefined();
    expect(e.text).not.toContain(dir);
    expect(e.text).not.toMatch(/^Index:|^=+$/m);
    expect(e.text).toMatch(/^--- README\.md\toriginal$/m);
    expect(e.text).toMatch(/^\+\+\+ README\.md\tmodified$/m);
    expect(e.text).toContain("-npm test\n+npm run check");
    // The fence of four backticks the server chose around a text holding three is gone, the file's own kept.
    expect(e.text).not.toContain("````");
    expect(e.text).toMatch(/^ ```sh$/m);
    expect(readFileSync(join(dir, "README.md"), "utf8")).toContain("npm test");
  });

  it("write_file over a file that exists: a unified diff of what is on disk against the proposed content", async () => {
    const { dir, agent } = await fsSpace();
    const file = join(dir, "notes.txt");
    writeFileSync(file, "one\ntwo\nthree\n");
    const id = await propose(agent, "fs", "write_file", { path: file, content: "one\n2\nthree\nfour\n" });
    const r = (await api(T.alice, "GET", `proposals/${id}/preview`)).body;
    expect(r).toMatchObject({ status: "ok", render: "diff", source: "builtin", tool: "fs/read_text_file" });
    expect(r.new_file).toBeUndefined();
    expect(r.text).toContain("-two\n+2\n");
    expect(r.text).toContain("+four");
    // Reused for a moment, not read again.
    const again = (await api(T.alice, "GET", `proposals/${id}/preview`)).body;
    expect(again).toMatchObject({ cached: true, text: r.text });
    // Bob may not read the file: his preview is refused, not Alice's reused.
    const bob = (await api(T.bob, "GET", `proposals/${id}/preview`)).body;
    expect(bob).toMatchObject({ status: "refused", code: "denied" });
    expect(readFileSync(file, "utf8")).toBe("one\ntwo\nthree\n");
  });

  it("write_file of a new file shows as a new file; a 10 MB file is not read; edit_file shows its own dry run and changes nothing", async () => {
    const { dir, agent } = await fsSpace();
    const fresh = await propose(agent, "fs", "write_file", { path: join(dir, "fresh.txt"), content: "brand new\n" });
    const r = (await api(T.alice, "GET", `proposals/${fresh}/preview`)).body;
    expect(r).toMatchObject({ status: "ok", render: "diff", new_file: true });
    expect(r.text).toContain("+brand new");

    const big = join(dir, "big.txt");
    writeFileSync(big, "y".repeat(10 * 1024 * 1024));
    const bigId = await propose(agent, "fs", "write_file", { path: big, content: "small" });
    const started = Date.now();
    const b = (await api(T.alice, "GET", `proposals/${bigId}/preview`)).body;
    expect(b).toMatchObject({ status: "too_large" });
    expect(b.message).toContain("10485760");
    expect(Date.now() - started).toBeLessThan(4000);

    const file = join(dir, "code.ts");
    writeFileSync(file, "const a = 1;\nconst b = 2;\n");
    const edit = await propose(agent, "fs", "edit_file", { path: file, edits: [{ oldText: "const b = 2;", newText: "const b = 3;" }] });
    const e = (await api(T.alice, "GET", `proposals/${edit}/preview`)).body;
    expect(e).toMatchObject({ status: "ok", render: "patch", tool: "fs/edit_file" });
    expect(e.text).toContain("-const b = 2;");
    expect(e.text).toContain("+const b = 3;");
    expect(e.text).not.toContain("```");
    expect(readFileSync(file, "utf8")).toBe("const a = 1;\nconst b = 2;\n");
  });

  it("reaches the terminal over the wire (proposals/preview) and `mewgate proposals show`, as the person asking", async () => {
    const { dir, agent } = await fsSpace();
    const file = join(dir, "notes.txt");
    writeFileSync(file, "one\ntwo\n");
    const id = await propose(agent, "fs", "write_file", { path: file, content: "one\n2\n" });
    const alice = await TestClient.join(gw!, "lab", T.alice);
    const bob = await TestClient.join(gw!, "lab", T.bob);
    clients.push(alice, bob);
    const wire = await askGateway(alice, "proposals/preview", { id });
    expect(wire.payload.result).toMatchObject({ status: "ok", render: "diff" });
    expect(wire.payload.result.text).toContain("-two\n+2");
    expect((await askGateway(bob, "proposals/preview", { id })).payload.result).toMatchObject({ status: "refused" });
    expect((await askGateway(alice, "proposals/preview", { id: "nope" })).payload.error.code).toBe(-32602);
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
    const common = { gateway: `ws://127.0.0.1:${gw!.port}`, space: "lab", token: T.alice };
    expect(await runProposals("show", id.slice(0, 10), common, io)).toBe(0);
    const text = out.join("");
    expect(text).toContain("agent wants fs/write_file");
    expect(text).toContain("preview: changes against what is there now (fs/read_text_file)");
    expect(text).toMatch(/^ {2}-two$/m);
    expect(text).toMatch(/^ {2}\+2$/m);
  });
});

describe("the terminal's preview lines", () => {
  it("strip escape sequences and bidi controls a file could carry, colour only by the diff's own marks", () => {
    const hostile = {
      status: "ok",
      render: "diff",
      tool: "fs/read_text_file\x1b]0;pwned\x07",
      text: "--- a\n+++ b\n@@ -1 +1 @@\n-\x1b[2Jold\u202Eevil\n+new\x1b]52;c;Y2xpcA==\x07\n",
    };
    const plain = previewLines(hostile, PLAIN, 80).join("\n");
    expect(plain).not.toMatch(/\x1b|\x07|\u202E/);
    expect(plain).toContain("-old�evil");
    expect(plain).toContain("+new");
    const coloured = previewLines(hostile, ANSI, 80).join("\n");
    // Only the colours the view adds: SGR codes, nothing else that starts with ESC.
    expect(coloured.replace(/\x1b\[\d+m/g, "")).not.toMatch(/\x1b/);
    expect(previewLines({ status: "timeout", tool: "fs/x", message: "fs/x did not answer within 5000 ms" }, PLAIN, 80)).toEqual([
      "preview timed out (fs/x): fs/x did not answer within 5000 ms",
    ]);
    expect(previewLines({ status: "none" }, PLAIN, 80)).toEqual([]);
  });
});
