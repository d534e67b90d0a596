/**
 * The participant side's public surface: named exports only. In-process
 * connections come from `gateway/inprocess.ts` (`connectInProcess`), since only code
 * inside the gateway process holds a `Space`.
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
} from "./client/index.js";
export { ParticipantError, RpcError, RpcErrorCodes, type ParticipantErrorCode, type ParticipantErrorDetails } from "./errors.js";
export type { CloseInfo, Transport, TransportFactory } from "./transport.js";
export { webSocketTransport, gatewayUrl, type WebSocketTransportOptions } from "./websocket.js";
export type { ParticipantInfo, ToolInfo, RpcId } from "./wire.js";
