/** The WebSocket close codes the gateway ends a connection with: part of the wire protocol, each documented in docs/protocol.md. */
export const CloseCodes = {
  goingAway: 1001,
  /** The space moved to another node of a cluster (or is between owners): reconnect. */
  moved: 1012,
  tryAgain: 1013,
  badRequest: 4400,
  unauthorized: 4401,
  identityMismatch: 4403,
  unknownSpace: 4404,
  unknownParticipant: 4406,
  joinTimeout: 4408,
  replaced: 4409,
  /** The participant's token expired (at join, or while connected). */
  tokenExpired: 4411,
  /** The participant's token is no longer accepted: revoked, rotated past its grace, or removed (with the participant) by a reload. */
  tokenRevoked: 4412,
  /** An operator ended the session (`DELETE /api/spaces/<space>/sessions/<id>`, `mewgate sessions end`). */
  sessionEnded: 4413,
  flood: 4429,
  slowConsumer: 4503,
} as const;
