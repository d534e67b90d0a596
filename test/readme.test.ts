/**
 * The README's offline walk-through, run as the README writes it: its `mewgate` commands
 * are read from its ```sh blocks (so a changed command is the one tested), `mewgate` is
 * the built CLI (`node dist/cli/main.js`), and the only changes are the ones a test must
 * make: a temp directory to work in, `--port 0` on `up`, and the proposal id the listing
 * printed in place of `<id>`. Its space.yaml snippets are checked against the schema too.
 * Once more from a fresh `git clone` of this checkout: the first screen's `npm install`
 * (from the registry, through npm's cache), the PATH section's `npm link` (into a prefix of
 * the test's own), then the same walk-through with the `mewgate` that put on the PATH.
 */
import { chmodSync, existsSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { alive, allGone, Cli, cleanEnv, descendants, MAIN, poll, ROOT, run, tempDir } from "./fixtures/cli/harness.js";

const README = readFileSync(join(ROOT, "README.md"), "utf8");

/** The bodies of the README's fenced blocks of one language. */
function blocks(lang: string): string[] {
  return [...README.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\``, "gm"))].map((m) => m[1]!);
}

/** One shell line as words: quotes group, a `#` after a space starts a comment. */
function words(line: string): string[] {
  const out: string[] = [];
  let word: string | undefined;
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else word += c;
    } else if (c === '"' || c === "'") {
      quote = c;
      word ??= "";
    } else if (/\s/.test(c)) {
      if (word !== undefined) out.push(word);
      word = undefined;
    } else if (c === "#" && word === undefined) {
      break;
    } else {
      word = (word ?? "") + c;
    }
  }
  if (quote) throw new Error(`unbalanced quote in README command: ${line}`);
  if (word !== undefined) out.push(word);
  return out;
}

/** Every `mewgate …` command of the README's sh blocks, as its arguments (without `mewgate`). */
function commands(): string[][] {
  const lines = blocks("sh").flatMap((b) => b.replace(/\\\n\s*/g, " ").split("\n"));
  return lines
    .map(words)
    .filter((w) => w[0] === "mewgate")
    .map((w) => w.slice(1));
}

/** The first README command that `pred` picks; fails naming what the README should show. */
function command(what: string, pred: (args: string[]) => boolean): string[] {
  const found = commands().find(pred);
  if (!found) throw new Error(`the README shows no command to ${what}`);
  return found;
}

/** A command run to its end, its output kept; `shown` for a failing assert's message. */
async function shell(
  cmd: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string; shown: string }> {
  const cli = new Cli(args, { env, cwd, command: [cmd] });
  const { code } = await cli.exited;
  return {
    code,
    stdout: cli.stdout,
    stderr: cli.stderr,
    shown: `${cmd} ${args.join(" ")}\n--- stdout:\n${cli.stdout}\n--- stderr:\n${cli.stderr}`,
  };
}

type Mewgate = (args: string[]) => Promise<{ code: number | null; stdout: string; stderr: string; shown: string }>;

/**
 * The README's walk-through in `cwd`, each command as the README writes it (the only change:
 * `--port 0` on `up`, whose 7420 may be taken), each output asserted.
 */
async function walkThrough(cwd: string, mewgate: Mewgate): Promise<void> {
  const init = await mewgate(command("write a starter space", (a) => a[0] === "init"));
  expect(init.code, init.shown).toBe(0);
  expect(init.stdout).toContain("next: mewgate up");
  expect(readFileSync(join(cwd, init.stdout.match(/next: mewgate up (\S+)/)![1]!, "..", ".gitignore"), "utf8")).toContain(".mewgate/");

  // Port 0: the example's 7420 may be taken on the machine running the tests.
  const up = await mewgate([
    ...command("start the space in the background", (a) => a[0] === "up" && a.includes("--detach")),
    "--port",
    "0",
  ]);
  expect(up.code, up.shown).toBe(0);
  const pid = Number(up.stdout.match(/running in the background \(pid (\d+)\)/)?.[1]);
  expect(pid, up.shown).toBeGreaterThan(0);
  pids.push(pid);

  const status = await mewgate(command("show the space's status", (a) => a[0] === "status"));
  expect(status.code, status.shown).toBe(0);
  // The space is named after its directory (init), so no "(name)" beside an id that says the same.
  expect(status.stdout).toMatch(/space my-space (\(.*\) )?at ws:\/\/127\.0\.0\.1:\d+\/ws/);
  expect(status.stdout).toMatch(/assistant\s+agent\s+connected/);
  expect(status.stdout).toContain("pending proposals (0)");
  expect(status.stdout).toMatch(/web console: http:\/\/127\.0\.0\.1:\d+\/ui\//);

  const send = await mewgate(command("send a chat", (a) => a[0] === "send"));
  expect(send.code, send.shown).toBe(0);

  // The assistant answers the chat by proposing to write hello.txt; it waits for someone to decide.
  const list = command(
    "list the pending proposals",
    (a) => a[0] === "proposals" && (a[1] === undefined || a[1].startsWith("-") || a[1] === "list"),
  );
  let listed = "";
  await poll(
    "the assistant's proposal in the README's listing",
    async () => {
      const r = await mewgate(list);
      expect(r.code, r.shown).toBe(0);
      listed = r.stdout;
      return /assistant → files\/write_file/.test(listed);
    },
    30_000,
    250,
  );
  const id = listed.match(/\[([0-9a-f]{8})\]/)?.[1];
  expect(id, listed).toBeDefined();

  const showArgs = command("show a proposal's card", (a) => a[0] === "proposals" && a[1] === "show");
  expect(showArgs, "the README's show command names the proposal as <id>").toContain("<id>");
  const show = await mewgate(showArgs.map((a) => (a === "<id>" ? id! : a)));
  expect(show.code, show.shown).toBe(0);
  expect(show.stdout).toMatch(/^assistant wants files\/write_file {2}#[0-9a-f]{8}$/m);
  expect(show.stdout).toMatch(/arguments:\n {2}path: hello\.txt/);
  expect(show.stdout).toContain("a new file");

  const approveArgs = command("approve a proposal", (a) => a[0] === "proposals" && a[1] === "approve");
  expect(approveArgs, "the README's approve command names the proposal as <id>").toContain("<id>");
  const approve = await mewgate(approveArgs.map((a) => (a === "<id>" ? id! : a)));
  expect(approve.code, approve.shown).toBe(0);
  expect(approve.stdout).toContain(`approved files/write_file [${id}] from assistant`);
  expect(approve.stdout).toContain("result: Successfully wrote to hello.txt");
  const space = join(cwd, init.stdout.match(/next: mewgate up (\S+)/)![1]!, "..");
  expect(existsSync(join(space, ".mewgate", "sandbox", "hello.txt"))).toBe(true);

  const tree = descendants(pid);
  const down = await mewgate(command("stop the space", (a) => a[0] === "down"));
  expect(down.code, down.shown).toBe(0);
  expect(down.stdout).toContain(`(pid ${pid})`);
  expect(alive(pid)).toBe(false);
  await allGone(tree);

  const after = await mewgate(command("show the space's status", (a) => a[0] === "status"));
  expect(after.code).not.toBe(0);
  expect(after.stderr).toContain("nothing is running");
}

const dirs: string[] = [];
const pids: number[] = [];

// A fresh clone holds a whole node_modules: removing it takes a while on a loaded machine.
afterEach(() => {
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}, 180_000);

describe("the README", () => {
  it("keeps its two commands", () => {
    const first = blocks("sh")[0]!;
    expect(first).toContain("npm install && npm start");
    expect(first).toContain("npm install && npm test");
  });

  it("runs its walk-through offline: init, up --detach, status, send, proposals, approve, down", { timeout: 150_000 }, async () => {
    const cwd = tempDir("mewgate-readme-");
    dirs.push(cwd);
    // `mewgate` on the PATH is the built CLI, as the README's PATH section makes it (npm link).
    const bin = tempDir("mewgate-bin-");
    dirs.push(bin);
    symlinkSync(MAIN, join(bin, "mewgate"));
    chmodSync(MAIN, 0o755);
    const env = cleanEnv({ PATH: `${bin}:${process.env["PATH"] ?? ""}` });
    await walkThrough(cwd, async (args) => {
      const r = await run(args, { env, cwd });
      return { ...r, shown: `mewgate ${args.join(" ")}\n--- stdout:\n${r.stdout}\n--- stderr:\n${r.stderr}` };
    });
  });

  it("works from a fresh clone: git clone, the README's npm install and npm link, then the walk-through with the mewgate npm link put on the PATH", {
    timeout: 360_000,
  }, async () => {
    // A real clone of this checkout's committed HEAD (what a new operator gets; uncommitted edits are not in it).
    const root = tempDir("mewgate-clone-");
    dirs.push(root);
    const repo = join(root, "mewgate");
    const git = await shell("git", ["clone", "--quiet", "--no-hardlinks", ROOT, repo], root, cleanEnv());
    expect(git.code, git.shown).toBe(0);
    // At this checkout's commit, whatever HEAD the clone chose (a detached HEAD in CI, a branch here).
    const head = (await shell("git", ["rev-parse", "HEAD"], ROOT, cleanEnv())).stdout.trim();
    expect((await shell("git", ["checkout", "--quiet", "--detach", head], repo, cleanEnv())).code).toBe(0);
    expect((await shell("git", ["rev-parse", "HEAD"], repo, cleanEnv())).stdout.trim()).toBe(head);
    expect(existsSync(join(repo, "node_modules")) || existsSync(join(repo, "dist"))).toBe(false);

    // npm from the registry, through the cache the machine already has; a prefix of its own for `npm link`.
    const prefix = join(root, "prefix");
    const env = cleanEnv({
      PATH: `${join(prefix, "bin")}:${process.env["PATH"] ?? ""}`,
      npm_config_prefix: prefix,
      npm_config_prefer_offline: "true",
      npm_config_audit: "false",
      npm_config_fund: "false",
      npm_config_update_notifier: "false",
      // The machine's own trust for the registry (a proxy's CA), as a person's shell would have it.
      ...Object.fromEntries(["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE"].flatMap((k) => (process.env[k] ? [[k, process.env[k]]] : []))),
    });
    // The first screen's install, as written (its `npm start` is the interactive demo, run by the walk-through's `up` instead).
    const install = words(blocks("sh")[0]!.split("\n")[0]!.split("&&")[0]!);
    expect(install).toEqual(["npm", "install"]);
    const installed = await shell(install[0]!, install.slice(1), repo, env);
    expect(installed.code, installed.shown).toBe(0);
    expect(existsSync(join(repo, "dist", "cli", "main.js")), "npm install builds dist/ (prepare)").toBe(true);
    // The clone stays as cloned: the install rewrote no tracked file (the lockfile included).
    expect((await shell("git", ["status", "--porcelain", "--untracked-files=no"], repo, env)).stdout).toBe("");

    // The PATH section's commands, as written.
    const pathSection = README.slice(README.indexOf("## `mewgate` on your PATH"));
    const linkLines = /```sh\n([\s\S]*?)```/
      .exec(pathSection)![1]!
      .split("\n")
      .map(words)
      .filter((w) => w.length);
    expect(linkLines.map((w) => w[0])).toEqual(["npm", "mewgate"]);
    const link = await shell(linkLines[0]![0]!, linkLines[0]!.slice(1), repo, env);
    expect(link.code, link.shown).toBe(0);
    // The `mewgate` now first on the PATH is the clone's own build, not this checkout's.
    expect(realpathSync(join(prefix, "bin", "mewgate"))).toBe(join(realpathSync(repo), "dist", "cli", "main.js"));
    const version = await shell("mewgate", linkLines[1]!.slice(1), repo, env);
    expect(version.code, version.shown).toBe(0);
    expect(version.stdout.trim()).toBe(JSON.parse(readFileSync(join(repo, "package.json"), "utf8")).version);

    // Then the walk-through in the clone, each `mewgate` the one npm link put on the PATH.
    await walkThrough(repo, (args) => shell("mewgate", args, repo, env));
  });

  it("prints the version with the command from its PATH section", async () => {
    const version = await run(
      command("print the version", (a) => a[0] === "--version"),
      { env: cleanEnv() },
    );
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toBe(JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version);
  });

  it("shows space.yaml snippets the gateway accepts", () => {
    const snippets = blocks("yaml");
    expect(snippets.length).toBeGreaterThan(0);
    for (const yaml of snippets) {
      // A fragment (participants, mcpServers) is checked inside a space of its own; ${VARS} it names are set.
      const whole = /^space:/m.test(yaml) ? yaml : `space: {id: readme}\n${yaml}`;
      const env = Object.fromEntries([...yaml.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => [m[1]!, "set-by-test"]));
      expect(() => parseSpaceConfig(whole, { file: "README.md", env }), yaml).not.toThrow();
    }
  });
});
