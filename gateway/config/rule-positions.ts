/**
 * Where each tool rule of space.yaml is (its line and column, and its `when` expression's):
 * policy/check.ts and explain name a rule by its place in the file. Kept beside the parsed
 * rules (keyed by their object), so the config itself stays plain data.
 */
import { type Document, isScalar, type LineCounter } from "yaml";
import { locate } from "./yaml.js";

type Rules = Partial<Record<"allow" | "ask" | "deny" | "except", ReadonlyArray<string | { tool: string; when: string }>>>;

/** Where a rule, or the `when` expression of one, starts in the file. */
export interface RulePosition {
  file: string;
  line: number;
  column: number;
  /** For a `when`: how many characters its scalar's quote takes before the expression (0 or 1); undefined for a block scalar, whose text starts on the next line. */
  quote?: number;
}

const RULE_POSITIONS = new WeakMap<object, Record<string, RulePosition>>();

/** Records where each of participant `id`'s tool rules is, for `rulePosition`. */
export function recordRulePositions(doc: Document, counter: LineCounter, file: string, id: string, tools: Rules): void {
  const out: Record<string, RulePosition> = {};
  for (const kind of ["deny", "except", "ask", "allow"] as const) {
    tools[kind]?.forEach((rule, i) => {
      const base = ["participants", id, "tools", kind, i];
      const node = locate(doc, base, false);
      if (node?.range) out[`${kind}[${i}]`] = { file, ...lineCol(counter, node.range[0]) };
      if (typeof rule === "string") return;
      const when = locate(doc, [...base, "when"], false);
      if (!when?.range || !isScalar(when)) return;
      const quote = when.type === "QUOTE_DOUBLE" || when.type === "QUOTE_SINGLE" ? 1 : when.type === "PLAIN" ? 0 : undefined;
      out[`${kind}[${i}].when`] = { file, ...lineCol(counter, when.range[0]), ...(quote === undefined ? {} : { quote }) };
    });
  }
  RULE_POSITIONS.set(tools, out);
}

function lineCol(counter: LineCounter, offset: number): { line: number; column: number } {
  const { line, col } = counter.linePos(offset);
  return { line, column: col };
}

/** Where `tools`'s rule `key` (`deny[0]`, or `deny[0].when` for its expression) is in its file, if it came from one. */
export function rulePosition(tools: object, key: string): RulePosition | undefined {
  return RULE_POSITIONS.get(tools)?.[key];
}

/**
 * `derived`, a policy rewritten from `original` (its `@group` rules spelt out, one per
 * member), keeps each rule's position: `from` maps each of its keys to the original's.
 */
export function deriveRulePositions(original: object, derived: object, from: Record<string, string>): void {
  const known = RULE_POSITIONS.get(original);
  if (!known) return;
  const out: Record<string, RulePosition> = {};
  for (const [key, was] of Object.entries(from)) {
    if (known[was]) out[key] = known[was];
    if (known[`${was}.when`]) out[`${key}.when`] = known[`${was}.when`]!;
  }
  RULE_POSITIONS.set(derived, out);
}
