/**
 * Caps (issue 50) as space.yaml states them and as `policy explain`, `policy test` and `policy
 * dry-run` read them, hostile first: a cap that counts nothing, a negative or endless cost, a
 * server declaring a cost that is not a number, a flood of subjects; then explain naming the
 * cap a call would break, a test case saying how many calls came before, and a dry run that
 * replays the trail in order and lists the calls a new cap would have refused or held.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { Authority } from "../gateway/policy/authority.js";
import { Caps } from "../gateway/policy/caps.js";
import { Groups } from "../gateway/policy/groups.js";
import type { PastCall } from "../gateway/policy/learn/history.js";
import { dryRun, Replayer } from "../gateway/policy/learn/replay.js";
import { Registry } from "../gateway/tools/registry.js";
import { capMetrics } from "../gateway/operator/policy-api.js";

const BASE = `
space: {id: capped}
participants:
  alice: {kind: human}
  bob: {kind: human}
  web: {kind: mcp}
  bot: {kind: agent, tools: {allow: ["web/*"]}}
  asker: {kind: agent, tools: {ask: ["web/*"]}}
`;
const parse = (extra: string) => parseSpaceConfig(`${extra}\n${BASE}`, { file: "/tmp/caps-policy.yaml", env: {} });

describe("caps in space.yaml, hostile first", () => {
  it("refuses a cap that counts nothing, a cost that is negative, endless or not a number, and a subject it does not know", () => {
    expect(() => parse("caps: [{per: agent}]")).toThrow(/a cap needs calls_per_minute, cost_per_minute or both/);
    expect(() => parse("caps: [{per: agent, calls_per_minute: 0}]")).toThrow(/calls_per_minute/);
    expect(() => parse("caps: [{per: agent, calls_per_minute: 2.5}]")).toThrow(/calls_per_minute/);
    expect(() => parse("caps: [{per: agent, cost_per_minute: -1}]")).toThrow(/cost_per_minute/);
    expect(() => parse("caps: [{per: agent, cost_per_minute: .inf}]")).toThrow(/cost_per_minute/);
    expect(() => parse("caps: [{per: agent, cost_per_minute: .nan}]")).toThrow(/cost_per_minute/);
    expect(() => parse("caps: [{per: team, calls_per_minute: 1}]")).toThrow(/per/);
    expect(() => parse("caps: [{per: agent, calls_per_minute: 1, action: deny}]")).toThrow(/action/);
    expect(() => parse("caps: [{per: agent, calls_per_minute: 1, tools: web/*}]")).toThrow(/tools/);
    expect(() => parse(`caps: [${Array(33).fill("{per: tool, calls_per_minute: 1}").join(", ")}]`)).toThrow(/caps/);
    expect(() => parse('costs: {"web/*": -0.1}')).toThrow(/costs/);
    expect(() => parse('costs: {"web/*": "lots"}')).toThrow(/costs/);
    // Written as a string, a number is read as one (as everywhere in space.yaml); the default action refuses.
    const cfg = parse('caps: [{per: agent, calls_per_minute: "2"}]\ncosts: {"web/*": "0.5"}');
    expect(cfg.caps[0]).toMatchObject({ per: "agent", calls_per_minute: 2, action: "refuse", tools: ["*"], callers: ["*"] });
    expect(cfg.costs["web/*"]).toBe(0.5);
  });

  it("a server's declared cost counts only when it is a finite number, never negative; space.yaml's costs come first", () => {
    const cfg = parse('caps: [{name: spend, per: tool, cost_per_minute: 1}]\ncosts: {"web/priced": 0.25}');
    const registry = new Registry();
    const declared = (cost: unknown) => ({ inputSchema: { type: "object" as const }, _meta: { "mewgate/cost": cost } });
    registry.set("web", [
      { name: "free", ...declared(-5) },
      { name: "huge", ...declared(Number.POSITIVE_INFINITY) },
      { name: "text", ...declared("0.9") },
      { name: "nan", ...declared(Number.NaN) },
      { name: "fair", ...declared(0.6) },
      { name: "priced", ...declared(100) },
    ]);
    const caps = new Caps(cfg, new Groups(cfg), registry);
    expect(["free", "huge", "text", "nan", "fair", "priced"].map((t) => caps.costOf("web", t))).toEqual([0, 0, 0, 0, 0.6, 0.25]);
    // A tool that declares nothing it may use without end; one that costs 0.6 once a minute.
    for (let i = 0; i < 100; i++) caps.plan("bot", "web", "free")?.apply();
    expect(caps.over("bot", "web", "free")).toBeUndefined();
    caps.plan("bot", "web", "fair")?.apply();
    expect(caps.over("bot", "web", "fair")).toMatchObject({ cap: "spend", what: "cost", limit: 1, used: 0.6, subject: "web/fair" });
    expect(caps.over("bot", "web", "priced")).toBeUndefined();
  });

  it("counts whole minutes of the clock: the next minute starts from nothing, and a record of another minute is not counted", () => {
    const cfg = parse("caps: [{name: few, per: agent, calls_per_minute: 2}]");
    let now = Date.UTC(2026, 0, 1, 12, 0, 59, 900);
    const caps = new Caps(cfg, new Groups(cfg), new Registry(), () => now);
    caps.plan("bot", "web", "search")?.apply();
    caps.plan("bot", "web", "search")?.apply();
    expect(caps.over("bot", "web", "search")?.text).toBe("few: bot has made 2 of 2 calls this minute");
    // A record of the minute before, read back late (a slow replica), is not counted.
    now += 200;
    expect(caps.over("bot", "web", "search")).toBeUndefined();
    caps.apply({ type: "cap", key: "few\u0000bot", minute: Math.floor((now - 60_000) / 60_000), calls: 50, cost: 0 });
    expect(caps.over("bot", "web", "search")).toBeUndefined();
    // A record with nonsense in it counts nothing.
    caps.apply({ type: "cap", key: "few\u0000bot", minute: Math.floor(now / 60_000), calls: "x" as never, cost: Number.NaN });
    expect(caps.uses()).toEqual([{ cap: "few", per: "agent", subject: "bot", calls: 0, cost: 0, calls_per_minute: 2 }]);
  });

  it("who is counted: an agent's own calls for no person, a person's direct calls and approvals for that person", () => {
    const cfg = parse("caps: [{name: people, per: person, calls_per_minute: 1}, {name: agents, per: agent, calls_per_minute: 5}]");
    const caps = new Caps(cfg, new Groups(cfg), new Registry());
    caps.plan("bot", "web", "search")?.apply();
    caps.plan("alice", "web", "search")?.apply();
    caps.plan("asker", "web", "search", "bob")?.apply();
    expect(caps.uses().map((u) => `${u.cap}:${u.subject}:${u.calls}`)).toEqual([
      "agents:asker:1",
      "agents:bot:1",
      "people:alice:1",
      "people:bob:1",
    ]);
    // Bob's next approval is past his cap; Alice may still approve.
    expect(caps.over("asker", "web", "search", { approver: "bob" })?.cap).toBe("people");
    expect(caps.over("asker", "web", "search", { approver: "alice" })?.cap).toBe("people");
    expect(caps.over("asker", "web", "search", { approver: "nobody-human" })).toBeUndefined();
  });
});

describe("caps in /metrics", () => {
  it("a name with quotes, backslashes, newlines or control characters cannot end a label or add a line", () => {
    const cfg = parse('caps: [{name: "a\\"} b\\\\ \\n evil 1\\u0007", per: agent, calls_per_minute: 4}]');
    const caps = new Caps(cfg, new Groups(cfg), new Registry());
    caps.plan("bot", "web", "search")?.apply();
    const text = capMetrics([{ id: "capped", authority: { caps } }] as never);
    const lines = text.trim().split("\n");
    expect(lines.filter((l) => !l.startsWith("#"))).toEqual([
      'mewgate_cap_calls{space="capped",cap="a_} b_ _ evil 1_",per="agent",subject="bot"} 1',
      'mewgate_cap_cost{space="capped",cap="a_} b_ _ evil 1_",per="agent",subject="bot"} 0',
      'mewgate_cap_calls_limit{space="capped",cap="a_} b_ _ evil 1_",per="agent",subject="bot"} 4',
    ]);
  });
});

describe("policy explain, test and dry-run understand caps", () => {
  const CAPPED = `
caps:
  - {name: per-agent, per: agent, calls_per_minute: 3, action: refuse, tools: ["web/*"], callers: [bot]}
  - {name: spend, per: tool, cost_per_minute: 1, action: hold, tools: ["web/search"]}
costs: {"web/search": 0.4}
`;

  it("explain names the caps that count a call and, past one, what it does, in the decision's words", async () => {
    const cfg = parse(CAPPED);
    const authority = new Authority(cfg, new Registry());
    expect(authority.explain("bot", "web", "search").caps).toEqual({ applying: ["per-agent", "spend"] });
    for (let i = 0; i < 3; i++) authority.caps.plan("bot", "web", "fetch")?.apply();
    const refused = authority.explain("bot", "web", "fetch");
    expect(refused).toMatchObject({ decision: "denied", code: "cap_exceeded", caps: { breach: { cap: "per-agent", action: "refuse" } } });
    expect(refused.why).toMatch(/an allow rule matches web\/fetch; and a cap refuses it until next minute: per-agent: bot has made 3 of 3/);
    // The hold waits for a person: only humans are named as approvers.
    authority.caps.clear();
    for (let i = 0; i < 2; i++) authority.caps.plan("asker", "web", "search")?.apply();
    const held = authority.explain("bot", "web", "search");
    expect(held).toMatchObject({ decision: "proposal", caps: { breach: { cap: "spend", action: "hold", what: "cost" } } });
    expect(held.approvers.sort()).toEqual(["alice", "bob"]);
    const { explanationText } = await import("../cli/policy.js");
    expect(explanationText(refused)).toMatch(/ {2}caps: per-agent \(refuse: per-agent: bot has made 3 of 3 calls this minute\)/);
  });

  it("policy test: a case says how many calls came this minute and what the caps then do", async () => {
    const { runPolicyTest } = await import("../cli/policy.js");
    const dir = mkdtempSync(join(tmpdir(), "caps-policy-"));
    writeFileSync(join(dir, "space.yaml"), `${CAPPED}\n${BASE}`);
    writeFileSync(
      join(dir, "cases.yaml"),
      `cases:
  - {caller: bot, tool: web/fetch, expect: direct, cap: none}
  - {caller: bot, tool: web/fetch, calls_this_minute: 2, expect: direct, cap: none}
  - {caller: bot, tool: web/fetch, calls_this_minute: 3, expect: deny, cap: refuse}
  - {caller: asker, tool: web/search, calls_this_minute: 1, expect: ask, cap: none}
  - {caller: asker, tool: web/search, calls_this_minute: 2, expect: ask, cap: hold, approvers: [alice, bob]}
  - {name: wrong on purpose, caller: bot, tool: web/fetch, calls_this_minute: 1000000, expect: deny, cap: none}
`,
    );
    let out = "";
    const write = (x: string) => {
      out += x;
      return true;
    };
    const io = { stdout: { write }, stderr: { write: () => true }, env: {} } as never;
    expect(await runPolicyTest(join(dir, "cases.yaml"), join(dir, "space.yaml"), {}, io)).toBe(1);
    expect(out).toMatch(/5 of 6 case\(s\) pass; 1 fail/);
    expect(out).toMatch(/wrong on purpose.*expected the caps to none, got refuse/);
    // A count that is no count is an error with its place, not a pass.
    writeFileSync(join(dir, "bad.yaml"), "cases:\n  - {caller: bot, tool: web/fetch, calls_this_minute: -1, expect: direct}\n");
    out = "";
    let err = "";
    const toErr = (x: string) => {
      err += x;
      return true;
    };
    const io2 = { stdout: { write }, stderr: { write: toErr }, env: {} } as never;
    expect(await runPolicyTest(join(dir, "bad.yaml"), join(dir, "space.yaml"), {}, io2)).not.toBe(0);
    expect(err).toMatch(/bad\.yaml:2:5: cases\.0\.calls_this_minute/);
  });

  it("dry-run replays the trail in order: a new cap lists the calls it would have refused or held, minute by minute", () => {
    const before = parse("");
    const after = parse(CAPPED);
    const at = (minute: number, second: number) => new Date(Date.UTC(2026, 0, 1, 9, minute, second)).toISOString();
    let n = 0;
    const call = (ts: string, proposer: string, tool: string, extra: Partial<PastCall> = {}): PastCall => ({
      id: `c${++n}`,
      ts,
      proposer,
      owner: "web",
      tool,
      args: {},
      said: "undecided",
      direct: true,
      ...extra,
    });
    const calls: PastCall[] = [
      // Five in one minute by bot: the fourth and fifth are past its cap.
      ...[1, 2, 3, 4, 5].map((s) => call(at(0, s), "bot", "fetch")),
      // The next minute starts again.
      call(at(1, 0), "bot", "fetch"),
      // Searches cost 0.4: the third in a minute is held, whoever asks.
      call(at(2, 1), "asker", "search", { said: "approved", by: "alice", direct: undefined }),
      call(at(2, 2), "asker", "search", { said: "approved", by: "alice", direct: undefined }),
      call(at(2, 3), "asker", "search", { said: "approved", by: "alice", direct: undefined }),
    ];
    const run = dryRun(new Replayer(before), new Replayer(after), calls);
    expect(run.replayed).toBe(9);
    expect(run.changes.map((c) => `${c.call.id} ${c.how}`)).toEqual(["c4 direct → denied", "c5 direct → denied"]);
    expect(run.changes[0]!.after?.cap).toBe("refuse: per-agent: bot has made 3 of 3 calls this minute");
    // The held search was a proposal already (asker asks for everything): its outcome says the cap held it.
    const third = new Replayer(after);
    const outcomes = calls.map((c) => third.replay(c));
    expect(outcomes[8]).toMatchObject({
      decision: "proposal",
      cap: "hold: spend: web/search has spent 0.8 of 1 this minute; this call costs 0.4",
    });
    // Deciding alone (as suggestions do) counts nothing: no cap is ever reached.
    const alone = new Replayer(after);
    expect(calls.map((c) => alone.decide(c)?.cap).filter(Boolean)).toEqual([]);
  });
});
