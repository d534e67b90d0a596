/**
 * Respond (docs/protocol.md): a chat correlated to an awaiting proposal answers the proposer
 * about it without deciding it — but only from someone who may decide that proposal. The
 * gateway marks such a chat `payload["mewgate/respond"]: {proposal, by}` and takes any such
 * mark off every other chat, so a peer with only chat rights cannot make its chat withdraw or
 * answer another participant's proposal (mewgate's agent counts only marked chats).
 */
import { type Envelope, RESPOND_KEY } from "../wire/envelope.js";
import { awaiting, type Proposal } from "./book.js";
import { isRecord } from "../wire/values.js";

/** `chat` as delivered: marked when `from` may decide the proposal it names (`mayDecide`), any forged mark taken off. */
export function respondMark(
  chat: Envelope,
  from: string,
  proposal: (id: string) => Proposal | undefined,
  mayDecide: (p: Proposal) => boolean,
): Envelope {
  const payload = isRecord(chat.payload) ? (chat.payload as Record<string, unknown>) : undefined;
  if (payload === undefined) return chat;
  const forged = Object.hasOwn(payload, RESPOND_KEY);
  const id = chat.correlation_id?.[0];
  const p = id === undefined ? undefined : proposal(id);
  const counts = p !== undefined && awaiting(p.state) && mayDecide(p);
  if (!forged && !counts) return chat;
  const rest = { ...payload };
  delete rest[RESPOND_KEY];
  return { ...chat, payload: counts ? { ...rest, [RESPOND_KEY]: { proposal: p.id, by: from } } : rest };
}
