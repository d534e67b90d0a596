/**
 * The CLIENT span of a request the bridge sends to its MCP server, when the space exports
 * traces (gateway/ports/tracing.ts `outbound`): under the span of the routed call it
 * serves (the request's `_meta.traceparent`, which the gateway set), with the transport,
 * the server's address and port over HTTP, its session and the revision the request was
 * actually sent at; the server gets the span's own `traceparent`, so its spans continue the
 * caller's trace.
 *
 * One small helper, called where the bridge sends a request (forward.ts), so whichever
 * client speaks to the server (the SDK's v1 or v2) keeps it by calling it.
 */
import type { CallTrace, Tracing } from "../../gateway/index.js";
import { isRecord } from "../../gateway/index.js";

export interface OutboundSpan {
  /** The request's params, carrying this span's `traceparent`. */
  params: unknown;
  /** Ends the span with the request: its JSON-RPC code or failure reason when it fails. */
  around<T>(sent: Promise<T>): Promise<T>;
}

/** How the request goes: over HTTP (to `address`) or a pipe, in a session (`sessionId`, 2025-era) or none, at the revision the sending client negotiated. */
export interface OutboundWay {
  http: boolean;
  address?: { host: string; port: number } | undefined;
  sessionId: string | undefined;
  /** The revision of the client that sends it (the bridge's 2026-07-28 client, or its 2025-era session). */
  protocolVersion: string | undefined;
}

/** A CLIENT span for `method` to server `server`; `undefined` when traces are off. */
export function outboundSpan(
  tracing: Tracing | undefined,
  server: string,
  way: OutboundWay,
  method: string,
  params: unknown,
): OutboundSpan | undefined {
  if (!tracing?.on) return undefined;
  const meta = isRecord(params) && isRecord(params["_meta"]) ? params["_meta"] : {};
  const name = method === "tools/call" && isRecord(params) && typeof params["name"] === "string" ? params["name"] : undefined;
  const span: CallTrace | undefined = tracing.outbound(
    {
      server,
      method,
      tool: name,
      transport: way.http ? "tcp" : "pipe",
      sessionId: way.sessionId,
      protocolVersion: way.protocolVersion,
      ...(way.address ? { serverAddress: way.address.host, serverPort: way.address.port } : {}),
    },
    typeof meta["traceparent"] === "string" ? meta["traceparent"] : undefined,
  );
  if (!span) return undefined;
  return {
    params: { ...(isRecord(params) ? params : {}), _meta: { ...meta, traceparent: span.traceparent } },
    around: (sent) =>
      sent.then(
        (result) => {
          span.end(isRecord(result) && result["isError"] === true ? "tool_error" : undefined);
          return result;
        },
        (err: unknown) => {
          const e = err as { code?: unknown; data?: { reason?: unknown } };
          const reason = typeof e.data?.reason === "string" ? e.data.reason : undefined;
          span.end(reason ?? (typeof e.code === "number" || typeof e.code === "string" ? String(e.code) : "error"));
          throw err;
        },
      ),
  };
}
