/**
 * A proposal's risk, stated (gateway/policy/learn/risk.ts): each fact the gateway holds
 * raises it with a reason in words; hostile shapes (a `..` inside a familiar directory, a
 * sibling directory, huge arguments, a cycle) are not mistaken for the familiar.
 */
import { describe, expect, it } from "vitest";
import type { PastCall } from "../gateway/policy/learn/history.js";
import { riskOf } from "../gateway/policy/learn/risk.js";

const past = (path: string, said: PastCall["said"] = "approved", tool = "write_file"): PastCall => ({
  id: `x${Math.random()}`,
  ts: "",
  proposer: "agent",
  owner: "fs",
  tool,
  args: { path },
  said,
  by: "alice",
});
const history = [past("notes/a.md"), past("notes/b.md"), past("notes/2026/c.md")];
const base = { id: "now", proposer: "agent", tool: "fs/write_file", byProposer: history, byTool: history };

describe("risk, stated", () => {
  it("hostile shapes: .., a sibling, a parent, huge arguments are never low", () => {
    for (const path of ["notes/../secrets/x", "notes-private/x.md", "x.md/..", "/etc/passwd", "other/notes/x.md"]) {
      const r = riskOf({ ...base, args: { path } });
      expect(r.level, path).not.toBe("low");
    }
    const huge = riskOf({ ...base, args: { path: "notes/a.md", content: "x".repeat(100_000) } });
    expect(huge.level).toBe("high");
    expect(huge.reasons.map((r) => r.code)).toContain("large");
    const cyclic: Record<string, unknown> = { path: "notes/a.md" };
    cyclic["self"] = cyclic;
    expect(riskOf({ ...base, args: cyclic }).level).toBe("low");
  });

  it("each fact is a reason: hints, a changed definition, flagged texts, a first use, rejections before", () => {
    expect(riskOf({ ...base, args: { path: "notes/d.md" } })).toEqual({ level: "low", reasons: [] });
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, annotations: { destructiveHint: true } }).level).toBe("high");
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, annotations: { openWorldHint: true } }).reasons.map((r) => r.code)).toEqual([
      "open_world",
    ]);
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, definitionChanged: true }).level).toBe("high");
    expect(riskOf({ ...base, args: { path: "notes/d.md" }, flagged: true }).level).toBe("high");
    const first = riskOf({ ...base, byTool: [], args: { path: "notes/d.md" } });
    expect(first.reasons.map((r) => r.text)).toEqual(["the first call of fs/write_file by agent"]);
    const rejected = riskOf({ ...base, byTool: [...history, past("notes/e.md", "rejected")], args: { path: "notes/d.md" } });
    expect(rejected.reasons[0]).toMatchObject({ code: "rejected_before", level: "medium" });
  });
});
