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
import type { AuditEntry } from "../gateway/proposals/book.js";
import { Registry } from "../gateway/ports/registry.js";

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
