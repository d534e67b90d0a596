/**
 * `mewgate up` end to end, without a terminal: JSON lines, --detach / status / down, the
 * one-shot commands against a running space, init then up, `run:` children, and the
 * README's `npm start`.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { alive, allGone, Cli, cleanEnv, DEMO, descendants, poll, ROOT, run, tempDir } from "./fixtures/cli/harness.js";

const started: Cli[] = [];
const pids: number[] = [];

afterEach(() => {
  for (const c of started.splice(0)) c.kill("SIGKILL");
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
});

function up(args: string[], opts: { env?: NodeJS.ProcessEnv; command?: string[] } = {}): Cli {
  const cli = new Cli(args, { ...opts, stdin: "pipe" });
  started.push(cli);
  return cli;
}

const isProposal = (l: Record<string, any>) => l["kind"] === "mcp/proposal";

describe("mewgate up without a terminal (JSON lines)", () => {
  it("prints every envelope as a JSON line, takes an approve line, and leaves nothing running on SIGTERM", async () => {
    const state = tempDir();
    const cli = up(["up", DEMO, "--state-dir", state, "--port", "0"]);
    const ready = await cli.waitLine((l) => l["event"] === "ready", "the ready event");
    expect(ready).toMatchObject({ space: "demo", participant: "you", url: expect.stringMatching(/^ws:\/\/127\.0\.0\.1:\d+$/) });
    expect(cli.lines()[0]).toMatchObject({ event: "listening" });
    expect(cli.lines().some((l) => l["kind"] === "system/welcome")).toBe(true);
    const proposal = await cli.waitLine(isProposal, "the assistant's proposal");
    expect(proposal).toMatchObject({ from: "assistant", to: ["files"], payload: { method: "tools/call", params: { name: "write_file" } } });
    // The demo's scripted reviewer (started by up, run:) leaves its note on the card; may_approve: none, so it still waits for you.
    const you = readFileSync(join(state, "tokens", "you.token"), "utf8").trim();
    const card = async () =>
      (await (
        await fetch(`${String(ready["url"]).replace(/^ws:/, "http:")}/api/spaces/demo/proposals/${proposal["id"]}`, {
          headers: { authorization: `Bearer ${you}` },
        })
      ).json()) as Record<string, any>;
    await poll("the reviewer's note on the card", async () => (await card())["review"] !== undefined, 20_000);
    const reviewed = await card();
    expect(reviewed["review"]).toMatchObject({
      by: "reviewer",
      verdict: expect.stringMatching(/^(approve|escalate)$/),
      reason: expect.any(String),
    });
    expect(reviewed["review"]["outcome"]).toBe("to_people");
    expect(reviewed["state"]).toBe("pending");

    cli.send({ approve: proposal["id"], scope: "once", arguments: { path: "approved.txt", content: "from a script\n" } });
    await cli.waitLine((l) => l["kind"] === "mcp/response" && l["correlation_id"]?.includes(proposal["id"]), "the call's response");
    expect(readFileSync(join(state, "sandbox", "approved.txt"), "utf8")).toBe("from a script\n");
    await cli.waitLine(
      (l) => l["kind"] === "chat" && l["from"] === "assistant" && /Done/.test(l["payload"]["text"]),
      "the assistant's reply",
    );

    cli.send("not json");
    await cli.waitLine((l) => l["event"] === "error" && /not JSON/.test(l["message"]), "an error line for bad input");
    cli.send({ chat: "what can you do?", to: ["assistant"] });
    await cli.waitLine(
      (l) => l["kind"] === "chat" && l["from"] === "assistant" && l["payload"]["text"].includes("scripted demo assistant"),
      "the fallback reply",
    );

    const rec = JSON.parse(readFileSync(join(state, "up.json"), "utf8"));
    expect(rec.pid).toBe(cli.child.pid);
    const tree = descendants(cli.child.pid!);
    expect(tree.length).toBeGreaterThan(0); // the filesystem MCP server
    cli.kill("SIGTERM");
    expect((await cli.exited).code).toBe(0);
    await allGone(tree);
    expect(existsSync(join(state, "up.pid"))).toBe(false);
    // No token reaches stdout, stderr or the logs.
    const token = readFileSync(join(state, "tokens", "you.token"), "utf8").trim();
    expect(cli.stdout + cli.stderr).not.toContain(token);
    for (const f of ["gateway.log", "assistant.log", "files.log"])
      expect(readFileSync(join(state, "logs", f), "utf8")).not.toContain(token);

    // The audit log of that run, through `mewgate audit`.
    const audit = await run(["audit", "--config", DEMO, "--state-dir", state]);
    expect(audit.code).toBe(0);
    expect(audit.stdout).toMatch(/proposed\s+\[[0-9a-f]{8}\]\s+assistant → files\/write_file/);
    expect(audit.stdout).toMatch(/approved\s+\[[0-9a-f]{8}\]\s+assistant → files\/write_file\s+by you\s+\(once\)/);
    const json = await run(["audit", "--config", DEMO, "--state-dir", state, "--json", "--participant", "you", "--since", "1h"]);
    expect(
      json.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).event),
    ).toEqual(expect.arrayContaining(["approved", "answered"]));
    const none = await run(["audit", "--config", DEMO, "--state-dir", state, "--until", "2000-01-01"]);
    expect(none.stdout).toContain("no audit entries match");
    const bad = await run(["audit", "--config", DEMO, "--state-dir", state, "--since", "yesterday-ish"]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--since "yesterday-ish": expected a date');
  });

  it("starts run: children with their connection in the environment, logs them, restarts a crashed one, and stops its whole process group", async () => {
    const state = tempDir();
    const dir = tempDir();
    const child = join(ROOT, "dist", "test", "fixtures", "cli", "child-participant.js");
    const pidFile = join(dir, "pids");
    writeFileSync(
      join(dir, "space.yaml"),
      `space: {id: kids}
participants:
  me: {kind: human}
  helper:
    kind: service
    run:
      command: ${JSON.stringify(process.execPath)}
      args: [${JSON.stringify(child)}]
      env: {EXTRA: "yes", CHILD_PIDS: ${JSON.stringify(pidFile)}}
`,
    );
    const cli = up(["up", join(dir, "space.yaml"), "--state-dir", state, "--port", "0", "--json"]);
    const online = await cli.waitLine((l) => l["kind"] === "chat" && l["from"] === "helper", "the child's chat");
    expect(online["payload"]["text"]).toMatch(/^child online: helper pid \d+ extra=yes$/);
    const [first] = readFileSync(pidFile, "utf8").trim().split("\n");
    const [childPid, grandchildPid] = first!.split(" ").map(Number);

    cli.send({ chat: "crash", to: ["helper"] });
    await cli.waitLine(
      (l) => l["event"] === "error" && /helper exited with code 3(: [^;]*)?; restarting/.test(l["message"]),
      "the restart notice",
    );
    await poll("the restarted child", () => readFileSync(pidFile, "utf8").trim().split("\n").length === 2, 10_000);
    await poll("the old process group gone", () => !alive(childPid!) && !alive(grandchildPid!), 5000);
    const log = readFileSync(join(state, "logs", "helper.log"), "utf8");
    expect(log).toContain("child starting as helper");
    expect(log).toContain("crashing on request");
    expect(log).not.toContain(readFileSync(join(state, "tokens", "helper.token"), "utf8").trim());

    const [second] = readFileSync(pidFile, "utf8").trim().split("\n").slice(1);
    const [pid2, grand2] = second!.split(" ").map(Number);
    await poll("the restarted child online", () => alive(pid2!) && alive(grand2!));
    cli.kill("SIGINT");
    expect((await cli.exited).code).toBe(0);
    await allGone([pid2!, grand2!]);
  });
});

describe("mewgate up --detach, status, down and the one-shot commands", () => {
  // About ten CLI processes one after another (and a reload): on a busy machine that is past the default 20 s.
  it("runs in the background; status, send, tools, proposals, token work against it; down stops exactly it and everything it started", {
    timeout: 60_000,
  }, async () => {
    const state = tempDir();
    const common = ["--config", DEMO, "--state-dir", state];
    const detach = await run(["up", DEMO, "--state-dir", state, "--port", "0", "--detach"]);
    expect(detach.stderr).toBe("");
    expect(detach.code).toBe(0);
    const [, pid] = detach.stdout.match(/running in the background \(pid (\d+)\)/)!;
    pids.push(Number(pid));
    // Not on this test's PATH, mewgate names itself as the node command that runs it.
    expect(detach.stdout).toMatch(/stop it: {3}node \S+main\.js down /);
    expect(readFileSync(join(state, "up.pid"), "utf8").trim()).toBe(pid);
    expect(alive(Number(pid))).toBe(true);

    const again = await run(["up", DEMO, "--state-dir", state, "--port", "0", "--detach"]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain(`this space is already running (pid ${pid}`);

    const status = await run(["status", DEMO, "--state-dir", state]);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/space demo \(Demo space\) at ws:\/\/127\.0\.0\.1:\d+\/ws/);
    expect(status.stdout).toMatch(/assistant\s+agent\s+connected/);
    expect(status.stdout).toMatch(/files\s+mcp\s+connected/);
    expect(status.stdout).toMatch(/files\/write_file\s+direct/);
    expect(status.stdout).toContain("pending proposals (0)");

    const tools = await run(["tools", ...common, "--json"]);
    expect(JSON.parse(tools.stdout).map((t: { name: string }) => t.name)).toContain("files/read_text_file");

    // A chat as the human makes the assistant propose; the proposal waits for anyone to decide.
    const sent = await run(["send", ...common, "hello @assistant"]);
    expect(sent.code).toBe(0);
    let listed = "";
    await poll("the proposal", async () => {
      listed = (await run(["proposals", "list", ...common])).stdout;
      return /assistant → files\/write_file/.test(listed);
    });
    const [, short] = listed.match(/\[([0-9a-f]{8})\]/)!;
    const approved = await run(["proposals", "approve", short!, ...common]);
    expect(approved.code).toBe(0);
    expect(approved.stdout).toContain(`approved files/write_file [${short}] from assistant`);
    expect(approved.stdout).toContain("result: Successfully wrote to hello.txt");
    expect(existsSync(join(state, "sandbox", "hello.txt"))).toBe(true);
    const gone = await run(["proposals", "approve", short!, ...common]);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toMatch(
      new RegExp(`\\[${short}\\] assistant → files/write_file is already approved by you at \\S+; nothing changed`),
    );
    const refused = await run(["send", ...common, "--to", "nobody", "hi"]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('the gateway refused it: unknown_recipient: no participant "nobody"');

    const shown = await run(["token", "show", "you", "--config", DEMO, "--state-dir", state]);
    expect(shown.stdout.trim()).toBe(readFileSync(join(state, "tokens", "you.token"), "utf8").trim());
    const rotated = await run(["token", "rotate", "files", "--config", DEMO, "--state-dir", state]);
    expect(rotated.code).toBe(0);
    // The running gateway takes the new token at once (a reload), no restart.
    expect(rotated.stdout).toMatch(/reloaded space demo\n(.*\n)* {2}tokens changed: files/);

    const tree = descendants(Number(pid));
    expect(tree.length).toBeGreaterThan(0);
    const down = await run(["down", DEMO, "--state-dir", state]);
    expect(down.stderr).toBe("");
    expect(down.code).toBe(0);
    expect(down.stdout).toContain(`stopped space demo (pid ${pid})`);
    expect(alive(Number(pid))).toBe(false);
    await allGone(tree);
    expect(existsSync(join(state, "up.pid"))).toBe(false);
    expect(readFileSync(join(state, "logs", "up.log"), "utf8")).toContain("stopped");

    const after = await run(["status", DEMO, "--state-dir", state]);
    expect(after.code).not.toBe(0);
    expect(after.stderr).toContain("nothing is running for space demo");
    const downAgain = await run(["down", DEMO, "--state-dir", state]);
    expect(downAgain.code).not.toBe(0);
    expect(downAgain.stderr).toContain("nothing to stop");
  });

  it("down leaves a recycled pid alone", async () => {
    const state = tempDir();
    // A pid file naming a live process that is not a mewgate up (this test runner).
    writeFileSync(join(state, "up.pid"), `${process.pid}\n`);
    writeFileSync(
      join(state, "up.json"),
      JSON.stringify({
        pid: process.pid,
        url: "ws://127.0.0.1:1",
        space: "demo",
        config: DEMO,
        stateDir: state,
        startTicks: 1,
        argv: ["node", "mewgate", "up"],
        startedAt: "",
      }),
    );
    const down = await run(["down", DEMO, "--state-dir", state]);
    expect(down.code).not.toBe(0);
    expect(down.stderr).toContain(`pid ${process.pid} is now another process`);
    expect(alive(process.pid)).toBe(true);
  });
});

describe("mewgate init", () => {
  it("writes the demo, refuses to overwrite it, and the result runs with up", async () => {
    const dir = join(tempDir(), "project");
    const init = await run(["init", dir]);
    expect(init.code).toBe(0);
    expect(init.stdout).toMatch(/next: node \S+main\.js up /);
    expect(existsSync(join(dir, "space.yaml"))).toBe(true);
    expect(existsSync(join(dir, "assistant.script.yaml"))).toBe(true);
    const again = await run(["init", dir]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain("not overwriting");
    const unknown = await run(["init", tempDir(), "--example", "nope"]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/no example "nope"; choose one of .*demo/);

    // Started from another directory, with the default state directory beside the file.
    const cli = up(["up", join(dir, "space.yaml"), "--port", "0"], {});
    const proposal = await cli.waitLine(isProposal, "the proposal");
    cli.send({ approve: proposal["id"].slice(0, 8) });
    await poll("hello.txt in the new space's sandbox", () => existsSync(join(dir, ".mewgate", "sandbox", "hello.txt")));
    cli.kill("SIGTERM");
    expect((await cli.exited).code).toBe(0);
  });

  it("every example space is valid and names its files", async () => {
    for (const example of ["demo", "coding", "team"]) {
      const dir = join(tempDir(), example);
      const init = await run(["init", dir, "--example", example]);
      expect(init.stderr).toBe("");
      const { loadSpace } = await import("../cli/space.js");
      const { exposedStateDir } = await import("../cli/up.js");
      const loaded = await loadSpace(join(dir, "space.yaml"), { env: {} });
      expect(exposedStateDir(loaded.config, loaded.stateDir), example).toEqual([]);
      for (const p of Object.values(loaded.config.participants)) {
        if (p.agent?.script) expect(existsSync(p.agent.script), `${example}: ${p.agent.script}`).toBe(true);
      }
    }
  });
});

describe("the README's start command", () => {
  it("npm start runs the demo: the proposal arrives as a JSON line, and it stops cleanly", async () => {
    const state = tempDir();
    const scripts = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).scripts;
    expect(scripts.start).toContain("up spaces/demo/space.yaml");
    const cli = up(["start", "--silent", "--", "--port", "0", "--state-dir", state], { command: ["npm"], env: cleanEnv() });
    const proposal = await cli.waitLine(isProposal, "the proposal", 30_000);
    expect(proposal["payload"]["params"]["name"]).toBe("write_file");
    const rec = JSON.parse(readFileSync(join(state, "up.json"), "utf8"));
    const tree = descendants(rec.pid);
    process.kill(rec.pid, "SIGTERM");
    await poll("the demo to stop", () => !alive(rec.pid), 10_000);
    await allGone(tree);
    expect((await cli.exited).code).toBe(0);
  });
});

describe("mewgate up --nodes 3 (a local cluster)", () => {
  it("serves the space from three nodes: another node answers for the owner", { timeout: 60_000 }, async () => {
    const state = tempDir();
    const cli = up(["up", DEMO, "--state-dir", state, "--port", "0", "--nodes", "3"]);
    await cli.waitLine((l) => l["event"] === "ready", "the ready event");
    const proposal = await cli.waitLine(isProposal, "the assistant's proposal");
    const nodes = [...cli.stderr.matchAll(/(n[23]) ws:\/\/127\.0\.0\.1:(\d+)\/ws/g)].map((m) => ({ name: m[1]!, port: Number(m[2]) }));
    expect(nodes.map((n) => n.name)).toEqual(["n2", "n3"]);
    const tree = descendants(cli.child.pid!);
    pids.push(...tree);
    const token = readFileSync(join(state, "tokens", "you.token"), "utf8").trim();
    const pending = async (port: number) => {
      const res = await fetch(`http://127.0.0.1:${port}/api/spaces/demo/proposals`, { headers: { authorization: `Bearer ${token}` } });
      return {
        status: res.status,
        node: res.headers.get("x-mewgate-node"),
        body: res.status === 200 ? ((await res.json()) as { proposals: Array<{ id: string }> }) : undefined,
      };
    };
    // Asked of another node, the answer comes from the owner (n1, this process).
    const before = await pending(nodes[0]!.port);
    expect(before.node).toBe("n1");
    expect(before.body!.proposals.map((p) => p.id)).toContain(proposal["id"]);

    // What happens when up itself is killed (everything stops with it) is in up-cluster.test.ts.
  });
});
