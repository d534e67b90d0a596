/**
 * Small HTTP helpers shared by the operator routes (api.ts, inject.ts): a bearer token
 * from the header, a bounded JSON-object body, a JSON answer.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { nestsWithin } from "../wire/envelope.js";

/** Deepest body any route takes: the deepest frame a space may allow (`gateway.limits.max_depth`), which then applies. */
const MAX_BODY_DEPTH = 1000;

export function bearer(header: string | undefined): string | undefined {
  const m = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return m?.[1];
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store", ...headers });
  res.end(JSON.stringify(body));
}

/** Bytes of an over-long body read and dropped after the 413, so the client reads the answer; past them the socket is cut. */
const DRAIN_MAX = 16 * 1024 * 1024;

/**
 * Reads a JSON object of at most `max` bytes (an empty body is `{}`). Past the limit it
 * answers 413 at once: `res` closes after the answer, and what is left of the body is read
 * and dropped (up to DRAIN_MAX), since a socket closed with unread bytes is reset and the
 * client would lose the answer.
 */
export function readJsonObject(
  req: IncomingMessage,
  res: ServerResponse,
  max: number,
): Promise<{ ok: true; body: Record<string, unknown> } | { ok: false; status: number; message: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max + DRAIN_MAX) return void req.destroy();
      if (size > max) {
        if (!over) {
          over = true;
          chunks.length = 0;
          res.setHeader("connection", "close");
          resolve({ ok: false, status: 413, message: `request body over ${max} bytes` });
        }
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => {
      if (over) return;
      if (size === 0) return resolve({ ok: true, body: {} });
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown;
        if (typeof body !== "object" || body === null || Array.isArray(body)) return resolve({ ok: false, status: 400, message: "the body must be a JSON object" });
        if (!nestsWithin(body, MAX_BODY_DEPTH)) return resolve({ ok: false, status: 400, message: `the body nests arrays and objects more than ${MAX_BODY_DEPTH} deep` });
        resolve({ ok: true, body: body as Record<string, unknown> });
      } catch {
        resolve({ ok: false, status: 400, message: "the body is not JSON" });
      }
    });
    req.on("error", () => resolve({ ok: false, status: 400, message: "the request failed" }));
  });
}
