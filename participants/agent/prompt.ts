/**
 * The agent's system prompt, generated from the space.
 *
 * Deterministic: the same space gives the same string whatever order participants and
 * tools arrive in (everything is sorted by id/name in code-unit order), so it can be
 * snapshot-tested and providers can cache it. Rebuild it when tools or participants
 * change; it costs a sort and a join.
 */
import { compare, type SpaceTool } from "./tools.js";
import { stripHidden } from "../../gateway/index.js";

export interface PromptParticipant {
  id: string;
  kind: string;
  description?: string | undefined;
}

export interface PromptInput {
  self: { id: string; description?: string | undefined; instructions?: string | undefined };
  space: { id: string; name?: string | undefined; description?: string | undefined };
  /** Everyone present; the agent itself may be included and is skipped. */
  participants: readonly PromptParticipant[];
  /** The gateway's `tools/list` for this agent. */
  tools: readonly SpaceTool[];
}

/** Longest description shown per tool or participant: the full one goes with the function definition. */
const MAX_DESCRIPTION = 300;

export function buildSystemPrompt(input: PromptInput): string {
  const { self, space } = input;
  const lines: string[] = [];
  const spaceName = space.name?.trim() ? `"${oneLine(space.name)}" (space id: ${space.id})` : `"${space.id}"`;
  lines.push(`You are ${self.id}, an AI agent participant in the shared workspace ${spaceName}.`);
  if (self.description?.trim()) lines.push(`Your role: ${oneLine(self.description)}`);
  if (space.description?.trim()) lines.push(`About this space: ${oneLine(space.description)}`);
  lines.push("Everything said in this space can be watched by every participant: humans, other agents and tool servers.");

  lines.push("", "## Participants");
  const others = input.participants.filter((p) => p.id !== self.id).sort((a, b) => compare(a.id, b.id));
  if (others.length === 0) lines.push("Nobody else is here right now.");
  for (const p of others) lines.push(`- ${p.id} (${p.kind})${p.description?.trim() ? `: ${short(p.description)}` : ""}`);

  lines.push(
    "",
    "## Conversation",
    'Messages reach you as "sender: text". Your reply text is posted to the space as a chat message from you.',
    "To address a participant, mention them as @id (for example @alice). Answer what is asked of you;",
    "do not reply only to acknowledge another agent, and stop once the task is done.",
  );

  lines.push("", "## Tools");
  const tools = [...input.tools].sort((a, b) => compare(a.name, b.name));
  const own = tools.filter((t) => t.participant === self.id);
  const theirs = tools.filter((t) => t.participant !== self.id);
  const direct = theirs.filter((t) => t.policy === "direct");
  const proposal = theirs.filter((t) => t.policy === "proposal");
  const denied = theirs.filter((t) => t.policy === "denied").length;
  if (direct.length + proposal.length === 0) {
    lines.push("No tools are available to you right now.");
  } else {
    lines.push(
      "Tools belong to participants and are named participant/tool. Each one is offered to you as a function",
      "whose description starts with the tool's name in brackets, for example [fs/read_file].",
      "Call several tools in one turn when the calls do not depend on each other: they run in parallel.",
    );
    if (direct.length > 0) {
      lines.push("", "Call directly:");
      for (const t of direct) lines.push(toolLine(t));
    }
    if (proposal.length > 0) {
      lines.push("", "Needs approval (each call becomes a proposal that a human may approve or reject; the call waits for the decision):");
      for (const t of proposal) lines.push(toolLine(t));
    }
  }
  if (denied > 0) {
    lines.push(
      "",
      `${denied} more ${denied === 1 ? "tool exists" : "tools exist"} in this space that you may not use; ${denied === 1 ? "it is" : "they are"} not offered to you.`,
    );
  }
  if (own.length > 0) lines.push("", `Your own tools, which others may call: ${own.map((t) => t.name).join(", ")}.`);

  lines.push(
    "",
    "## When a tool call does not succeed",
    "- Rejected: the result says the proposal was rejected, by whom and why. Read the reason and adapt: change the",
    "  arguments, take another way, or ask in chat. Do not repeat the same call unchanged.",
    "- Timed out: no answer or no decision came in time. The call may or may not have taken effect: check before",
    "  repeating anything that changes state, and say so when you cannot.",
    "- Other errors (unknown tool, invalid arguments, the tool failed): fix the call if you can, otherwise explain",
    "  the problem in chat.",
  );

  if (self.instructions?.trim()) lines.push("", "## Instructions", self.instructions.trim());
  return lines.join("\n");
}

function toolLine(t: SpaceTool): string {
  return `- ${t.name}${t.description?.trim() ? `: ${short(t.description)}` : ""}`;
}

function oneLine(text: string): string {
  // Nothing hidden reaches the model through the prompt (gateway/tools/inspect.ts).
  return stripHidden(text).replace(/\s+/g, " ").trim();
}

function short(text: string): string {
  const line = oneLine(text);
  if (line.length <= MAX_DESCRIPTION) return line;
  // Never cut a surrogate pair in half: a lone surrogate is not valid UTF-8 on the wire.
  return `${line.slice(0, MAX_DESCRIPTION - 1).replace(/[\uD800-\uDBFF]$/, "")}…`;
}
