/**
 * Log lines through a 2026-07-28 face: the face (face/server.ts) sends its own lines and a tool
 * server's about a call on the call's own request, to the in-process client that asked
 * (modern/modern.ts); that client has one connection for every request of a seat, so each request
 * is given a route (LOG_ROUTE in its `_meta`), the face's lines carry it back, and here they
 * reach the 2026-07-28 request they are about, through its `ctx.mcpReq.log`, which sends
 * them at or above the level that request's client asked for (its envelope's `logLevel`),
 * and not at all when it asked for none.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { LOG_ROUTE } from "../held/input.js";

/** What sends one line to a 2026-07-28 request's client (the SDK v2's `ctx.mcpReq.log`). */
export type RequestLog = (level: never, data: unknown, logger?: string) => Promise<void>;
type Schema = typeof import("@modelcontextprotocol/sdk/types.js").LoggingMessageNotificationSchema;

const tables = new WeakMap<Client, Map<string, { log: RequestLog | undefined }>>();
let routes = 0;

export interface LogRoute {
  /** The value of LOG_ROUTE in the request's `_meta`. */
  id: string;
  /** From now on the lines go to `log` (a held call's later request), or nowhere. */
  to(log: RequestLog | undefined): void;
  end(): void;
}

/** A route on `client` for the lines about one request, to `log`. */
export function logRoute(schema: Schema, client: Client, log: RequestLog | undefined): LogRoute {
  let table = tables.get(client);
  if (!table) {
    const t = new Map<string, { log: RequestLog | undefined }>();
    table = t;
    tables.set(client, t);
    client.setNotificationHandler(schema, (n) => {
      const id = (n.params as { _meta?: Record<string, unknown> })._meta?.[LOG_ROUTE];
      const send = typeof id === "string" ? t.get(id)?.log : undefined;
      send?.(n.params.level as never, n.params.data, n.params.logger).catch(() => {});
    });
  }
  const id = `r${++routes}`;
  const entry = { log };
  const mine = table;
  mine.set(id, entry);
  return {
    id,
    to: (next) => {
      entry.log = next;
    },
    end: () => void mine.delete(id),
  };
}
