/**
 * `mewgate policy check | explain | test`: what the space's tool rules match, why a call is
 * decided as it is, and a table of expected decisions to keep in CI.
 *
 * `check` and `test` read the space.yaml alone (no gateway needed): rules, conditions and
 * participants, with no grants and no registered tools (so no annotations). `explain` asks
 * the running gateway (GET policy/explain), which knows its grants and tools.
 */
import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { isMap, isSeq, LineCounter, parseDocument } from "yaml";
import * as z from "zod";
import { ConfigError, formatIssue, type ConfigIssue, type SpaceConfig } from "../gateway/index.js";
import { Authority, type Explanation } from "../gateway/index.js";
import { checkPolicy, formatFinding } from "../gateway/index.js";
import { Registry } from "../gateway/index.js";
import { withApi } from "./commands.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import type { RemoteOptions } from "./remote.js";
import { CliError, loadSpace, spaceFile } from "./space.js";

/** The one decision point, over a space.yaml alone: no grants, no registered tools. */
export function offlineAuthority(
  config: SpaceConfig,
  tools: Record<string, Array<{ name: string; annotations?: Record<string, unknown> | undefined }>> = {},
): Authority {
  const registry = new Registry();
  for (const [owner, list] of Object.entries(tools))
    registry.set(
      owner,
      list.map((t) => ({ name: t.name, inputSchema: { type: "object" }, ...(t.annotations ? { annotations: t.annotations } : {}) })),
    );
  const authority = new Authority(config, registry);
  return authority;
}

// --- check -------------------------------------------------------------------------------

export function runPolicyCheck(file: string | undefined, opts: { json?: boolean }, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const { config, unset } = await loadForCheck(spaceFile(file), io.env);
    const findings = checkPolicy(config);
    const errors = findings.filter((f) => f.severity === "error").length;
    const warnings = findings.length - errors + unset.length;
    if (opts.json) io.stdout.write(`${JSON.stringify({ findings, unset, errors, warnings }, null, 2)}\n`);
    else {
      for (const u of unset)
        io.stdout.write(`warning: ${formatIssue(u)} (checked as if it were "${u.placeholder}"; mewgate up needs it set)\n`);
      for (const f of findings) io.stdout.write(`${formatFinding(f)}\n`);
      io.stdout.write(
        findings.length || unset.length
          ? `${errors} error(s), ${warnings} warning(s)\n`
          : `${config.file}: every tool rule names a participant of the space and can decide something\n`,
      );
    }
    return errors ? 1 : 0;
  });
}

/** An `${VAR}` the file uses that is not set where `policy check` runs. */
export interface UnsetVariable extends ConfigIssue {
  name: string;
  placeholder: string;
}

const UNSET = /^environment variable ([A-Za-z_][A-Za-z0-9_]*) is not set$/;

/**
 * The space.yaml as `policy check` reads it: with the variables mewgate itself offers
 * (`${MEWGATE_SANDBOX}` and the others, as every command sees them: space.ts), and any
 * other `${VAR}` that is not set read as a placeholder and named, since the rules do not
 * depend on a path or a secret and a check in CI should not need them. Anything else wrong
 * with the file is reported as before.
 */
export async function loadForCheck(file: string, env: NodeJS.ProcessEnv): Promise<{ config: SpaceConfig; unset: UnsetVariable[] }> {
  try {
    return { config: (await loadSpace(file, { env })).config, unset: [] };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const unset = err.issues.flatMap((i) => {
      const name = UNSET.exec(i.message)?.[1];
      return name === undefined ? [] : [{ ...i, name, placeholder: `unset-${name}` }];
    });
    if (unset.length === 0) throw err;
    const filled = { ...env, ...Object.fromEntries(unset.map((u) => [u.name, u.placeholder])) };
    return { config: (await loadSpace(file, { env: filled })).config, unset };
  }
}

// --- explain -----------------------------------------------------------------------------

export function runPolicyExplain(
  participant: string,
  tool: string,
  opts: RemoteOptions & { args?: string; json?: boolean },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    if (opts.args !== undefined) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(opts.args);
      } catch {
        throw new CliError('--args must be a JSON object, e.g. --args \'{"path": "notes/a.md"}\'');
      }
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new CliError("--args must be a JSON object");
    }
    const q = new URLSearchParams({ caller: participant, tool, ...(opts.args !== undefined ? { args: opts.args } : {}) });
    const e = await withApi(opts, io, (api) => api.get<Explanation>(`policy/explain?${q}`));
    io.stdout.write(opts.json ? `${JSON.stringify(e, null, 2)}\n` : explanationText(e));
    return 0;
  });
}

const DECISION_WORDS: Record<string, string> = { direct: "direct", proposal: "ask (a proposal someone approves)", denied: "deny" };

/** An explanation for a person: decision, rule with its line, condition, approvers. */
export function explanationText(e: Explanation): string {
  const lines = [`${e.caller} → ${e.tool}: ${DECISION_WORDS[e.decision] ?? e.decision}${e.code ? ` (${e.code})` : ""}`, `  why: ${e.why}`];
  if (e.rule)
    lines.push(
      `  rule: ${e.rule.key}${e.rule.file ? ` at ${e.rule.file}:${e.rule.line}:${e.rule.column}` : ""}: ${JSON.stringify(e.rule.when === undefined ? e.rule.tool : { tool: e.rule.tool, when: e.rule.when })}`,
    );
  if (e.grant) lines.push(`  grant: ${e.grant.id} from ${e.grant.from}`);
  if (e.guards) {
    lines.push(
      `  guards: ${e.guards.applying.join(", ")}${e.guards.action ? ` (${e.guards.action})` : " (nothing found in these arguments)"}`,
    );
    for (const f of e.guards.findings ?? []) lines.push(`    ${f.guard}: ${f.text} → ${f.action}`);
  }
  if (e.caps)
    lines.push(
      `  caps: ${e.caps.applying.join(", ")}${e.caps.breach ? ` (${e.caps.breach.action}: ${e.caps.breach.text})` : " (none reached this minute)"}`,
    );
  for (const c of e.conditions) lines.push(`  condition ${c.key}: ${c.when} → ${c.result}${c.error ? ` (${c.error})` : ""}`);
  if (e.decision === "proposal")
    lines.push(`  approvers: ${e.approvers.length ? e.approvers.join(", ") : "nobody in the space could approve it"}`);
  if (e.decision === "proposal" && (e.approvals ?? 1) > 1)
    lines.push(
      `  approvals: ${e.approvals} distinct approvers needed (never the proposer)${e.approvers.length < e.approvals! ? `; only ${e.approvers.length} could approve it` : ""}`,
    );
  return `${lines.join("\n")}\n`;
}

// --- test --------------------------------------------------------------------------------

const EXPECT = { direct: "direct", ask: "proposal", deny: "denied" } as const;

const CaseSchema = z.strictObject({
  caller: z.string().min(1),
  tool: z.string().regex(/^[^/]+\/.+$/, { error: "expected participant/tool" }),
  args: z.record(z.string(), z.unknown()).optional(),
  expect: z.enum(["direct", "ask", "deny"]),
  /** How many distinct approvals the call needs (with `ask`). */
  approvals: z.int().min(0).optional(),
  /** Exactly who could approve it (with `ask`), in any order; `@group` stands for its members. */
  approvers: z.array(z.string()).optional(),
  /** The tool's MCP annotations, as its server would declare them (`{readOnlyHint: true}`). */
  annotations: z.record(z.string(), z.unknown()).optional(),
  /** What the guards do with these arguments: `none` (nothing found), `hold`, `deny` or `redact`. */
  guard: z.enum(["none", "hold", "deny", "redact"]).optional(),
  /** How many calls of this tool the caller has made this minute already, counted against the caps first (default 0). */
  calls_this_minute: z.int().min(0).max(1_000_000).optional(),
  /** What the caps do with one more call: `none` (no cap reached), `hold` or `refuse`. */
  cap: z.enum(["none", "hold", "refuse"]).optional(),
  name: z.string().optional(),
});
const CasesSchema = z.strictObject({ space: z.string().optional(), cases: z.array(CaseSchema).min(1) });

export function runPolicyTest(
  casesFile: string,
  file: string | undefined,
  opts: { json?: boolean },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    let text: string;
    try {
      text = await readFile(casesFile, "utf8");
    } catch (err) {
      throw new CliError(
        `cannot read ${casesFile}: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (err as Error).message}`,
      );
    }
    const counter = new LineCounter();
    const doc = parseDocument(text, { lineCounter: counter });
    if (doc.errors.length) throw new CliError(`${casesFile}: ${doc.errors[0]!.message.replace(/\s+/g, " ")}`);
    const at = (i: number): string => {
      const seq = isMap(doc.contents) ? doc.contents.get("cases", true) : undefined;
      const node = isSeq(seq) ? (seq.items[i] as { range?: [number, number, number] } | undefined) : undefined;
      const { line, col } = counter.linePos(node?.range?.[0] ?? 0);
      return `${casesFile}:${line}:${col}`;
    };
    const parsed = CasesSchema.safeParse(doc.toJS());
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const where = issue.path[0] === "cases" && typeof issue.path[1] === "number" ? at(issue.path[1]) : casesFile;
      throw new CliError(`${where}: ${issue.path.join(".")}: ${issue.message}`);
    }
    const spacePath = file ?? (parsed.data.space !== undefined ? resolve(dirname(casesFile), parsed.data.space) : spaceFile(undefined));
    // The variables mewgate offers, as `policy check` reads them: a case does not depend on a path.
    const { config } = await loadForCheck(spacePath, io.env);
    const errors = checkPolicy(config).filter((f) => f.severity === "error");
    if (errors.length) throw new CliError(errors.map(formatFinding).join("\n"));
    // Tools as the cases declare them (for their annotations); last word per tool wins.
    const declared: Record<string, Map<string, Record<string, unknown> | undefined>> = {};
    for (const c of parsed.data.cases) {
      const slash = c.tool.indexOf("/");
      const owner = c.tool.slice(0, slash);
      declared[owner] ??= new Map();
      declared[owner]!.set(c.tool.slice(slash + 1), c.annotations ?? declared[owner]?.get(c.tool.slice(slash + 1)));
    }
    const authority = offlineAuthority(
      config,
      Object.fromEntries(Object.entries(declared).map(([o, m]) => [o, [...m].map(([name, annotations]) => ({ name, annotations }))])),
    );
    const failures: string[] = [];
    const results: Array<Record<string, unknown>> = [];
    parsed.data.cases.forEach((c, i) => {
      const label = `${c.name ? `${c.name}: ` : ""}${c.caller} → ${c.tool}${c.args ? ` ${JSON.stringify(c.args)}` : ""}`;
      if (!config.participants[c.caller]) {
        failures.push(`${at(i)}: ${label}: no participant ${JSON.stringify(c.caller)} in ${config.file}`);
        return;
      }
      const slash = c.tool.indexOf("/");
      const [owner, tool] = [c.tool.slice(0, slash), c.tool.slice(slash + 1)];
      // Each case counts from nothing but the calls it says were made this minute.
      authority.caps.clear();
      const n = c.calls_this_minute ?? 0;
      for (const r of (n > 0 && authority.caps.plan(c.caller, owner, tool)?.records) || [])
        authority.caps.apply({ ...r, calls: n, cost: r.cost * n });
      const e = authority.explain(c.caller, owner, tool, c.args ?? {});
      const problems: string[] = [];
      if (e.decision !== EXPECT[c.expect])
        problems.push(`expected ${c.expect}, got ${Object.entries(EXPECT).find(([, v]) => v === e.decision)?.[0] ?? e.decision}`);
      const guardDid = e.guards?.action ?? "none";
      if (c.guard !== undefined && c.guard !== guardDid) problems.push(`expected the guards to ${c.guard}, got ${guardDid}`);
      const capDid = e.caps?.breach?.action ?? "none";
      if (c.cap !== undefined && c.cap !== capDid) problems.push(`expected the caps to ${c.cap}, got ${capDid}`);
      const approvals = e.approvals ?? (e.decision === "proposal" ? 1 : 0);
      if (c.approvals !== undefined && c.approvals !== approvals) problems.push(`expected ${c.approvals} approval(s), got ${approvals}`);
      const wanted = c.approvers === undefined ? undefined : authority.groups.expand(c.approvers).filter((id) => id !== c.caller);
      if (wanted !== undefined && [...wanted].sort().join(",") !== [...e.approvers].sort().join(","))
        problems.push(`expected approvers [${c.approvers!.join(", ")}], got [${e.approvers.join(", ")}]`);
      results.push({ case: i, caller: c.caller, tool: c.tool, ok: problems.length === 0, decision: e.decision, why: e.why });
      if (problems.length) {
        const rule = e.rule ? `; rule ${e.rule.key}${e.rule.file ? ` at ${e.rule.file}:${e.rule.line}:${e.rule.column}` : ""}` : "";
        failures.push(`${at(i)}: ${label}: ${problems.join("; ")} (${e.why}${rule})`);
      }
    });
    const total = parsed.data.cases.length;
    if (opts.json) io.stdout.write(`${JSON.stringify({ passed: total - failures.length, failed: failures.length, results }, null, 2)}\n`);
    else {
      for (const f of failures) io.stdout.write(`FAIL ${f}\n`);
      io.stdout.write(`${total - failures.length} of ${total} case(s) pass${failures.length ? `; ${failures.length} fail` : ""}\n`);
    }
    return failures.length ? 1 : 0;
  });
}
