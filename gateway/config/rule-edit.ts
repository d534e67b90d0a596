/**
 * One tool rule added to a space.yaml, as text, keeping everything else as it was written:
 * comments, anchors and aliases, key order, quoting, flow or block style (the `yaml`
 * library's Document API edits the parsed tree and prints it back).
 *
 * The rule goes at the end of `participants.<id>.tools.<allow|ask|deny>`. Where that place
 * is reached through an alias or a merge key (`<<: *defaults`), adding to it would change
 * every participant sharing the anchor, or hide what the merge brought in: refused, with
 * where, for a person to do by hand.
 */
import { isAlias, isMap, isSeq, parseDocument, type YAMLMap } from "yaml";
import type { ToolRule } from "./config.js";

export class RuleEditError extends Error {
  override readonly name = "RuleEditError";
}

function hasMergeKey(map: YAMLMap): boolean {
  return map.items.some((pair) => {
    const key = pair.key as { value?: unknown } | string | null;
    return key === "<<" || (typeof key === "object" && key !== null && key.value === "<<");
  });
}

/** `text` with `rule` appended to the participant's `kind` list. Throws a `RuleEditError` saying where, if it cannot be done in place. */
export function addToolRule(text: string, participant: string, kind: "allow" | "ask" | "deny" | "except", rule: ToolRule): string {
  const doc = parseDocument(text);
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
  const tools = p.get("tools", true);
  if (tools === undefined || tools === null) {
    if (hasMergeKey(p))
      throw new RuleEditError(
        `participants.${participant} takes keys from a merge (<<): a tools key here would hide the merged one; add the rule by hand`,
      );
    p.set("tools", doc.createNode({ [kind]: [rule] }));
    return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
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
    tools.set(kind, doc.createNode([rule]));
    return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
  }
  if (isAlias(list))
    throw new RuleEditError(
      `participants.${participant}.tools.${kind} is an alias, shared with whoever else uses its anchor: add the rule by hand`,
    );
  if (!isSeq(list)) throw new RuleEditError(`participants.${participant}.tools.${kind} is not a list`);
  list.items.push(doc.createNode(rule));
  return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
}
