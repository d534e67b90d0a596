/**
 * The added cost per decision of a tool rule with a CEL condition (policy/conditions.ts)
 * against the same rule as a plain glob, in this process: the decision point
 * (policy/authority.ts `call`) asked for the same call, with the same arguments, under
 * the two space.yamls, in interleaved blocks so both see the same machine.
 */
import { parseSpaceConfig } from "../gateway/index.js";
import { Authority } from "../gateway/index.js";
import { Registry } from "../gateway/index.js";

export interface ConditionFigures {
  /** µs per decision, median over blocks. */
  plain: number;
  conditional: number;
  /** µs added per decision: the median of the differences of blocks run side by side (robust to a machine whose load drifts). */
  added: number;
  /** The fastest block of each, and their difference: the cost with the least interference. */
  fastest: { plain: number; conditional: number };
  decisions: number;
}

const yaml = (rule: string) => `space: {id: cel}
participants:
  alice: {kind: human, token: alice-token-1}
  helper:
    kind: agent
    token: helper-token-2
    tools:
      allow: ["files/*"]
      ask: [${rule}]
  files: {kind: mcp, token: files-token-3}
`;

function authority(rule: string): Authority {
  const config = parseSpaceConfig(yaml(rule), { file: "space.yaml", env: {} });
  const registry = new Registry();
  registry.set("files", [{ name: "write_file", inputSchema: { type: "object" } }]);
  const a = new Authority(config, registry);
  return a;
}

export function benchConditions(opts: { blocks?: number; perBlock?: number } = {}): ConditionFigures {
  const blocks = opts.blocks ?? 40;
  const perBlock = opts.perBlock ?? 5_000;
  const plain = authority(`"files/write_file"`);
  const conditional = authority(`{tool: "files/write_file", when: "!args.path.startsWith('notes/') || args.path.contains('..')"}`);
  // A realistic write outside notes/, which both rules ask about: a path and a kilobyte of content.
  const params = { name: "write_file", arguments: { path: "src/main.ts", content: "x".repeat(1024) } };
  const allows = () => false;
  const time = (a: Authority): number => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < perBlock; i++)
      if (a.call("helper", allows, "files", "tools/call", params).decision !== "proposal")
        throw new Error("bench: the rule decided otherwise");
    return Number(process.hrtime.bigint() - t0) / 1000 / perBlock;
  };
  // warm up
  for (let i = 0; i < 4; i++) {
    time(plain);
    time(conditional);
  }
  const p: number[] = [];
  const c: number[] = [];
  for (let i = 0; i < blocks; i++) {
    p.push(time(plain));
    c.push(time(conditional));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  return {
    plain: median(p),
    conditional: median(c),
    added: median(c.map((x, i) => x - p[i]!)),
    fastest: { plain: Math.min(...p), conditional: Math.min(...c) },
    decisions: blocks * perBlock,
  };
}
