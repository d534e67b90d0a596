/**
 * Traces of an MCP face: a SERVER span for each `tools/call`, `resources/read`,
 * `prompts/get` and `completion/complete` it serves, with the session,
 * the protocol revision and the transport (`mcp.session.id`, `mcp.protocol.version`,
 * `network.transport`), under the client's own `traceparent`; the request to the space
 * carries the span's context, so the routed call, the bridge's call out to its server and
 * the server itself continue the client's trace (gateway/ports/tracing.ts).
 *
 * Given to a face by whoever serves it: the HTTP faces have the space's `Tracing`
 * (http/http.ts); `mewgate mcp` (stdio, another process) has none, and its calls hang under the
 * client's `traceparent` at the gateway as before.
 */
import type { CallTrace, FaceCallInfo, Tracing } from "../../../gateway/index.js";

/** What a face knows of one request; `headerTraceparent`: a W3C `traceparent` HTTP header, used when `_meta` has none. */
export type FaceRequest = Pick<FaceCallInfo, "method" | "tool" | "rpcId" | "sessionId" | "protocolVersion" | "resourceUri" | "prompt"> & {
  headerTraceparent?: string | undefined;
};

/** What a face knows of a request from the SDK's handler context: its id, session and (over HTTP) revision header. */
export function requestOf(
  method: string,
  extra: { requestId: string | number; sessionId?: string | undefined; requestInfo?: { headers: Record<string, unknown> } | undefined },
): FaceRequest {
  const version = extra.requestInfo?.headers["mcp-protocol-version"];
  const traceparent = extra.requestInfo?.headers["traceparent"];
  return {
    method,
    rpcId: extra.requestId,
    sessionId: extra.sessionId,
    protocolVersion: typeof version === "string" ? version : undefined,
    ...(typeof traceparent === "string" ? { headerTraceparent: traceparent } : {}),
  };
}

/** Starts a face's span for one request under the client's `traceparent`; `undefined` when traces are off. */
export type FaceTrace = (request: FaceRequest, clientTraceparent: unknown) => CallTrace | undefined;

/** The face trace of `seat` in `space` over `transport`; `protocolVersion` for a face of one revision (2026-07-28). */
export function faceTrace(
  tracing: Tracing,
  space: string,
  seat: string,
  transport: FaceCallInfo["transport"],
  protocolVersion?: string,
): FaceTrace | undefined {
  if (!tracing.on) return undefined;
  return ({ headerTraceparent: _, ...request }, clientTraceparent) =>
    tracing.face(
      { space, seat, transport, ...request, protocolVersion: request.protocolVersion ?? protocolVersion },
      typeof clientTraceparent === "string" ? clientTraceparent : undefined,
    );
}

/**
 * Runs one call under a face span: `run` gets the span's `traceparent` for the request to
 * the space; the span ends with the call (`tool_error` for an error result, the JSON-RPC
 * code or the failure's code for a throw).
 */
export async function traced<T>(
  trace: FaceTrace | undefined,
  request: FaceRequest,
  meta: unknown,
  run: (traceparent: string | undefined) => Promise<T>,
): Promise<T> {
  const inMeta = typeof meta === "object" && meta !== null ? (meta as Record<string, unknown>)["traceparent"] : undefined;
  // A client may send its trace context as an HTTP header alone (W3C Trace Context): it counts as the `_meta` one.
  const clientTraceparent = inMeta ?? request.headerTraceparent;
  const span = trace?.(request, clientTraceparent);
  // Untraced here, the header's context still goes on to the space (the gateway checks it), as a `_meta` one does.
  if (!span) return run(inMeta === undefined ? request.headerTraceparent : undefined);
  try {
    const result = await run(span.traceparent);
    const isError = typeof result === "object" && result !== null && (result as Record<string, unknown>)["isError"] === true;
    span.end(isError ? "tool_error" : undefined);
    return result;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    span.end(typeof code === "number" || typeof code === "string" ? String(code).slice(0, 64) : "error");
    throw err;
  }
}
