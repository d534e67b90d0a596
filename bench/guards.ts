/**
 * The added cost of the default guards (issue 50): secrets held, personal data redacted, URLs
 * held to a host list, on arguments and results (policy/guards.ts over content/scan.ts), in
 * this process:
 *   - per call, 4 KiB of arguments: the decision point (policy/authority.ts `call`) asked for
 *     the same call under a space.yaml with the guards and the same one without, in
 *     interleaved blocks so both see the same machine;
 *   - per result, 1 MiB of text: what the router asks of a result before the caller gets it
 *     (`Guards.screen(…, "results")`), against the same space without guards.
 * Each call gets arguments (and each result a body) of its own: the guards keep their reading
 * of an object for the rest of that call (a memo by object), which a reused one would hit.
 */
import { Authority, parseSpaceConfig, Registry } from "../gateway/index.js";

/** The guards a space would start with: the three detectors, each with the action it is usually given. */
export const DEFAULT_GUARDS = `guards:
  - {name: secrets, detect: secrets, action: hold}
  - {name: personal, detect: personal, action: redact}
  - {name: egress, detect: egress, hosts: [api.github.com, "*.example.com"], action: deny}
`;

const yaml = (guards: string) => `space: {id: guarded}
${guards}
participants:
  alice: {kind: human, token: alice-token-1}
  helper: {kind: agent, token: helper-token-2, tools: {allow: ["files/*"]}}
  files: {kind: mcp, token: files-token-3}
`;

function authority(guards: string): Authority {
  const config = parseSpaceConfig(yaml(guards), { file: "space.yaml", env: {} });
  const registry = new Registry();
  registry.set("files", [{ name: "write_file", inputSchema: { type: "object" } }]);
  return new Authority(config, registry);
}

/** Ordinary text of `bytes` characters: prose, code, a path, a listed URL, numbers; nothing a guard should find. */
export function ordinaryText(bytes: number): string {
  const para =
    "The build runs the unit tests first, then the integration suite against a local server on port 8080. " +
    "See https://api.github.com/repos/acme/widgets/pulls/1742 for the review thread; the change touches " +
    "src/render/layout.ts and docs/guide.md. function measure(rows: Row[]): number { return rows.reduce((n, r) => n + r.width, 0); }\n" +
    "Release 4.2.1 moved the cache to /var/cache/widgets and raised the timeout from 30 to 45 seconds.\n";
  return para.repeat(Math.ceil(bytes / para.length)).slice(0, bytes);
}

export interface GuardFigures {
  /** µs per decision with 4 KiB of arguments, median over blocks. */
  plain: number;
  guarded: number;
  /** µs added per decision: the median of the differences of blocks run side by side. */
  added: number;
  fastest: { plain: number; guarded: number };
  decisions: number;
  /** µs per 1 MiB result read by the guards (median over blocks), and without guards. */
  result: { guarded: number; plain: number; fastest: number; results: number };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export function benchGuards(opts: { blocks?: number; perBlock?: number; resultBlocks?: number } = {}): GuardFigures {
  const blocks = opts.blocks ?? 30;
  const perBlock = opts.perBlock ?? 500;
  const plain = authority("");
  const guarded = authority(DEFAULT_GUARDS);
  const content = ordinaryText(4096 - 120);
  const allows = () => false;
  const time = (a: Authority): number => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < perBlock; i++) {
      // A fresh object per call, as each call's arguments are.
      const params = { name: "write_file", arguments: { path: "docs/notes/release.md", message: "Notes for 4.2.1", content } };
      const v = a.call("helper", allows, "files", "tools/call", params);
      if (v.decision !== "direct" || ("guard" in v && v.guard)) throw new Error("bench: the guards found something in ordinary text");
    }
    return Number(process.hrtime.bigint() - t0) / 1000 / perBlock;
  };
  for (let i = 0; i < 3; i++) {
    time(plain);
    time(guarded);
  }
  const p: number[] = [];
  const g: number[] = [];
  for (let i = 0; i < blocks; i++) {
    p.push(time(plain));
    g.push(time(guarded));
  }

  // A 1 MiB result, as the router screens it on its way back (calls/guarded.ts `screenResult`).
  const big = ordinaryText(1024 * 1024);
  const screen = (a: Authority): number => {
    const t0 = process.hrtime.bigint();
    const v = a.guards.screen("helper", "files", "write_file", { content: [{ type: "text", text: big }] }, "results");
    const us = Number(process.hrtime.bigint() - t0) / 1000;
    if (v !== undefined) throw new Error(`bench: the guards found something in the ordinary result: ${v.findings[0]?.text}`);
    return us;
  };
  const resultBlocks = opts.resultBlocks ?? 15;
  screen(guarded);
  const r: number[] = [];
  const rp: number[] = [];
  for (let i = 0; i < resultBlocks; i++) {
    rp.push(screen(plain));
    r.push(screen(guarded));
  }
  return {
    plain: median(p),
    guarded: median(g),
    added: median(g.map((x, i) => x - p[i]!)),
    fastest: { plain: Math.min(...p), guarded: Math.min(...g) },
    decisions: blocks * perBlock,
    result: { guarded: median(r), plain: median(rp), fastest: Math.min(...r), results: resultBlocks },
  };
}
