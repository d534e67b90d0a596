/**
 * Two small readers every layer needs: is this value a plain JSON object, and a text cut to a
 * length a person reads. One copy here; `cli/` and `participants/` take them from
 * `gateway/index.ts`. (A name quoted in a gateway error is cut by `ports/host.ts`'s `clip`,
 * at 64 characters; the browser has its own copy in `ui/cards.js`.)
 */

/** A JSON object: not null, not an array. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `text` cut to at most `max` characters, the last an ellipsis when it was cut. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
