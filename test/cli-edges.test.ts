/**
 * The CLI's edges, driven as a person would: output piped into a reader that stops early,
 * the same flags on every command, hints that name commands a shell runs, `up --detach`
 * saying what a foreground `up` says, and a participant that cannot start or crashes
 * reported with its cause in one line.
 */
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Cli, cleanEnv, MAIN, ROOT, run, tempDir } from "./fixtures/cli/harness.js";
import { killGateway, spawnGateway, type GatewayProcess } from "./helpers.js";

const started: Cli[] = [];
const gateways: GatewayProcess[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) c.kill("SIGKILL");
  await Promise.all(gateways.splice(0).map(killGateway));
});

const TOKEN = "you-edges-token-0123456789abcdef";

function space(extra = ""): { dir: string; file: string } {
  const dir = tempDir();
  const file = join(dir, "space.yaml");
  writeFileSync(file, `space: {id: edges}\nparticipants:\n  you: {kind: human, token: ${TOKEN}}\n${extra}`);
  return { dir, file };
}

/** Runs `mewgate args` with its stdout closed by the reader before it writes: as `| head -1` does, every time. */
async function withClosedStdout(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [MAIN, ...args], { env: cleanEnv(), cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout.destroy();
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  return { code, stderr };
}

describe("the CLI's edges", () => {
  it("ends quietly when its reader goes away (EPIPE), for every command that writes to stdout", { timeout: 60_000 }, async () => {
    const { file } = space();
    for (const args of [
      ["audit", "--json", "-c", file],
      ["audit", "-c", file],
      ["token", "show", "you", "-c", file],
      ["--version"],
      ["--help"],
    ]) {
      const r = await withClosedStdout(args);
      expect({ args, stderr: r.stderr }).toEqual({ args, stderr: expect.not.stringMatching(/EPIPE|at \w|Error/) });
    }
    // And through a real shell pipe, as a person types it.
    const piped = spawnSync(
      "sh",
      ["-c", `"${process.execPath}" "${MAIN}" audit --json -c "${file}" | head -1; "${process.execPath}" "${MAIN}" --help | head -1`],
      { env: cleanEnv(), encoding: "utf8" },
    );
    expect(piped.stderr).not.toMatch(/EPIPE|at \w/);
  });

  it("takes the space file as an argument or -c alike: token show you s2/space.yaml, status -c", { timeout: 30_000 }, async () => {
    const { file } = space();
    const shown = await run(["token", "show", "you", file]);
    expect({ code: shown.code, out: shown.stdout.trim() }).toEqual({ code: 0, out: TOKEN });
    const both = await run(["token", "show", "you", file, "-c", join(ROOT, "spaces", "demo", "space.yaml")]);
    expect(both.code).not.toBe(0);
    expect(both.stderr).toContain("two space files given");
    const status = await run(["status", "-c", file]);
    expect(status.stderr).not.toMatch(/unknown option/);
    expect(status.stderr).toContain("nothing is running for space edges");
    const viaG = await run(["status", "-c", file, "-g", "ws://127.0.0.1:1"]);
    expect(viaG.stderr).not.toMatch(/unknown option/);
  });

  it("names CLI commands in CLI error hints, not terminal ones", { timeout: 30_000 }, async () => {
    const { file } = space();
    const gw = await spawnGateway(file);
    gateways.push(gw);
    const r = await run(["proposals", "approve", "nope", "-g", `ws://127.0.0.1:${gw.port}`, "-s", "edges", "-t", TOKEN]);
    expect(r.code).not.toBe(0);
    // The hint names a command the shell can run: `mewgate` when that is this program on the PATH, else `node …/main.js`.
    expect(r.stderr).toMatch(/no pending proposal "nope" \((mewgate|node \S*main\.js) proposals list lists them\)/);
    expect(r.stderr).not.toContain("/proposals");
  });

  it("up --detach prints the warnings a foreground up prints", { timeout: 60_000 }, async () => {
    const { file } = space("  outside: {kind: agent}\n");
    const state = tempDir();
    const r = await run(["up", file, "--state-dir", state, "--port", "0", "--detach"]);
    try {
      expect(r.code).toBe(0);
      expect(r.stderr).toContain("outside (agent) is not started by up");
    } finally {
      await run(["down", file, "--state-dir", state]);
    }
  });

  it("reports a participant whose command is missing, or whose script fails, with its cause in one line", { timeout: 60_000 }, async () => {
    const crash = `console.error(JSON.stringify({ level: 30, msg: "starting" })); console.error(JSON.stringify({ level: 50, msg: "cannot open the database \\u001b[31mred", err: { message: "ENOENT: no such file, open '/x.db'" } })); console.error("    at Object.<anonymous> (/x.js:1:1)"); process.exit(1)`;
    const { file } = space(
      `  helper:\n    kind: service\n    run: {command: no-such-binary-mewgate}\n  crasher:\n    kind: service\n    run: {command: ${JSON.stringify(process.execPath)}, args: ["-e", ${JSON.stringify(crash)}]}\n`,
    );
    const state = tempDir();
    const cli = new Cli(["up", file, "--state-dir", state, "--port", "0", "--json"], { stdin: "pipe" });
    started.push(cli);
    await cli.waitLine(
      (l) => l["event"] === "error" && /^helper: command "no-such-binary-mewgate" not found \(spawn ENOENT\)/.test(l["message"]),
      "the missing command, in one line",
    );
    const crashed = await cli.waitLine(
      (l) => l["event"] === "error" && /^crasher exited with code 1/.test(l["message"]),
      "the crash, with its cause",
    );
    expect(crashed["message"]).toContain("cannot open the database red: ENOENT: no such file, open '/x.db'");
    expect(crashed["message"]).not.toContain("\u001b");
    expect(crashed["message"]).not.toContain("\n");
  });
});
