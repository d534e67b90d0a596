/**
 * The participant client: one `ParticipantClient` (client.ts) composed of the connection
 * and its reconnects, outgoing calls and proposals, serving requests, and the dispatch of
 * what arrives. This index is the folder's surface: named exports only (STYLE #11); the
 * pieces behind the facade are private to the folder. May import `gateway/envelope.ts` and
 * the participant side's transport, wire and error modules, nothing above them.
 */
export {
  ParticipantClient,
  backoffDelay,
  type ApproveOptions,
  type CallOptions,
  type ClientCloseEvent,
  type ClientEvents,
  type ClientOptions,
  type ClientStatus,
  type IncomingNotification,
  type IncomingRequest,
  type NotificationHandler,
  type OutboundEnvelope,
  type PendingCall,
  type PresenceEvent,
  type ReconnectOptions,
  type RequestHandler,
  type TransportClientOptions,
  type TypedCallOptions,
  type WebSocketClientOptions,
  type WelcomeInfo,
} from "./client.js";
