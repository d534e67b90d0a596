/**
 * Pages of a list under a byte budget, for answers that must fit one frame: `tools/list`,
 * `proposals/list` and the welcome. A cursor is the index of the next item, opaque to
 * clients; a list that changed between pages may repeat or skip an item, never fail.
 */

export interface Page<T> {
  items: T[];
  /** Where the next page starts; absent on the last page. */
  next?: string;
}

/** Reads a cursor from a client. `undefined` means "from the start"; `null` means it is not one of ours. */
export function readCursor(cursor: unknown): number | undefined | null {
  if (cursor === undefined) return undefined;
  if (typeof cursor !== "string" || !/^c[0-9]{1,9}$/.test(cursor)) return null;
  return Number(cursor.slice(1));
}

/**
 * Items from `start`, as many as fit in `budget` bytes (each measured by `size`) and at
 * most `max`; always at least one if any is left, so a client always moves on.
 */
export function takePage<T>(all: readonly T[], start: number, budget: number, size: (t: T) => number, max = 1000): Page<T> {
  const items: T[] = [];
  let i = start;
  for (; i < all.length && items.length < max; i++) {
    const n = size(all[i]!);
    // Callers bound each item well below a page, so the first always fits in practice.
    if (n > budget && items.length > 0) break;
    budget -= n;
    items.push(all[i]!);
  }
  return i < all.length ? { items, next: `c${i}` } : { items };
}

/** The size of a value as JSON, plus a comma. */
export function jsonBytes(v: unknown): number {
  return Buffer.byteLength(JSON.stringify(v)) + 1;
}
