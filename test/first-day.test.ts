/**
 * An operator's first day (issue 39), against the built CLI and a real gateway: init that
 * makes the example the new space's own, hints that name a command that runs, `policy
 * check` that names an unset variable instead of failing, reading without `--as` in a space
 * of two humans, logs only the owner can read, `send` that says what it sent, one JSON
 * shape for a proposal, a decided proposal shown and named as decided, prose wrapped at
 * words, and the terminal's `A` offering the narrowest scope first.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { rewriteExample, spaceIdFor } from "../cli/init-rewrite.js";
import { onPath, selfCommand } from "../cli/invocation.js";
import { alwaysChoices, pickChoice } from "../cli/terminal/always-scopes.js";
import { wrapWords } from "../cli/terminal/wrap-words.js";
import { alive, allGone, cleanEnv, descendants, MAIN, poll, run, tempDir } from "./fixtures/cli/harness.js";

const dirs: string[] = [];
const pids: number[] = [];

afterEach(() => {
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function fresh(prefix = "mewgate-day-"): string {
  const d = tempDir(prefix);
  dirs.push(d);
  return d;
}

/** A PATH whose `mewgate` is the built CLI, as `npm link` makes it. */
function linkedPath(): string {
  const bin = fresh("mewgate-bin-");
  symlinkSync(MAIN, join(bin, "mewgate"));
  chmodSync(MAIN, 0o755);
  return `${bin}:${process.env["PATH"] ?? ""}`;
}

describe("init makes the example the new space's own", () => {
  it("hostile directory names still give a valid id; comments name the new place; the rest is as written", () => {
    expect(spaceIdFor("My Space")).toBe("my-space");
    expect(spaceIdFor("--..")).toBe("space");
    expect(spaceIdFor("ÉTÉ 2026")).toBe("ete-2026");
    expect(spaceIdFor("a".repeat(300))).toHaveLength(64);
    expect(spaceIdFor("\u202eevil\u0000")).toBe("evil");
    const text =
      "# The demo space: x\n#   mewgate up spaces/demo/space.yaml      (what `npm start` runs)\nspace:\n  id: demo   # keep\n  name: Demo space\nparticipants:\n  you:\n    name: not the space\n    id: nor-this\n";
    const out = rewriteExample(text, { example: "demo", id: "ops", where: "ops", file: "space.yaml" });
    expect(out).toBe(
      "# The ops space (from the demo example): x\n#   mewgate up ops/space.yaml\nspace:\n  id: ops   # keep\n  name: ops\nparticipants:\n  you:\n    name: not the space\n    id: nor-this\n",
    );
  });

  it("sets the space id from its argument, rewrites the comments, writes .gitignore, and its hint runs", async () => {
    const cwd = fresh();
    const env = cleanEnv({ PATH: linkedPath() });
    const init = await run(["init", "my-space"], { cwd, env });
    expect(init.code, init.stderr).toBe(0);
    const yaml = readFileSync(join(cwd, "my-space", "space.yaml"), "utf8");
    expect(yaml).toMatch(/^space:\n {2}id: my-space\n {2}name: my-space$/m);
    expect(yaml).toContain("#   mewgate up my-space/space.yaml\n");
    expect(yaml).not.toContain("npm start");
    expect(yaml).not.toContain("spaces/demo");
    expect(readFileSync(join(cwd, "my-space", "policy.cases.yaml"), "utf8")).toContain("mewgate policy test my-space/policy.cases.yaml");
    expect(readFileSync(join(cwd, "my-space", ".gitignore"), "utf8")).toMatch(/^\.mewgate\/$/m);
    expect(init.stdout).toContain('space id "my-space"');
    expect(init.stdout).toContain("next: mewgate up my-space/space.yaml");
    expect(init.stdout).toContain("which .gitignore keeps out of version control");
    // The policy cases of the example still hold for the renamed space.
    const cases = await run(["policy", "test", "my-space/policy.cases.yaml"], { cwd, env });
    expect(cases.code, cases.stdout + cases.stderr).toBe(0);

    // A .gitignore of the directory's own is left alone, and the hint says what to add.
    const own = join(cwd, "own");
    mkdirSync(own);
    writeFileSync(join(own, ".gitignore"), "node_modules\n");
    const again = await run(["init", "own"], { cwd, env });
    expect(again.code).toBe(0);
    expect(readFileSync(join(own, ".gitignore"), "utf8")).toBe("node_modules\n");
    expect(again.stdout).toContain("add .mewgate/ to own/.gitignore");
  });

  it("without mewgate on the PATH (a clone after npm install), the hint names the node command that works", async () => {
    const cwd = fresh();
    const init = await run(["init", "s"], { cwd, env: cleanEnv() });
    expect(init.code).toBe(0);
    const next = init.stdout.match(/^next: (.+)$/m)![1]!;
    expect(next).toMatch(/^node \S+main\.js up s\/space\.yaml$/);
    // The hint, run as printed, finds the space (here: policy check stands in for up).
    const [, main] = next.match(/^node (\S+) up/)!;
    const check = await run(["policy", "check", "s/space.yaml"], { cwd, env: cleanEnv() });
    expect(check.code).toBe(0);
    expect(existsSync(join(cwd, main!))).toBe(true);
    // A `mewgate` on the PATH that is another program is not this one.
    const other = fresh("mewgate-other-");
    writeFileSync(join(other, "mewgate"), "#!/bin/sh\necho impostor\n", { mode: 0o755 });
    expect(onPath(MAIN, other)).toBe(false);
    expect(selfCommand(MAIN, other, other)).toMatch(/^node /);
    expect(onPath(MAIN, linkedPath())).toBe(true);
    expect(selfCommand("/tmp/with space/main.js", "/tmp", "")).toBe('node "with space/main.js"');
    expect(selfCommand("/opt/m/dist/cli/main.js", "/home/a/b/c", "")).toBe("node /opt/m/dist/cli/main.js");
  });
});

describe("policy check with variables that are not set", () => {
  it("names each unset ${VAR} with its line and checks the rules anyway; mewgate's own variables are set", async () => {
    const dir = fresh();
    writeFileSync(
      join(dir, "space.yaml"),
      [
        "space: {id: vars}",
        "participants:",
        "  you: {kind: human}",
        "  files:",
        "    kind: mcp",
        "    mcp: {command: node, args: [server.js, '${MEWGATE_SANDBOX}', '${PROJECT_ROOT}']}",
        "  bot:",
        "    kind: agent",
        "    token: ${BOT_TOKEN_SECRET}",
        "    agent: {provider: scripted, script: s.yaml}",
        "    tools: {ask: [files/write_file, nobody/tool]}",
        "",
      ].join("\n"),
    );
    const r = await run(["policy", "check", join(dir, "space.yaml")], { env: cleanEnv() });
    expect(r.stdout).toMatch(
      /warning: .*space\.yaml:6:\d+: participants\.files\.mcp\.args\[2\]: environment variable PROJECT_ROOT is not set \(checked as if it were "unset-PROJECT_ROOT"/,
    );
    expect(r.stdout).toMatch(/warning: .*space\.yaml:9:\d+: participants\.bot\.token: environment variable BOT_TOKEN_SECRET is not set/);
    expect(r.stdout).not.toContain("MEWGATE_SANDBOX");
    // The rules were still checked: the unknown participant is found as it always was.
    expect(r.stdout).toMatch(/warning: .*space\.yaml:11:\d+: .*no participant "nobody"/);
    expect(r.stdout).toContain("0 error(s), 3 warning(s)");
    expect(r.code).toBe(0);
    const json = await run(["policy", "check", join(dir, "space.yaml"), "--json"], { env: cleanEnv({ PROJECT_ROOT: "/srv" }) });
    const out = JSON.parse(json.stdout);
    expect(out.unset.map((u: { name: string }) => u.name)).toEqual(["BOT_TOKEN_SECRET"]);
    // Something else wrong with the file still fails as before, unset variables or not.
    writeFileSync(join(dir, "bad.yaml"), "space: {id: Bad Id}\nparticipants:\n  you: {kind: human, token: '${NOPE}'}\n");
    const bad = await run(["policy", "check", join(dir, "bad.yaml")], { env: cleanEnv() });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("space.id");
  });
});

describe("a space of two humans, from the command line", () => {
  it("up --detach, status and proposals read without --as; send and decide say what they did; one JSON shape; logs 0600", {
    timeout: 120_000,
  }, async () => {
    const cwd = fresh();
    const env = cleanEnv({ PATH: linkedPath() });
    expect((await run(["init", "duo"], { cwd, env })).code).toBe(0);
    const file = join(cwd, "duo", "space.yaml");
    writeFileSync(
      file,
      readFileSync(file, "utf8").replace("participants:\n", "participants:\n  bob:\n    kind: human\n    visibility: all\n"),
    );
    const mewgate = (args: string[]) => run(args, { cwd, env });

    const up = await mewgate(["up", "duo/space.yaml", "--detach", "--port", "0"]);
    expect(up.code, up.stderr).toBe(0);
    const pid = Number(up.stdout.match(/\(pid (\d+)\)/)![1]);
    pids.push(pid);
    expect(up.stdout).not.toContain("<you>");
    expect(up.stdout).toContain("sign in with the token of one of bob, you: mewgate token show <id> -c duo/space.yaml");

    const status = await mewgate(["status", "duo/space.yaml"]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stderr).toContain("reading as bob, the first of the space's humans (bob, you); --as <id> to look as another");
    expect(status.stdout).toMatch(/assistant\s+agent\s+connected/);

    // Deciding is not reading: it still wants to know who.
    const anon = await mewgate(["send", "-c", "duo/space.yaml", "hello"]);
    expect(anon.code).not.toBe(0);
    expect(anon.stderr).toContain("several humans (bob, you); pick one with --as <id>");
    const sent = await mewgate(["send", "-c", "duo/space.yaml", "--as", "you", "hello @assistant"]);
    expect(sent.code, sent.stderr).toBe(0);
    expect(sent.stdout).toMatch(/^sent a chat to everyone in the space \(id [0-9a-f-]{36}\)\n$/);

    let listed: any[] = [];
    await poll(
      "the proposal",
      async () => {
        const r = await mewgate(["proposals", "-c", "duo/space.yaml", "--json"]);
        listed = r.code === 0 ? JSON.parse(r.stdout) : [];
        return listed.length === 1;
      },
      30_000,
      250,
    );
    const [p] = listed;
    // The API's shape, not an envelope: the same fields as show --json (without the preview).
    expect(p).toMatchObject({
      id: expect.any(String),
      shortId: p.id.slice(0, 8),
      proposer: "assistant",
      owner: "files",
      tool: "files/write_file",
      method: "tools/call",
      state: "pending",
      arguments: { path: "hello.txt" },
    });
    expect(p.kind).toBeUndefined();
    const shown = JSON.parse((await mewgate(["proposals", "show", p.shortId, "-c", "duo/space.yaml", "--json"])).stdout);
    const { preview, ...card } = shown;
    expect(preview.status).toBeDefined();
    // The same shape; a reviewer's note (`review`) may arrive between the two reads.
    const shape = (o: Record<string, unknown>) =>
      Object.keys(o)
        .filter((k) => k !== "review")
        .sort();
    expect(shape(card)).toEqual(shape(p));

    const rejected = await mewgate(["proposals", "reject", p.shortId, "--reason", "unsafe", "-c", "duo/space.yaml", "--as", "you"]);
    expect(rejected.code, rejected.stderr).toBe(0);
    const twice = await mewgate(["proposals", "reject", p.shortId, "--reason", "unsafe", "-c", "duo/space.yaml", "--as", "bob"]);
    expect(twice.code).not.toBe(0);
    expect(twice.stderr).toMatch(
      new RegExp(`\\[${p.shortId}\\] assistant → files/write_file is already rejected by you at \\S+; nothing changed`),
    );
    expect(twice.stderr).not.toContain("no pending proposal");

    const card2 = await mewgate(["proposals", "show", p.shortId, "-c", "duo/space.yaml"]);
    expect(card2.code, card2.stderr).toBe(0);
    expect(card2.stdout).toMatch(new RegExp(`^\\[${p.shortId}\\] assistant → files/write_file: rejected by you at `));
    expect(card2.stdout).toMatch(/arguments:\n {2}path: hello\.txt\n {2}content:\n/);
    const decided = JSON.parse((await mewgate(["proposals", "decided", "-c", "duo/space.yaml", "--json"])).stdout);
    // Decided entries share the core of the shape.
    for (const k of ["id", "shortId", "proposer", "owner", "tool", "method", "state", "arguments"]) expect(decided[0], k).toHaveProperty(k);
    const decidedText = (await mewgate(["proposals", "decided", "-c", "duo/space.yaml"])).stdout;
    expect(decidedText).toMatch(/arguments: \{"path":"hello\.txt","content":/);

    // Every log under the state directory is the owner's alone.
    const logs = join(cwd, "duo", ".mewgate", "logs");
    const files = readdirSync(logs);
    expect(files.length).toBeGreaterThan(1);
    for (const f of files) expect((statSync(join(logs, f)).mode & 0o777).toString(8), f).toBe("600");

    const tree = descendants(pid);
    expect((await mewgate(["down", "duo/space.yaml"])).code).toBe(0);
    expect(alive(pid)).toBe(false);
    await allGone(tree);
  });
});

describe("the terminal's words", () => {
  it("prose wraps at spaces; a word longer than the line is split; nothing is lost", () => {
    const text = "The quick brown fox jumps over the lazy dog and keeps running far away";
    const lines = wrapWords(text, 20);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(20);
    expect(lines.map((l) => l.replace(/^↪ /, "")).join(" ")).toBe(text);
    expect(lines.every((l) => !/\w$/.test(l) || text.includes(l.replace(/^↪ /, "")))).toBe(true);
    const long = wrapWords("x".repeat(50), 20);
    expect(long.map((l) => l.replace(/^↪ /, "")).join("")).toBe("x".repeat(50));
    expect(wrapWords("a\u001b[31mred\n\nb", 20)).toEqual(["ared", "", "b"]);
    expect(wrapWords(" ".repeat(5000), 20)).toEqual([""]);
  });

  it("Always offers the narrowest scope first and takes a typed choice", () => {
    const choices = alwaysChoices({ path: "notes/a.md", content: "hi" });
    expect(choices[0]!.limit).toBe("exact");
    expect(choices.at(-1)!.limit).toBe("tool");
    expect(choices.some((c) => typeof c.limit === "object" && c.limit.field === "path")).toBe(true);
    expect(pickChoice("yes", choices)).toBe(choices[0]);
    expect(pickChoice(" YES 2 ", choices)).toBe(choices[1]);
    expect(pickChoice(`yes ${choices.length}`, choices)!.limit).toBe("tool");
    expect(pickChoice("yes 99", choices)).toBeUndefined();
    expect(pickChoice("yes -1", choices)).toBeUndefined();
    expect(pickChoice("no", choices)).toBeUndefined();
    expect(pickChoice("yesyes", choices)).toBeUndefined();
  });
});
