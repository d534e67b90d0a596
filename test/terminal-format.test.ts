/** The terminal's view and proposal queue as pure functions. */
import { describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { formatEnvelope, PLAIN, ProposalQueue, whyApproval, type ViewContext } from "../cli/terminal/index.js";
import { visibleLength } from "../cli/terminal/format.js";

let n = 0;
const env = (e: Partial<Envelope> & { kind: string }): Envelope => ({
  protocol: "mew/v0.4",
  id: `id-${++n}`,
  ts: "2025-01-01T00:00:00Z",
  from: "assistant",
  payload: {},
  ...e,
});
const ctx = (width = 80): ViewContext => ({ me: "you", width, style: PLAIN, calls: new Map(), proposals: new Set() });
const proposal = (id: string, args: unknown = { path: "a.txt" }) =>
  env({ id, kind: "mcp/proposal", to: ["files"], payload: { method: "tools/call", params: { name: "write_file", arguments: args } } });

describe("formatEnvelope", () => {
  it("shows chat as `from: text`, addressed chat with its addressees, extra lines indented", () => {
    expect(formatEnvelope(env({ kind: "chat", payload: { text: "hi" } }), ctx())).toEqual(["assistant: hi"]);
    expect(formatEnvelope(env({ kind: "chat", to: ["you"], payload: { text: "one\ntwo" } }), ctx())).toEqual([
      "assistant → you: one",
      "  two",
    ]);
  });

  it("puts a tool call and its result on one line each, cut to the width, and names the tool on the result", () => {
    const c = ctx(60);
    const req = env({
      kind: "mcp/request",
      to: ["files"],
      payload: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "write_file", arguments: { content: "x".repeat(500) } } },
    });
    const [call] = formatEnvelope(req, c);
    expect(call).toMatch(/^→ assistant calls files\/write_file \{"content":"xxx/);
    expect(visibleLength(call!)).toBeLessThanOrEqual(60);
    const res = env({
      from: "files",
      kind: "mcp/response",
      to: ["assistant"],
      correlation_id: [req.id],
      payload: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "Successfully wrote\nto x" }] } },
    });
    expect(formatEnvelope(res, c)).toEqual(["← files/write_file → assistant: Successfully wrote ⏎ to x"]);
    const failed = env({
      kind: "mcp/request",
      to: ["files"],
      payload: { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "read_file" } },
    });
    formatEnvelope(failed, c);
    const err = env({
      from: "system:gateway",
      kind: "mcp/response",
      correlation_id: [failed.id],
      payload: { jsonrpc: "2.0", id: 2, error: { code: -32001, message: "timed out" } },
    });
    expect(formatEnvelope(err, c)).toEqual(["✗ files/read_file → assistant: timed out (from the gateway)"]);
  });

  it("folds reasoning to one line, shows presence and errors, hides the tool-list plumbing", () => {
    expect(formatEnvelope(env({ kind: "reasoning/thought", payload: { message: "first\nsecond" } }), ctx())).toEqual([
      "  ~ assistant thinks: first ⏎ second",
    ]);
    expect(
      formatEnvelope(
        env({ from: "system:gateway", kind: "system/presence", payload: { event: "join", participant: { id: "bob", kind: "agent" } } }),
        ctx(),
      ),
    ).toEqual(["* bob joined (agent)"]);
    expect(
      formatEnvelope(env({ from: "system:gateway", kind: "system/error", payload: { code: "denied", message: "no" } }), ctx()),
    ).toEqual(["! denied: no"]);
    expect(
      formatEnvelope(env({ from: "system:gateway", kind: "mcp/request", payload: { method: "notifications/tools/list_changed" } }), ctx()),
    ).toEqual([]);
  });
});

describe("whyApproval", () => {
  const config = parseSpaceConfig(
    `space: {id: s}\nparticipants:\n  you: {kind: human}\n  assistant:\n    kind: agent\n    tools: {ask: [files/write_*]}\n  files: {kind: mcp}\n`,
    { file: "/x/space.yaml", env: {} },
  );
  it("names the rule from the space.yaml, or the fallback, or just the policy", () => {
    const tools = [{ name: "files/write_file", annotations: { readOnlyHint: false, destructiveHint: true } }];
    expect(whyApproval(proposal("p1"), { config, tools })).toBe(
      "policy: proposal — assistant's tools.ask matches files/write_file (tool is destructive, not read-only)",
    );
    const other = env({ kind: "mcp/proposal", to: ["files"], payload: { method: "tools/call", params: { name: "move_file" } } });
    expect(whyApproval(other, { config })).toContain('the space\'s fallback "ask" applies');
    expect(whyApproval(proposal("p2"), {})).toBe("policy: proposal — assistant may not call files/write_file directly");
  });
});

describe("ProposalQueue", () => {
  it("keeps arrival order and a selection, hides decided proposals until the gateway refuses, resolves short ids", () => {
    const q = new ProposalQueue();
    const [a, b, c] = [proposal("aaaa1111"), proposal("bbbb2222"), proposal("bbbb3333")];
    expect(q.sync([a, b, c])).toBe(true);
    expect(q.position).toBe(1);
    expect(q.sync([a, b, c])).toBe(false);
    q.next();
    expect(q.current?.id).toBe("bbbb2222");
    q.prev();
    q.prev();
    expect(q.current?.id).toBe("bbbb3333");
    q.markDecided("bbbb3333");
    expect(q.all.map((p) => p.id)).toEqual(["aaaa1111", "bbbb2222"]);
    q.sync([a, b, c]);
    expect(q.size).toBe(2);
    q.undo("bbbb3333");
    q.sync([a, b, c]);
    expect(q.size).toBe(3);
    expect(q.resolve("aaaa")).toMatchObject({ ok: true, proposal: a });
    expect(q.resolve("bbbb")).toMatchObject({ ok: false, message: expect.stringContaining("matches 2 proposals") });
    expect(q.resolve("zz")).toMatchObject({ ok: false });
    // The selected one leaves: its successor is selected.
    q.next();
    const selected = q.current!.id;
    q.sync([a, b, c].filter((p) => p.id !== selected));
    expect(q.current).toBeDefined();
    expect(q.current!.id).not.toBe(selected);
  });
});
