/**
 * What the space asks of a `mewgate mcp` participant, answered by its MCP client: a tool
 * server that the client called asks for a form (elicitation) or a completion (sampling)
 * about that call, or for the client's roots.
 *
 * One participant may have several MCP sessions (the HTTP endpoint shares one
 * `ParticipantClient` among the sessions of one token), so the requests of the space are
 * taken in one place per client — the desk — and handed to the session whose call they
 * are about (by `correlation_id`). Roots are not about a call: the session that most
 * recently said it has roots answers. Resource subscriptions are counted here across
 * sessions, so one session's unsubscribe does not end another's updates.
 */
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import { ErrorCode, McpError, type ServerNotification, type ServerRequest } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import type { IncomingRequest, ParticipantClient } from "../../client.js";
import { RpcError } from "../../errors.js";

/** One MCP session, as the desk sees it. */
export interface Session {
  /** Whether one of `ids` is the envelope id of a call this session made and still waits on. */
  made(ids: readonly string[]): string | undefined;
  /** Whether its MCP client declared the capability `method` needs. */
  offers(method: string): boolean;
  /** Asks its MCP client. `about`: the call it concerns, if any. */
  ask(req: IncomingRequest, about: string | undefined): Promise<unknown>;
}

const CLIENT_METHODS: Readonly<Record<string, string>> = {
  "sampling/createMessage": "sampling",
  "elicitation/create": "elicitation",
  "roots/list": "roots",
};

export class Desk {
  private readonly sessions: Session[] = [];
  /** Resource URI → sessions subscribed to it. */
  private readonly subscribed = new Map<string, Set<Session>>();

  constructor(private readonly client: ParticipantClient) {
    client.onRequest((req) => this.handle(req));
  }

  /** Adds a session; returns the function that removes it (and its subscriptions: the URIs nobody holds any more). */
  add(session: Session): () => string[] {
    this.sessions.push(session);
    return () => {
      const i = this.sessions.indexOf(session);
      if (i >= 0) this.sessions.splice(i, 1);
      const dropped: string[] = [];
      for (const uri of [...this.subscribed.keys()]) if (this.unsubscribe(session, uri)) dropped.push(uri);
      return dropped;
    };
  }

  /** Records a subscription; true when it is the first for `uri` (ask the owner). */
  subscribe(session: Session, uri: string): boolean {
    let subs = this.subscribed.get(uri);
    const first = subs === undefined;
    if (!subs) {
      subs = new Set();
      this.subscribed.set(uri, subs);
    }
    subs.add(session);
    return first;
  }

  /** Drops a subscription; true when nobody holds `uri` any more (tell the owner). */
  unsubscribe(session: Session, uri: string): boolean {
    const subs = this.subscribed.get(uri);
    if (!subs?.delete(session) || subs.size > 0) return false;
    this.subscribed.delete(uri);
    return true;
  }

  subscribers(uri: string): readonly Session[] {
    return [...(this.subscribed.get(uri) ?? [])];
  }

  private async handle(req: IncomingRequest): Promise<unknown> {
    if (req.method === "ping") return {};
    const capability = CLIENT_METHODS[req.method];
    if (capability === undefined)
      throw new RpcError(
        ErrorCode.MethodNotFound,
        `"${this.client.id}" is an MCP client's seat in the space; it answers ${Object.keys(CLIENT_METHODS).join(", ")} and ping, not ${req.method}`,
      );
    const ids = req.envelope.correlation_id ?? [];
    let session: Session | undefined;
    let about: string | undefined;
    for (const s of this.sessions) {
      about = s.made(ids);
      if (about !== undefined) {
        session = s;
        break;
      }
    }
    if (!session && req.method === "roots/list") session = [...this.sessions].reverse().find((s) => s.offers("roots/list"));
    // A link for this person about no call (a sign-in card): to a session whose client takes URL elicitation, else it
    // waits, in the person's inbox (`GET requests`, the web console), to be answered there.
    if (!session && req.method === "elicitation/create" && isUrlMode(req.params)) {
      session = [...this.sessions].reverse().find((s) => s.offers("elicitation/create#url"));
      if (!session) return answeredElsewhere(req);
    }
    if (!session)
      throw new RpcError(
        ErrorCode.InvalidRequest,
        `${req.method} to "${this.client.id}" is not about a call any of its MCP sessions is waiting on`,
      );
    if (!session.offers(req.method))
      throw new RpcError(ErrorCode.MethodNotFound, `the MCP client of "${this.client.id}" does not support ${capability}`);
    return session.ask(req, about);
  }
}

function isUrlMode(params: unknown): boolean {
  return typeof params === "object" && params !== null && (params as { mode?: unknown }).mode === "url";
}

/** Longest a card waits here for its person to answer it elsewhere, unless its asker says (the gateway bounds that too). */
const ELSEWHERE_MS = 300_000;

/** A card left for its person to answer at the console: no answer from here; it ends when its asker or the gateway ends it. */
function answeredElsewhere(req: IncomingRequest): Promise<unknown> {
  const meta = (req.params as { _meta?: Record<string, unknown> } | undefined)?._meta;
  const asked = meta?.["mewgate/timeout_ms"];
  const ms = typeof asked === "number" && asked > 0 && asked < ELSEWHERE_MS ? asked : ELSEWHERE_MS;
  return new Promise((_, reject) => {
    const done = () => {
      clearTimeout(timer);
      reject(new RpcError(ErrorCode.InvalidRequest, "the card was not answered"));
    };
    const timer = setTimeout(done, ms);
    timer.unref();
    req.signal.addEventListener("abort", done, { once: true });
  });
}

const desks = new WeakMap<ParticipantClient, Desk>();

/** The desk of `client`, made on first use (it serves the client's requests from then on). */
export function deskOf(client: ParticipantClient): Desk {
  let desk = desks.get(client);
  if (!desk) {
    desk = new Desk(client);
    desks.set(client, desk);
  }
  return desk;
}

/** How long the MCP client gets to answer a form or a completion a tool server asked for, unless the asker says. */
const DEFAULT_CALLBACK_TIMEOUT_MS = 600_000;

/**
 * Puts what a tool server asks to the MCP client of `server`: `related` is the MCP request
 * (the tool call) it is about, whose stream carries it over streamable HTTP; `only` the
 * participant served as itself, whose forms keep its own words.
 */
export async function askClient(
  server: Server,
  req: IncomingRequest,
  related: RequestHandlerExtra<ServerRequest, ServerNotification> | undefined,
  only: string | undefined,
  log: Logger | undefined,
): Promise<unknown> {
  try {
    return await askClientOnce(server, req, related, only, log);
  } catch (err) {
    // The client's refusal goes on in its own words: the SDK's "MCP error <code>: " prefix
    // would otherwise be prefixed again by the tool server's SDK ("MCP error -32602: MCP error -32602: …").
    if (err instanceof McpError) throw new RpcError(err.code, unprefixed(err), err.data);
    throw err;
  }
}

/** An SDK error's message without the prefix the SDK put before the sender's words. */
export function unprefixed(err: McpError): string {
  const prefix = `MCP error ${err.code}: `;
  return err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
}

function askClientOnce(
  server: Server,
  req: IncomingRequest,
  related: RequestHandlerExtra<ServerRequest, ServerNotification> | undefined,
  only: string | undefined,
  log: Logger | undefined,
): Promise<unknown> {
  const params = { ...(req.params as Record<string, unknown>) };
  const meta = typeof params["_meta"] === "object" && params["_meta"] !== null ? { ...(params["_meta"] as Record<string, unknown>) } : {};
  const asked = meta["mewgate/timeout_ms"];
  const forMeta = meta["mewgate/for"];
  const tool = typeof forMeta === "object" && forMeta !== null ? (forMeta as Record<string, unknown>)["tool"] : undefined;
  for (const key of Object.keys(meta)) if (key.startsWith("mewgate/")) delete meta[key];
  if (Object.keys(meta).length > 0) params["_meta"] = meta;
  else delete params["_meta"];
  const options = {
    signal: req.signal,
    timeout: typeof asked === "number" && asked > 0 ? asked : DEFAULT_CALLBACK_TIMEOUT_MS,
    // Over streamable HTTP it goes out on the stream of the tool call it is about.
    ...(related ? { relatedRequestId: related.requestId } : {}),
  };
  log?.info({ method: req.method, from: req.from }, "a tool server asks the MCP client");
  switch (req.method) {
    case "elicitation/create":
      // Whoever reads the form should know which tool server asks.
      // Who asks is the sender the gateway stamped; the tool it names is its own word, shown as context.
      // Serving one participant as itself, the client knows who asks: the server's own words.
      if (typeof params["message"] === "string" && req.from !== only) {
        const context = typeof tool === "string" ? ` (${tool.replace(/[\u0000-\u001f\u007f-\u009f]/g, "").slice(0, 200)})` : "";
        params["message"] = `${req.from} asks${context}: ${params["message"]}`;
      }
      return server.elicitInput(params as never, options);
    case "sampling/createMessage":
      return server.createMessage(params as never, options);
    default:
      return server.listRoots(undefined, options);
  }
}
