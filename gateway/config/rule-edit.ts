/**
 * One tool rule added to a space.yaml, as text: the rule's own text is spliced in where it
 * belongs and not one other character of the file changes — comments, anchors and aliases,
 * key order, quoting, blank lines, flow or block style all stay as they were written. The
 * `yaml` library's Document API finds the place (each node knows its range in the text); the
 * rule is written as a one-line flow mapping (`{tool: 'fs/write_file', when: '…'}`), whose
 * single-quoted scalars keep a CEL expression's quotes and backslashes as they are.
 *
 * The rule goes at the end of `participants.<id>.tools.<allow|ask|deny|except>`, that list or
 * the `tools` mapping made when missing. Where that place is reached through an alias or a
 * merge key (`<<: *defaults`), adding to it would change every participant sharing the
 * anchor, or hide what the merge brought in: refused, with where, for a person to do by hand.
 */
import { isAlias, isMap, isSeq, parseDocument, type Node, type YAMLMap, type YAMLSeq } from "yaml";
import type { ToolRule } from "./config.js";

export class RuleEditError extends Error {
  override readonly name = "RuleEditError";
}

export type RuleKindName = "allow" | "ask" | "deny" | "except";

function hasMergeKey(map: YAMLMap): boolean {
  return map.items.some((pair) => {
    const key = pair.key as { value?: unknown } | string | null;
    return key === "<<" || (typeof key === "object" && key !== null && key.value === "<<");
  });
}

/** A YAML single-quoted scalar: every character as it is, a quote doubled. */
const single = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** The rule as one line of YAML flow: `'fs/x'` or `{tool: 'fs/x', when: '…'}`. */
export function ruleText(rule: ToolRule): string {
  if (/[\n\r]/.test(typeof rule === "string" ? rule : `${rule.tool}${rule.when}`))
    throw new RuleEditError("the rule holds a line break: add it by hand");
  return typeof rule === "string" ? single(rule) : `{tool: ${single(rule.tool)}, when: ${single(rule.when)}}`;
}

const lineStart = (text: string, at: number) => text.lastIndexOf("\n", at - 1) + 1;
/** The end of the line `at` is on (before its newline), or the end of the text. */
function lineEnd(text: string, at: number): number {
  const nl = text.indexOf("\n", at);
  return nl < 0 ? text.length : nl;
}
/** The indentation of the line `at` is on. */
const indentAt = (text: string, at: number) => /^[ ]*/.exec(text.slice(lineStart(text, at)))![0];
const splice = (text: string, at: number, insert: string) => text.slice(0, at) + insert + text.slice(at);

/** Where a flow collection's closing bracket is (`]` or `}`), searching back from its end. */
function closing(text: string, node: Node, bracket: "]" | "}"): number {
  const end = node.range![1];
  const at = text.lastIndexOf(bracket, end - 1);
  if (at < node.range![0]) throw new RuleEditError("could not find where the list ends: add the rule by hand");
  return at;
}

/** `text` with `entry` added at the end of the flow or block collection `node`. */
function appendTo(text: string, node: YAMLSeq | YAMLMap, entry: { flow: string; block: string }): string {
  const flow = (node as { flow?: boolean }).flow === true;
  if (flow) {
    const at = closing(text, node, isSeq(node) ? "]" : "}");
    const empty = node.items.length === 0;
    // Before the bracket, after any spaces that pad it: `[a, b]` → `[a, b, c]`.
    let before = at;
    while (before > 0 && (text[before - 1] === " " || text[before - 1] === "\t")) before--;
    return splice(text, before, `${empty ? "" : ", "}${entry.flow}`);
  }
  const last = node.items.at(-1);
  const lastNode = (
    isSeq(node) ? last : ((last as { value?: Node | null; key?: Node } | undefined)?.value ?? (last as { key?: Node })?.key)
  ) as Node | null | undefined;
  if (!lastNode?.range) throw new RuleEditError("could not find where the list ends: add the rule by hand");
  // The new entry takes the indentation of the last one's line, on the line after it (and after its trailing comment).
  const firstItem = (isSeq(node) ? node.items[0] : (node.items[0] as { key?: Node })?.key) as Node | undefined;
  const indent = indentAt(text, firstItem?.range?.[0] ?? lastNode.range[0]);
  let end = lineEnd(text, Math.max(lastNode.range[0], lastNode.range[1] - 1));
  // A file written with CRLF gets CRLF.
  const crlf = text[end - 1] === "\r";
  if (crlf) end--;
  const prefix = isSeq(node) ? `${indent}- ` : indent;
  return splice(text, end, `${crlf ? "\r\n" : "\n"}${prefix}${entry.block}`);
}

/** `text` with `rule` appended to the participant's `kind` list. Throws a `RuleEditError` saying where, if it cannot be done in place. */
export function addToolRule(text: string, participant: string, kind: RuleKindName, rule: ToolRule): string {
  const doc = parseDocument(text, { keepSourceTokens: false });
  if (doc.errors.length) throw new RuleEditError(`the file does not parse: ${doc.errors[0]!.message.replace(/\s+/g, " ")}`);
  if (!isMap(doc.contents)) throw new RuleEditError("the file is not a mapping");
  const participants = doc.contents.get("participants", true);
  if (!isMap(participants))
    throw new RuleEditError(
      isAlias(participants) ? "participants is an alias: add the rule by hand" : "the file has no participants mapping",
    );
  const p = participants.get(participant, true);
  if (isAlias(p)) throw new RuleEditError(`participants.${participant} is an alias of another participant: add the rule by hand`);
  if (!isMap(p)) throw new RuleEditError(`no participant ${JSON.stringify(participant)} under participants`);
  const item = ruleText(rule);
  const tools = p.get("tools", true);
  if (tools === undefined || tools === null) {
    if (hasMergeKey(p))
      throw new RuleEditError(
        `participants.${participant} takes keys from a merge (<<): a tools key here would hide the merged one; add the rule by hand`,
      );
    if (tools === null) throw new RuleEditError(`participants.${participant}.tools is empty: add the rule by hand`);
    return appendTo(text, p, { flow: `tools: {${kind}: [${item}]}`, block: `tools: {${kind}: [${item}]}` });
  }
  if (isAlias(tools))
    throw new RuleEditError(
      `participants.${participant}.tools is an alias, shared with whoever else uses its anchor: add the rule by hand`,
    );
  if (!isMap(tools)) throw new RuleEditError(`participants.${participant}.tools is not a mapping`);
  const list = tools.get(kind, true);
  if (list === undefined || list === null) {
    if (hasMergeKey(tools))
      throw new RuleEditError(
        `participants.${participant}.tools takes keys from a merge (<<): a ${kind} key here would hide the merged one; add the rule by hand`,
      );
    if (list === null) throw new RuleEditError(`participants.${participant}.tools.${kind} is empty: add the rule by hand`);
    if (tools.items.length === 0 && !(tools as { flow?: boolean }).flow)
      throw new RuleEditError(`participants.${participant}.tools is empty: add the rule by hand`);
    return appendTo(text, tools, { flow: `${kind}: [${item}]`, block: `${kind}: [${item}]` });
  }
  if (isAlias(list))
    throw new RuleEditError(
      `participants.${participant}.tools.${kind} is an alias, shared with whoever else uses its anchor: add the rule by hand`,
    );
  if (!isSeq(list)) throw new RuleEditError(`participants.${participant}.tools.${kind} is not a list`);
  if (list.items.length === 0 && !(list as { flow?: boolean }).flow)
    throw new RuleEditError(`participants.${participant}.tools.${kind} is empty: add the rule by hand`);
  return appendTo(text, list, { flow: item, block: item });
}
