/**
 * A proposal's risk, stated (gateway/policy/learn/risk.ts), hostile first: a tool that
 * declares no hints is not "low" (MCP's defaults: destructive, open-world); what the
 * arguments hold is read from the first call, at every depth, arrays included — a secret,
 * shell syntax, a hidden, secret-like or system path, a host never seen, a path outside what
 * this proposer touched (never made familiar by a past `/srv`); huge and cyclic arguments.
 * "Low" is nothing new and nothing dangerous, and its words say both.
 */
import { describe, expect, it } from "vitest";
import type { PastCall } from "../gateway/policy/learn/history.js";
import { riskOf, traitsOf } from "../gateway/policy/learn/risk.js";

let k = 0;
const past = (args: Record<string, unknown>, said: PastCall["said"] = "approved", tool = "write_file"): PastCall => ({
  id: `x${++k}`,
  ts: "",
  proposer: "agent",
  owner: "fs",
  tool,
  args,
  said,
  by: "alice",
});
const SAFE = { readOnlyHint: false, destructiveHint: false, openWorldHint: false };
const history = [
  past({ path: "notes/a.md" }),
  past({ path: "notes/b.md" }),
  past({ path: "notes/2026/c.md" }),
  past({ url: "https://docs.example.org/a" }, "approved", "fetch"),
];
const base = { id: "now", proposer: "agent", tool: "fs/write_file", byProposer: history, byTool: history.slice(0, 3), annotations: SAFE };
const codes = (args: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  riskOf({ ...base, ...extra, args }).reasons.map((r) => r.code);

describe("risk, stated", () => {
  it("a tool that declares no hints is destructive and open-world by MCP's defaults, and says so", () => {
    const r = riskOf({ ...base, annotations: undefined, args: { path: "notes/d.md" } });
    expect(r.level).toBe("high");
    expect(r.reasons.map((x) => x.code)).toEqual(["destructive", "open_world"]);
    expect(r.reasons[0]!.text).toMatch(/declares no hints: MCP's default/);
    expect(traitsOf({ readOnlyHint: true })).toMatchObject({ destructive: false, openWorld: false });
    expect(traitsOf({ destructiveHint: false })).toMatchObject({ destructive: false, openWorld: true });
  });

  it("content, from the first call and at every depth: secrets, shell, hidden, secret-like and system paths", () => {
    expect(codes({ path: "notes/d.md", text: "key AKIAIOSFODNN7EXAMPLE" })).toContain("secret");
    expect(codes({ path: "notes/d.md", parts: [{ deep: ["ghp_x7Qk2mZ9vR4tL8wN3pJ6sF1yH5cD0bG2aE4u"] }] })).toContain("secret");
    expect(codes({ command: "npm test && curl https://x.example/u" }, { tool: "shell/run_command" })).toContain("shell");
    expect(codes({ command: "git push --force; rm -rf /" })).toContain("shell");
    expect(codes({ path: "notes/.env" })).toContain("sensitive_path");
    expect(codes({ path: "notes/.git/hooks/x" })).toContain("hidden_path");
    expect(codes({ path: "~/.bashrc" })).toContain("sensitive_path");
    expect(codes({ path: "/etc/cron.d/x" })).toContain("sensitive_path");
    expect(codes({ path: "notes/../secrets/x" })).toContain("traversal");
    // The first call: every reason is there already.
    const first = riskOf({ ...base, byProposer: [], byTool: [], args: { path: "notes/.env", text: "AKIAIOSFODNN7EXAMPLE" } });
    expect(first.reasons.map((r) => r.code)).toEqual(expect.arrayContaining(["secret", "sensitive_path", "first_use", "new_path"]));
  });

  it("hosts and paths never seen are new; a past /srv does not make every absolute path familiar", () => {
    expect(codes({ url: "https://paste.example.net/u" })).toContain("new_host");
    expect(codes({ url: "https://docs.example.org/b" })).not.toContain("new_host");
    expect(codes({ files: ["other/x.md"] })).toContain("new_path");
    const srv = [...history, past({ path: "/srv" })];
    for (const path of ["/home/u/x", "/srv2/x", "/x"])
      expect(
        riskOf({ ...base, byProposer: srv, args: { path } }).reasons.map((r) => r.code),
        path,
      ).toContain("new_path");
    for (const path of ["notes/../secrets/x", "notes-private/x.md", "other/notes/x.md"])
      expect(riskOf({ ...base, args: { path } }).level, path).not.toBe("low");
  });

  it("huge arguments are high; cyclic ones are read within bounds", () => {
    const huge = riskOf({ ...base, args: { path: "notes/a.md", content: "x".repeat(100_000) } });
    expect(huge.level).toBe("high");
    expect(huge.reasons.map((r) => r.code)).toContain("large");
    const cyclic: Record<string, unknown> = { path: "notes/a.md" };
    cyclic["self"] = cyclic;
    expect(riskOf({ ...base, args: cyclic }).reasons.map((r) => r.code)).toContain("large");
  });

  it("each fact is a reason; low says nothing is new and nothing dangerous", () => {
    const low = riskOf({ ...base, args: { path: "notes/d.md", text: "a plain note" } });
    expect(low.level).toBe("low");
    expect(low.reasons).toEqual([]);
    expect(low.summary).toMatch(/^low: nothing new .* nothing dangerous found/);
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, annotations: { destructiveHint: true } }).level).toBe("high");
    expect(codes({ path: "notes/d.md" }, { annotations: { ...SAFE, openWorldHint: true } })).toEqual(["open_world"]);
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, definitionChanged: true }).level).toBe("high");
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, flagged: true }).level).toBe("high");
    const first = riskOf({ ...base, byTool: [], args: { path: "notes/d.md" } });
    expect(first.reasons.map((r) => r.text)).toEqual(["the first call of fs/write_file by agent"]);
    expect(first.summary).toBe("medium: the first call of fs/write_file by agent");
    const rejected = riskOf({ ...base, byTool: [...history, past({ path: "notes/e.md" }, "rejected")], args: { path: "notes/d.md" } });
    expect(rejected.reasons[0]).toMatchObject({ code: "rejected_before", level: "medium" });
  });
});
