/**
 * Who hears the MCP server's log lines sent outside any call: the participants that asked
 * for its log (`logging/setLevel` through the bridge, as a client of the server would), each
 * at the level it last asked for. A line sent during a call goes to that call's caller
 * (notifications.ts); one sent outside goes to these, addressed to each (never broadcast),
 * so a face serving the server as itself (`/mcp/<participant>`) passes it to its client as
 * the server itself would.
 *
 * Split from notifications.ts: b38's rewrite of the bridge's client keeps its hook there.
 */

/** MCP's log levels, least severe first. */
const LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"] as const;

/** Most participants kept as listeners (a space is smaller; a bound all the same). */
const MAX_LISTENERS = 1000;

export class LogListeners {
  /** Participant → the least severe level it wants. */
  private readonly levels = new Map<string, number>();

  /** A `logging/setLevel` from `who`: it hears lines at `level` and above. An unknown level changes nothing. */
  asked(who: string, params: unknown): void {
    const level = typeof params === "object" && params !== null ? (params as Record<string, unknown>)["level"] : undefined;
    const rank = LEVELS.indexOf(level as (typeof LEVELS)[number]);
    if (rank < 0) return;
    if (!this.levels.has(who) && this.levels.size >= MAX_LISTENERS) return;
    this.levels.set(who, rank);
  }

  /** Who hears a line at `level` (an unknown level counts as `info`). */
  for(level: unknown): string[] {
    const found = LEVELS.indexOf(level as (typeof LEVELS)[number]);
    const rank = found < 0 ? 1 : found;
    return [...this.levels].filter(([, wants]) => rank >= wants).map(([who]) => who);
  }

  /** A participant left. */
  drop(who: string): void {
    this.levels.delete(who);
  }
}
