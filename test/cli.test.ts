import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startGateway, TestClient } from "./helpers.js";

const MAIN = join(import.meta.dirname, "..", "dist", "cli", "main.js");
const children: ChildProcess[] = [];

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
});

function run(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  const child = spawn(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  return child;
}

function output(child: ChildProcess): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d) => (stdout += d));
  child.stderr!.on("data", (d) => (stderr += d));
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
}

function firstLine(child: ChildProcess, re: RegExp): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let buf = "";
    child.stdout!.on("data", (d) => {
      buf += d;
      const m = buf.match(re);
      if (m) resolve(m);
    });
    child.on("exit", (code) => reject(new Error(`exited ${code} before printing ${re}`)));
  });
}

function space(yaml: string): { dir: string; file: string } {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-cli-"));
  const file = join(dir, "space.yaml");
  writeFileSync(file, yaml);
  return { dir, file };
}

const OK = `space: {id: cli}\nparticipants:\n  alice: {kind: human, token: "\${ALICE_TOKEN}"}\n`;

describe("mewgate gateway", () => {
  it("prints ws://HOST:PORT once it accepts connections, and stops cleanly on SIGTERM", async () => {
    const { file } = space(OK);
    const child = run(["gateway", "--config", file, "--port", "0"], { ALICE_TOKEN: "secret-alice-1" });
    const done = output(child);
    const [, port] = await firstLine(child, /ws:\/\/127\.0\.0\.1:(\d+)/);
    const alice = await TestClient.join({ port: Number(port) }, "cli", "secret-alice-1");
    child.kill("SIGTERM");
    expect((await alice.closed).code).toBe(1001);
    expect((await done).code).toBe(0);
  });

  it("keeps tokens out of the logs, even at debug level and for refused attempts", async () => {
    const { dir, file } = space(OK);
    const log = join(dir, "gw.log");
    const child = run(["gateway", "--config", file, "--port", "0", "--log-file", log, "--log-level", "debug"], {
      ALICE_TOKEN: "secret-alice-1",
    });
    const done = output(child);
    const [, port] = await firstLine(child, /ws:\/\/127\.0\.0\.1:(\d+)/);
    const alice = await TestClient.join({ port: Number(port) }, "cli", "secret-alice-1");
    alice.send({ from: "mallory", kind: "chat", payload: { text: "forged" } });
    await alice.next((e) => e.kind === "system/error");
    const wrong = TestClient.connect({ port: Number(port) }, "space=cli&token=guess-token-42");
    await wrong.closed;
    const joinFrame = TestClient.connect({ port: Number(port) }, "space=cli");
    await joinFrame.opened;
    joinFrame.send({ type: "join", space: "cli", token: "secret-alice-1" });
    await joinFrame.next((e) => e.kind === "system/welcome");
    child.kill("SIGTERM");
    await done;
    const text = readFileSync(log, "utf8");
    // A member's lines carry its id, though its own logger is made only when it first logs.
    const joinedLine = text.split("\n").find((l) => l.includes('"msg":"joined"'));
    expect(JSON.parse(joinedLine!)).toMatchObject({ space: "cli", participant: "alice", msg: "joined" });
    expect(text).toContain("refused");
    expect(text).not.toContain("secret-alice-1");
    expect(text).not.toContain("guess-token-42");
    // The start is accounted for, phase by phase, and the phases add up.
    const started = text.split("\n").find((l) => l.includes('"accepting connections"'));
    const ms = (JSON.parse(started!) as { start_ms: Record<string, number> }).start_ms;
    expect(Object.keys(ms)).toEqual(["node", "code", "config", "gateway", "listen", "total"]);
    for (const v of Object.values(ms)) expect(v).toBeGreaterThanOrEqual(0);
    expect(Math.abs(ms["node"]! + ms["code"]! + ms["config"]! + ms["gateway"]! + ms["listen"]! - ms["total"]!)).toBeLessThan(1);
  });

  it("exits non-zero with file:line:col on a bad space.yaml", async () => {
    const { file } = space(`space: {id: cli}\nparticipants:\n  alice:\n    kind: robot\n`);
    const { code, stderr } = await output(run(["gateway", "--config", file, "--port", "0"]));
    expect(code).not.toBe(0);
    expect(stderr).toContain(`${file}:4:11: participants.alice.kind:`);
    expect(stderr).toContain('"robot"');
  });

  it("exits non-zero with a readable message when the port is in use", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r));
    const port = (blocker.address() as { port: number }).port;
    try {
      const { file } = space(OK);
      const { code, stderr } = await output(run(["gateway", "--config", file, "--port", String(port)], { ALICE_TOKEN: "secret-alice-1" }));
      expect(code).not.toBe(0);
      expect(stderr).toContain(`port ${port} on 127.0.0.1 is already in use`);
    } finally {
      blocker.close();
    }
  });

  it("suggests the nearest command for a typo", async () => {
    const { code, stderr } = await output(run(["gatway"]));
    expect(code).not.toBe(0);
    expect(stderr).toMatch(/Did you mean gateway\?/);
  });
});

describe("mewgate commands: errors a person can act on", () => {
  const done = (args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}) => {
    const child = spawn(process.execPath, [MAIN, ...args], {
      env: { PATH: process.env.PATH, ...opts.env },
      cwd: opts.cwd,
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    return output(child);
  };

  it("up without a space.yaml says where it looked and how to get one", async () => {
    const { dir } = space(OK);
    const empty = mkdtempSync(join(tmpdir(), "mewgate-empty-"));
    const r = await done(["up"], { cwd: empty });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`no space.yaml in ${empty}`);
    expect(r.stderr).toContain("mewgate init");
    const missing = await done(["up", join(dir, "nope.yaml")]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain(`${join(dir, "nope.yaml")}: cannot read: no such file`);
  });

  it("up with an invalid space.yaml points at file:line:col", async () => {
    const { file } = space(`space: {id: cli}\nparticipants:\n  alice:\n    kind: robot\n`);
    const r = await done(["up", file, "--port", "0"]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`${file}:4:11: participants.alice.kind:`);
  });

  it("up on a port in use says so", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r));
    const port = (blocker.address() as { port: number }).port;
    try {
      const { dir, file } = space(OK);
      const r = await done(["up", file, "--port", String(port), "--state-dir", join(dir, "state")], {
        env: { ALICE_TOKEN: "secret-alice-1" },
      });
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain(`port ${port} on 127.0.0.1 is already in use`);
    } finally {
      blocker.close();
    }
  });

  it("an unknown command gets the nearest one suggested", async () => {
    const r = await done(["upp"]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Did you mean up\?/);
  });

  it("connect to a gateway that is not there names the URL", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r));
    const port = (blocker.address() as { port: number }).port;
    await new Promise<void>((r) => blocker.close(() => r()));
    const r = await done(["connect", "--gateway", `ws://127.0.0.1:${port}`, "--space", "cli", "--token", "whatever-token"]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`cannot reach the gateway at ws://127.0.0.1:${port} (connection refused)`);
  });

  it("a wrong token is refused by name, for connect and the one-shot commands", async () => {
    const gw = await startGateway(OK, { env: { ALICE_TOKEN: "secret-alice-1" } });
    try {
      for (const cmd of [["connect"], ["tools"], ["send", "hi"], ["proposals"]]) {
        const r = await done([...cmd, "--gateway", gw.url, "--space", "cli", "--token", "not-the-token"]);
        expect(r.code, cmd.join(" ")).not.toBe(0);
        expect(r.stderr).toContain('the gateway refused the token from --token for space "cli"');
      }
      const space404 = await done(["tools", "--gateway", gw.url, "--space", "nope", "--token", "secret-alice-1"]);
      expect(space404.stderr).toContain(`the gateway at ${gw.url} has no space "nope"`);
    } finally {
      await gw.stop();
    }
  });

  it("connect in JSON mode joins, sends a chat, and leaves at the end of its input", async () => {
    const gw = await startGateway(
      `space: {id: cli}\nparticipants:\n  alice: {kind: human, token: "secret-alice-1"}\n  bob: {kind: human, token: "secret-bob-22"}\n`,
    );
    try {
      const bob = await TestClient.join(gw, "cli", "secret-bob-22");
      const child = spawn(process.execPath, [MAIN, "connect", "--gateway", gw.url, "--space", "cli", "--token", "secret-alice-1"], {
        env: { PATH: process.env.PATH },
        stdio: ["pipe", "pipe", "pipe"],
      });
      children.push(child);
      const result = output(child);
      await bob.next((e) => e.kind === "system/presence" && e.payload.event === "join");
      child.stdin!.end(`${JSON.stringify({ chat: "hi bob", to: ["bob"] })}\n`);
      const chat = await bob.next((e) => e.kind === "chat");
      expect(chat).toMatchObject({ from: "alice", to: ["bob"], payload: { text: "hi bob" } });
      const { code, stdout } = await result;
      expect(code).toBe(0);
      const lines = stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      expect(lines[0].kind).toBe("system/welcome");
      expect(lines.some((l) => l.event === "ready" && l.participant === "alice")).toBe(true);
      bob.close();
    } finally {
      await gw.stop();
    }
  });

  it("status and down with nothing running, and tokens that are not ours to rotate", async () => {
    const { dir, file } = space(`space: {id: cli}\nparticipants:\n  alice: {kind: human, token: "secret-alice-1"}\n  bot: {kind: agent}\n`);
    const status = await done(["status", file, "--state-dir", join(dir, "s")]);
    expect(status.code).not.toBe(0);
    expect(status.stderr).toContain("nothing is running for space cli");
    const down = await done(["down", file, "--state-dir", join(dir, "s")]);
    expect(down.code).not.toBe(0);
    expect(down.stderr).toContain("nothing to stop");
    const rotate = await done(["token", "rotate", "alice", "--config", file]);
    expect(rotate.code).not.toBe(0);
    expect(rotate.stderr).toContain("is set in");
    expect(rotate.stderr).toContain("mewgate only rotates tokens it generated");
    const env = await done(["token", "rotate", "bot", "--config", file], { env: { MEWGATE_TOKEN_BOT: "from-the-env-1" } });
    expect(env.stderr).toContain("comes from MEWGATE_TOKEN_BOT");
    const none = await done(["token", "show", "bot", "--config", file]);
    expect(none.stderr).toContain('"bot" has no token yet');
    const fresh = await done(["token", "rotate", "bot", "--config", file]);
    expect(fresh.code).toBe(0);
    const shown = await done(["token", "show", "bot", "--config", file]);
    expect(shown.stdout.trim()).toBe(readFileSync(join(dir, ".mewgate", "tokens", "bot.token"), "utf8").trim());
  });
});

describe("mewgate bridge", () => {
  it("plugs a stdio MCP server into a running space until SIGTERM, then stops it", async () => {
    const sandbox = mkdtempSync(join(tmpdir(), "mewgate-bridge-"));
    writeFileSync(join(sandbox, "note.txt"), "bridged\n");
    const gw = await startGateway(
      `space: {id: cli}\nparticipants:\n  alice: {kind: human, token: "secret-alice-1"}\n  fs: {kind: mcp, token: "secret-fs-22"}\n`,
    );
    try {
      const alice = await TestClient.join(gw, "cli", "secret-alice-1");
      const server = join(import.meta.dirname, "..", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js");
      const child = run([
        "bridge",
        "--gateway",
        gw.url,
        "--space",
        "cli",
        "--token",
        "secret-fs-22",
        "--as",
        "fs",
        "--",
        process.execPath,
        server,
        sandbox,
      ]);
      const done = output(child);
      await alice.next((e) => e.kind === "system/presence" && e.payload.event === "join" && e.payload.participant.id === "fs", 15_000);
      await alice.next((e) => e.kind === "mcp/request" && e.payload.method === "notifications/tools/list_changed", 15_000);
      alice.send({
        id: "call-1",
        kind: "mcp/request",
        to: ["system:gateway"],
        payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "fs/read_text_file", arguments: { path: "note.txt" } } },
      });
      const answer = await alice.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("call-1") === true, 10_000);
      expect(answer.payload.result.content[0].text).toBe("bridged\n");
      child.kill("SIGTERM");
      const { code, stderr } = await done;
      expect(code).toBe(0);
      expect(stderr).toContain("joined space cli as fs");
      await alice.next((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === "fs");
      alice.close();
    } finally {
      await gw.stop();
    }
  });

  it("says which participant it should be", async () => {
    const { code, stderr } = await output(
      run(["bridge", "--gateway", "ws://127.0.0.1:1", "--space", "x", "--token", "tok-12345678", "--", "true"]),
    );
    expect(code).not.toBe(0);
    expect(stderr).toContain("give --as <id>");
  });
});
