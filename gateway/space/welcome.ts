/**
 * The welcome a participant gets when it joins (and again when its grants change).
 *
 * It must always fit one frame, or the joiner — perhaps the human who would reject the
 * proposal that made it large — could never get in. So each part gets a share of the
 * frame budget and says where the rest is: pending proposals are listed small (large
 * arguments elided, `proposals/get` fetches one) and, past their share, continue with
 * `proposals/list` from `proposals_cursor`; the catalogue continues with `tools/list`
 * from `tools_cursor`; other participants past their share are counted, not listed; and
 * history is newest first until its share is spent.
 */
import { type Envelope, systemEnvelope } from "../wire/envelope.js";
import { listed } from "../requests/endpoint.js";
import { jsonBytes, takePage } from "../wire/paging.js";
import type { Proposal } from "../proposals/book.js";

/** Most bytes of history in one welcome, whatever the frame allows. */
export const WELCOME_HISTORY_BYTES = 256 * 1024;

export interface WelcomeParts {
  to: string;
  you: Record<string, unknown>;
  space: Record<string, unknown>;
  participants: Record<string, unknown>[];
  /** How many participants there are when `participants` lists only some of them (a large space). */
  participantsTotal?: number | undefined;
  /** The JSON size of one participant entry, when the caller knows it already. Default: serialize it. */
  participantBytes?: ((p: Record<string, unknown>) => number) | undefined;
  tools: Record<string, unknown>[];
  /** Pending proposals the joiner may see, oldest first. */
  proposals: Proposal[];
  /** What the joiner may see of recent traffic, newest first. */
  history: Iterable<{ env: Envelope; size: number }>;
  /** Bytes the whole welcome may take. */
  budget: number;
  /** Open MEW streams, for late joiners. */
  activeStreams?: Record<string, unknown>[];
  /** Who holds each person's conversation (conversations.ts); none when nobody does. */
  conversations?: Record<string, unknown>[];
}

export function buildWelcome(w: WelcomeParts): Envelope {
  let left = w.budget - jsonBytes(w.you) - jsonBytes(w.space) - 1024;
  const payload: Record<string, unknown> = { you: w.you, space: w.space };
  if (w.conversations?.length) {
    payload["conversations"] = w.conversations;
    left -= sizeOf(w.conversations);
  }
  // Always present, empty too: MEW's clients read the list rather than test for it.
  payload["active_streams"] = w.activeStreams ?? [];
  if (w.activeStreams?.length) left -= sizeOf(w.activeStreams);

  const participantBytes = w.participantBytes ?? jsonBytes;
  const participants = takePage(w.participants, 0, Math.floor(left / 2), participantBytes);
  payload["participants"] = participants.items;
  const total = Math.max(w.participantsTotal ?? 0, w.participants.length);
  if (participants.next || total > participants.items.length) payload["participants_total"] = total;
  left -= participants.items.reduce((n, p) => n + participantBytes(p), 2);

  const proposals = takePage(w.proposals.map(listed), 0, Math.floor(left / 3), jsonBytes);
  payload["proposals"] = proposals.items;
  if (proposals.next) payload["proposals_cursor"] = proposals.next;
  left -= sizeOf(proposals.items);

  const tools = takePage(w.tools, 0, Math.floor((left * 2) / 3), jsonBytes);
  payload["tools"] = tools.items;
  if (tools.next) payload["tools_cursor"] = tools.next;
  left -= sizeOf(tools.items);

  const history: Envelope[] = [];
  let budget = Math.min(WELCOME_HISTORY_BYTES, left);
  for (const h of w.history) {
    if (h.size + 1 > budget) break;
    budget -= h.size + 1;
    history.push(h.env);
  }
  payload["history"] = history.reverse();
  return systemEnvelope("system/welcome", payload, { to: [w.to] });
}

function sizeOf(items: unknown[]): number {
  let n = 2;
  for (const i of items) n += jsonBytes(i);
  return n;
}
