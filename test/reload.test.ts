/**
 * Reload without restart and managed tokens, against a real gateway on loopback: an invalid
 * file changes nothing and says where; a removed participant is closed (4412) and cannot
 * approve; a member whose rights shrank is told and its now-denied proposal cancelled;
 * the reload is in the audit trail, token values never. Tokens rotated with grace, revoked,
 * expired — each refused at join afterwards and the sessions using them closed. Then
 * SIGHUP against a real `mewgate up` process.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join as pathJoin } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { runReload, runSessions } from "../cli/reload.js";
import { runToken } from "../cli/token.js";
import { readAudit } from "../gateway/space/ledger.js";
import { Cli, poll, run } from "./fixtures/cli/harness.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const dirs: string[] = [];
const clis: Cli[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const c of clis.splice(0)) c.kill("SIGKILL");
  for (const g of gateways.splice(0)) await g.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-reload-"));
  dirs.push(dir);
  return dir;
}

/** A port free right now on loopback, so that space.yaml can name the address the CLI finds the gateway at. */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

const T = (id: string) => `${id}-token-0123456789abcdef`;
/** A space: `rules` is the agent's tool policy; `bob` is a second human (an approver) unless `withoutBob`. */
const SPACE = (port: number, rules = 'ask: ["fs/*"]', opts: { withoutBob?: boolean; tokens?: boolean } = {}) => `
space: {id: rl}
gateway: {port: ${port}, state_dir: .mewgate, limits: {rate_per_second: 5000, rate_burst: 5000}}
participants:
  human: {kind: human${opts.tokens === false ? "" : `, token: ${T("human")}`}}
${opts.withoutBob ? "" : `  bob: {kind: human${opts.tokens === false ? "" : `, token: ${T("bob")}`}}\n`}  fs: {kind: mcp${opts.tokens === false ? "" : `, token: ${T("fs")}`}}
  agent: {kind: agent${opts.tokens === false ? "" : `, token: ${T("agent")}`}, tools: {${rules}}}
`;
const TOOLS = [
  { name: "write_file", inputSchema: { type: "object" } },
  { name: "read_file", inputSchema: { type: "object" } },
];
const propose = (id: string, tool = "write_file") => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: tool, arguments: { path: id } } },
});

async function setup(yaml: (port: number) => string): Promise<{ g: TestGateway; dir: string; file: string; port: number }> {
  const dir = tempDir();
  const port = await freePort();
  const g = await startGateway(yaml(port), { dir, port });
  gateways.push(g);
  return { g, dir, file: pathJoin(dir, "space.yaml"), port };
}

async function api(
  g: { port: number },
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${g.port}/api/spaces/rl/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

async function join(g: { port: number }, token: string): Promise<TestClient> {
  const c = await TestClient.join(g, "rl", token);
  clients.push(c);
  return c;
}

/** Connects and resolves with the close code, for a token that must be refused. */
async function refused(g: { port: number }, token: string): Promise<{ code: number; reason: string }> {
  const c = TestClient.connect(g, "space=rl", { authorization: `Bearer ${token}` });
  clients.push(c);
  return c.closed;
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

const space = (g: TestGateway) => g.gateway.spaces.get("rl")!;

describe("reload: hostile first", () => {
  it("an invalid file changes nothing, and the error says file:line:col", async () => {
    const { g, file } = await setup((p) => SPACE(p));
    const agent = await join(g, T("agent"));
    const before = readFileSync(file, "utf8");
    // Line 9, column 31: not a visibility. And the agent's rules widened on the same go: must not apply.
    writeFileSync(
      file,
      before.replace('ask: ["fs/*"]', 'allow: ["fs/*"]').replace("bob: {kind: human", "bob: {kind: human, visibility: sometimes"),
    );
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe("invalid_config");
    expect(r.body.error.message).toMatch(/^nothing changed: .*space\.yaml:6:\d+: participants\.bob\.visibility/);
    expect(space(g).authority.tool("agent", "fs", "write_file")).toBe("proposal");
    expect(agent.closeCode).toBeUndefined();
    expect(readAudit(pathJoin(g.dir, ".mewgate")).some((e) => e.event === "reloaded")).toBe(false);
    // The CLI says the same and exits 1.
    const out = io();
    expect(await runReload(file, {}, out.io)).toBe(1);
    expect(out.err()).toMatch(/space\.yaml:6:\d+/);
    // A syntax error too.
    writeFileSync(file, `${before}\n  broken: [unclosed\n`);
    const syntax = await api(g, T("human"), "POST", "reload");
    expect(syntax.status).toBe(422);
    expect(syntax.body.error.message).toMatch(/space\.yaml:\d+:\d+/);
  });

  it("a token file that cannot be read changes nothing either, and names the file", async () => {
    const { g, file, port } = await setup((p) => SPACE(p));
    const agent = await join(g, T("agent"));
    writeFileSync(file, SPACE(port, 'deny: ["fs/*"]'));
    mkdirSync(pathJoin(g.dir, ".mewgate", "tokens"), { recursive: true });
    writeFileSync(pathJoin(g.dir, ".mewgate", "tokens", "agent.meta.json"), "{not json");
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status).toBe(422);
    expect(r.body.error).toMatchObject({ code: "reload_failed", message: expect.stringMatching(/agent\.meta\.json cannot be read/) });
    expect(space(g).authority.tool("agent", "fs", "write_file")).toBe("proposal");
    expect(agent.closeCode).toBeUndefined();
  });

  it("only an operator may reload, list sessions or end one", async () => {
    const { g } = await setup((p) => SPACE(p));
    for (const [m, path] of [
      ["POST", "reload"],
      ["GET", "sessions"],
      ["DELETE", "sessions/human"],
    ] as const) {
      const r = await api(g, T("agent"), m, path);
      expect(r.status, `${m} ${path}`).toBe(403);
      expect(r.body.error.code).toBe("capability_violation");
    }
  });

  it("an approver removed by a reload mid-way is closed (4412) and its approval refused on every path", async () => {
    const { g, file, port } = await setup((p) => SPACE(p));
    const fs = await toolOwner(g, "rl", T("fs"), TOOLS);
    clients.push(fs);
    const agent = await join(g, T("agent"));
    const bob = await join(g, T("bob"));
    await waitFor(() => space(g).registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("p1"));
    await bob.next((e) => e.kind === "mcp/proposal" && e.id === "p1");
    writeFileSync(file, SPACE(port, 'ask: ["fs/*"]', { withoutBob: true }));
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status).toBe(200);
    expect(r.body.reloaded[0]).toMatchObject({ removed: ["bob"], closed: ["bob"] });
    // Bob's approval, sent at once on the socket being closed, does nothing.
    bob.send({ kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    const closed = await bob.closed;
    expect(closed).toEqual({ code: 4412, reason: expect.stringMatching(/removed from the space/) });
    // Through the API, and through a new connection: refused.
    const viaApi = await api(g, T("bob"), "POST", "proposals/p1/approve", { scope: "once" });
    expect(viaApi.status).toBe(401);
    expect((await refused(g, T("bob"))).code).toBe(4401);
    expect(
      space(g)
        .proposals.pending()
        .map((p) => p.id),
    ).toEqual(["p1"]);
    expect(
      readAudit(pathJoin(g.dir, ".mewgate"))
        .filter((e) => e.proposal === "p1")
        .map((e) => e.event),
    ).toEqual(["proposed"]);
  });

  it("a member whose rights shrank is told, its now-denied proposal cancelled; one now direct stays a proposal", async () => {
    const { g, file, port } = await setup((p) => SPACE(p));
    const fs = await toolOwner(g, "rl", T("fs"), TOOLS);
    clients.push(fs);
    const agent = await join(g, T("agent"));
    await waitFor(() => space(g).registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("w1", "write_file"));
    agent.send(propose("r1", "read_file"));
    await waitFor(() => space(g).proposals.pending().length === 2, 5000, "two proposals");
    writeFileSync(file, SPACE(port, 'deny: ["fs/write_file"], allow: ["fs/read_file"]'));
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.status).toBe(200);
    expect(r.body.reloaded[0]).toMatchObject({ changed: ["agent"], told: ["agent"], cancelled: ["w1"] });
    const reject = await agent.next((e) => e.kind === "mcp/reject" && e.correlation_id?.[0] === "w1");
    expect(reject.payload).toMatchObject({ reason: "policy_changed", text: expect.stringMatching(/deny agent fs\/write_file/) });
    const told = await agent.next((e) => e.kind === "capability/revoke" && e.from === "system:gateway");
    expect(told.payload).toMatchObject({ recipient: "agent", reason: "policy_changed" });
    // A fresh welcome came before the notice, with the tool's new policy.
    const welcomes = agent.received.filter((e) => e.kind === "system/welcome");
    expect(welcomes.length).toBe(2);
    const tools = welcomes[1]!.payload.tools as Array<{ name: string; policy: string }>;
    expect(tools.find((t) => t.name === "fs/write_file")?.policy).toBe("denied");
    expect((welcomes[0]!.payload.tools as Array<{ name: string; policy: string }>).find((t) => t.name === "fs/write_file")?.policy).toBe(
      "proposal",
    );
    // The read, now allowed directly, still waits for a person.
    expect(
      space(g)
        .proposals.pending()
        .map((p) => p.id),
    ).toEqual(["r1"]);
    expect(agent.closeCode).toBeUndefined();
    // In the audit trail: who reloaded and what changed; no token anywhere in it.
    const trail = readAudit(pathJoin(g.dir, ".mewgate"));
    const reloaded = trail.find((e) => e.event === "reloaded")!;
    expect(reloaded).toMatchObject({ proposer: "human", changes: ["participants changed: agent"] });
    expect(trail.find((e) => e.proposal === "w1" && e.event === "rejected")).toMatchObject({
      reason: "policy_changed",
      by: "system:gateway",
    });
    const journal = readFileSync(pathJoin(g.dir, ".mewgate", "journal"), "latin1");
    for (const id of ["human", "bob", "agent", "fs"]) expect(journal).not.toContain(T(id));
  });

  it("a participant removed from the file is closed with 4412; an added one can join at once", async () => {
    const { g, file, port } = await setup((p) => SPACE(p));
    const agent = await join(g, T("agent"));
    writeFileSync(file, SPACE(port).replace(/ {2}agent: .*\n/, "  carol: {kind: human, token: carol-token-0123456789abcdef}\n"));
    const r = await api(g, T("human"), "POST", "reload");
    expect(r.body.reloaded[0]).toMatchObject({ added: ["carol"], removed: ["agent"], closed: ["agent"] });
    expect(await agent.closed).toMatchObject({ code: 4412 });
    expect((await refused(g, T("agent"))).code).toBe(4401);
    await join(g, "carol-token-0123456789abcdef");
  });
});

describe("tokens: rotate, grace, revoke, expire, sessions", () => {
  /** A space whose tokens the gateway generates (mewgate only rotates those). */
  async function generated() {
    const s = await setup((p) => SPACE(p, 'ask: ["fs/*"]', { tokens: false }));
    const tok = (id: string) => readFileSync(pathJoin(s.dir, ".mewgate", "tokens", `${id}.token`), "utf8").trim();
    return { ...s, tok };
  }

  it("rotate --grace: the old token works until the grace ends, then is refused at join (4411) and its session closed", {
    timeout: 30_000,
  }, async () => {
    const { g, file, tok } = await generated();
    const t1 = tok("agent");
    const old = await join(g, t1);
    const out = io();
    expect(await runToken("rotate", "agent", { config: file, grace: "3s", as: "human" }, out.io)).toBe(0);
    expect(out.out()).toMatch(/the old one works for 3s more/);
    expect(out.out()).toMatch(/tokens changed: agent/);
    expect(out.out() + out.err()).not.toContain(t1);
    const t2 = tok("agent");
    expect(t2).not.toBe(t1);
    // Both work during the grace; the new one's session replaces the old.
    const fresh = await join(g, t2);
    expect(await old.closed).toMatchObject({ code: 4409 });
    const during = await join(g, t1);
    expect(fresh.closeCode === undefined || fresh.closeCode === 4409).toBe(true);
    // After the grace: the session on the old token ends, and the old token is refused.
    expect(await during.closed).toEqual({ code: 4411, reason: expect.stringMatching(/expired/) });
    expect(await refused(g, t1)).toMatchObject({ code: 4411 });
    await join(g, t2);
  });

  it("rotate without grace: the old token's session is closed at once (4412) and the old token refused", async () => {
    const { g, file, tok } = await generated();
    const t1 = tok("agent");
    const session = await join(g, t1);
    expect(await runToken("rotate", "agent", { config: file, as: "human" }, io().io)).toBe(0);
    expect(await session.closed).toMatchObject({ code: 4412 });
    expect((await refused(g, t1)).code).toBe(4401);
    await join(g, tok("agent"));
  });

  it("revoke: the session using it is closed, the token refused after; works for a token set in space.yaml too", async () => {
    const { g, file } = await setup((p) => SPACE(p));
    const session = await join(g, T("agent"));
    const out = io();
    expect(await runToken("revoke", "agent", { config: file, as: "human" }, out.io)).toBe(0);
    expect(out.out()).toMatch(/revoked the token of agent/);
    expect(await session.closed).toMatchObject({ code: 4412 });
    expect((await refused(g, T("agent"))).code).toBe(4401);
    // The meta file holds digests only.
    const meta = readFileSync(pathJoin(g.dir, ".mewgate", "tokens", "agent.meta.json"), "utf8");
    expect(meta).not.toContain(T("agent"));
  });

  it("expire: a token past its expiry is refused at join (4411), and a session on it is closed when it expires", {
    timeout: 30_000,
  }, async () => {
    const { g, file, tok } = await generated();
    expect(await runToken("rotate", "agent", { config: file, expires: "2s", as: "human" }, io().io)).toBe(0);
    const t = tok("agent");
    const session = await join(g, t);
    const sessions = await api(g, tok("human"), "GET", "sessions");
    expect(sessions.body.sessions.find((s: any) => s.participant === "agent")).toMatchObject({
      address: "127.0.0.1",
      token_expires_at: expect.any(String),
    });
    expect(JSON.stringify(sessions.body)).not.toContain(t);
    expect(await session.closed).toMatchObject({ code: 4411 });
    expect(await refused(g, t)).toMatchObject({ code: 4411, reason: expect.stringMatching(/expired at/) });
  });

  it("an operator lists sessions and ends one (4413)", async () => {
    const { g, file } = await setup((p) => SPACE(p));
    const agent = await join(g, T("agent"));
    const out = io();
    expect(await runSessions("list", undefined, { config: file, as: "human" }, out.io)).toBe(0);
    expect(out.out()).toMatch(/agent \(agent\) from 127\.0\.0\.1 since/);
    expect(await runSessions("end", "agent", { config: file, as: "human" }, io().io)).toBe(0);
    expect(await agent.closed).toEqual({ code: 4413, reason: "your session was ended by human" });
    const again = await api(g, T("human"), "DELETE", "sessions/agent");
    expect(again.status).toBe(404);
  });
});

describe("SIGHUP against a real mewgate up", () => {
  it("reloads on SIGHUP (a removed participant closed, an invalid file refused with line:col) and keeps running", {
    timeout: 60_000,
  }, async () => {
    const dir = tempDir();
    const port = await freePort();
    const file = pathJoin(dir, "space.yaml");
    writeFileSync(file, SPACE(port));
    const cli = new Cli(["up", file, "--port", String(port), "--as", "human"], { stdin: "pipe" });
    clis.push(cli);
    await cli.waitLine((l) => l["event"] === "ready", "up ready");
    const g = { port };
    const agent = await join(g, T("agent"));
    writeFileSync(file, SPACE(port).replace(/ {2}agent: .*\n/, ""));
    cli.child.kill("SIGHUP");
    expect(await agent.closed).toMatchObject({ code: 4412 });
    await poll("the reload said", () => /reloaded space rl/.test(cli.stderr + cli.stdout));
    writeFileSync(file, "space: {id: rl}\nparticipants:\n  human: {kind: humn}\n");
    cli.child.kill("SIGHUP");
    await poll("the refusal said", () => /reload refused, nothing changed: .*space\.yaml:3:\d+/.test(cli.stderr + cli.stdout));
    // Still running, with the rules of the last good file.
    await join(g, T("bob"));
    const audit = await run(["audit", "--state-dir", pathJoin(dir, ".mewgate")]);
    expect(audit.stdout, audit.stderr).toMatch(/reloaded\s+by SIGHUP\s+participants removed: agent/);
    cli.child.kill("SIGTERM");
    expect((await cli.exited).code).toBe(0);
  });
});

describe("a reload that adds or removes an MCP server under mewgate up", () => {
  it("starts the one it adds (its tools are in the space at once) and stops the one it removes", { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const port = await freePort();
    const file = pathJoin(dir, "space.yaml");
    const echo = pathJoin(import.meta.dirname, "fixtures", "bridge", "echo.mjs");
    writeFileSync(file, SPACE(port));
    const cli = new Cli(["up", file, "--port", String(port), "--as", "human"], { stdin: "pipe" });
    clis.push(cli);
    await cli.waitLine((l) => l["event"] === "ready", "up ready");
    const g = { port };
    const toolsOf = async (who: string) =>
      ((await api(g, T("human"), "GET", "tools")).body.tools as Array<{ participant: string }>).filter((t) => t.participant === who);
    expect(await toolsOf("pg")).toEqual([]);
    const added = `${SPACE(port)}  pg: {kind: mcp, token: ${T("pg")}, mcp: {command: ${JSON.stringify(process.execPath)}, args: [${JSON.stringify(echo)}]}}\n`;
    writeFileSync(file, added);
    const reload = await run(["reload", file, "--as", "human"]);
    expect(reload.code, reload.stderr).toBe(0);
    expect(reload.stdout).toMatch(/participants added: pg/);
    await poll("pg's tools in the space", async () => ((await toolsOf("pg")).length > 0 ? true : undefined), 20_000, 200);
    await poll("the start said", () => /pg: MCP server started \(added by a reload\)/.test(cli.stderr + cli.stdout));
    // Removed: stopped, and its tools leave the space.
    writeFileSync(file, SPACE(port));
    expect((await run(["reload", file, "--as", "human"])).code).toBe(0);
    await poll("pg's tools gone", async () => ((await toolsOf("pg")).length === 0 ? true : undefined), 20_000, 200).catch((e) => {
      throw new Error(`${e.message}\n${cli.stderr.slice(-1500)}\n${cli.stdout.slice(-1500)}`);
    });
    await poll("the stop said", () => /pg: MCP server stopped \(removed from the space\)/.test(cli.stderr + cli.stdout));
    cli.child.kill("SIGTERM");
    expect((await cli.exited).code).toBe(0);
  });
});
