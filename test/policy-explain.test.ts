// Explain always agrees with the decision actually taken: random rules (globs and CEL
// conditions), random arguments, checked against an independent model of the order and
// against what a real gateway does with the call.
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { Authority } from "../gateway/policy/authority.js";
import { compileGlob } from "../gateway/policy/capabilities.js";
import { compileCondition } from "../gateway/policy/conditions.js";
import { Registry } from "../gateway/tools/registry.js";
import { startGateway, TestClient, toolCall, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const GLOBS = ["files/*", "files/write_file", "files/read_file", "shell/run", "shell/*", "*", "*/write_*"];
const CONDITIONS = [
  "args.path.startsWith('notes/')",
  "args.amount > 100",
  "args.command.contains('rm -rf')",
  "has(args.x)",
  "caller.kind == 'agent'",
  "size(args) > 1",
  "args.path == 'a' || args.amount < 0",
];
const TOOLS = ["files/write_file", "files/read_file", "shell/run"] as const;

type Rule = string | { tool: string; when: string };
interface Policy {
  allow: Rule[];
  ask: Rule[];
  deny: Rule[];
  fallback: "allow" | "ask" | "deny";
}

const rule = fc.oneof(fc.constantFrom(...GLOBS), fc.record({ tool: fc.constantFrom(...GLOBS), when: fc.constantFrom(...CONDITIONS) }));
const policy = fc.record({
  allow: fc.array(rule, { maxLength: 3 }),
  ask: fc.array(rule, { maxLength: 3 }),
  deny: fc.array(rule, { maxLength: 2 }),
  fallback: fc.constantFrom("allow" as const, "ask" as const, "deny" as const),
});
const args = fc.record(
  {
    path: fc.oneof(fc.constantFrom("notes/a", "src/b", "a", "notes/../x"), fc.integer(), fc.constant(null)),
    amount: fc.oneof(fc.double({ noNaN: true, min: -1000, max: 1000 }), fc.string({ maxLength: 3 })),
    command: fc.oneof(fc.constantFrom("ls", "rm -rf /", "echo rm -rf"), fc.boolean()),
    x: fc.jsonValue({ maxDepth: 2 }),
  },
  { requiredKeys: [] },
);

const TOKENS = { alice: "alice-token-1", helper: "helper-token-3", files: "files-token-4", shell: "shell-token-5" };
const yamlOf = (p: Policy): string =>
  JSON.stringify({
    space: { id: "prop" },
    policy: { fallback: p.fallback },
    participants: {
      alice: { kind: "human", token: TOKENS.alice },
      helper: { kind: "agent", token: TOKENS.helper, tools: { allow: p.allow, ask: p.ask, deny: p.deny } },
      files: { kind: "mcp", token: TOKENS.files },
      shell: { kind: "mcp", token: TOKENS.shell },
    },
  });

/** The order of docs/configuration.md, written out again independently: deny, ask, allow, fallback (no grants, no annotations here). */
function model(p: Policy, tool: string, a: Record<string, unknown>): "direct" | "proposal" | "denied" {
  const applies = (kind: "allow" | "ask" | "deny") =>
    p[kind].some((r) => {
      const glob = typeof r === "string" ? r : r.tool;
      if (!compileGlob(glob)(tool)) return false;
      if (typeof r === "string") return true;
      const out = compileCondition(r.when).evaluate({ args: a, caller: { id: "helper", kind: "agent", groups: [] }, tool: { name: tool } });
      return out.ok ? out.value : kind !== "allow";
    });
  if (applies("deny")) return "denied";
  if (applies("ask")) return "proposal";
  if (applies("allow")) return "direct";
  return p.fallback === "allow" ? "direct" : p.fallback === "deny" ? "denied" : "proposal";
}

function authorityFor(p: Policy): Authority {
  const config = parseSpaceConfig(yamlOf(p), { file: "space.yaml", env: {} });
  const authority = new Authority(config, new Registry());
  return authority;
}

describe("explain agrees with the decision", () => {
  it("with the decision point's verdict and an independent model of the order, for random rules and arguments", () => {
    fc.assert(
      fc.property(policy, fc.constantFrom(...TOOLS), args, (p, tool, a) => {
        const authority = authorityFor(p);
        const [owner, name] = tool.split("/") as [string, string];
        const e = authority.explain("helper", owner, name, a);
        const verdict = authority.call("helper", () => false, owner, "tools/call", { name, arguments: a });
        expect(e.decision).toBe(verdict.decision);
        expect(e.decision).toBe(model(p, tool, a));
        // The rule it names is one that matches the tool, of the kind that made the decision.
        if (e.rule) {
          expect(compileGlob(e.rule.tool)(tool)).toBe(true);
          expect({ deny: "denied", ask: "proposal", allow: "direct" }[e.rule.kind as "deny"]).toBe(e.decision);
        }
        // A human may call anything here, so may approve; the proposer never may.
        if (e.decision === "proposal") expect(e.approvers).toContain("alice");
        expect(e.approvers).not.toContain("helper");
      }),
      { numRuns: 200, seed: 25 },
    );
  });
});

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

describe("explain agrees with a real gateway", () => {
  it("for random rules, each call's outcome on the wire is what GET policy/explain said", async () => {
    await fc.assert(
      fc.asyncProperty(policy, fc.array(fc.tuple(fc.constantFrom(...TOOLS), args), { minLength: 3, maxLength: 3 }), async (p, calls) => {
        gw = await startGateway(yamlOf(p));
        try {
          const tools = {
            files: [
              { name: "write_file", inputSchema: { type: "object" } },
              { name: "read_file", inputSchema: { type: "object" } },
            ],
            shell: [{ name: "run", inputSchema: { type: "object" } }],
          };
          for (const [id, list] of Object.entries(tools)) clients.push(await toolOwner(gw, "prop", TOKENS[id as "files"], list));
          await waitFor(() => gw!.gateway.spaces.get("prop")!.registry.list().length === 3, 5000, "tools registered");
          const helper = await TestClient.join(gw, "prop", TOKENS.helper);
          clients.push(helper);
          for (const [i, [tool, a]] of calls.entries()) {
            const q = new URLSearchParams({ tool, args: JSON.stringify(a) });
            const res = await fetch(`http://127.0.0.1:${gw.port}/api/spaces/prop/policy/explain?${q}`, {
              headers: { authorization: `Bearer ${TOKENS.helper}` },
            });
            const e = (await res.json()) as { decision: string };
            const [owner, name] = tool.split("/") as [string, string];
            helper.send(toolCall(`c${i}`, owner, name, a));
            const got = await helper.next(
              (x) => x.correlation_id?.includes(`c${i}`) === true && (x.kind === "system/error" || x.kind === "mcp/response"),
            );
            const taken =
              got.kind === "mcp/response"
                ? "direct"
                : got.payload.code === "proposal_required"
                  ? "proposal"
                  : got.payload.code === "denied"
                    ? "denied"
                    : got.payload.code;
            expect(taken).toBe(e.decision);
          }
        } finally {
          for (const c of clients.splice(0)) c.ws.terminate();
          await gw.stop();
          gw = undefined;
        }
      }),
      { numRuns: 12, seed: 7 },
    );
  }, 120_000);
});
