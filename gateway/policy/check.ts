/**
 * Rules that say what they match: every tool rule of space.yaml checked against the space's
 * participants and, once they have registered them, their tools.
 *
 * - a rule whose participant part names no participant: a warning (`did you mean "files"?`),
 *   an error under `policy.strict: true`. A typo in a `deny` must never widen access quietly.
 * - a rule whose tool part matches none of its participant's registered tools: a warning
 *   (tools register when their owner joins, so this is known only then; router.ts logs it).
 * - a rule that can never decide anything, since a rule before it in the fixed order
 *   deny → grant → except → ask → allow (or earlier in the same list) covers every call it covers.
 * - a `when` condition that does not compile (conditions.ts): an error, at its line and column.
 *
 * The same findings at load — a start (space/space.ts) and a reload (edge/reload.ts) both go
 * through `admitPolicy`: errors refuse the file, warnings are shown where the operator looks
 * (`up`, `gateway`, `reload` print them) — in `mewgate policy check`, in the operator API and
 * in the console's Tools view.
 */
import { ConfigError, type ConfigIssue, formatIssue, rulePosition, type SpaceConfig, type ToolPolicy } from "../config/config.js";
import { suggest } from "../config/schema.js";
import { GATEWAY_ID } from "../wire/envelope.js";
import { compileGlob } from "./capabilities.js";
import { compileCondition, type ConditionError } from "./conditions.js";
import { ruleGlob } from "./rules.js";

export type FindingCode = "unknown_participant" | "unknown_tool" | "shadowed" | "bad_condition" | "no_tool_part";

export interface PolicyFinding extends ConfigIssue {
  severity: "error" | "warning";
  code: FindingCode;
  /** The participant whose rule this is, and the rule's glob. */
  participant: string;
  rule: string;
}

export function formatFinding(f: PolicyFinding): string {
  return `${f.severity}: ${formatIssue(f)}`;
}

/** What is known of the tools registered so far (tools/registry.ts's list). */
export interface ToolList {
  list(): readonly { participant: string; tool: string }[];
}

const KINDS = ["deny", "except", "ask", "allow"] as const;

/** Every finding about the space's tool rules, errors and warnings, in file order. */
export function checkPolicy(config: SpaceConfig, tools?: ToolList): PolicyFinding[] {
  const ids = [...Object.keys(config.participants), GATEWAY_ID];
  const registered = new Map<string, string[]>();
  for (const t of tools?.list() ?? []) {
    const list = registered.get(t.participant) ?? [];
    list.push(t.tool);
    registered.set(t.participant, list);
  }
  const out: PolicyFinding[] = [];
  for (const [id, p] of Object.entries(config.participants)) {
    if (p.tools) out.push(...checkRules(config, id, p.tools, ids, registered));
  }
  return out.sort((a, b) => a.line - b.line || a.column - b.column);
}

/**
 * What a start and a reload do with a file's tool rules, the one path for both: an error
 * (a condition that does not compile, a rule naming nobody under `policy.strict`) refuses
 * the file with a `ConfigError` saying file:line:col; the warnings are returned, for the
 * caller to show. `tools`: what is registered so far (a reload knows; a start does not yet).
 */
export function admitPolicy(config: SpaceConfig, tools?: ToolList): PolicyFinding[] {
  const findings = checkPolicy(config, tools);
  const errors = findings.filter((f) => f.severity === "error");
  if (errors.length) throw new ConfigError(errors);
  return findings;
}

/** The findings about one owner's tools that registered late: rules naming it that match none of them. */
export function unmatchedRules(config: SpaceConfig, tools: ToolList, owner: string): PolicyFinding[] {
  return checkPolicy(config, tools).filter(
    (f) => f.code === "unknown_tool" && ownerPart(f.rule) !== undefined && compileGlob(ownerPart(f.rule)!)(owner),
  );
}

function ownerPart(glob: string): string | undefined {
  const slash = glob.indexOf("/");
  return slash < 0 ? undefined : glob.slice(0, slash);
}

function checkRules(config: SpaceConfig, id: string, tools: ToolPolicy, ids: string[], registered: Map<string, string[]>): PolicyFinding[] {
  const out: PolicyFinding[] = [];
  const strict = config.policy.strict === true;
  const earlier: { kind: string; key: string; glob: string; test: (s: string) => boolean }[] = [];
  for (const kind of KINDS) {
    (tools[kind] ?? []).forEach((rule, i) => {
      const key = `${kind}[${i}]`;
      const glob = ruleGlob(rule);
      const at = rulePosition(tools, key);
      const finding = (severity: PolicyFinding["severity"], code: FindingCode, message: string, where = at): void => {
        out.push({
          severity,
          code,
          file: where?.file ?? config.file,
          line: where?.line ?? 0,
          column: where?.column ?? 0,
          path: `participants.${id}.tools.${key}`,
          message,
          participant: id,
          rule: glob,
        });
      };
      if (typeof rule !== "string") {
        try {
          compileCondition(rule.when);
        } catch (err) {
          const e = err as ConditionError;
          const w = rulePosition(tools, `${key}.when`);
          // The expression's own line and column, moved to where its scalar sits in the file.
          const pos =
            w && e.line !== undefined
              ? w.quote === undefined
                ? { ...w, line: w.line + e.line, column: e.column }
                : { ...w, line: w.line + e.line - 1, column: e.line === 1 ? w.column + w.quote + e.column - 1 : e.column }
              : at;
          finding("error", "bad_condition", `when: ${e.message}`, pos);
        }
      }
      const slash = glob.indexOf("/");
      if (slash < 0) {
        finding(
          strict ? "error" : "warning",
          "no_tool_part",
          `${JSON.stringify(glob)} names no tool, so it matches nothing; write participant/tool, like "${glob}/*"`,
        );
        return;
      }
      const owner = glob.slice(0, slash);
      const tool = glob.slice(slash + 1);
      const ownerTest = compileGlob(owner);
      const owners = ids.filter((x) => ownerTest(x));
      if (owners.length === 0) {
        const near = owner.includes("*")
          ? undefined
          : suggest(
              owner,
              ids.filter((x) => x !== GATEWAY_ID),
            );
        finding(
          strict ? "error" : "warning",
          "unknown_participant",
          `no participant ${JSON.stringify(owner)} in this space, so this ${kind} rule matches nothing${near ? `; did you mean ${JSON.stringify(near)}?` : ""}`,
        );
      } else if (!owner.includes("*") && registered.has(owner)) {
        const names = registered.get(owner)!;
        const toolTest = compileGlob(tool);
        if (!names.some((n) => toolTest(n))) {
          const near = tool.includes("*") ? undefined : suggest(tool, names);
          finding(
            "warning",
            "unknown_tool",
            `${owner} has no tool ${JSON.stringify(tool)}, so this ${kind} rule matches nothing${near ? `; did you mean "${owner}/${near}"?` : ""}`,
          );
        }
      }
      const cover = earlier.find((e) => covers(e, glob));
      if (cover) {
        const why =
          cover.kind === kind
            ? `${cover.key} (${JSON.stringify(cover.glob)}) already covers it`
            : `${cover.key} (${JSON.stringify(cover.glob)}) covers every call it covers, and ${cover.kind} is decided before ${kind}`;
        finding("warning", "shadowed", `this rule can never decide anything: ${why}`);
      }
      // A rule with a condition covers only some calls, so it never hides a later rule.
      if (typeof rule === "string") earlier.push({ kind, key, glob, test: compileGlob(glob) });
    });
  }
  return out;
}

/** Whether glob `e` matches every name glob `g` can match (exactly for a literal `g`; for a pattern, when `e` is `g` or a prefix pattern of it). */
function covers(e: { glob: string; test: (s: string) => boolean }, g: string): boolean {
  if (!g.includes("*")) return e.test(g);
  if (e.glob === g) return true;
  // `files/*` covers `files/read_*`; `*` covers everything.
  return e.glob.endsWith("*") && !e.glob.slice(0, -1).includes("*") && g.startsWith(e.glob.slice(0, -1));
}
