/**
 * `mewgate mcp` (and `--only`) at MCP 2026-07-28: one stdio connection is one revision,
 * chosen by its opening message. `OpeningTransport` reads stdin and holds what arrives until
 * someone starts it, so stdio.ts can look at the first message: an `initialize` (or anything
 * without the 2026-07-28 `_meta` envelope) opens a 2025-era session with the face as ever;
 * `server/discover` or an enveloped request opens 2026-07-28, served by the SDK v2's
 * `serveStdio` with the same factory the HTTP faces use (modern/modern.ts), over an in-process
 * client of a face that takes `input_required` as it came (held/input.ts). A held call at
 * 2026-07-28 over stdio waits in its request (the connection stays open), with progress.
 */
import type { Readable, Writable } from "node:stream";
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { loadModernModules, modernServerFactory } from "../modern/modern.js";
import { serveTaskMethod } from "../tasks/task-ext.js";
import type { SpaceMcpServer } from "../face/server.js";

/** A stdio transport whose messages wait, from the first, until it is started. */
export class OpeningTransport {
  onmessage?: (message: JSONRPCMessage) => void;
  onclose?: () => void;
  onerror?: (error: Error) => void;
  /** Sees each message before the SDK does; true takes it (the tasks extension's methods, which the SDK does not route). */
  intercept?: (message: JSONRPCMessage) => boolean;
  private readonly buffer = new ReadBuffer();
  private readonly held: JSONRPCMessage[] = [];
  private started = false;
  private closed = false;
  private firstArrived: ((m: JSONRPCMessage) => void) | undefined;
  readonly first: Promise<JSONRPCMessage>;

  constructor(
    private readonly stdin: Readable,
    private readonly stdout: Writable,
  ) {
    this.first = new Promise((resolve) => (this.firstArrived = resolve));
    stdin.on("data", this.ondata);
    stdin.on("error", this.onerr);
  }

  private readonly ondata = (chunk: Buffer) => {
    this.buffer.append(chunk);
    for (;;) {
      let message: JSONRPCMessage | null;
      try {
        message = this.buffer.readMessage();
      } catch (err) {
        this.onerror?.(err as Error);
        continue;
      }
      if (message === null) break;
      this.firstArrived?.(message);
      this.firstArrived = undefined;
      if (this.started) this.deliver(message);
      else this.held.push(message);
    }
  };

  private readonly onerr = (err: Error) => this.onerror?.(err);

  async start(): Promise<void> {
    this.started = true;
    for (const m of this.held.splice(0)) this.deliver(m);
  }

  private deliver(message: JSONRPCMessage): void {
    if (this.intercept?.(message)) return;
    this.onmessage?.(message);
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve) => {
      if (this.stdout.write(serializeMessage(message))) resolve();
      else this.stdout.once("drain", resolve);
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stdin.off("data", this.ondata);
    this.stdin.off("error", this.onerr);
    this.buffer.clear();
    this.onclose?.();
  }
}

/** Whether a connection's opening message asks for 2026-07-28 (the SDK's own classification of a body). */
export async function opensModern(message: JSONRPCMessage): Promise<boolean> {
  if (!("method" in message)) return false;
  if (message.method === "initialize") return false;
  const m = await loadModernModules();
  return m.v2.classifyInboundRequest({ httpMethod: "POST", body: message }).kind !== "legacy";
}

/** Serves the connection at 2026-07-28 through `face` (made with `takesInput`); resolves with a function that ends it. */
export async function serveModernStdio(face: SpaceMcpServer, transport: OpeningTransport): Promise<() => Promise<void>> {
  const m = await loadModernModules();
  const { serveStdio } = await import("@modelcontextprotocol/server/stdio");
  const [here, there] = m.InMemoryTransport.createLinkedPair();
  await face.connect(there);
  const inner = new m.Client({ name: "mewgate-2026-07-28", version: "1.0.0" }, { capabilities: {} });
  await inner.connect(here);
  // The connection's one server instance: the face's list changes go out through it to the
  // connection's listen streams, which the SDK's stdio entry filters and stamps.
  const make = modernServerFactory(m, inner, undefined, { tasks: true });
  // tasks/* of the tasks extension, answered before the SDK (tasks/task-ext.ts); stdio has no Mcp-* headers to check.
  transport.intercept = (message) => {
    const method = (message as { method?: unknown }).method;
    if (typeof method !== "string" || !method.startsWith("tasks/") || !("id" in message)) return false;
    const taskId = (message as { params?: { taskId?: unknown } }).params?.taskId;
    const header = (name: string) =>
      name === "mcp-method" ? method : name === "mcp-name" && typeof taskId === "string" ? taskId : undefined;
    void serveTaskMethod(m, inner, undefined, message, header).then((w) => (w ? transport.send(w.body as never) : undefined));
    return true;
  };
  let instance: ReturnType<typeof make> | undefined;
  const tell = (send: (s: ReturnType<typeof make>) => Promise<void>) => () => {
    if (instance) void send(instance).catch(() => {});
  };
  inner.setNotificationHandler(
    m.listen.ToolListChangedNotificationSchema as never,
    tell((s) => s.sendToolListChanged()),
  );
  inner.setNotificationHandler(
    m.listen.PromptListChangedNotificationSchema as never,
    tell((s) => s.sendPromptListChanged()),
  );
  inner.setNotificationHandler(
    m.listen.ResourceListChangedNotificationSchema as never,
    tell((s) => s.sendResourceListChanged()),
  );
  const handle = serveStdio((() => (instance = make())) as never, { legacy: "reject", transport: transport as never });
  return async () => {
    await handle.close().catch(() => {});
    await inner.close().catch(() => {});
  };
}
