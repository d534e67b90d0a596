/**
 * The one seam between a participant and the bytes: a participant talks to its
 * space through a `Transport`, whether the frames travel over a WebSocket
 * (`participants/websocket.ts`) or stay inside the gateway process
 * (`gateway/inprocess.ts`, which implements the same shape structurally so that
 * `gateway/` never imports from `participants/`).
 */

/** How a connection ended: a WebSocket close code (1006 when it never opened or broke) and its reason. */
export interface CloseInfo {
  code: number;
  reason: string;
}

/**
 * One connection to a space. Used once: a reconnect makes a new transport.
 *
 * Contract:
 * - Install `onmessage` / `onclose` before calling `start()`.
 * - `start()` resolves once frames may be sent and rejects if the connection could not be
 *   opened. Either way, `onclose` is called exactly once after `start()`, when the
 *   connection ends or fails to open.
 * - `onmessage` receives one text frame (one envelope) per call, in order, never
 *   re-entrantly from inside `send()`.
 * - `send()` throws if the connection is not open; it never blocks.
 */
export interface Transport {
  start(): Promise<void>;
  send(text: string): void;
  close(code?: number, reason?: string): void;
  onmessage?: ((text: string) => void) | undefined;
  onclose?: ((info: CloseInfo) => void) | undefined;
  /** Out-of-band problems (socket errors); not necessarily fatal, `onclose` says when it is. */
  onerror?: ((error: Error) => void) | undefined;
  /** Bytes queued but not yet written, when the transport knows (WebSocket). */
  readonly bufferedAmount?: number;
}

/** Opens a fresh connection; called once per connection attempt (so once per reconnect). */
export type TransportFactory = () => Transport;
