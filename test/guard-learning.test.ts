/**
 * Where guards meet learning (issue 50 with issue 45's learner), hostile first: a suggestion
 * never names a secret or a piece of personal data (space.yaml would hold it, and a rule naming
 * it would free it); the dry run of a learned rule counts a call a guard holds as held; an
 * `allow` a person wrote or accepted does not let through what a guard holds; a held call's
 * risk says what the guard found, high, so no reviewer's bound lets it through alone.
 */
import { describe, expect, it } from "vitest";
import { parseSpaceConfig, type SpaceConfig } from "../gateway/config/config.js";
import { Authority } from "../gateway/policy/authority.js";
import { type PastCall, pastCalls, personIn } from "../gateway/policy/learn/history.js";
import { Replayer } from "../gateway/policy/learn/replay.js";
import { riskOf } from "../gateway/policy/learn/risk.js";
import { suggest } from "../gateway/policy/learn/suggest.js";
import type { AuditEntry } from "../gateway/audit/entry.js";
import { Registry } from "../gateway/tools/registry.js";

const GH = "ghp_x7Qk2mZ9vR4tL8wN3pJ6sF1yH5cD0bG2aE4u";
const space = (extra = "", rules = "") =>
  parseSpaceConfig(
    `
space: {id: learn}
${extra}
participants:
  alice: {kind: human}
  fs: {kind: mcp}
  agent: {kind: agent, tools: {${rules}}}
`,
    { file: "/tmp/guard-learning.yaml", env: {} },
  );
const TOOLS = [{ participant: "fs", tool: "send", annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false } }];

let n = 0;
function approved(args: Record<string, unknown>): AuditEntry[] {
  const id = `p${++n}`;
  const ts = new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString();
  const base = { ts, proposal: id, proposer: "agent", owner: "fs", tool: "send", method: "tools/call" };
  return [
    { ...base, event: "proposed", arguments: args },
    { ...base, event: "approved", arguments: args, by: "alice", scope: "once" },
  ];
}
const call = (args: Record<string, unknown>): PastCall => ({
  id: "x",
  ts: "",
  proposer: "agent",
  owner: "fs",
  tool: "send",
  args,
  said: "undecided",
});

describe("guards and learning, hostile first", () => {
  it("a suggestion never names a secret or an email it saw approved again and again", () => {
    const cfg = space();
    const entries = [1, 2, 3, 4, 5].flatMap((i) => approved({ to: "bob@corp.example.org", token: GH, note: `week ${i}` }));
    const all = suggest(cfg, pastCalls(entries, personIn(cfg)), TOOLS);
    const text = JSON.stringify(all);
    expect(text).not.toContain("bob@corp");
    expect(text).not.toContain(GH.slice(6));
    // What it would allow does not cover the calls that held them: the content check refuses them.
    for (const s of all.filter((x) => x.kind !== "deny")) expect(JSON.stringify(s.rule)).not.toMatch(/corp\.example|ghp_/);
  });

  it("an allow rule (written or accepted) does not let through what a guard holds; the dry run counts it held", () => {
    const cfg: SpaceConfig = space(
      "guards: [{detect: [secrets, personal], action: hold, on: arguments}, {detect: egress, hosts: [api.github.com], action: deny}]",
      `allow: [{tool: "fs/send", when: "true"}]`,
    );
    const authority = new Authority(cfg, new Registry());
    const decide = (args: Record<string, unknown>) =>
      authority.call("agent", () => false, "fs", "tools/call", { name: "send", arguments: args });
    expect(decide({ note: "plain" }).decision).toBe("direct");
    const held = decide({ note: `token ${GH}` });
    expect(held.decision).toBe("proposal");
    expect(held.decision === "proposal" && held.guard?.findings[0]?.what).toBe("a GitHub token");
    expect(decide({ note: "mail bob@corp.example.org" }).decision).toBe("proposal");
    expect(decide({ note: "https://paste.example/u" })).toMatchObject({ decision: "denied", code: "guard_denied" });
    // The approver's bar (confirming) is not held again: a person releases it by approving.
    expect(authority.call("alice", () => false, "fs", "tools/call", { name: "send", arguments: { note: GH } }, true).decision).not.toBe(
      "proposal",
    );
    // The dry run of a rule decides with the same decision point, guards included.
    const replay = new Replayer(cfg, TOOLS);
    expect(replay.decide(call({ note: "plain" }))!.decision).toBe("direct");
    expect(replay.decide(call({ note: Buffer.from(`k ${GH}`).toString("base64") }))!.decision).toBe("proposal");
  });

  it("a held call's risk names what the guard found, high", () => {
    const risk = riskOf({
      id: "p",
      proposer: "agent",
      tool: "fs/send",
      args: { note: "hello" },
      annotations: { readOnlyHint: true },
      guarded: ["note holds a GitHub token (ghp_…(40))"],
      byProposer: [],
      byTool: [],
    });
    expect(risk.level).toBe("high");
    expect(risk.reasons.find((r) => r.code === "guard")?.text).toBe("a guard holds it for a person: note holds a GitHub token (ghp_…(40))");
    // Personal data alone is worth a closer look, and is said masked.
    const personal = riskOf({
      id: "q",
      proposer: "agent",
      tool: "fs/send",
      args: { to: "bob@corp.example.org" },
      byProposer: [],
      byTool: [],
    });
    expect(personal.reasons.find((r) => r.code === "personal")?.text).toBe("to holds an email address (bob@…(20))");
  });
});

describe("policy explain, test and dry-run understand guards", () => {
  const GUARDED = `
space: {id: pol}
guards:
  - {name: no-secrets, detect: secrets, action: hold, on: arguments}
  - {name: no-paste, detect: egress, hosts: [api.github.com], action: deny, tools: ["fs/fetch"]}
  - {name: mask-mail, detect: personal, personal: [email], action: redact}
participants:
  alice: {kind: human}
  fs: {kind: mcp}
  agent: {kind: agent, tools: {allow: ["fs/*"]}}
`;

  it("explain names the guards that apply, what they found (masked) and what they do, in the decision's words", async () => {
    const cfg = parseSpaceConfig(GUARDED, { file: "/tmp/pol.yaml", env: {} });
    const authority = new Authority(cfg, new Registry());
    const held = authority.explain("agent", "fs", "send", { note: `key ${GH}` });
    expect(held.decision).toBe("proposal");
    expect(held.why).toMatch(/an allow rule matches fs\/send; and a guard holds it for a person: a GitHub token in note/);
    expect(held.guards).toMatchObject({ applying: ["no-secrets", "mask-mail"], action: "hold" });
    expect(JSON.stringify(held)).not.toContain(GH.slice(6));
    const denied = authority.explain("agent", "fs", "fetch", { url: "https://paste.example/u" });
    expect(denied).toMatchObject({ decision: "denied", code: "guard_denied", guards: { action: "deny" } });
    const redacted = authority.explain("agent", "fs", "send", { to: "bob@corp.example.org" });
    expect(redacted).toMatchObject({ decision: "direct", guards: { action: "redact" } });
    expect(authority.explain("agent", "fs", "send", { note: "plain" }).guards).toEqual({ applying: ["no-secrets", "mask-mail"] });
    const { explanationText } = await import("../cli/policy.js");
    expect(explanationText(held)).toMatch(
      /guards: no-secrets, mask-mail \(hold\)\n {4}no-secrets: note holds a GitHub token \(ghp_…\(40\)\) → hold/,
    );
  });

  it("policy test checks what the guards do; dry-run lists the calls a new guard would hold, masked", async () => {
    const { mkdtempSync, writeFileSync, mkdirSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const { runPolicyTest } = await import("../cli/policy.js");
    const { runPolicyDryRun } = await import("../cli/policy-learn.js");
    const dir = mkdtempSync(join(tmpdir(), "guard-policy-"));
    const file = join(dir, "space.yaml");
    writeFileSync(file, GUARDED);
    writeFileSync(
      join(dir, "cases.yaml"),
      `cases:
  - {caller: agent, tool: fs/send, args: {note: "key ${GH}"}, expect: ask, guard: hold}
  - {caller: agent, tool: fs/fetch, args: {url: "https://paste.example/u"}, expect: deny, guard: deny}
  - {caller: agent, tool: fs/send, args: {to: "bob@corp.example.org"}, expect: direct, guard: redact}
  - {caller: agent, tool: fs/send, args: {note: plain}, expect: direct, guard: none}
  - {name: wrong on purpose, caller: agent, tool: fs/send, args: {note: "key ${GH}"}, expect: ask, guard: none}
`,
    );
    let out = "";
    const write = (x: string) => {
      out += x;
      return true;
    };
    const io = { stdout: { write }, stderr: { write: () => true }, env: {} } as never;
    expect(await runPolicyTest(join(dir, "cases.yaml"), file, {}, io)).toBe(1);
    expect(out).toMatch(/4 of 5 case\(s\) pass; 1 fail/);
    expect(out).toMatch(/wrong on purpose.*expected the guards to none, got hold/);
    // Dry-run: the trail of a space without guards, replayed under one with them.
    const plain = GUARDED.replace(/guards:[\s\S]*?participants:/, "participants:");
    const state = join(dir, ".mewgate");
    mkdirSync(state, { recursive: true });
    writeFileSync(file, plain);
    const cfgPlain = parseSpaceConfig(plain, { file, env: {} });
    const { Gateway } = await import("../gateway/edge/server.js");
    const gw = new Gateway({ spaces: [cfgPlain], host: "127.0.0.1", port: 0, env: {} });
    await gw.listen();
    const space = gw.spaces.get("pol")!;
    const { directCallPlan } = await import("../gateway/calls/direct-audit.js");
    await space.ledger.record(
      directCallPlan({
        id: "r1",
        caller: "agent",
        target: "fs",
        method: "tools/call",
        params: { name: "send", arguments: { note: `key ${GH}` } },
        reason: undefined,
      }),
      directCallPlan({
        id: "r2",
        caller: "agent",
        target: "fs",
        method: "tools/call",
        params: { name: "send", arguments: { note: "plain" } },
        reason: undefined,
      }),
    );
    await gw.close();
    const changed = join(dir, "guarded.yaml");
    writeFileSync(changed, GUARDED);
    out = "";
    expect(await runPolicyDryRun(changed, { config: file }, io)).toBe(0);
    expect(out).toMatch(/2 recorded call\(s\) replayed; 1 would be decided otherwise/);
    expect(out).toMatch(/direct → proposal.*guard hold: a GitHub token in note/);
    expect(out).not.toContain(GH.slice(6));
  });
});
