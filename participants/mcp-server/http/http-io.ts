/**
 * Reading and answering JSON-RPC over HTTP for the MCP faces (http.ts): a header's value, a
 * bounded JSON body, and a JSON-RPC error answered before any MCP session exists.
 */
import type { IncomingMessage, ServerResponse } from "node:http";

/** JSON-RPC error codes the SDK's transport uses for transport-level refusals. */
export const RPC_SERVER_ERROR = -32000;
export const RPC_SESSION_NOT_FOUND = -32001;
export const RPC_PARSE_ERROR = -32700;
export const RPC_INTERNAL_ERROR = -32603;

export function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  const s = Array.isArray(v) ? v[0] : v;
  return s === undefined || s === "" ? undefined : s;
}

export function rpcError(
  res: ServerResponse,
  status: number,
  code: number,
  message: string,
  reason?: string,
  headers?: Record<string, string>,
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const error = reason === undefined ? { code, message } : { code, message, data: { reason } };
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify({ jsonrpc: "2.0", error, id: null }));
}

/** Reads a JSON body of at most `max` bytes. Past the limit the connection is closed once the 413 is out. */
export function readJson(
  req: IncomingMessage,
  max: number,
): Promise<{ ok: true; body: unknown } | { ok: false; status: number; message: string }> {
  const tooLarge = { ok: false as const, status: 413, message: `request body over ${max} bytes` };
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > max) return Promise.resolve(tooLarge);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= max) {
        chunks.push(chunk);
        return;
      }
      req.off("data", onData);
      req.off("end", onEnd);
      req.pause();
      resolve(tooLarge);
    };
    const onEnd = () => {
      try {
        resolve({ ok: true, body: JSON.parse(Buffer.concat(chunks).toString("utf8")) });
      } catch {
        resolve({ ok: false, status: 400, message: "Parse error: the body is not JSON" });
      }
    };
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", reject);
  });
}
