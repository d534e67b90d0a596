/**
 * `tools/list` of one participant served as itself (`/mcp/<participant>`, `mewgate mcp
 * --only`), page by page as its server gives it: the server's own order, its own page
 * size and its own cursors, passed through unchanged (opaque to the client, as they are
 * to us). Each page is asked of the participant through the gateway, as the seat, and
 * cut to what the space's policy lets the seat see: a tool the catalogue does not offer
 * the seat (denied, or not registered yet) is left out of its page, so a cursor another
 * session was given lists nothing this seat may not see.
 *
 * A seat whose capabilities do not reach the participant's `tools/list` gets the
 * catalogue in one page, as before (it has no cursor to follow).
 *
 * Also here: a tool name the catalogue does not know, asked of the server itself, so the
 * client gets the server's own answer for an unknown tool (an `isError` result from most
 * SDK servers) rather than one of ours.
 */
import { CallToolResultSchema, ErrorCode, type CallToolResult, type Tool } from "@modelcontextprotocol/sdk/types.js";
import type { ParticipantClient } from "../../client.js";
import { ParticipantError, RpcError } from "../../errors.js";
import type { Catalogue } from "./catalogue.js";

const TIMEOUT_MS = 10_000;
/** Longest cursor passed on either way (a server's cursor is short; a client's may be anything). */
const MAX_CURSOR = 4096;

/** Codes saying the seat may not ask this (its capabilities, the policy), not that the server failed. */
const REFUSED = new Set(["capability_violation", "denied"]);

export interface ToolsPage {
  tools: Tool[];
  nextCursor?: string;
}

/**
 * One page of the participant's tools. `undefined` when the seat cannot ask the
 * participant for its list (the caller then answers from the catalogue); a refusal of the
 * cursor by the server comes back as the server gave it.
 */
export async function ownToolsPage(
  client: ParticipantClient,
  participant: string,
  cursor: string | undefined,
  catalogue: Catalogue,
): Promise<ToolsPage | undefined> {
  if (cursor !== undefined && cursor.length > MAX_CURSOR) throw new RpcError(ErrorCode.InvalidParams, "tools/list: cursor too long");
  let res: unknown;
  try {
    res = await client.request(participant, "tools/list", cursor === undefined ? {} : { cursor }, { timeoutMs: TIMEOUT_MS });
  } catch (err) {
    if (!(err instanceof ParticipantError)) throw err;
    if (REFUSED.has(err.code)) return undefined;
    if (err.code === "rpc_error") throw new RpcError(err.rpcCode ?? ErrorCode.InternalError, err.message, err.data);
    throw new RpcError(ErrorCode.InternalError, `${participant}: ${err.message}`);
  }
  const r = typeof res === "object" && res !== null ? (res as Record<string, unknown>) : {};
  const listed = Array.isArray(r["tools"]) ? r["tools"] : [];
  const tools: Tool[] = [];
  const seen = new Set<string>();
  for (const t of listed) {
    const name = typeof t === "object" && t !== null ? (t as Record<string, unknown>)["name"] : undefined;
    if (typeof name !== "string" || seen.has(name)) continue;
    seen.add(name);
    const entry = catalogue.byName.get(name);
    if (!entry || entry.participant !== participant) continue;
    const tool = catalogue.tools.find((c) => c.name === name);
    if (tool) tools.push(tool);
  }
  const next = r["nextCursor"];
  return { tools, ...(typeof next === "string" && next.length > 0 && next.length <= MAX_CURSOR ? { nextCursor: next } : {}) };
}

/**
 * A `tools/call` of a name the catalogue does not know, sent to the participant itself
 * (through the gateway, whose policy decides it as for any call): its server's own answer
 * for a tool it does not have. `undefined` when the space would not pass the call (the
 * policy denies or holds it, the seat may not call the participant directly): the caller
 * then answers as it did.
 */
export async function askUnknownTool(
  client: ParticipantClient,
  participant: string,
  name: string,
  args: Record<string, unknown> | undefined,
  signal: AbortSignal,
): Promise<CallToolResult | undefined> {
  let res: unknown;
  try {
    res = await client.request(participant, "tools/call", { name, arguments: args ?? {} }, { timeoutMs: TIMEOUT_MS, signal });
  } catch (err) {
    if (!(err instanceof ParticipantError)) throw err;
    // The server's own JSON-RPC error for it (an SDK server's InvalidParams): as it gave it.
    if (err.code === "rpc_error") throw new RpcError(err.rpcCode ?? ErrorCode.InternalError, err.message, err.data);
    return undefined;
  }
  const parsed = CallToolResultSchema.safeParse(res);
  return parsed.success ? parsed.data : undefined;
}
