/**
 * Load clients. The same code drives the gateway and the naive forwarder; the only
 * difference is that a gateway connection is ready after its `system/welcome`, a naive
 * one as soon as it is open.
 */
import type { Socket } from "node:net";
import { WebSocket } from "ws";
import type { ServerKind } from "./procs.js";

export const SPACE = "bench";

export interface Target {
  kind: ServerKind;
  /** `ws://127.0.0.1:PORT` */
  base: string;
}

/** Tokens are written into the bench space.yaml, so every client knows its own. */
export function tokenFor(id: string): string {
  return `bench-token-${id}`;
}

const TEXT = { binary: false } as const;

/** One connected participant. Counts every frame; `onFrame` is set per scenario. */
export class Client {
  received = 0;
  onFrame: ((data: Buffer) => void) | undefined;
  closed = false;
  readonly closedAt: Promise<void>;

  constructor(
    readonly id: string,
    readonly ws: WebSocket,
  ) {
    ws.on("message", (data) => {
      this.received++;
      this.onFrame?.(data as Buffer);
    });
    ws.on("error", () => {});
    this.closedAt = new Promise((resolve) =>
      ws.once("close", () => {
        this.closed = true;
        resolve();
      }),
    );
  }

  send(frame: Buffer | string): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(frame, TEXT);
  }

  /** Stops reading from the socket: the kernel buffers fill, then the server's. */
  pauseReading(): void {
    (this.ws as unknown as { _socket: Socket })._socket.pause();
  }

  terminate(): void {
    this.ws.terminate();
  }
}

/** Connects as participant `id` and resolves once the connection is ready to use. */
export function join(target: Target, id: string, timeoutMs = 10_000): Promise<Client> {
  const ws = new WebSocket(`${target.base}/ws?space=${SPACE}`, {
    headers: { authorization: `Bearer ${tokenFor(id)}` },
    perMessageDeflate: false,
    // The load clients count frames; validating UTF-8 would only spend the client's core.
    skipUTF8Validation: true,
  });
  const client = new Client(id, ws);
  return new Promise<Client>((resolve, reject) => {
    const done = (err?: Error) => {
      clearTimeout(timer);
      ws.off("open", onOpen);
      ws.off("message", onMessage);
      ws.off("close", onClose);
      ws.off("error", onError);
      if (err) {
        ws.terminate();
        reject(err);
      } else {
        resolve(client);
      }
    };
    const timer = setTimeout(() => done(new Error(`${id}: not ready within ${timeoutMs} ms`)), timeoutMs);
    const onOpen = () => {
      if (target.kind !== "gateway") done();
    };
    const onMessage = (data: Buffer) => {
      if (target.kind !== "gateway") return;
      // The first frame must be the welcome; anything else means the bench is misconfigured.
      if (data.includes('"system/welcome"')) done();
      else done(new Error(`${id}: first frame was not system/welcome: ${data.toString("utf8", 0, 200)}`));
    };
    const onClose = (code: number, reason: Buffer) => done(new Error(`${id}: closed ${code} ${reason.toString()}`));
    const onError = (err: Error) => done(new Error(`${id}: ${err.message}`));
    ws.on("open", onOpen);
    ws.on("message", onMessage);
    ws.on("close", onClose);
    ws.on("error", onError);
  });
}

/**
 * Joins the ids in order with at most `concurrency` handshakes in flight. Fails on the
 * first failure. Past `deadline` (a performance.now() time) no new join is started; the
 * ones in flight finish, and the clients joined so far are returned.
 */
export async function joinMany(
  target: Target,
  ids: readonly string[],
  concurrency: number,
  opts: { deadline?: number; timeoutMs?: number } = {},
): Promise<Client[]> {
  const clients: Client[] = [];
  let next = 0;
  let failed: Error | undefined;
  const deadline = opts.deadline ?? Infinity;
  const worker = async () => {
    while (next < ids.length && !failed && performance.now() < deadline) {
      const id = ids[next++]!;
      try {
        clients.push(await join(target, id, opts.timeoutMs));
      } catch (err) {
        failed ??= err as Error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, worker));
  if (failed) {
    for (const c of clients) c.terminate();
    throw failed;
  }
  return clients;
}

/**
 * Waits until no client has received a frame for `quietMs` (e.g. presence after joins),
 * at most `maxMs`. Returns whether it went quiet.
 */
export async function quiet(clients: readonly { received: number }[], quietMs: number, maxMs: number): Promise<boolean> {
  const total = () => clients.reduce((n, c) => n + c.received, 0);
  const deadline = performance.now() + maxMs;
  let last = total();
  let since = performance.now();
  while (performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, Math.min(50, quietMs)));
    const now = total();
    if (now !== last) {
      last = now;
      since = performance.now();
    } else if (performance.now() - since >= quietMs) {
      return true;
    }
  }
  return false;
}

/** Terminates every client and waits (bounded) until the sockets are closed. */
export async function closeAll(clients: readonly { terminate(): void; closedAt: Promise<void> }[], maxMs = 5000): Promise<void> {
  for (const c of clients) c.terminate();
  await Promise.race([Promise.all(clients.map((c) => c.closedAt)), new Promise((r) => setTimeout(r, maxMs))]);
}
