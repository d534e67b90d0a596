import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { TestClient } from "./helpers.js";

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
    const child = run(["gateway", "--config", file, "--port", "0", "--log-file", log, "--log-level", "debug"], { ALICE_TOKEN: "secret-alice-1" });
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
    expect(text).toContain("joined");
    expect(text).toContain("refused");
    expect(text).not.toContain("secret-alice-1");
    expect(text).not.toContain("guess-token-42");
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
