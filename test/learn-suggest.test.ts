/**
 * Suggested rules from the audit trail (gateway/policy/learn/): hostile first. A proposer that
 * games learning gets a rule that covers only what was seen — never the parent, a sibling, a
 * hidden file, `..`, or an extra argument; a rejected call is covered only with its rejecter's
 * confirmation; no suggestion loosens a deny or a quorum; destructive tools get a scoped ask.
 * Then the happy paths: deny rules from repeated rejections, the dry run's split, the rule
 * written into a space.yaml with its comments and anchors kept, and 10,000 recorded calls.
 */
import { describe, expect, it } from "vitest";
import { parseSpaceConfig, type SpaceConfig } from "../gateway/config/config.js";
import { addToolRule, RuleEditError } from "../gateway/config/rule-edit.js";
import { type PastCall, pastCalls } from "../gateway/policy/learn/history.js";
import { Replayer } from "../gateway/policy/learn/replay.js";
import { type Suggestion, suggest, withRule } from "../gateway/policy/learn/suggest.js";
import type { AuditEntry } from "../gateway/proposals/book.js";
import { replayDay } from "../bench/attention.js";
import { seededDay } from "../bench/attention-day.js";

const SPACE = (agentRules = "", extra = "") => `
space: {id: learn}
participants:
  alice: {kind: human}
  bob: {kind: human}
  fs: {kind: mcp}
  helper: {kind: agent}
  agent: {kind: agent, tools: {${agentRules}}${extra}}
`;
const config = (rules?: string, extra?: string): SpaceConfig =>
  parseSpaceConfig(SPACE(rules, extra), { file: "/tmp/learn-space.yaml", env: {} });

let n = 0;
/** The audit entries of one proposal and its decision. */
function decided(
  args: Record<string, unknown>,
  said: "approved" | "rejected" | "edited" | "withdrawn",
  opts: { by?: string; tool?: string; proposer?: string } = {},
): AuditEntry[] {
  const id = `p${++n}`;
  const ts = new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString();
  const base = { ts, proposal: id, proposer: opts.proposer ?? "agent", owner: "fs", tool: opts.tool ?? "write_file", method: "tools/call" };
  const out: AuditEntry[] = [{ ...base, event: "proposed", arguments: args }];
  if (said === "approved") out.push({ ...base, event: "approved", arguments: args, by: opts.by ?? "alice", scope: "once" });
  if (said === "edited") out.push({ ...base, event: "approved", arguments: { ...args, edited: 1 }, edited: true, by: opts.by ?? "alice" });
  if (said === "rejected") out.push({ ...base, event: "rejected", arguments: args, by: opts.by ?? "alice", reason: "disagree" });
  if (said === "withdrawn") out.push({ ...base, event: "withdrawn", by: base.proposer });
  return out;
}

const notes = (names: string[], said: "approved" | "rejected" = "approved", dir = "notes/2026/") =>
  names.flatMap((x) => decided({ path: `${dir}${x}`, content: `text of ${x}` }, said));
const call = (args: Record<string, unknown>, tool = "write_file"): PastCall => ({
  id: "x",
  ts: "",
  proposer: "agent",
  owner: "fs",
  tool,
  args,
  said: "undecided",
});

function only(list: Suggestion[], kind?: string): Suggestion {
  const found = list.filter((s) => kind === undefined || s.kind === kind);
  expect(found).toHaveLength(1);
  return found[0]!;
}

describe("a proposer that games learning", () => {
  it("gets a rule covering only the directory it was approved in: not the parent, a sibling, a hidden file, .. or an extra argument", () => {
    const cfg = config();
    const calls = pastCalls(notes(["a.md", "b.md", "c.md", "d.md", "sub/e.md"]));
    const s = only(suggest(cfg, calls), "allow");
    expect(s.participant).toBe("agent");
    expect(s.covers).toEqual({ approved: 5, rejected: 0, edited: 0, undecided: 0 });
    expect(s.changes["proposal → direct"]?.total).toBe(5);
    const after = new Replayer(withRule(cfg, s.participant, s.kind, s.rule));
    const decide = (args: Record<string, unknown>) => after.decide(call(args))!.decision;
    expect(decide({ path: "notes/2026/new.md", content: "x" })).toBe("direct");
    expect(decide({ path: "notes/2026/deeper/new.md" })).toBe("direct");
    // Everything else is still asked.
    for (const path of [
      "notes/2026-private/x.md",
      "notes/other/x.md",
      "notes/x.md",
      "notes/2026/../../etc/passwd",
      "notes/2026/.git/hooks/pre-commit",
      "notes/2026/.env",
      "notes/2026//x",
      "notes/2026/-rf",
      "notes/2026/x\u0000y",
      "notes/2026/x%2e%2e/y",
      "notes/2026/ｘ.md",
      "/notes/2026/x.md",
      "other/notes/2026/x.md",
    ]) {
      expect(decide({ path, content: "x" }), path).toBe("proposal");
    }
    expect(decide({ path: "notes/2026/x.md", content: "x", mode: "append" })).toBe("proposal");
    expect(decide({ path: 42 })).toBe("proposal");
    expect(decide({})).toBe("proposal");
    // Another tool and another proposer are untouched.
    expect(after.decide(call({ path: "notes/2026/x.md" }, "delete_file"))!.decision).toBe("proposal");
    expect(after.decide({ ...call({ path: "notes/2026/x.md" }), proposer: "helper" })?.decision).toBe("proposal");
  });

  it("a rejected call inside the pattern needs its rejecter's confirmation, and is listed", () => {
    const calls = pastCalls([
      ...notes(["a.md", "b.md", "c.md"]),
      ...decided({ path: "notes/2026/evil.md", content: "x" }, "rejected", { by: "bob" }),
    ]);
    const s = only(suggest(config(), calls), "allow");
    expect(s.confirm).toEqual({ calls: [calls[3]!.id], by: ["bob"] });
    expect(s.covers.rejected).toBe(1);
    expect(s.listed.rejected.map((c) => c.args["path"])).toEqual(["notes/2026/evil.md"]);
    expect(s.changes["proposal → direct"]).toMatchObject({ total: 4, approved: 3, rejected: 1 });
  });

  it("an edited approval, a withdrawal, a gateway's cancel and a self-approval teach nothing", () => {
    const entries = [
      ...decided({ path: "notes/a.md" }, "edited"),
      ...decided({ path: "notes/b.md" }, "edited"),
      ...decided({ path: "notes/c.md" }, "withdrawn"),
      ...decided({ path: "notes/d.md" }, "approved", { by: "system:gateway" }),
      ...decided({ path: "notes/e.md" }, "approved", { by: "agent" }),
      ...decided({ path: "notes/f.md" }, "approved"),
    ];
    expect(suggest(config(), pastCalls(entries))).toEqual([]);
  });

  it("values that vary freely with nothing else to hold give no allow (it would widen past what was seen)", () => {
    const entries = ["ls", "rm -rf /tmp/x", "cat a", "echo 1", "pwd", "id"].flatMap((command) =>
      decided({ command }, "approved", { tool: "run" }),
    );
    expect(suggest(config(), pastCalls(entries)).filter((s) => s.kind === "allow")).toEqual([]);
    // A few forms seen: exactly those.
    const few = ["git status", "git diff", "git status", "git diff"].flatMap((command) =>
      decided({ command }, "approved", { tool: "run" }),
    );
    const s = only(suggest(config(), pastCalls(few)), "allow");
    const after = new Replayer(withRule(config(), s.participant, s.kind, s.rule));
    expect(after.decide(call({ command: "git diff" }, "run"))!.decision).toBe("direct");
    expect(after.decide(call({ command: "git push --force" }, "run"))!.decision).toBe("proposal");
  });
});

describe("a seeded day, learning as the bench does", () => {
  it("no harmful call the seed marks runs without a person, and the person is asked less", () => {
    const day = seededDay(36, 2400, 8);
    const without = replayDay(day, false);
    const learning = replayDay(day, true);
    expect(day.filter((c) => c.harmful)).toHaveLength(10);
    expect(learning.harmfulRan).toBe(0);
    expect(learning.decisions).toBeLessThan(without.decisions);
    // Risky tools were never allowed, only stated as scoped asks.
    for (const a of learning.accepted) expect(a).not.toMatch(/^allow \S+ (git\/push|shell\/run|fs\/delete_file|mail\/send|web\/fetch)$/);
  });
});

describe("never looser than the operator's word", () => {
  it("a quorum stays: no allow for a call that needs two approvals", () => {
    const cfg = config(undefined, ", approvals: 2");
    expect(suggest(cfg, pastCalls(notes(["a.md", "b.md", "c.md", "d.md"])))).toEqual([]);
    const perTool = config(undefined, ', approvals: {"fs/write_*": 2}');
    expect(suggest(perTool, pastCalls(notes(["a.md", "b.md", "c.md", "d.md"])))).toEqual([]);
  });

  it("a deny stays: a call denied now is never let through, and an ask above it means nothing is suggested", () => {
    // The pattern was approved before the operator denied one file.
    const cfg = config(`deny: [{tool: fs/write_file, when: 'args.path == "notes/2026/d.md"'}]`);
    const s = only(suggest(cfg, pastCalls(notes(["a.md", "b.md", "c.md", "d.md"]))), "allow");
    const after = new Replayer(withRule(cfg, s.participant, s.kind, s.rule));
    expect(after.decide(call({ path: "notes/2026/d.md", content: "x" }))!.decision).toBe("denied");
    expect(s.changes["proposal → direct"]?.total).toBe(3);
    expect(Object.keys(s.changes)).toEqual(["proposal → direct"]);
    // An ask rule that names the tool is the operator's "always ask": an allow below it decides nothing.
    const asked = config("ask: [fs/write_file]");
    expect(suggest(asked, pastCalls(notes(["a.md", "b.md", "c.md"])))).toEqual([]);
  });

  it("a destructive or open-world tool gets a scoped ask, never an allow", () => {
    const tools = [{ participant: "fs", tool: "write_file", annotations: { destructiveHint: true } }];
    const s = only(suggest(config(), pastCalls(notes(["a.md", "b.md", "c.md"])), tools));
    expect(s.kind).toBe("ask");
    expect(s.notes.join(" ")).toMatch(/destructive/);
    const open = only(
      suggest(config(), pastCalls(notes(["a.md", "b.md", "c.md"])), [
        { participant: "fs", tool: "write_file", annotations: { openWorldHint: true } },
      ]),
    );
    expect(open.kind).toBe("ask");
  });
});

describe("suggestions", () => {
  it("repeated rejections give a deny: the whole tool when never approved, else the rejected pattern only", () => {
    const never = pastCalls(["a", "b", "c"].flatMap((x) => decided({ path: `secrets/${x}` }, "rejected", { tool: "delete_file" })));
    const d = only(suggest(config(), never), "deny");
    expect(d.rule).toBe("fs/delete_file");
    expect(d.changes["proposal → denied"]?.rejected).toBe(3);
    const mixed = pastCalls([...notes(["a.md"]), ...notes(["x", "y", "z"], "rejected", "secrets/")]);
    const m = only(suggest(config(), mixed), "deny");
    const after = new Replayer(withRule(config(), m.participant, m.kind, m.rule));
    expect(after.decide(call({ path: "secrets/w", content: "q" }))!.decision).toBe("denied");
    expect(after.decide(call({ path: "notes/2026/a.md", content: "q" }))!.decision).toBe("proposal");
  });

  it("a shared exact value becomes an equality; the id is stable", () => {
    const entries = ["1", "2", "3"].flatMap((x) => decided({ branch: "main", message: `fix ${x}` }, "approved", { tool: "commit" }));
    const a = only(suggest(config(), pastCalls(entries)));
    const b = only(suggest(config(), pastCalls(entries)));
    expect(a.id).toBe(b.id);
    expect(a.scope).toContain('branch is "main"');
    const after = new Replayer(withRule(config(), a.participant, a.kind, a.rule));
    expect(after.decide(call({ branch: "main", message: "x" }, "commit"))!.decision).toBe("direct");
    expect(after.decide(call({ branch: "release", message: "x" }, "commit"))!.decision).toBe("proposal");
  });

  it("10,000 recorded calls give their suggestions (timed in the bench, not here)", () => {
    const entries: AuditEntry[] = [];
    for (let i = 0; i < 10_000; i++)
      entries.push(
        ...decided({ path: `notes/day/${i % 50}.md`, content: `c${i}` }, i % 97 === 0 ? "rejected" : "approved", {
          tool: `t${i % 20}`,
          proposer: i % 3 === 0 ? "agent" : "agent",
        }),
      );
    const calls = pastCalls(entries);
    expect(calls).toHaveLength(10_000);
    const list = suggest(config(), calls);
    expect(list.filter((s) => s.kind === "allow")).toHaveLength(20);
    for (const s of list) expect(s.listed.approved.length).toBeLessThanOrEqual(200);
  });
});

describe("writing a rule into space.yaml", () => {
  const FILE = `# the team's space
space: {id: learn} # inline comment
groups:
  team: &team [alice]
participants:
  # people
  alice: {kind: human}
  fs:
    kind: mcp
  agent:
    kind: agent
    approvers: *team
    tools: &shared
      ask:
        - fs/read_* # reads asked too
      deny: [fs/rm]
  twin: {kind: agent, tools: *shared}
`;
  it("keeps comments, anchors, aliases and flow style; the rule lands last in its list", () => {
    const rule = { tool: "fs/write_file", when: 'args["path"].startsWith("notes/")' };
    const out = addToolRule(FILE, "agent", "allow", rule);
    for (const kept of [
      "# the team's space",
      "# inline comment",
      "team: &team [alice]",
      "approvers: *team",
      "tools: &shared",
      "twin: {kind: agent, tools: *shared}",
      "# people",
      "- fs/read_* # reads asked too",
      "deny: [fs/rm]",
    ])
      expect(out).toContain(kept);
    const parsed = parseSpaceConfig(out, { file: "/tmp/x.yaml", env: {} });
    expect(parsed.participants["agent"]!.tools!.allow).toEqual([rule]);
    // The anchor holds the agent's tools: the twin that shares them shares the rule (the edit is where the anchor is).
    expect(parsed.participants["twin"]!.tools!.allow).toEqual([rule]);
    const denied = addToolRule(out, "agent", "deny", "fs/delete_file");
    expect(parseSpaceConfig(denied, { file: "/tmp/x.yaml", env: {} }).participants["agent"]!.tools!.deny).toEqual([
      "fs/rm",
      "fs/delete_file",
    ]);
  });

  it("refuses where the edit would reach others through an anchor, or hide a merge", () => {
    expect(() => addToolRule(FILE, "twin", "allow", "fs/x")).toThrow(RuleEditError);
    const merged = `participants:\n  agent:\n    <<: {tools: {deny: [fs/rm]}}\n    kind: agent\n`;
    expect(() => addToolRule(merged, "agent", "allow", "fs/x")).toThrow(/merge/);
    const sharedTools = `x: &t {ask: [fs/*]}\nparticipants:\n  agent: {kind: agent, tools: *t}\n`;
    expect(() => addToolRule(sharedTools, "agent", "allow", "fs/x")).toThrow(/alias/);
    expect(() => addToolRule("participants: {", "agent", "allow", "fs/x")).toThrow(/parse/);
    expect(() => addToolRule(FILE, "nobody", "allow", "fs/x")).toThrow(/no participant/);
  });
});
