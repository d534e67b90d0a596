/**
 * An MCP SDK `Transport` that carries JSON-RPC inside envelopes, so an `McpServer` (or a
 * low-level `Server`) from `@modelcontextprotocol/sdk` can serve a space. Used by
 * `ParticipantClient.serveMcp()`; the client owns routing, this class only translates.
 *
 * JSON-RPC ids are local: every incoming request gets a fresh id before it reaches the
 * server, because two callers may both use id 1 and the SDK keys its handlers and
 * cancellations by id. Responses are mapped back to the request envelope (and so to the
 * caller's own id and address) by the client.
 *
 * There is no MCP `initialize` over a space: the gateway asks `tools/list` directly. The
 * SDK `Server` (1.x) does not require initialization before serving requests — it only
 * checks its own declared capabilities — so requests can be fed in as they come.
 */
import type { Transport as McpTransport, TransportSendOptions } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type RequestId,
} from "@modelcontextprotocol/sdk/types.js";
import { ParticipantError, RpcErrorCodes } from "./errors.js";

/** What the transport needs from the participant connection. */
export interface McpHost {
  /** Answers the request that arrived in envelope `requestEnvelopeId`. */
  respond(requestEnvelopeId: string, outcome: { result: unknown } | { error: { code: number; message: string; data?: unknown } }): void;
  /** A notification about that request (progress, logging) to its caller. */
  notifyCaller(requestEnvelopeId: string, method: string, params: unknown): void;
  /** A request from the server to the caller of that request (sampling, elicitation, ping). */
  requestCaller(requestEnvelopeId: string, method: string, params: unknown): Promise<unknown>;
  /** A notification not tied to a request: `notifications/…/list_changed` go to the gateway. */
  notifyUnrelated(method: string, params: unknown): void;
  /** The server closed its transport: stop routing to it. */
  detach(): void;
}

export class EnvelopeServerTransport implements McpTransport {
  onclose?: (() => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  onmessage?: (<T extends JSONRPCMessage>(message: T) => void) | undefined;
  private nextId = 1;
  /** Local JSON-RPC id → the request envelope it came in. */
  private readonly byLocal = new Map<RequestId, string>();
  private readonly byEnvelope = new Map<string, RequestId>();
  private closed = false;

  constructor(private readonly host: McpHost) {}

  async start(): Promise<void> {}

  /** An `mcp/request` addressed to us, with a JSON-RPC id. */
  deliverRequest(envelopeId: string, method: string, params: unknown): void {
    const id = this.nextId++;
    this.byLocal.set(id, envelopeId);
    this.byEnvelope.set(envelopeId, id);
    this.feed({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) } as JSONRPCMessage);
  }

  /** A notification addressed to us (other than a cancellation, see `cancel`). */
  deliverNotification(method: string, params: unknown): void {
    this.feed({ jsonrpc: "2.0", method, ...(params === undefined ? {} : { params }) } as JSONRPCMessage);
  }

  /** The caller cancelled, the gateway timed the call out, or we lost the connection. */
  cancel(envelopeId: string, reason: string): void {
    const id = this.byEnvelope.get(envelopeId);
    if (id === undefined) return;
    this.forget(id);
    this.feed({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason } });
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    if (this.closed) throw new Error("transport closed");
    if (isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) {
      const envelopeId = message.id === undefined ? undefined : this.byLocal.get(message.id);
      // Unknown: cancelled, or from before a reconnect; nobody waits for it any more.
      if (envelopeId === undefined) return;
      this.forget(message.id!);
      this.host.respond(envelopeId, isJSONRPCErrorResponse(message) ? { error: message.error } : { result: message.result });
      return;
    }
    const related = options?.relatedRequestId === undefined ? undefined : this.byLocal.get(options.relatedRequestId);
    if (isJSONRPCRequest(message)) {
      const serverId = message.id;
      if (related === undefined) {
        // A server-initiated request outside any call has no one to go to in a space.
        queueMicrotask(() =>
          this.feed({
            jsonrpc: "2.0",
            id: serverId,
            error: { code: RpcErrorCodes.internalError, message: `"${message.method}" can only be sent while serving a request` },
          }),
        );
        return;
      }
      this.host.requestCaller(related, message.method, message.params).then(
        (result) => this.feed({ jsonrpc: "2.0", id: serverId, result } as JSONRPCMessage),
        (err: unknown) => {
          const e = err instanceof ParticipantError ? err : undefined;
          const error = {
            code: e?.rpcCode ?? RpcErrorCodes.internalError,
            message: (err as Error).message,
            ...(e?.data === undefined ? {} : { data: e.data }),
          };
          this.feed({ jsonrpc: "2.0", id: serverId, error });
        },
      );
      return;
    }
    if (isJSONRPCNotification(message)) {
      if (related !== undefined) this.host.notifyCaller(related, message.method, message.params);
      else this.host.notifyUnrelated(message.method, message.params);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.byLocal.clear();
    this.byEnvelope.clear();
    this.host.detach();
    this.onclose?.();
  }

  private feed(message: JSONRPCMessage): void {
    if (!this.closed) this.onmessage?.(message);
  }

  private forget(id: RequestId): void {
    const envelopeId = this.byLocal.get(id);
    this.byLocal.delete(id);
    if (envelopeId !== undefined) this.byEnvelope.delete(envelopeId);
  }
}
