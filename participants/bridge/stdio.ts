/**
 * An MCP SDK client `Transport` over a child process's stdin/stdout, for the bridge.
 *
 * The SDK's own `StdioClientTransport` would do for talking, but it drops what the bridge
 * has to tell a caller whose call died with the server: the exit code and the signal. It
 * also reports the end only when every stdio stream of the child has closed, which a
 * grandchild holding stdout (a wrapper script) can delay forever. This one keeps the exit,
 * reports the end shortly after the process exits whatever its streams do, and splits
 * stderr into lines for the log. Framing is the SDK's (`ReadBuffer`, `serializeMessage`),
 * and the environment starts from the SDK's `getDefaultEnvironment()` as theirs does.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { StringDecoder } from "node:string_decoder";
import { getDefaultEnvironment } from "@modelcontextprotocol/client/stdio";
import { type JSONRPCMessage, ReadBuffer, serializeMessage, type Transport } from "@modelcontextprotocol/client";

export interface ChildStdioOptions {
  command: string;
  args?: string[] | undefined;
  /** Merged over the SDK's safe default environment (HOME, PATH, USER, …), never over all of ours. */
  env?: Record<string, string> | undefined;
  cwd?: string | undefined;
  /** One call per stderr line (without the newline); long lines are cut at `maxLineChars`. */
  onStderrLine?: ((line: string) => void) | undefined;
  maxLineChars?: number | undefined;
}

/** How the process ended. `error` is set when it could not be spawned at all. */
export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  error?: Error | undefined;
}

/** Once the process has exited, its remaining output gets this long to arrive before we report the end. */
const EXIT_GRACE_MS = 200;
/** `close()`: time to exit after stdin is closed, then after SIGTERM, before SIGKILL. */
const STDIN_GRACE_MS = 500;
const TERM_GRACE_MS = 2000;

export class ChildStdioTransport implements Transport {
  onclose?: (() => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  onmessage?: (<T extends JSONRPCMessage>(message: T) => void) | undefined;

  /** Set when the process has exited (or failed to spawn). */
  exit: ChildExit | undefined;
  /** The protocol version the `Client` negotiated (it tells transports that have this setter). */
  protocolVersion: string | undefined;

  private child: ChildProcess | undefined;
  private readonly readBuffer = new ReadBuffer();
  private readonly stderrDecoder = new StringDecoder("utf8");
  private stderrRest = "";
  private finished = false;
  private readonly inbox: JSONRPCMessage[] = [];
  private delivering = false;
  private exited: Promise<void> | undefined;

  constructor(private readonly opts: ChildStdioOptions) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  setProtocolVersion(version: string): void {
    this.protocolVersion = version;
  }

  start(): Promise<void> {
    if (this.child) throw new Error("ChildStdioTransport already started");
    const child = spawn(this.opts.command, this.opts.args ?? [], {
      env: { ...getDefaultEnvironment(), ...this.opts.env },
      cwd: this.opts.cwd,
      stdio: ["pipe", "pipe", "pipe"],
      shell: false,
      windowsHide: true,
    });
    this.child = child;
    this.exited = new Promise((resolve) => child.once("exit", () => resolve()));
    return new Promise((resolve, reject) => {
      let spawned = false;
      child.once("spawn", () => {
        spawned = true;
        resolve();
      });
      child.on("error", (err) => {
        if (!spawned) {
          // ENOENT, EACCES: there will be no exit event.
          this.exit = { code: null, signal: null, error: err };
          reject(err);
          this.finish();
        } else {
          this.onerror?.(err);
        }
      });
      child.once("exit", (code, signal) => {
        this.exit = { code, signal };
        setTimeout(() => this.finish(), EXIT_GRACE_MS).unref();
      });
      child.once("close", () => this.finish());
      child.stdin!.on("error", (err) => this.onerror?.(err)); // EPIPE after the child died
      child.stdout!.on("data", (chunk: Buffer) => {
        try {
          this.readBuffer.append(chunk);
        } catch (err) {
          // One message over the buffer limit (10 MB): the stream cannot be resynchronised.
          this.onerror?.(err as Error);
          child.kill("SIGKILL");
          return;
        }
        for (;;) {
          let message: JSONRPCMessage | null;
          try {
            message = this.readBuffer.readMessage();
          } catch (err) {
            // A line on stdout that is not JSON-RPC (a server logging to stdout): skip it.
            this.onerror?.(err as Error);
            continue;
          }
          if (message === null) break;
          this.inbox.push(message);
        }
        void this.deliver();
      });
      child.stdout!.on("error", (err) => this.onerror?.(err));
      child.stderr!.on("data", (chunk: Buffer) => this.stderr(this.stderrDecoder.write(chunk)));
      child.stderr!.on("error", () => {});
    });
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin;
    if (!stdin || this.finished || !stdin.writable) throw new Error("not connected: the MCP server process is not running");
    if (stdin.write(serializeMessage(message))) return;
    // Wait for the pipe to drain, or for it to close (the child died): never forever.
    await new Promise<void>((resolve) => {
      const done = () => {
        stdin.off("drain", done);
        stdin.off("close", done);
        resolve();
      };
      stdin.on("drain", done);
      stdin.on("close", done);
    });
  }

  /** Closes stdin (the MCP way to ask a stdio server to exit), then escalates to SIGTERM and SIGKILL. */
  async close(): Promise<void> {
    const child = this.child;
    if (!child || this.exit) {
      this.finish();
      return;
    }
    const exited = this.exited!;
    const within = (ms: number) =>
      Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);
    child.stdin?.end();
    if (!(await within(STDIN_GRACE_MS))) {
      child.kill("SIGTERM");
      if (!(await within(TERM_GRACE_MS))) {
        child.kill("SIGKILL");
        await within(TERM_GRACE_MS);
      }
    }
    this.finish();
  }

  /**
   * Hands messages to the SDK in order. After a notification the next message waits one
   * microtask: the SDK runs notification handlers (progress among them) in a microtask but
   * handles a response at once, and a response drops its call's progress handler. Without
   * the pause a server's last progress notification, arriving in the same chunk as the
   * result, would be lost.
   */
  private async deliver(): Promise<void> {
    if (this.delivering) return;
    this.delivering = true;
    try {
      while (this.inbox.length > 0) {
        const message = this.inbox.shift()!;
        this.onmessage?.(message);
        if (this.inbox.length > 0 && !("id" in message)) await Promise.resolve();
      }
    } finally {
      this.delivering = false;
    }
  }

  /** Reports the end once: the process exited (or never started) or was closed. */
  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    const rest = this.stderrRest + this.stderrDecoder.end();
    this.stderrRest = "";
    if (rest) this.line(rest);
    this.readBuffer.clear();
    // A grandchild may still hold the pipes; they are of no use to us any more.
    this.child?.stdout?.destroy();
    this.child?.stderr?.destroy();
    this.onclose?.();
  }

  private stderr(text: string): void {
    const lines = (this.stderrRest + text).split("\n");
    this.stderrRest = lines.pop() ?? "";
    const max = this.opts.maxLineChars ?? 8192;
    // A process that never writes a newline must not grow our memory.
    if (this.stderrRest.length > max) {
      lines.push(this.stderrRest);
      this.stderrRest = "";
    }
    for (const line of lines) this.line(line);
  }

  private line(raw: string): void {
    const max = this.opts.maxLineChars ?? 8192;
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.length === 0) return;
    this.opts.onStderrLine?.(line.length > max ? `${line.slice(0, max)}…` : line);
  }
}
