/**
 * What a bridged MCP server asks of its client, answered by the space: sampling (a model
 * completion), elicitation (a form or a URL for a person) and roots.
 *
 * Sampling and elicitation belong to the call the server is serving, so they go back to
 * that call's caller as a *callback* (gateway/calls.ts): the caller's agent answers a
 * sampling request with its own model, a person answers a form in their terminal, web
 * console, or the MCP client of `mewgate mcp`; an agent that is itself serving someone
 * passes a form on up its chain. The gateway lets a callback through only to the caller of
 * a call the bridge is serving, and stops the clocks of the calls waiting on it.
 *
 * Over stdio a server's request names no call, so the bridge ties it to the calls it has
 * in flight: the callers of all of them must be one participant, or nobody can be told
 * apart and the server gets an error that says so. Roots are the operator's choice
 * (space.yaml `roots:`): a fixed list, or one participant to ask; without it the server
 * is not offered roots at all.
 */
import { type Client, type ClientCapabilities, ProtocolError } from "@modelcontextprotocol/client";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import type { McpServerConfig } from "../../gateway/index.js";
import type { IncomingRequest, ParticipantClient } from "../client.js";
import { ParticipantError, RpcError } from "../errors.js";
import { callerOffers } from "./client-caps.js";
import { isRecord } from "../../gateway/index.js";

/** A person gets this long to answer a form (the gateway bounds it by `calls.max_timeout_ms`). */
const ELICITATION_TIMEOUT_MS = 600_000;
/** An agent's model gets this long for a completion. */
const SAMPLING_TIMEOUT_MS = 120_000;
const ROOTS_TIMEOUT_MS = 10_000;

/** What the bridge tells the server it can do, from the server's entry in space.yaml. */
export function clientCapabilities(server: McpServerConfig): ClientCapabilities {
  const caps: ClientCapabilities = {};
  if (server.sampling !== false) caps.sampling = {};
  if (server.elicitation !== false) caps.elicitation = { form: {}, url: {} };
  if (server.roots !== undefined) caps.roots = { listChanged: !Array.isArray(server.roots) };
  return caps;
}

/** A call the server is serving now, and how to stop its clock while its caller is asked something. */
export interface ServedCall {
  req: IncomingRequest;
  pause(): void;
  resume(): void;
}

export interface CallbackHost {
  readonly id: string;
  readonly participant: ParticipantClient;
  readonly server: McpServerConfig;
  readonly log: Logger | undefined;
  /** The calls the server is serving now. */
  inflight(): ServedCall[];
}

/** Installs the handlers for the server's requests on `client` (before it connects). */
export function installCallbacks(client: Client, host: CallbackHost): void {
  const { server } = host;
  if (server.sampling !== false) {
    client.setRequestHandler(
      "sampling/createMessage",
      (request, ctx) => askCaller(host, "sampling/createMessage", request.params, SAMPLING_TIMEOUT_MS, ctx.mcpReq.signal) as never,
    );
  }
  if (server.elicitation !== false) {
    client.setRequestHandler(
      "elicitation/create",
      (request, ctx) => askCaller(host, "elicitation/create", request.params, ELICITATION_TIMEOUT_MS, ctx.mcpReq.signal) as never,
    );
  }
  const roots = server.roots;
  if (roots !== undefined) {
    client.setRequestHandler("roots/list", async (_request, ctx) => {
      if (Array.isArray(roots)) return { roots: roots.map((r) => (typeof r === "string" ? { uri: r } : r)) };
      return (await relay(host, () =>
        host.participant.request(roots.from, "roots/list", {}, { timeoutMs: ROOTS_TIMEOUT_MS, signal: ctx.mcpReq.signal, chain: false }),
      )) as never;
    });
  }
}

/**
 * The one participant whose calls the server is serving now, with those calls; or why
 * there is none. Used for callbacks and for the server's log messages.
 */
export function soleCaller(calls: ServedCall[]): { caller: string; calls: ServedCall[] } | { why: string } {
  if (calls.length === 0) return { why: "it is serving no call right now, so there is nobody to ask" };
  const callers = new Set(calls.map((c) => c.req.from));
  if (callers.size > 1) return { why: `it is serving calls of ${[...callers].sort().join(", ")} at once, and cannot say whose this is` };
  return { caller: calls[0]!.req.from, calls };
}

/** Asks the caller of the call the server is serving; the clocks of those calls stop meanwhile. */
async function askCaller(
  host: CallbackHost,
  method: string,
  params: Record<string, unknown>,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<unknown> {
  const found = soleCaller(host.inflight());
  if ("why" in found) throw new ProtocolError(ErrorCode.InvalidRequest, `${method} from "${host.id}" cannot be routed: ${found.why}`);
  const { caller, calls } = found;
  // A face said its client offers no such thing (client-caps.ts): answered here, as that client would.
  const served = calls.map((c) => c.req);
  if (!callerOffers(method, served)) {
    const what = method.split("/")[0];
    throw new RpcError(ErrorCode.MethodNotFound, `the MCP client of "${caller}" does not support ${what} (for this call)`);
  }
  // The caller's own envelope first (a SDK caller finds its call by it), then what it correlates to.
  const correlationId = [...new Set(calls.flatMap((c) => [c.req.envelope.id, ...(c.req.envelope.correlation_id ?? [])]))];
  const tool = calls.length === 1 ? toolOf(host.id, calls[0]!.req) : undefined;
  const meta = { ...(isRecord(params["_meta"]) ? params["_meta"] : {}), "mewgate/for": { caller, ...(tool ? { tool } : {}) } };
  for (const c of calls) c.pause();
  host.log?.info({ method, caller, tool }, "the MCP server asks the caller");
  try {
    return await relay(host, () =>
      host.participant.request(caller, method, { ...params, _meta: meta }, { timeoutMs, signal, correlationId, chain: false }),
    );
  } finally {
    for (const c of calls) c.resume();
  }
}

/**
 * The space's answer, or its refusal as the JSON-RPC error the server understands (the SDK
 * v2's `ProtocolError`, which the client's SDK sends with its code and data), in the
 * refuser's words: without the "MCP error <code>: " prefix an SDK v1 error carries.
 */
async function relay(host: CallbackHost, ask: () => Promise<unknown>): Promise<unknown> {
  try {
    return await ask();
  } catch (err) {
    if (err instanceof McpError) throw new ProtocolError(err.code, unprefixed(err), err.data);
    if (err instanceof RpcError) throw new ProtocolError(err.code, err.message, err.data);
    const e = err instanceof ParticipantError ? err : undefined;
    const code = e?.rpcCode ?? ErrorCode.InternalError;
    host.log?.info({ code: e?.code, err: (err as Error).message }, "the space did not answer the MCP server's request");
    throw new ProtocolError(code, (err as Error).message, e?.data);
  }
}

/** A message without the "MCP error <code>: " an SDK put before the sender's words. */
function unprefixed(err: McpError): string {
  const prefix = `MCP error ${err.code}: `;
  return err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
}

function toolOf(owner: string, req: IncomingRequest): string | undefined {
  const name = req.method === "tools/call" && isRecord(req.params) ? req.params["name"] : undefined;
  return typeof name === "string" ? `${owner}/${name}` : undefined;
}
