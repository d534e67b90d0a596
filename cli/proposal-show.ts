/**
 * `mewgate proposals show ID`: one proposal's card — from the model the console draws
 * (gateway/operator/views.ts: who, the tool and its hints, why the proposer wants it, the
 * rule, times, every argument) — and its preview (what the call would change, read as you:
 * gateway/proposals/preview.ts).
 */
import type { Envelope } from "../gateway/index.js";
import type { ApiClient } from "./api.js";
import { cardLines, decidedCardLines } from "./card-text.js";
import type { Io } from "./lifecycle.js";
import { CliError } from "./space.js";
import { ANSI, PLAIN, sanitize } from "./terminal/format.js";
import { previewLines } from "./terminal/preview-view.js";

export async function showProposal(api: ApiClient, p: Envelope, io: Io, opts: { json?: boolean | undefined }): Promise<number> {
  const id = encodeURIComponent(p.id);
  const card = await api.get<Record<string, unknown>>(`proposals/${id}`);
  const preview = await api
    .get<Record<string, unknown>>(`proposals/${id}/preview`)
    .catch((err: Error) => ({ status: "failed", message: err.message }));
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

const DECIDED_WORDS: Record<string, string> = {
  approved: "approved",
  rejected: "rejected",
  withdrawn: "withdrawn by its proposer",
  expired: "expired",
};

/**
 * A proposal the pending list does not have: if it was decided, `show` draws its decided
 * card and a decision says it is already decided (by whom, when) instead of "no pending
 * proposal"; else `notFound` as before.
 */
export async function decidedAlready(
  api: ApiClient,
  ref: string,
  verb: string,
  notFound: string,
  io: Io,
  opts: { json?: boolean | undefined },
  width: number,
): Promise<number> {
  const { decided } = await api.get<{ decided: Array<Record<string, unknown>> }>("proposals?state=decided&limit=500");
  const matches = decided.filter((d) => typeof d["id"] === "string" && (d["id"] === ref || d["id"].startsWith(ref)));
  if (matches.length > 1) throw new CliError(`"${ref}" matches ${matches.length} decided proposals; give more of the id`);
  const d = matches[0];
  if (!d) throw new CliError(notFound);
  if (verb === "show") {
    if (opts.json) io.stdout.write(`${JSON.stringify(d, null, 2)}\n`);
    else {
      const tty = (io.stdout as { isTTY?: boolean }).isTTY === true && !io.env["NO_COLOR"];
      io.stdout.write(`${decidedCardLines(d, tty ? ANSI : PLAIN, width).join("\n")}\n`);
    }
    return 0;
  }
  const by = Array.isArray(d["approvedBy"]) && d["approvedBy"].length ? d["approvedBy"].join(" and ") : d["decidedBy"];
  const how = `${DECIDED_WORDS[String(d["decision"])] ?? String(d["decision"])}${by && d["decision"] !== "withdrawn" ? ` by ${String(by)}` : ""} at ${String(d["decidedAt"])}`;
  throw new CliError(
    sanitize(
      `[${String(d["shortId"])}] ${String(d["proposer"])} → ${String(d["tool"] ?? d["method"])} is already ${how}; nothing changed (mewgate proposals show ${String(d["shortId"])})`,
    ),
  );
}
