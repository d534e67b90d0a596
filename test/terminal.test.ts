/**
 * The interactive terminal, driven as a person would: `mewgate up spaces/demo/space.yaml`
 * in a tmux pane, keys sent with send-keys, the screen read with capture-pane.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, DEMO, MAIN, poll, requireTmux, run, tempDir, Tmux } from "./fixtures/cli/harness.js";
import { readAudit } from "../gateway/space/ledger.js";
import { interruptedGateway, type TestClient, toolOwner, type Env, type TestGateway } from "./helpers.js";

const panes: Tmux[] = [];
const gateways: TestGateway[] = [];
const sockets: TestClient[] = [];

beforeAll(() => requireTmux());

afterEach(async () => {
  for (const p of panes.splice(0)) p.kill();
  for (const c of sockets.splice(0)) c.ws.terminate();
  for (const g of gateways.splice(0)) await g.stop();
});

function demo(extraArgs: string[] = [], env: NodeJS.ProcessEnv = {}): { pane: Tmux; state: string } {
  const state = tempDir("mewgate-term-");
  const pane = new Tmux([process.execPath, MAIN, "up", DEMO, "--state-dir", state, "--port", "0", ...extraArgs], { env: cleanEnv(env) });
  panes.push(pane);
  return { pane, state };
}

describe("mewgate up: the interactive terminal", () => {
  it("shows the agent's proposal within seconds; `a` approves it and the file appears in the sandbox", async () => {
    const { pane, state } = demo();
    await pane.waitFor(/1 proposal waiting/);
    const screen = pane.capture();
    expect(screen).toContain("assistant wants files/write_file");
    expect(screen).toMatch(/why: policy: proposal — assistant's tools\.ask matches files\/write_file/);
    expect(screen).toContain('"path": "hello.txt"');
    // `mewgate status` reads through the operator API: the human's terminal keeps its seat.
    const status = await run(["status", DEMO, "--state-dir", state]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain("pending proposals (1)");
    await new Promise((r) => setTimeout(r, 300));
    expect(pane.capture()).not.toMatch(/rejoined|replaced|disconnected/);
    pane.keys("a");
    const file = join(state, "sandbox", "hello.txt");
    await poll("hello.txt in the sandbox", () => existsSync(file));
    expect(readFileSync(file, "utf8")).toContain("Hello from the mewgate demo!");
    await pane.waitFor(/← files\/write_file → assistant: Successfully wrote to hello\.txt/);
    await pane.waitFor(/assistant → you: Done/);

    // Ctrl-C stops everything and the program exits 0.
    pane.keys("C-c");
    await pane.waitFor(/\[exited 0\]/);
    expect(existsSync(join(state, "up.pid"))).toBe(false);
  });

  it("`r` asks for a reason; the agent gets the rejection with it, and the audit log records it", async () => {
    const { pane, state } = demo();
    await pane.waitFor(/1 proposal waiting/);
    pane.keys("r");
    await pane.waitFor(/why reject files\/write_file\?/);
    pane.type("not in my sandbox, thanks");
    pane.keys("Enter");
    // The scripted assistant repeats what the rejection told it.
    await pane.waitFor(
      /assistant → you: OK, I did not do it\. What came back: Rejected by you \(reason: disagree\): .*not in my sandbox, thanks/,
    );
    expect(existsSync(join(state, "sandbox", "hello.txt"))).toBe(false);
    const rejected = readAudit(state).find((e) => e.event === "rejected");
    expect(rejected).toMatchObject({
      proposer: "assistant",
      owner: "files",
      tool: "write_file",
      by: "you",
      reason: "disagree",
      text: "not in my sandbox, thanks",
    });
    pane.keys("C-c");
    await pane.waitFor(/\[exited 0\]/);
  });

  it("shows why the agent wants the call and the tool's hints; `R` answers it without deciding, and the agent withdraws and hears it", async () => {
    const { pane, state } = demo();
    await pane.waitFor(/1 proposal waiting/);
    const screen = pane.capture();
    expect(screen).toMatch(/tool: destructive · not read-only · idempotent · closed world/);
    expect(screen).toMatch(/assistant says why:\s+Hi! I'm the demo assistant\. I'd like to write a welcome note into the sandbox/);
    pane.keys("R");
    await pane.waitFor(/answer assistant about this proposal, without deciding/);
    pane.type("use the notes folder, please");
    pane.keys("Enter");
    await pane.waitFor(
      /assistant → you: OK, I did not do it\. What came back: .*you answered your proposal instead of approving it: "use the notes folder, please"/,
    );
    await pane.waitFor(/no proposals waiting/);
    expect(existsSync(join(state, "sandbox", "hello.txt"))).toBe(false);
    expect(readAudit(state).map((e) => e.event)).toEqual(["proposed", "withdrawn"]);
    pane.keys("C-c");
    await pane.waitFor(/\[exited 0\]/);
  });

  it("queues several proposals: n moves, A approves always, e edits the arguments before approving, chat and / commands work", async () => {
    const { pane, state } = demo(["--no-greet"]);
    await pane.waitFor(/you> /);
    pane.type("please write two notes");
    pane.keys("Enter");
    await pane.waitFor(/2 proposals waiting · 1\/2/);
    expect(pane.capture()).toMatch(/also: assistant → files\/write_file \[[0-9a-f]{8}\] \{"path":"note-2\.txt"/);
    pane.keys("n");
    await pane.waitFor(/2 proposals waiting · 2\/2[\s\S]*"path": "note-2\.txt"/);
    // Approve the selected one (note-2) for good: the assistant may write files from now on.
    // A standing grant is never one keystroke: it says what it allows and waits for a typed yes.
    pane.keys("A");
    // The scopes come narrowest first, as in the console: these arguments (a path's directory when it has one), then the whole tool.
    await pane.waitFor(
      /approve always\? it also grants[\s\S]*participant: assistant[\s\S]*tool:\s+files\/write_file[\s\S]*\[1\] only with exactly these arguments[\s\S]*\[\d\] any arguments \(the whole tool\)[\s\S]*always let assistant call files\/write_file/,
    );
    pane.type("no");
    pane.keys("Enter");
    await pane.waitFor(/not confirmed; nothing approved/);
    expect(pane.capture()).toMatch(/2 proposals waiting/);
    pane.keys("A");
    const [, whole] = await pane.waitFor(
      /not confirmed; nothing approved[\s\S]*approve always\? it also grants[\s\S]*\[(\d)\] any arguments \(the whole tool\)/,
    );
    pane.type(`yes ${whole}`);
    pane.keys("Enter");
    await pane.waitFor(/1 proposal waiting · 1\/1[\s\S]*"path": "note-1\.txt"/);
    pane.keys("e");
    await pane.waitFor(/edit arguments as JSON/);
    pane.keys("C-u");
    pane.type('{"path":"edited.txt","content":"changed by you\\n"}');
    pane.keys("Enter");
    // The server creates a file before it writes its content: wait for the content, not the name.
    const edited = join(state, "sandbox", "edited.txt");
    await poll(
      "both writes",
      () => existsSync(join(state, "sandbox", "note-2.txt")) && existsSync(edited) && readFileSync(edited, "utf8") !== "",
    );
    expect(readFileSync(edited, "utf8")).toBe("changed by you\n");
    expect(existsSync(join(state, "sandbox", "note-1.txt"))).toBe(false);
    await pane.waitFor(/no proposals waiting/);

    // The always-grant holds: the next write goes straight through, no proposal.
    pane.type("try again");
    pane.keys("Enter");
    await poll("hello.txt written without asking", () => existsSync(join(state, "sandbox", "hello.txt")));

    pane.type("/participants");
    pane.keys("Enter");
    await pane.waitFor(/participants:\s+you \(you\)/);
    pane.type("/pause assistant");
    pane.keys("Enter");
    await pane.waitFor(/assistant status: state=paused/);
    pane.type("/nonsense");
    pane.keys("Enter");
    await pane.waitFor(/unknown command \/nonsense; \/help lists them/);
    pane.type("/quit");
    pane.keys("Enter");
    await pane.waitFor(/\[exited 0\]/);
    const audit = readAudit(state);
    expect(
      audit
        .filter((e) => e.event === "approved")
        .map((e) => e.scope)
        .sort(),
    ).toEqual(["always", "once"]);
    // The edited approval says so in the audit trail.
    expect(audit.filter((e) => e.event === "approved").some((e) => e.edited === true)).toBe(true);
  });

  it("`e` opens $EDITOR on the arguments when it is set, and approves what was saved", async () => {
    // An "editor" that changes the file in place, as a person would in vi.
    const { pane, state } = demo([], { EDITOR: "sed -i s/hello.txt/via-editor.txt/" });
    await pane.waitFor(/1 proposal waiting/);
    pane.keys("e");
    await poll("the edited write", () => existsSync(join(state, "sandbox", "via-editor.txt")));
    await pane.waitFor(/approved \[[0-9a-f]{8}\] with edited arguments \{"path":"via-editor\.txt"/);
    expect(existsSync(join(state, "sandbox", "hello.txt"))).toBe(false);
    pane.keys("C-c");
    await pane.waitFor(/\[exited 0\]/);
  });

  it("shows a proposal interrupted by a gateway stop apart, with why; `a` approves it again and it runs once", async () => {
    const T = { me: "me-token-0123456789", bot: "bot-token-0123456789", fs: "fs-token-0123456789" };
    const yaml = `
space: {id: term}
participants:
  me: {kind: human, token: ${T.me}}
  bot: {kind: agent, token: ${T.bot}, tools: {ask: ["fs/write_file"]}}
  fs: {kind: mcp, token: ${T.fs}}
`;
    const tools = [{ name: "write_file", inputSchema: { type: "object" } }];
    const dir = tempDir("mewgate-term-intr-");
    const g = await interruptedGateway(yaml, dir, {
      space: "term",
      id: "intr-1",
      owner: "fs",
      ownerToken: T.fs,
      tools,
      tool: "write_file",
      args: { path: "again.txt" },
      proposerToken: T.bot,
      approverToken: T.me,
    });
    gateways.push(g);
    const calls: Env[] = [];
    sockets.push(
      await toolOwner(g, "term", T.fs, tools, {
        onCall: (env, reply) => {
          calls.push(env);
          return reply({ content: [{ type: "text", text: "written" }] });
        },
      }),
    );
    const tokenFile = join(dir, "me.token");
    writeFileSync(tokenFile, `${T.me}\n`, { mode: 0o600 });
    const pane = new Tmux([process.execPath, MAIN, "connect", "--gateway", g.url, "--space", "term", "--token-file", tokenFile], {
      env: cleanEnv(),
    });
    panes.push(pane);
    await pane.waitFor(/1 proposal waiting/);
    const screen = pane.capture();
    expect(screen).toMatch(/bot wants fs\/write_file +\[intr-1\] +INTERRUPTED/);
    expect(screen).toContain("interrupted: the gateway stopped after it was approved; it may or may not have run");
    expect(screen).toContain("approved by me before the stop");
    expect(screen).toContain("a approve again");
    pane.keys("a");
    await pane.waitFor(/approved fs\/write_file again \[intr-1\]/);
    await poll("the call at its owner", () => calls.length === 1);
    await pane.waitFor(/no proposals waiting/);
    expect(calls).toHaveLength(1);
    pane.keys("C-c");
    await pane.waitFor(/\[exited 0\]/);
  });
});
