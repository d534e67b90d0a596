/**
 * In-process connections: built-in participants (agents, the space-as-MCP-server, the
 * terminal) join a space without a socket.
 *
 * A connection here has the same shape as the participant SDK's `Transport`
 * (`participants/transport.ts`), written out again because `gateway/` never imports from
 * `participants/`; TypeScript's structural typing makes one usable as the other.
 *
 * It is trusted — no token — because only code inside the gateway process can reach a
 * `Space` object. It still goes through the space's whole inbound pipeline (schema, `from`,
 * capabilities, routing), so an in-process participant can do exactly what its
 * capabilities allow and nothing more.
 */
import { CloseCodes, ErrorCodes, errorEnvelope, type ErrorCode } from "../wire/envelope.js";
import type { Member, Peer, Space } from "./space.js";

/** The client end of an in-process connection (structurally a participant `Transport`). */
export interface InProcessConnection {
  /** Joins the space. Rejects (and calls `onclose`) when the participant is not in the space or the space has shut down. */
  start(): Promise<void>;
  /** Hands one frame to the space's inbound pipeline. Throws if the connection is not open. */
  send(text: string): void;
  /** Leaves the space. */
  close(code?: number, reason?: string): void;
  onmessage?: ((text: string) => void) | undefined;
  onclose?: ((info: { code: number; reason: string }) => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
}

export interface InProcessOptions {
  /** Send this participant its own envelopes back. */
  echo?: boolean;
}

/**
 * Opens an in-process connection of `participantId` to `space`. Nothing happens until
 * `start()`; take the space from `gateway.spaces.get(id)`.
 */
export function connectInProcess(space: Space, participantId: string, opts: InProcessOptions = {}): InProcessConnection {
  return new InProcessPeer(space, participantId, opts);
}

type State = "new" | "open" | "closing" | "closed";

class InProcessPeer implements InProcessConnection {
  onmessage?: ((text: string) => void) | undefined;
  onclose?: ((info: { code: number; reason: string }) => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  private state: State = "new";
  private member: Member | undefined;
  /** What the space sees: its own object, since `Peer.send` takes bytes and ours takes text. */
  private readonly peer: Peer = {
    send: (bytes, text) => this.deliver(bytes, text),
    close: (code, reason) => this.closedBySpace(code, reason),
  };

  constructor(
    private readonly space: Space,
    private readonly participantId: string,
    private readonly opts: InProcessOptions,
  ) {}

  async start(): Promise<void> {
    if (this.state !== "new") throw new Error("in-process connection already started");
    // A client that reconnects after shutdown must not re-join a space nobody routes for.
    if (this.space.closed) {
      this.end(CloseCodes.unknownSpace, `space "${this.space.id}" has shut down`);
      throw new Error(`space "${this.space.id}" has shut down`);
    }
    if (!this.space.config.participants[this.participantId]) {
      this.end(CloseCodes.unknownParticipant, `no participant "${this.participantId}" in space "${this.space.id}"`);
      throw new Error(`no participant "${this.participantId}" in space "${this.space.id}"`);
    }
    this.state = "open";
    // join() sends the welcome through send() below before it returns; delivery is
    // deferred, so the member is set by the time the client sees anything.
    try {
      this.member = this.space.join(this.participantId, this.peer, this.opts.echo === undefined ? {} : { echo: this.opts.echo });
    } catch (err) {
      this.end(CloseCodes.unknownParticipant, (err as Error).message);
      throw err;
    }
  }

  // --- client → space ----------------------------------------------------------------

  send(text: string): void {
    if (this.state !== "open" || !this.member) throw new Error("the connection is not open");
    const limit = this.space.config.gateway.limits.max_payload_bytes;
    // The same size rule as the WebSocket server; length is a cheap lower bound on bytes.
    if (text.length > limit || (text.length * 3 > limit && Buffer.byteLength(text) > limit)) {
      return this.reply(ErrorCodes.payloadTooLarge, `frame of ${Buffer.byteLength(text)} bytes exceeds the limit of ${limit} bytes`);
    }
    try {
      this.space.pipeline.handle(this.member, text);
    } catch {
      // As on the socket path: a bug costs one frame, not the caller.
      this.reply(ErrorCodes.internal, "the gateway failed to handle this frame");
    }
  }

  close(code = 1000, reason = "closed"): void {
    if (this.state === "new") {
      this.end(code, reason);
      return;
    }
    if (this.state !== "open") return;
    if (this.member) this.space.leave(this.member, "disconnected");
    this.end(code, reason);
  }

  // --- space → client (the Peer) ---------------------------------------------------------

  /**
   * Delivery is deferred to a microtask: the sender's `space.pipeline.handle()` returns before any
   * recipient runs, so an in-process participant answering from its handler never
   * re-enters the space mid-routing, and per-connection order is kept (microtasks are FIFO).
   * No byte cap is needed here, unlike a socket: the queue drains before the event loop
   * does anything else, so it holds at most what one synchronous burst produced.
   */
  private deliver(bytes: Buffer, text?: string): void {
    if (this.state !== "open") return;
    queueMicrotask(() => {
      if (this.state === "open" || this.state === "closing") this.onmessage?.(text ?? bytes.toString("utf8"));
    });
  }

  /**
   * The space closes us: replaced (4409), removed or its token revoked (4412), gateway
   * shutdown (1001). As a socket's end does, it leaves the space (a replaced member is left
   * alone there): a member closed by a reload would otherwise stay, its tools listed.
   */
  private closedBySpace(code: number, reason: string): void {
    if (this.state !== "open") return;
    if (this.member) this.space.leave(this.member, "closed by the space");
    this.end(code, reason);
  }

  /** Stops accepting, lets already queued deliveries run, then reports the close. */
  private end(code: number, reason: string): void {
    this.state = "closing";
    queueMicrotask(() => {
      this.state = "closed";
      this.onclose?.({ code, reason });
    });
  }

  private reply(code: ErrorCode, message: string): void {
    this.deliver(Buffer.from(JSON.stringify(errorEnvelope(this.participantId, code, message))));
  }
}
