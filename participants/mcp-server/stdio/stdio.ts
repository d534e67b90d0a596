/**
 * The space as an MCP server over stdio: what `mewgate mcp` runs, so an MCP client that
 * launches servers as commands (an IDE, a desktop app) can join a space.
 *
 * stdout carries MCP JSON-RPC and nothing else; logs go wherever the logger writes.
 */
import type { Readable, Writable } from "node:stream";
import { ParticipantClient, type ClientOptions } from "../../client.js";
import type { ParticipantError } from "../../errors.js";
import { createSpaceMcpServer, type SpaceMcpServer, type SpaceMcpServerOptions } from "../face/server.js";
import { OpeningTransport, opensModern, serveModernStdio } from "./stdio-modern.js";
import { describeParticipant, type OnlyParticipant } from "../face/face.js";

export interface StdioServeOptions extends SpaceMcpServerOptions {
  /** Where MCP messages come from. Default `process.stdin`. */
  stdin?: Readable | undefined;
  /** Where MCP messages go. Default `process.stdout`. */
  stdout?: Writable | undefined;
  /** Stops serving (e.g. on SIGTERM). */
  signal?: AbortSignal | undefined;
  /** Serve this one participant as itself (`mewgate mcp --only`); asked for its server's description once joined. */
  onlyParticipant?: string | undefined;
}

/**
 * Joins the space (failing fast, before any MCP traffic, when the gateway refuses the
 * token or cannot be reached), then serves MCP over stdio until the MCP client closes
 * stdin, `signal` aborts, or the space connection ends for good — the last rejects with
 * that `ParticipantError`. A `ParticipantClient` passed in is left open; one made from
 * options is closed.
 */
export async function runStdio(opts: StdioServeOptions): Promise<void> {
  const owned = !(opts.client instanceof ParticipantClient);
  const client = opts.client instanceof ParticipantClient ? opts.client : new ParticipantClient(opts.client as ClientOptions);
  const stdin = opts.stdin ?? process.stdin;
  const stdout = opts.stdout ?? process.stdout;
  try {
    await client.connect();
  } catch (err) {
    if (owned) await client.close();
    throw err;
  }
  let only: OnlyParticipant | undefined = opts.only;
  if (opts.onlyParticipant !== undefined) {
    try {
      only = await describeParticipant(client, opts.onlyParticipant);
    } catch (err) {
      if (owned) await client.close();
      throw err;
    }
  }
  let failure: ParticipantError | undefined;
  const offClose = client.on("close", (e) => {
    if (!e.reconnecting && e.error) failure = e.error;
  });
  // The opening message chooses the revision of the connection (stdio-modern.ts).
  const transport = new OpeningTransport(stdin, stdout);
  let stopModern: (() => Promise<void>) | undefined;
  let server: SpaceMcpServer | undefined;
  const ended = new Promise<void>((resolve) => {
    stdin.once("end", resolve);
    stdin.once("close", resolve);
    opts.signal?.addEventListener("abort", () => resolve(), { once: true });
    if (opts.signal?.aborted) resolve();
  });
  try {
    const first = await Promise.race([transport.first, ended]);
    if (first !== undefined) {
      const modern = await opensModern(first);
      server = createSpaceMcpServer({ ...opts, client, only, takesInput: modern });
      void server.closed.then(() => void transport.close());
      if (modern) stopModern = await serveModernStdio(server, transport);
      else await server.connect(transport);
      opts.logger?.info({ participant: client.id, space: client.welcome?.space?.id, modern }, "serving the space over MCP stdio");
      await Promise.race([ended, server.closed]);
    }
  } finally {
    offClose();
    await stopModern?.();
    await transport.close();
    await server?.close().catch(() => {});
    if (owned) await client.close("MCP client went away");
  }
  if (failure) throw failure;
}
