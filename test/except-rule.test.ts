/**
 * The `except` rule (policy/rules.ts): what narrows an explicit `ask`, as an accepted
 * suggestion writes it. Hostile first: a condition that cannot be evaluated lets nothing
 * through (the ask applies); a deny still wins; a grant is still above; a changed tool
 * definition still asks; an except with no ask below it is no allow in disguise for anything
 * else. Then: it decides direct, says so in words, and the checks see it in the fixed order.
 */
import { describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { checkPolicy } from "../gateway/policy/check.js";
import { CompiledPolicy, decideWhy } from "../gateway/policy/rules.js";

const config = (tools: string) =>
  parseSpaceConfig(`space: {id: x}\nparticipants:\n  fs: {kind: mcp}\n  a:\n    kind: agent\n    tools: ${tools}\n`, {
    file: "/tmp/x.yaml",
    env: {},
  });
const decide = (tools: string, args: unknown, extra: Partial<Parameters<typeof decideWhy>[0]> = {}) => {
  const policy = new CompiledPolicy(config(tools).participants["a"]!.tools);
  return decideWhy({
    policy,
    granted: () => false,
    configured: () => false,
    owner: "fs",
    tool: "write_file",
    fallback: "ask",
    facts: { args, caller: { id: "a", kind: "agent", groups: [] } },
    ...extra,
  });
};
const RULES = `{ask: [fs/*], except: [{tool: fs/write_file, when: 'args.path.startsWith("notes/") && clean(args.text)'}], deny: [{tool: fs/write_file, when: 'args.path == "notes/x.md"'}]}`;

describe("except rules", () => {
  it("fail closed: a condition that cannot say, a deny, a changed definition all keep it from letting a call through", () => {
    expect(decide(RULES, { path: 42 }).decision).toBe("proposal");
    expect(decide(RULES, { path: "notes/a.md" }).decision).toBe("proposal"); // text missing: an error, so the ask
    expect(decide(RULES, { path: "notes/a.md", text: "AKIAIOSFODNN7EXAMPLE" }).decision).toBe("proposal");
    expect(decide(RULES, { path: "notes/x.md", text: "hi" }).decision).toBe("denied");
    expect(decide(RULES, { path: "notes/a.md", text: "hi" }, { unconfirmed: true }).decision).toBe("proposal");
    expect(decide(RULES, { path: "other/a.md", text: "hi" }).decision).toBe("proposal");
  });

  it("decides direct where it holds, says so, and a grant stays above it", () => {
    const d = decide(RULES, { path: "notes/a.md", text: "hi" });
    expect(d).toMatchObject({ decision: "direct", step: "except" });
    expect(d.why).toMatch(/an except rule matches fs\/write_file \(when .* holds\), so no ask applies/);
    expect(decide(RULES, { path: "notes/a.md", text: "hi" }, { granted: () => true }).step).toBe("grant");
  });

  it("the checks read it in the order deny → grant → except → ask → allow", () => {
    const f = checkPolicy(config("{except: [fs/write_file], ask: [fs/write_file]}"));
    expect(f.map((x) => x.message).join("\n")).toMatch(/except\[0\] .* covers every call it covers, and except is decided before ask/);
    const bad = checkPolicy(config(`{except: [{tool: fs/write_file, when: 'args.x >'}]}`));
    expect(bad[0]).toMatchObject({ severity: "error", code: "bad_condition", path: "participants.a.tools.except[0]" });
  });
});
