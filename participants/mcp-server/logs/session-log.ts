/**
 * MCP logging on one session of a face: the level its client set (`logging/setLevel`), the
 * face's own lines (a call waits, who approved it) and the tool servers' lines passed on
 * (about one of this session's calls; serving one participant as itself, also those its
 * server sent outside any call, which the bridge sends to whoever set a level there:
 * bridge/log-listeners.ts).
 *
 * face/server.ts owns the session and says when it may send.
 */
import type { LoggingLevel } from "@modelcontextprotocol/sdk/types.js";
import { LOG_ROUTE } from "../held/input.js";

/** MCP's log levels, least severe first. */
const LOG_LEVELS: readonly LoggingLevel[] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

type Notify = (n: {
  method: "notifications/message";
  params: { level: LoggingLevel; logger: string; data: unknown; _meta?: Record<string, unknown> };
}) => Promise<void>;
/** The request a line is about: its stream, and its `_meta`. */
type About = { sendNotification: Notify; _meta?: Record<string, unknown> | undefined };

export class SessionLog {
  /** Below this the MCP client hears no log messages. */
  level: LoggingLevel = "info";

  constructor(
    /** Whether the session may send now (initialized, not closed). */
    private readonly open: () => boolean,
    /** Sends on the session's own stream. */
    private readonly notify: Notify,
    private readonly debug: (err: Error) => void,
  ) {}

  /** A line to the client, at or above its level, on the stream of the request it is about (`about`), else the session's. */
  send(level: LoggingLevel, data: unknown, about: About | undefined, logger = "mewgate"): void {
    if (LOG_LEVELS.indexOf(level) < LOG_LEVELS.indexOf(this.level) || !this.open()) return;
    // The route of the 2026-07-28 request it is about, when a 2026-07-28 face asked (modern-logs.ts).
    const route = about?._meta?.[LOG_ROUTE];
    const notification = {
      method: "notifications/message" as const,
      params: { level, logger, data, ...(typeof route === "string" ? { _meta: { [LOG_ROUTE]: route } } : {}) },
    };
    (about ? about.sendNotification(notification) : this.notify(notification)).catch(this.debug);
  }

  /**
   * A tool server's `notifications/message` from `from`: passed on under the server's own
   * logger name when serving it as itself (`only`), else prefixed with who sent it.
   */
  fromServer(params: unknown, from: string, only: string | undefined, about: About | undefined): void {
    if (typeof params !== "object" || params === null) return;
    const p = params as Record<string, unknown>;
    const level = LOG_LEVELS.includes(p["level"] as LoggingLevel) ? (p["level"] as LoggingLevel) : "info";
    const own = typeof p["logger"] === "string" ? p["logger"] : undefined;
    const logger = only !== undefined ? (own ?? from) : own !== undefined ? `${from}/${own}` : from;
    this.send(level, p["data"], about, logger);
  }
}
