import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, parseSpaceConfig } from "../gateway/config/config.js";
import { checkPolicy, formatFinding } from "../gateway/policy/check.js";
import {
  CLI_MAIN,
  errorFor,
  killGateway,
  responseFor,
  spawnGateway,
  startGateway,
  TestClient,
  toolCall,
  toolOwner,
  waitFor,
  type TestGateway,
} from "./helpers.js";

const T = {
  alice: "alice-token-1",
  bob: "bob-token-22",
  helper: "helper-token-3",
  files: "files-token-4",
  shell: "shell-token-5",
  pay: "pay-token-666",
};

const SPACE = (helperTools: string, extra = "") => `space: {id: pol}
${extra}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}}
  helper:
    kind: agent
    token: ${T.helper}
    tools:
${helperTools}
  files: {kind: mcp, token: ${T.files}}
  shell: {kind: mcp, token: ${T.shell}}
  pay: {kind: mcp, token: ${T.pay}}
`;

const TOOLS = {
  files: [
    { name: "read_file", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
    { name: "write_file", inputSchema: { type: "object" } },
  ],
  shell: [{ name: "run", inputSchema: { type: "object" } }],
  pay: [{ name: "transfer", inputSchema: { type: "object" } }],
};

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function enter(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "pol", token);
  clients.push(c);
  return c;
}

async function owners(): Promise<void> {
  for (const [id, tools] of Object.entries(TOOLS)) clients.push(await toolOwner(gw!, "pol", T[id as keyof typeof T], tools));
  await waitFor(() => gw!.gateway.spaces.get("pol")!.registry.list().length === 4, 5000, "tools registered");
}

/** The decision the gateway actually takes for a call: direct (answered), proposal or denied (error codes). */
async function outcome(c: TestClient, id: string, owner: string, tool: string, args: Record<string, unknown>): Promise<string> {
  c.send(toolCall(id, owner, tool, args));
  const e = await c.next((x) => x.correlation_id?.includes(id) === true && (x.kind === "system/error" || x.kind === "mcp/response"));
  if (e.kind === "mcp/response") return "direct";
  return e.payload.code === "proposal_required" ? "proposal" : e.payload.code === "denied" ? "denied" : `error:${e.payload.code}`;
}

async function api(path: string, token: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/pol/${path}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() };
}

/** Runs the CLI without blocking this process, which may be hosting the gateway it talks to. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI_MAIN, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

const file = (yaml: string, name = "space.yaml"): string => {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-policy-"));
  const f = join(dir, name);
  writeFileSync(f, yaml);
  return f;
};

describe("rules that say what they match (hostile first)", () => {
  const TYPO = `      deny: ["file/write_file"]
      allow: ["files/*"]`;

  it("a typo'd participant in deny is a warning with file:line:col and a suggestion, and the load goes on", () => {
    const config = parseSpaceConfig(SPACE(TYPO), { file: "space.yaml", env: {} });
    const findings = checkPolicy(config);
    expect(findings).toHaveLength(1);
    expect(formatFinding(findings[0]!)).toBe(
      'warning: space.yaml:10:14: participants.helper.tools.deny[0]: no participant "file" in this space, so this deny rule matches nothing; did you mean "files"?',
    );
  });

  it("under policy.strict the same typo stops the gateway from starting", async () => {
    const err = await startGateway(SPACE(TYPO, "policy: {strict: true}")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(
      /space\.yaml:10:14: participants\.helper\.tools\.deny\[0\]: no participant "file".*did you mean "files"\?/,
    );
  });

  it("policy check exits non-zero on errors and zero on warnings, printing both", async () => {
    const warn = await cli(["policy", "check", file(SPACE(TYPO))]);
    expect(warn.status).toBe(0);
    expect(warn.stdout).toMatch(/^warning: .*space\.yaml:10:14: .*did you mean "files"\?$/m);
    const strict = await cli(["policy", "check", file(SPACE(TYPO, "policy: {strict: true}"))]);
    expect(strict.status).toBe(1);
    expect(strict.stdout).toMatch(/^error: .*space\.yaml:10:14: /m);
  });

  it("a shadowed rule is a warning naming the rule that hides it", () => {
    const config = parseSpaceConfig(
      SPACE(`      deny: ["files/*"]
      ask: ["files/write_file"]
      allow: ["shell/*", "shell/run"]`),
      { file: "space.yaml", env: {} },
    );
    const messages = checkPolicy(config).map(formatFinding);
    expect(messages).toEqual([
      'warning: space.yaml:11:13: participants.helper.tools.ask[0]: this rule can never decide anything: deny[0] ("files/*") covers every call it covers, and deny is decided before ask',
      'warning: space.yaml:12:26: participants.helper.tools.allow[1]: this rule can never decide anything: allow[0] ("shell/*") already covers it',
    ]);
  });

  it("a condition that does not compile stops the load at the expression's own line and column", async () => {
    const yaml = SPACE(`      deny: [{tool: "shell/run", when: "args.command.contains('rm') && nosuch"}]`);
    const err = await startGateway(yaml).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    // "when: " starts at column 35; the quote, then `nosuch` 33 characters into the expression.
    expect((err as Error).message).toMatch(/space\.yaml:10:\d+: participants\.helper\.tools\.deny\[0\]: when: unknown name "nosuch"/);
    const col = Number(/space\.yaml:10:(\d+)/.exec((err as Error).message)![1]);
    expect(
      yaml
        .split("\n")[9]!
        .slice(col - 1)
        .startsWith("nosuch"),
    ).toBe(true);
  });

  it("a tool that registers late while a rule still matches none of its tools is logged, and shown by policy/check", async () => {
    gw = await startGateway(SPACE(`      ask: ["files/write_fil"]`));
    await owners();
    const r = await api("policy/check", T.alice);
    expect(r.status).toBe(200);
    expect(r.body.findings).toEqual([
      expect.objectContaining({
        severity: "warning",
        code: "unknown_tool",
        path: "participants.helper.tools.ask[0]",
        message: expect.stringContaining('did you mean "files/write_file"?'),
      }),
    ]);
    expect((await api("policy/check", T.helper)).status).toBe(403);
  });
});

describe("a rule that still matches nothing when its tools register", () => {
  it("is logged by a gateway process, with the rule's line and a suggestion", async () => {
    const g = await spawnGateway(file(SPACE(`      ask: ["files/write_fil"]`)), { args: ["--log-file", "-"] });
    try {
      const owner = await toolOwner(g, "pol", T.files, TOOLS.files);
      try {
        await waitFor(() => g.stderr().includes('"code":"unknown_tool"'), 10_000, "the late finding to be logged");
        const line = g
          .stderr()
          .split("\n")
          .find((l) => l.includes('"code":"unknown_tool"'))!;
        expect(JSON.parse(line)).toMatchObject({
          level: 40,
          rule: "participants.helper.tools.ask[0]",
          at: expect.stringMatching(/space\.yaml:10:13$/),
          msg: expect.stringContaining('did you mean "files/write_file"?'),
        });
      } finally {
        owner.ws.terminate();
      }
    } finally {
      await killGateway(g);
    }
  });
});

describe("conditions on arguments against a real gateway (hostile first)", () => {
  // Order is deny → grant → ask → allow: "anything else asks" is an ask rule on the rest.
  const TOOLS_YAML = `      allow: ["files/*", "shell/run", "pay/transfer"]
      ask: [{tool: "files/write_file", when: "!args.path.startsWith('notes/') || args.path.contains('..')"}, {tool: "pay/transfer", when: "args.amount > 100"}]
      deny: [{tool: "shell/run", when: "args.command.contains('rm -rf')"}]`;

  it("hostile arguments fail closed: a missing field, a wrong type, __proto__, nesting thousands deep", async () => {
    gw = await startGateway(SPACE(TOOLS_YAML));
    await owners();
    const helper = await enter(T.helper);
    // deny fails closed: no command at all, a command that is not a string.
    expect(await outcome(helper, "h1", "shell", "run", {})).toBe("denied");
    expect(await outcome(helper, "h2", "shell", "run", { command: ["rm", "-rf", "/"] })).toBe("denied");
    // ask fails closed: a path that is not a string, or hidden behind __proto__, or climbing out of notes/, asks.
    expect(await outcome(helper, "h3", "files", "write_file", { path: { startsWith: "notes/" } })).toBe("proposal");
    expect(await outcome(helper, "h4", "files", "write_file", JSON.parse('{"__proto__": {"path": "notes/x"}}'))).toBe("proposal");
    expect(await outcome(helper, "h4b", "files", "write_file", { path: "notes/../secrets.env" })).toBe("proposal");
    // Arguments nested thousands deep never reach a condition: the frame is refused whole.
    let deep: unknown = "notes/x";
    for (let i = 0; i < 3000; i++) deep = { p: deep };
    expect(await outcome(helper, "h5", "shell", "run", { command: "ls", deep })).toBe("error:too_deep");
    // ask fails closed: an amount that is not a number asks.
    expect(await outcome(helper, "h6", "pay", "transfer", { amount: "1000" })).toBe("proposal");
    // The gateway keeps serving: a plain call goes through.
    expect(await outcome(helper, "h7", "files", "write_file", { path: "notes/ok.md" })).toBe("direct");
    expect(({} as Record<string, unknown>)["path"]).toBeUndefined();
  });

  it("writes under notes/ are fine, anything else asks; rm -rf is denied; amounts over 100 ask", async () => {
    gw = await startGateway(SPACE(TOOLS_YAML));
    await owners();
    const helper = await enter(T.helper);
    expect(await outcome(helper, "w1", "files", "write_file", { path: "notes/today.md", content: "hi" })).toBe("direct");
    expect(await outcome(helper, "w2", "files", "write_file", { path: "src/main.ts", content: "hi" })).toBe("proposal");
    expect(await outcome(helper, "s1", "shell", "run", { command: "ls -la" })).toBe("direct");
    expect(await outcome(helper, "s2", "shell", "run", { command: "cd / && rm -rf *" })).toBe("denied");
    expect(await outcome(helper, "p1", "pay", "transfer", { amount: 100 })).toBe("direct");
    expect(await outcome(helper, "p2", "pay", "transfer", { amount: 250.5 })).toBe("proposal");
    // A proposal of the write outside notes/ is decided by a human, and runs.
    helper.send({
      id: "prop1",
      kind: "mcp/proposal",
      to: ["files"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "src/a.ts" } } },
    });
    const alice = await enter(T.alice);
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "prop1");
    // The card says which rule, with its condition, asked for it (the proposal's own arguments decide).
    const card = (await api("proposals", T.alice)).body.proposals.find((x: { id: string }) => x.id === "prop1");
    expect(card.why).toBe("an ask rule matches files/write_file (when !args.path.startsWith('notes/') || args.path.contains('..') holds)");
    alice.send({ kind: "mcp/approve", correlation_id: ["prop1"], payload: {} });
    await helper.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("prop1") === true);
  });

  it("explain through the API says which rule (with its line), which condition, and who could approve; and agrees with the gateway", async () => {
    gw = await startGateway(SPACE(TOOLS_YAML));
    await owners();
    const helper = await enter(T.helper);
    const q = (tool: string, args: unknown, caller = "helper") =>
      `policy/explain?${new URLSearchParams({ caller, tool, args: JSON.stringify(args) })}`;
    const denied = (await api(q("shell/run", { command: "rm -rf /" }), T.alice)).body;
    expect(denied).toMatchObject({
      decision: "denied",
      code: "denied",
      step: "deny",
      rule: {
        kind: "deny",
        key: "participants.helper.tools.deny[0]",
        tool: "shell/run",
        when: "args.command.contains('rm -rf')",
        line: 12,
        column: 14,
      },
      condition: { result: "true" },
    });
    const asked = (await api(q("files/write_file", { path: "src/x" }), T.alice)).body;
    expect(asked).toMatchObject({
      decision: "proposal",
      step: "ask",
      rule: { key: "participants.helper.tools.ask[0]", tool: "files/write_file", line: 11, column: 13 },
      condition: { key: "ask[0]", result: "true" },
    });
    expect(asked.approvers.sort()).toEqual(["alice", "bob"]);
    const missing = (await api(q("shell/run", {}), T.alice)).body;
    expect(missing).toMatchObject({ decision: "denied", condition: { result: "error" } });
    // Explain agrees with what the gateway does with the same call.
    for (const [i, [tool, args]] of (
      [
        ["shell/run", { command: "rm -rf /" }],
        ["files/write_file", { path: "src/x" }],
        ["files/write_file", { path: "notes/x" }],
        ["pay/transfer", { amount: 101 }],
      ] as const
    ).entries()) {
      const e = (await api(q(tool, args), T.helper)).body;
      const [owner, name] = tool.split("/") as [string, string];
      expect(await outcome(helper, `agree-${i}`, owner, name, args)).toBe(e.decision);
    }
    // A participant explains only its own calls; a human anyone's.
    expect((await api(q("files/write_file", {}, "bob"), T.helper)).status).toBe(403);
    expect((await api(q("files/write_file", {}, "nobody"), T.alice)).status).toBe(404);
    expect((await api(`policy/explain?tool=files/write_file&args=${encodeURIComponent("[1]")}`, T.helper)).body.error.code).toBe(
      "invalid_payload",
    );
    expect((await api(`policy/explain?tool=nothing`, T.helper)).status).toBe(400);
    // An "always" approval is a grant: explain names it and its granter.
    helper.send({
      id: "always1",
      kind: "mcp/proposal",
      to: ["files"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "src/x" } } },
    });
    const alice = await enter(T.alice);
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "always1");
    alice.send({ kind: "mcp/approve", correlation_id: ["always1"], payload: { scope: "always" } });
    await helper.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("always1") === true);
    const granted = (await api(q("files/write_file", { path: "src/y" }), T.alice)).body;
    expect(granted).toMatchObject({ decision: "direct", step: "grant", grant: { from: "alice", id: expect.any(String) } });
    expect(await outcome(helper, "after-grant", "files", "write_file", { path: "src/y" })).toBe("direct");
  });

  it("explain via the CLI prints the decision, the rule's line and the approvers", async () => {
    gw = await startGateway(SPACE(TOOLS_YAML));
    await owners();
    const target = ["-g", `ws://127.0.0.1:${gw.port}`, "-s", "pol"];
    const r = await cli(["policy", "explain", "helper", "pay/transfer", "--args", '{"amount": 500}', ...target], {
      MEWGATE_TOKEN: T.alice,
    });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("helper → pay/transfer: ask");
    expect(r.stdout).toMatch(/rule: participants\.helper\.tools\.ask\[1\] at .*space\.yaml:11:\d+/);
    expect(r.stdout).toContain("condition ask[1]: args.amount > 100 → true");
    expect(r.stdout).toMatch(/approvers: (alice, bob|bob, alice)/);
    const bad = await cli(["policy", "explain", "helper", "pay/transfer", "--args", "[", ...target], { MEWGATE_TOKEN: T.alice });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain("--args must be a JSON object");
  });
});

void responseFor;
void errorFor;

describe("policy test: table-driven expectations", () => {
  const SPACES = join(import.meta.dirname, "..", "spaces");

  it("a failing case is printed with its line, what was expected and the rule that decided, and exits 1", async () => {
    const space = file(
      SPACE(`      allow: ["files/*"]
      ask: [{tool: "files/write_file", when: "!args.path.startsWith('notes/')"}]`),
    );
    const cases = join(space, "..", "cases.yaml");
    writeFileSync(
      cases,
      `space: space.yaml
cases:
  - {caller: helper, tool: files/write_file, args: {path: notes/a}, expect: direct}
  - {caller: helper, tool: files/write_file, args: {path: src/a}, expect: direct}
  - {caller: helper, tool: files/write_file, args: {path: src/a}, expect: ask, approvers: [alice]}
  - {caller: nobody, tool: files/write_file, expect: deny}
`,
    );
    const r = await cli(["policy", "test", cases]);
    expect(r.status).toBe(1);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toMatch(
      /^FAIL .*cases\.yaml:4:5: helper → files\/write_file \{"path":"src\/a"\}: expected direct, got ask \(an ask rule matches files\/write_file \(when !args\.path\.startsWith\('notes\/'\) holds\); rule participants\.helper\.tools\.ask\[0\] at .*space\.yaml:11:\d+\)$/,
    );
    expect(lines[1]).toMatch(/^FAIL .*cases\.yaml:5:5: .*expected approvers \[alice\], got \[(alice, bob|bob, alice)\]/);
    expect(lines[2]).toMatch(/^FAIL .*cases\.yaml:6:5: nobody → files\/write_file: no participant "nobody"/);
    expect(lines[3]).toBe("1 of 4 case(s) pass; 3 fail");
  });

  it("a malformed cases file is refused with where and why", async () => {
    const space = file(SPACE(`      allow: ["files/*"]`));
    const cases = join(space, "..", "cases.yaml");
    writeFileSync(cases, `space: space.yaml\ncases:\n  - {caller: helper, tool: files/write_file, expect: maybe}\n`);
    const r = await cli(["policy", "test", cases]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/cases\.yaml:3:5: cases\.0\.expect: /);
  });

  it("the example spaces pass their own cases", async () => {
    for (const name of ["demo", "coding", "team"]) {
      const r = await cli(["policy", "test", join(SPACES, name, "policy.cases.yaml")]);
      expect(r.stderr).toBe("");
      expect(r.stdout).toMatch(/^(\d+) of \1 case\(s\) pass\n$/);
      expect(r.status).toBe(0);
      const check = await cli(["policy", "check", join(SPACES, name, "space.yaml")]);
      expect(check.status).toBe(0);
      expect(check.stdout).not.toMatch(/warning|error/);
    }
  });
});
