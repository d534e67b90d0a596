/**
 * The CLI against what the world leaves lying around: up.json files from older versions,
 * cut short or naming someone else's process; tokens in argv; a corrupt state journal.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { alive, allGone, cleanEnv, MAIN, ROOT, run, tempDir } from "./fixtures/cli/harness.js";
import { killGateway, spawnGateway, TestClient, type GatewayProcess } from "./helpers.js";

const children: ChildProcess[] = [];
const gateways: GatewayProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const g of gateways.splice(0)) await killGateway(g);
});

const SPACE = `
space: {id: clih}
participants:
  me: {kind: human, token: me-token-123456}
  bot: {kind: agent, token: bot-token-123456}
`;

function spaceDir(): { dir: string; state: string; file: string } {
  const dir = tempDir();
  const file = join(dir, "space.yaml");
  writeFileSync(file, SPACE);
  const state = join(dir, ".mewgate");
  mkdirSync(state, { recursive: true });
  return { dir, state, file };
}

/** A long-running process whose command line is `argv` (node, idling). */
function idler(extraArgs: string[]): ChildProcess {
  const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)", ...extraArgs], { stdio: "ignore" });
  children.push(child);
  return child;
}

describe("mewgate down and old or damaged up.json files", () => {
  it("does not kill a process that an old up.json (no argv) names but that is not a mewgate up", async () => {
    const { state, file } = spaceDir();
    const stranger = idler(["unrelated-program"]);
    writeFileSync(join(state, "up.json"), JSON.stringify({ pid: stranger.pid, url: "ws://127.0.0.1:1", space: "clih" }));
    const r = await run(["down", file], { env: cleanEnv() });
    expect(r.stderr).not.toMatch(/TypeError|at .*\.js:\d+/);
    expect(r.stderr).toContain("another process");
    expect(r.code).toBe(1);
    expect(alive(stranger.pid!)).toBe(true);
  });

  it("stops the mewgate up an old up.json names, though the file has no argv", async () => {
    const { state, file } = spaceDir();
    const up = idler([MAIN, "up", file]);
    writeFileSync(join(state, "up.json"), JSON.stringify({ pid: up.pid, startedAt: new Date().toISOString() }));
    const r = await run(["down", file], { env: cleanEnv() });
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain(`pid ${up.pid}`);
    expect(r.code).toBe(0);
    await allGone([up.pid!]);
  });

  it("says precisely what is wrong with an up.json cut short or without a pid, without a stack trace", async () => {
    const { state, file } = spaceDir();
    writeFileSync(join(state, "up.json"), '{"pid": 12');
    const cut = await run(["down", file], { env: cleanEnv() });
    expect(cut.code).toBe(1);
    expect(cut.stderr).toContain("up.json is not JSON");
    expect(cut.stderr).toContain("remove");
    expect(cut.stderr).not.toMatch(/at .*\.js:\d+/);
    writeFileSync(join(state, "up.json"), JSON.stringify({ url: "ws://127.0.0.1:1" }));
    const noPid = await run(["down", file], { env: cleanEnv() });
    expect(noPid.code).toBe(1);
    expect(noPid.stderr).toMatch(/up\.json: pid: /);
  });
});

describe("tokens out of argv", () => {
  it("warns when the token is given on the command line, and when a token file is readable by others", async () => {
    const dir = tempDir();
    const args = ["tools", "--gateway", "ws://127.0.0.1:1", "--space", "clih"];
    const inArgv = await run([...args, "--token", "secret-token-1"], { env: cleanEnv() });
    expect(inArgv.stderr).toContain("warning: --token puts the token in the command line");
    expect(inArgv.stderr).not.toContain("secret-token-1");

    const file = join(dir, "token");
    writeFileSync(file, "secret-token-2\n");
    chmodSync(file, 0o644);
    const open = await run([...args, "--token-file", file], { env: cleanEnv() });
    expect(open.stderr).toContain("can be read by other users; chmod 600");
    chmodSync(file, 0o600);
    const closed = await run([...args, "--token-file", file], { env: cleanEnv() });
    expect(closed.stderr).not.toContain("warning");
    const fromEnv = await run(args, { env: cleanEnv({ MEWGATE_TOKEN: "secret-token-3" }) });
    expect(fromEnv.stderr).not.toContain("warning");
  });

  it("prints the package's version", async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    for (const flag of ["--version", "-V"]) {
      const r = await run([flag], { env: cleanEnv() });
      expect(r.stdout.trim()).toBe(pkg.version);
    }
  });
});

describe("mewgate state repair", () => {
  it("a corrupt journal stops the gateway with the byte and the way out; repair lets it start with what came before", {
    timeout: 30_000,
  }, async () => {
    const { state, file } = spaceDir();
    const g1 = await spawnGateway(file);
    gateways.push(g1);
    const me = await TestClient.join(g1, "clih", "me-token-123456");
    const bot = await TestClient.join(g1, "clih", "bot-token-123456");
    me.send({ id: "g1", kind: "capability/grant", payload: { recipient: "bot", capabilities: [{ kind: "chat/x" }] } });
    await bot.next((e) => e.id === "g1");
    me.ws.terminate();
    bot.ws.terminate();
    await killGateway(g1);
    // Damage the middle of the journal: the grant's frame twice, the first corrupted.
    const journal = join(state, "journal");
    const bytes = readFileSync(journal);
    const extra = Buffer.from(bytes.subarray(8));
    const damaged = Buffer.concat([bytes, extra]);
    damaged.writeUInt8(damaged.readUInt8(20) ^ 0xff, 20);
    writeFileSync(journal, damaged);

    const refused = await spawnGateway(file).then(
      (g) => {
        gateways.push(g);
        return "started";
      },
      (err: Error) => err.message,
    );
    expect(refused).toContain("is corrupt at byte 8");
    expect(refused).toContain("mewgate state repair");

    const repaired = await run(["state", "repair", file], { env: cleanEnv() });
    expect(repaired.code).toBe(0);
    expect(repaired.stdout).toContain("unreadable from byte 8");
    gateways.push(await spawnGateway(file));
  });
});

describe("one-shot commands never disturb a live session", () => {
  it("tools, proposals and grants act through the API: the human's live connection stays, and a grant can be listed and revoked", {
    timeout: 30_000,
  }, async () => {
    const { file } = spaceDir();
    const g = await spawnGateway(file);
    gateways.push(g);
    const me = await TestClient.join(g, "clih", "me-token-123456");
    const bot = await TestClient.join(g, "clih", "bot-token-123456");
    const common = ["--gateway", `ws://127.0.0.1:${g.port}`, "--space", "clih", "--token-file", tokenFileWith("me-token-123456")];
    expect((await run(["tools", ...common], { env: cleanEnv() })).code).toBe(0);
    expect((await run(["proposals", "list", ...common], { env: cleanEnv() })).stdout).toContain("no proposals waiting");
    me.send({ id: "lend", kind: "capability/grant", payload: { recipient: "bot", capabilities: [{ kind: "chat/x" }], reason: "try it" } });
    await bot.next((e) => e.id === "lend");
    const listed = await run(["grants", ...common], { env: cleanEnv() });
    expect(listed.stdout).toMatch(/\[lend\] me → bot: .*chat\/x.* \(try it\)/);
    const revoked = await run(["grants", "revoke", "lend", ...common], { env: cleanEnv() });
    expect(revoked.code).toBe(0);
    await bot.next((e) => e.kind === "capability/revoke");
    expect((await run(["grants", ...common], { env: cleanEnv() })).stdout).toContain("no grants");
    // Through all of that, the human's own connection was never replaced (4409).
    expect(me.closeCode).toBeUndefined();
    me.send({ id: "alive", kind: "chat", payload: { text: "still here" } });
    await bot.next((e) => e.id === "alive");
  });
});

function tokenFileWith(token: string): string {
  const file = join(tempDir(), "token");
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  return file;
}

describe("up --detach", () => {
  it("fails with the participant's error when a declared participant does not start, and leaves nothing running", {
    timeout: 30_000,
  }, async () => {
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    writeFileSync(
      file,
      "space: {id: bad}\nparticipants:\n  you: {kind: human}\n  fs:\n    kind: mcp\n    mcp: {command: /nonexistent/mcp-server, args: []}\n",
    );
    const r = await run(["up", file, "--port", "0", "--detach"], { env: cleanEnv() });
    expect(r.code).not.toBe(0);
    // One line, the cause named: the command is missing.
    expect(r.stderr).toContain('could not start fs: command "/nonexistent/mcp-server" not found (spawn ENOENT)');
    expect(r.stdout).not.toContain("running in the background");
    const down = await run(["down", file], { env: cleanEnv() });
    expect(down.stderr).toContain("nothing to stop");
  });
});
