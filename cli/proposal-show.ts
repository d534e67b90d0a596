/**
 * `mewgate proposals show ID`: one proposal whole — who, what, why it waits, every argument
 * — and its preview (what the call would change, read as you: gateway/proposals/preview.ts).
 */
import type { Envelope } from "../gateway/wire/envelope.js";
import type { ApiClient } from "./api.js";
import type { Io } from "./lifecycle.js";
import { ANSI, callShape, PLAIN, sanitize, shortId, wrapJson } from "./terminal/format.js";
import { previewLines } from "./terminal/preview-view.js";

export async function showProposal(api: ApiClient, p: Envelope, io: Io, opts: { json?: boolean | undefined }): Promise<number> {
  const view = await api.get<Record<string, unknown>>(`proposals/${encodeURIComponent(p.id)}`);
  const preview = await api.get<Record<string, unknown>>(`proposals/${encodeURIComponent(p.id)}/preview`).catch((err: Error) => ({ status: "failed", message: err.message }));
  if (opts.json) {
    io.stdout.write(`${JSON.stringify({ proposal: view, preview }, null, 2)}\n`);
    return 0;
  }
  const tty = (io.stdout as { isTTY?: boolean }).isTTY === true && !io.env["NO_COLOR"];
  const s = tty ? ANSI : PLAIN;
  const width = Math.max(40, (io.stdout as { columns?: number }).columns ?? 100);
  const call = callShape(p);
  const lines = [
    `${s.bold(sanitize(p.from))} wants ${s.bold(call.label)}  ${s.dim(`[${shortId(p.id)}] ${p.id}`)}`,
    ...(typeof view["why"] === "string" ? [s.dim(`why: ${sanitize(view["why"])}`)] : []),
    ...(typeof view["expiresAt"] === "string" ? [s.dim(`expires: ${view["expiresAt"]}`)] : []),
    call.method === "tools/call" ? "arguments:" : "params:",
    ...wrapJson(call.arguments, width - 4).lines.map((l) => `  ${l}`),
    ...previewLines(preview, s, width, Number.MAX_SAFE_INTEGER),
  ];
  io.stdout.write(`${lines.join("\n")}\n`);
  return 0;
}
