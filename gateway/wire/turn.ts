/**
 * One agent turn, one card: the tool calls a model asked for in one reply (parallel tool
 * calls) are marked as one turn, `params._meta["mewgate/turn"] = {id, index, count}`, so a
 * person sees them together and may decide them together or one by one.
 *
 * The mark is the proposer's word and only groups what is shown: each call is still its own
 * proposal, decided and recorded on its own. Read here strictly: an id of at most 64
 * letters, digits, `-` or `_`, a count from 2 to 64 and an index below it; anything else is
 * no mark at all.
 */
export const TURN_META_KEY = "mewgate/turn";

export interface TurnMark {
  id: string;
  index: number;
  count: number;
}

const ID = /^[A-Za-z0-9_-]{1,64}$/;

/** The turn a call's params say it belongs to, if they say so in the expected shape. */
export function turnOf(params: unknown): TurnMark | undefined {
  if (typeof params !== "object" || params === null) return undefined;
  const meta = (params as Record<string, unknown>)["_meta"];
  if (typeof meta !== "object" || meta === null || Array.isArray(meta)) return undefined;
  const t = (meta as Record<string, unknown>)[TURN_META_KEY];
  if (typeof t !== "object" || t === null || Array.isArray(t)) return undefined;
  const { id, index, count } = t as Record<string, unknown>;
  if (typeof id !== "string" || !ID.test(id)) return undefined;
  if (
    !Number.isInteger(count) ||
    !Number.isInteger(index) ||
    (count as number) < 2 ||
    (count as number) > 64 ||
    (index as number) < 0 ||
    (index as number) >= (count as number)
  )
    return undefined;
  return { id, index: index as number, count: count as number };
}
