/**
 * The participant client: one `ParticipantClient` (client.ts) composed of the connection
 * and its reconnects, outgoing calls and proposals, serving requests, and the dispatch of
 * what arrives. This index is the folder's surface: named exports only; the
 * pieces behind the facade are private to the folder. May import `gateway/envelope.ts` and
 * the participant side's transport, wire and error modules, nothing above them.
 */
export { ParticipantClient } from "./client.js";
export { backoffDelay } from "./connection.js";
export type {
  ApproveOptions,
  CallOptions,
  ClientCloseEvent,
  ClientEvents,
  ClientOptions,
  ClientStatus,
  IncomingNotification,
  IncomingRequest,
  NotificationHandler,
  OutboundEnvelope,
  PendingCall,
  PresenceEvent,
  ReconnectOptions,
  RequestHandler,
  TransportClientOptions,
  TypedCallOptions,
  WebSocketClientOptions,
  WelcomeInfo,
} from "./types.js";
