/**
 * What the MCP server tells the space outside any call: `tools/list_changed` to the
 * registry (which lists the tools again) and to everyone (a face serving the server as
 * itself passes it on), `resources/` and `prompts/list_changed` to everyone, resource updates to the participants subscribed through this bridge, and its
 * log lines and finished URL flows to the caller they are about. Owns those resource
 * subscriptions: who holds which, renewed at a restarted server, dropped when the last
 * holder leaves.
 *
 * Split from bridge.ts, which routes presence and welcomes here.
 */
import type { Notification } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import type { IncomingRequest, ParticipantClient } from "../client.js";
import { soleCaller } from "./callbacks.js";
import { LogListeners } from "./log-listeners.js";
import { AnyResult, type Upstream } from "./server.js";
import { isRecord } from "../../gateway/index.js";

/** What the notifications need of the bridge. */
export interface NotificationHost {
  readonly participant: ParticipantClient;
  readonly log: Logger | undefined;
  /** The server's current run, if any. */
  readonly upstream: Upstream | undefined;
}

/** Sends to the space, logging (not throwing) when the connection cannot take it. */
export function trySend(log: Logger | undefined, send: () => unknown): void {
  try {
    send();
  } catch (err) {
    log?.debug({ err: (err as Error).message }, "could not send");
  }
}

export class ServerNotifications {
  /** Resource URI → participants subscribed to it through us. */
  private readonly subscribers = new Map<string, Set<string>>();
  /** Who asked for the server's log lines sent outside a call (`logging/setLevel`). */
  readonly logListeners = new LogListeners();

  constructor(private readonly host: NotificationHost) {}

  /** A notification from the server, outside any call of its own. */
  onNotification(up: Upstream, n: Notification): void {
    if (up.lost) return;
    switch (n.method) {
      case "notifications/tools/list_changed":
        if (this.host.participant.status !== "open") return;
        // The gateway lists the tools again (and tells the space if the catalogue changed); a
        // face serving this server as itself (/mcp/<participant>) passes on the server's own word.
        this.host.participant.announceTools();
        trySend(this.host.log, () => this.host.participant.notify(undefined, n.method, n.params));
        return;
      case "notifications/resources/list_changed":
      case "notifications/prompts/list_changed":
        // Nobody in the space keeps a catalogue of these; whoever cares hears it.
        if (this.host.participant.status === "open")
          trySend(this.host.log, () => this.host.participant.notify(undefined, n.method, n.params));
        return;
      case "notifications/resources/updated": {
        const uri = isRecord(n.params) ? n.params["uri"] : undefined;
        for (const who of (typeof uri === "string" ? this.subscribers.get(uri) : undefined) ?? []) {
          trySend(this.host.log, () => this.host.participant.notify(who, n.method, n.params));
        }
        return;
      }
      case "notifications/message":
      case "notifications/elicitation/complete": {
        if (n.method === "notifications/message") {
          const p = isRecord(n.params) ? n.params : {};
          const level = LOG_LEVELS[String(p["level"])] ?? "info";
          this.host.log?.[level]({ stream: "mcp-log", logger: p["logger"], data: p["data"] }, "MCP server log message");
        }
        // During someone's calls it is about them (a log line, a URL flow they finished):
        // they hear it, and a space server passes it to its MCP client.
        const found = soleCaller([...up.inflight]);
        if ("caller" in found && this.host.participant.status === "open") {
          const correlationId = found.calls.map((c) => c.req.envelope.id);
          trySend(this.host.log, () => this.host.participant.notify(found.caller, n.method, n.params, { correlationId }));
        } else if (n.method === "notifications/message" && up.inflight.size === 0 && this.host.participant.status === "open") {
          // Outside any call: whoever asked for the server's log (log-listeners.ts).
          const level = isRecord(n.params) ? n.params["level"] : undefined;
          for (const who of this.logListeners.for(level))
            trySend(this.host.log, () => this.host.participant.notify(who, n.method, n.params));
        }
        return;
      }
      default:
        this.host.log?.debug({ method: n.method }, "notification from the MCP server; not forwarded");
    }
  }

  /** A `resources/subscribe` the server accepted: the caller hears that resource's updates. */
  subscribed(req: IncomingRequest): void {
    const uri = isRecord(req.params) ? req.params["uri"] : undefined;
    if (typeof uri !== "string") return;
    let subs = this.subscribers.get(uri);
    if (!subs) {
      subs = new Set();
      this.subscribers.set(uri, subs);
    }
    subs.add(req.from);
  }

  /** A participant left: its subscriptions end, and the server's too when nobody else holds them. */
  dropSubscriber(who: string): void {
    this.logListeners.drop(who);
    for (const [uri, subs] of this.subscribers) {
      if (!subs.delete(who) || subs.size > 0) continue;
      this.subscribers.delete(uri);
      const up = this.host.upstream;
      if (up?.ready && !up.lost) up.client.request({ method: "resources/unsubscribe", params: { uri } }, AnyResult).catch(() => {});
    }
  }

  /**
   * A `resources/unsubscribe` from a participant: true when others still hold the
   * subscription, so the server's stays and the caller is answered here.
   */
  release(req: IncomingRequest): boolean {
    const uri = isRecord(req.params) ? req.params["uri"] : undefined;
    const subs = typeof uri === "string" ? this.subscribers.get(uri) : undefined;
    subs?.delete(req.from);
    // Others still want updates: the server's subscription stays.
    if (subs && subs.size > 0) return true;
    if (typeof uri === "string") this.subscribers.delete(uri);
    return false;
  }

  /** After a gateway restart: whoever left meanwhile will not be announced as leaving. */
  dropAbsent(present: ReadonlySet<string>): void {
    const gone = new Set([...this.subscribers.values()].flatMap((subs) => [...subs].filter((who) => !present.has(who))));
    for (const who of gone) this.dropSubscriber(who);
  }

  /** A new run of the server: the subscriptions held through us are made again. */
  renew(up: Upstream): void {
    for (const uri of this.subscribers.keys()) {
      up.client
        .request({ method: "resources/subscribe", params: { uri } }, AnyResult)
        .catch((err: Error) => this.host.log?.warn({ uri, err: err.message }, "could not renew a resource subscription"));
    }
  }
}

const LOG_LEVELS: Record<string, "debug" | "info" | "warn" | "error"> = {
  debug: "debug",
  info: "info",
  notice: "info",
  warning: "warn",
  error: "error",
  critical: "error",
  alert: "error",
  emergency: "error",
};
