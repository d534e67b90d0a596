/**
 * `subscriptions/listen` at MCP 2026-07-28: the changes a seat sees, on the streams its
 * clients hold open. There are no sessions at 2026-07-28, so list changes and resource
 * updates reach a client only on such a stream.
 *
 * One `ListenFeed` per seat and path, beside its in-process client of the face (modern.ts):
 * what the face tells that client (the seat's tools, prompts or resources changed: a grant,
 * a switch, the server's own change; a subscribed resource updated) is published on a bus
 * the SDK v2's listen streams read, each stream filtered by what its request asked for and
 * stamped with its subscription id by the SDK. The face already sends a seat only the
 * changes of what that seat sees, so a stream never carries another seat's.
 *
 * A stream's `resourceSubscriptions` subscribe the face (and through it the server, as the
 * seat, under its policy) for the stream's life, counted per URI across the seat's streams:
 * the last stream to let a URI go unsubscribes it. Bounded: at most `MAX_STREAMS` open
 * streams per seat and path, `MAX_URIS` URIs per stream, each at most `MAX_URI` characters.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { ServerEventBus } from "@modelcontextprotocol/server";

/** Open listen streams per seat and path: enough for a client per window, few enough that a flood cannot pin memory. */
export const MAX_STREAMS = 16;
/** URIs one stream may subscribe to. */
export const MAX_URIS = 256;
/** The longest URI a stream may subscribe to. */
export const MAX_URI = 2048;

/** The notification schemas of the face's SDK the feed listens for (loaded with the face's other modules). */
export interface ListenSchemas {
  ToolListChangedNotificationSchema: unknown;
  PromptListChangedNotificationSchema: unknown;
  ResourceListChangedNotificationSchema: unknown;
  ResourceUpdatedNotificationSchema: unknown;
}

/** Why a listen request is refused before it is served, if it is. */
export type ListenRefusal = { code: number; message: string };

export class ListenFeed {
  private readonly held = new Map<string, number>();
  private readonly enders = new Set<() => void>();
  private streams = 0;
  private ended = false;

  constructor(
    readonly bus: ServerEventBus,
    private readonly client: Client,
    schemas: ListenSchemas,
  ) {
    const on = (schema: unknown, publish: (n: { params?: Record<string, unknown> }) => void) =>
      client.setNotificationHandler(schema as never, publish as never);
    on(schemas.ToolListChangedNotificationSchema, () => bus.publish({ kind: "tools_list_changed" }));
    on(schemas.PromptListChangedNotificationSchema, () => bus.publish({ kind: "prompts_list_changed" }));
    on(schemas.ResourceListChangedNotificationSchema, () => bus.publish({ kind: "resources_list_changed" }));
    on(schemas.ResourceUpdatedNotificationSchema, (n) => {
      const uri = n.params?.["uri"];
      if (typeof uri === "string") bus.publish({ kind: "resource_updated", uri });
    });
  }

  /**
   * Opens one stream's hold: its URIs subscribed (each through the face, once for all the
   * seat's streams). Resolves with what releases it, or with why the stream is refused (too
   * many streams, a bad URI list, a URI the face would not subscribe to) — nothing held then.
   */
  async open(params: unknown): Promise<{ release: () => void } | ListenRefusal> {
    if (this.ended) return { code: -32603, message: "the seat's connection to the space has ended" };
    if (this.streams >= MAX_STREAMS)
      return { code: -32603, message: `Subscription limit reached: at most ${MAX_STREAMS} open subscriptions/listen streams per seat` };
    const uris = requestedUris(params);
    if (typeof uris === "string") return { code: -32602, message: `Invalid params: ${uris}` };
    this.streams++;
    const subscribed: string[] = [];
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.streams--;
      for (const uri of subscribed) this.let(uri);
    };
    for (const uri of uris) {
      const n = this.held.get(uri) ?? 0;
      if (n === 0) {
        try {
          await this.client.subscribeResource({ uri });
        } catch (err) {
          release();
          return { code: -32602, message: `Invalid params: cannot subscribe to ${clipUri(uri)}: ${(err as Error).message}` };
        }
      }
      this.held.set(uri, (this.held.get(uri) ?? 0) + 1);
      subscribed.push(uri);
    }
    return { release };
  }

  /** Registers what ends a stream when the seat's connection ends; returns what unregisters it. */
  onEnd(end: () => void): () => void {
    if (this.ended) {
      end();
      return () => {};
    }
    this.enders.add(end);
    return () => this.enders.delete(end);
  }

  /** The seat's connection ended: every open stream ends. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const end of [...this.enders]) end();
    this.enders.clear();
  }

  /** Open streams now (for tests and figures). */
  get openStreams(): number {
    return this.streams;
  }

  private let(uri: string): void {
    const n = (this.held.get(uri) ?? 1) - 1;
    if (n > 0) {
      this.held.set(uri, n);
      return;
    }
    this.held.delete(uri);
    if (!this.ended) void this.client.unsubscribeResource({ uri }).catch(() => {});
  }
}

/** The URIs a listen request asks updates of (none when it asks none), or why they are refused. */
function requestedUris(params: unknown): string[] | string {
  const filter = (params as { notifications?: { resourceSubscriptions?: unknown } } | undefined)?.notifications;
  const list = filter?.resourceSubscriptions;
  if (list === undefined) return [];
  if (!Array.isArray(list)) return "notifications.resourceSubscriptions must be a list of URIs";
  if (list.length > MAX_URIS) return `at most ${MAX_URIS} resourceSubscriptions per stream (${list.length} given)`;
  const out = new Set<string>();
  for (const uri of list) {
    if (typeof uri !== "string" || uri.length === 0) return "each of notifications.resourceSubscriptions must be a non-empty string";
    if (uri.length > MAX_URI) return `a resource URI of ${uri.length} characters is longer than ${MAX_URI}`;
    if (/[\u0000-\u001f\u007f]/.test(uri)) return "a resource URI holds a control character";
    out.add(uri);
  }
  return [...out];
}

function clipUri(uri: string): string {
  return JSON.stringify(uri.length > 200 ? `${uri.slice(0, 200)}…` : uri);
}
