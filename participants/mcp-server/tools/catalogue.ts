/**
 * The space's tools as one MCP server's `tools/list`, and failures as tool results.
 *
 * Pure functions: the server (face/server.ts) feeds them what `tools/list` on `system:gateway`
 * returned and what a failed call rejected with.
 */
import { AUTHZ_KEY, denial } from "../held/denials.js";
import { ToolSchema, type CallToolResult, type Tool } from "@modelcontextprotocol/sdk/types.js";
import { GATEWAY_ID, isRecord } from "../../../gateway/index.js";
import { ToolNameMap } from "../../agent/names.js";
import { forModel } from "../../agent/tools.js";
import type { ParticipantError } from "../../errors.js";
import type { ToolInfo } from "../../wire.js";

/** What a space tool needs from this participant: called directly, or proposed and approved first. */
export type ExposedPolicy = "direct" | "proposal";

export interface CatalogueEntry {
  /** `participant/tool`, as the space names it. */
  real: string;
  participant: string;
  policy: ExposedPolicy;
  /** The server's own `execution.taskSupport`: a call made as a task goes to it as one (tasks/tasks.ts) when `optional` or `required`. */
  taskSupport?: string | undefined;
}

export interface Catalogue {
  /** What `tools/list` answers, in the registry's order. */
  tools: Tool[];
  /** MCP tool name → the space's tool. */
  byName: ReadonlyMap<string, CatalogueEntry>;
  /** Equal for equal tool lists: a change of it is a `list_changed`. */
  fingerprint: string;
  /** Names left out: two real names that encode alike, or a definition MCP clients would refuse. */
  skipped: { name: string; why: string }[];
}

export const APPROVAL_NOTE =
  "Needs approval: calling it sends a proposal to the space, and the call waits until a participant approves or rejects it. " +
  "A rejection comes back as an error result carrying the approver's reason.";

/**
 * Builds the MCP view of the space's tools for participant `self`: every tool except the
 * ones policy denies it and its own, under the MCP-safe names of `participants/agent/names.ts`
 * (`fs/read_file` → `fs__read_file`), with the real name in the title and description.
 */
export function buildCatalogue(infos: readonly ToolInfo[], self: string | undefined, only?: string): Catalogue {
  const visible: { info: ToolInfo; participant: string; policy: ExposedPolicy }[] = [];
  for (const info of infos) {
    const slash = info.name.indexOf("/");
    const participant = info.participant ?? (slash > 0 ? info.name.slice(0, slash) : "");
    if (info.policy === "denied" || participant === self) continue;
    if (only !== undefined && participant !== only) continue;
    // A policy the gateway did not state is treated as direct: if the call needs approval
    // after all, the gateway turns it into a proposal and the call still waits for it.
    visible.push({ info, participant, policy: info.policy === "proposal" ? "proposal" : "direct" });
  }
  if (only !== undefined) return ownNames(visible);
  const names = new ToolNameMap(visible.map((v) => v.info.name));
  const skipped = names.collisions.flatMap((c) =>
    c.names.map((name) => ({ name, why: `its MCP name ${c.functionName} is shared with ${c.names.filter((n) => n !== name).join(", ")}` })),
  );
  const tools: Tool[] = [];
  const byName = new Map<string, CatalogueEntry>();
  for (const { info, participant, policy } of visible) {
    const fn = names.functionName(info.name);
    if (fn === undefined) continue;
    // An MCP client hands these to its model: hidden characters out, a flag stated (gateway/tools/inspect.ts).
    const tool = toMcpTool(fn, forModel(info), policy, participant);
    if (!tool) {
      skipped.push({ name: info.name, why: "its definition is not a valid MCP tool" });
      continue;
    }
    tools.push(tool);
    byName.set(fn, { real: info.name, participant, policy, taskSupport: taskSupportOf(info) });
  }
  return { tools, byName, fingerprint: JSON.stringify(tools), skipped };
}

/**
 * One participant's tools under their own names (`/mcp/<participant>`): the server's own
 * title and description (cleaned for a model like every tool of the space), the policy in
 * `_meta`. Names are unique within one server, so nothing is encoded.
 */
function ownNames(visible: { info: ToolInfo; participant: string; policy: ExposedPolicy }[]): Catalogue {
  const tools: Tool[] = [];
  const byName = new Map<string, CatalogueEntry>();
  const skipped: { name: string; why: string }[] = [];
  for (const { info, participant, policy } of visible) {
    const own = info.tool ?? info.name.slice(participant.length + 1);
    if (!own || byName.has(own)) continue;
    const tool = toMcpTool(own, forModel(info), policy, participant, true);
    if (!tool) {
      skipped.push({ name: info.name, why: "its definition is not a valid MCP tool" });
      continue;
    }
    tools.push(tool);
    byName.set(own, { real: info.name, participant, policy, taskSupport: taskSupportOf(info) });
  }
  return { tools, byName, fingerprint: JSON.stringify(tools), skipped };
}

function toMcpTool(fn: string, info: ToolInfo, policy: ExposedPolicy, participant: string, asItself = false): Tool | undefined {
  const real = info.name;
  const needsApproval = policy === "proposal";
  const ownTitle = typeof info["title"] === "string" && info["title"] ? info["title"] : undefined;
  const title = asItself ? ownTitle : `${ownTitle ? `${ownTitle} (${real})` : real}${needsApproval ? " — needs approval" : ""}`;
  const description = asItself
    ? info.description
    : [`${real}${info.description ? `: ${info.description}` : ""}`, ...(needsApproval ? [APPROVAL_NOTE] : [])].join("\n\n");
  const tool: Record<string, unknown> = {
    name: fn,
    ...(title === undefined ? {} : { title }),
    ...(description === undefined ? {} : { description }),
    inputSchema: objectSchema(info.inputSchema) ?? { type: "object" },
    // The server's own _meta (MCP Apps UI resources, …) passes through beside ours.
    _meta: {
      ...(isRecord(info["_meta"]) ? info["_meta"] : {}),
      "mewgate/name": real,
      "mewgate/participant": participant,
      "mewgate/policy": policy,
    },
  };
  if (info["icons"] !== undefined) tool["icons"] = info["icons"];
  if (info["execution"] !== undefined) tool["execution"] = info["execution"];
  const outputSchema = objectSchema(info["outputSchema"]);
  if (outputSchema) tool["outputSchema"] = outputSchema;
  if (info.annotations) tool["annotations"] = info.annotations;
  // A client validates the whole list at once, so one odd definition must not spoil it:
  // try without the optional parts before leaving the tool out.
  const bare = { ...tool, icons: undefined, execution: undefined };
  for (const candidate of [tool, bare, { ...bare, annotations: undefined }, { ...bare, annotations: undefined, outputSchema: undefined }]) {
    const parsed = ToolSchema.safeParse(candidate);
    if (parsed.success) return parsed.data;
  }
  return undefined;
}

function taskSupportOf(info: ToolInfo): string | undefined {
  const execution = info["execution"];
  return isRecord(execution) && typeof execution["taskSupport"] === "string" ? execution["taskSupport"] : undefined;
}

/** A JSON Schema for an object, with `type: "object"` as MCP requires; `undefined` for anything else. */
function objectSchema(schema: unknown): Record<string, unknown> | undefined {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) return undefined;
  const s = schema as Record<string, unknown>;
  if (s["type"] === undefined) return { type: "object", ...s };
  return s["type"] === "object" ? s : undefined;
}

/** A failed call as the tool result an MCP client (and the model behind it) reads. */
export function failureResult(real: string, err: ParticipantError): CallToolResult {
  // A refusal by a person or the policy carries the structured denial's envelope (held/denials.ts): decided, nothing to do;
  // a sign-in the caller must make (or one with more scope) too: theirs to make, then call again.
  const refused =
    err.code === "rejected" ||
    err.code === "expired" ||
    err.code === "denied" ||
    err.code === "sign_in_needed" ||
    err.code === "step_up_needed";
  return {
    content: [{ type: "text", text: failureText(real, err) }],
    isError: true,
    ...(refused ? { _meta: { [AUTHZ_KEY]: denial(err.code) } } : {}),
  };
}

export function failureText(real: string, err: ParticipantError): string {
  const owner = real.slice(0, Math.max(0, real.indexOf("/")));
  const from = err.envelope?.from;
  const by = from === undefined ? "an approver" : from === GATEWAY_ID ? "the gateway" : from;
  switch (err.code) {
    case "rejected":
      return `${real} was not run: rejected by ${by}${err.reason ? `: ${err.reason}` : ""}${err.text ? ` — ${err.text}` : ""}`;
    case "expired":
      return `${real} was not run: nobody approved the proposal in time, so it expired${err.text ? ` (${err.text})` : ""}`;
    case "withdrawn":
      return `${real} was not run: the proposal was withdrawn${err.reason ? ` (${err.reason})` : ""}`;
    case "denied":
      return `${real} was not run: the space's policy denies it to this participant`;
    case "unknown_tool":
      return `${real} is not a tool of the space (any more); list the tools again`;
    case "timeout":
      return `${real} did not answer in time: ${err.message}`;
    case "target_left":
      return `${real} failed: ${owner ? `"${owner}"` : "its owner"} left the space before answering`;
    case "target_offline":
      return `${real} was not run: ${owner ? `"${owner}"` : "its owner"} is not connected to the space`;
    case "participant_disabled":
      return `${real} was not run: ${owner ? `"${owner}"` : "its owner"} is switched off in the space; someone who may switch it on can (space/enable)`;
    case "disconnected":
    case "closed":
    case "connect_failed":
      return `${real} failed: the connection to the space was lost (${err.message}); the call may or may not have run`;
    default:
      return `${real} failed (${err.code}): ${err.message}`;
  }
}
