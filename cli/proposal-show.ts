/**
 * `mewgate proposals show ID`: one proposal's card — from the model the console draws
 * (gateway/operator/views.ts: who, the tool and its hints, why the proposer wants it, the
 * rule, times, every argument) — and its preview (what the call would change, read as you:
 * gateway/proposals/preview.ts).
 */
import type { Envelope } from "../gateway/wire/envelope.js";
import type { ApiClient } from "./api.js";
import { cardLines } from "./card-text.js";
import type { Io } from "./lifecycle.js";
import { ANSI, PLAIN } from "./terminal/format.js";
import { previewLines } from "./terminal/preview-view.js";

export async function showProposal(api: ApiClient, p: Envelope, io: Io, opts: { json?: boolean | undefined }): Promise<number> {
  const id = encodeURIComponent(p.id);
  const card = await api.get<Record<string, unknown>>(`proposals/${id}`);
  const preview = await api.get<Record<string, unknown>>(`proposals/${id}/preview`).catch((err: Error) => ({ status: "failed", message: err.message }));
  if (opts.json) {
    io.stdout.write(`${JSON.stringify({ ...card, preview }, null, 2)}\n`);
    return 0;
  }
  const tty = (io.stdout as { isTTY?: boolean }).isTTY === true && !io.env["NO_COLOR"];
  const s = tty ? ANSI : PLAIN;
  const width = Math.max(40, (io.stdout as { columns?: number }).columns ?? 100);
  io.stdout.write(`${[...cardLines(card, s, width), ...previewLines(preview, s, width, Number.MAX_SAFE_INTEGER)].join("\n")}\n`);
  return 0;
}
