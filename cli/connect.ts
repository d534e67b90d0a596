/**
 * `mewgate connect`: the interactive terminal (or JSON lines) against a running gateway.
 * `mewgate bridge`: an MCP server plugged into a running space from the command line.
 */
import { createLogger, Tracing } from "../gateway/index.js";
import { ParticipantError } from "../participants/index.js";
import { withEnvDefaults } from "./commands.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { explainConnectError, openClient, resolveTarget, type RemoteOptions } from "./remote.js";
import { bridgeOAuth } from "./oauth.js";
import { CliError } from "./space.js";
import { createTerminal, isJsonMode } from "./terminal/index.js";
import type { TerminalInput, TerminalOutput } from "./terminal/session.js";

export interface ConnectIo extends Io {
  stdin: TerminalInput;
  stdout: TerminalOutput;
}

/** Resolves on SIGINT/SIGTERM; the returned function removes the handlers. */
function onSignals(): { signalled: Promise<NodeJS.Signals>; off: () => void } {
  let resolve!: (s: NodeJS.Signals) => void;
  const signalled = new Promise<NodeJS.Signals>((r) => (resolve = r));
  const handler = (s: NodeJS.Signals) => resolve(s);
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(s, handler);
  return {
    signalled,
    off: () => {
      for (const s of ["SIGINT", "SIGTERM", "SIGHUP"]) process.off(s, handler);
    },
  };
}

export function runConnect(
  opts: RemoteOptions & { json?: boolean },
  io: ConnectIo = { ...processIo(), stdin: process.stdin, stdout: process.stdout },
): Promise<number> {
  return guard(io, async () => {
    const target = await resolveTarget(withEnvDefaults(opts, io.env), io.env);
    // A lost connection (1012 when the space moves to another node, 1006 when the node dies)
    // is tried again with backoff for about a minute before `connect` gives up.
    const client = await openClient(target, { reconnect: { initialDelayMs: 200, maxDelayMs: 5000, maxAttempts: 20 } });
    const json = isJsonMode({ json: opts.json, input: io.stdin });
    const terminal = createTerminal({
      client,
      input: io.stdin,
      output: io.stdout,
      json: opts.json,
      config: target.loaded?.config,
      env: io.env,
      exitOnEof: true,
    });
    const signals = onSignals();
    try {
      terminal.start();
      if (json) io.stdout.write(`${JSON.stringify({ event: "ready", url: target.url, space: target.space, participant: client.id })}\n`);
      const end = await Promise.race([terminal.done, signals.signalled.then(() => ({ reason: "quit" as const, message: undefined }))]);
      terminal.finish({ reason: "quit" });
      if (end.reason === "closed") throw new CliError(end.message ?? "disconnected");
      return 0;
    } finally {
      signals.off();
      await client.close();
    }
  });
}

export interface BridgeCommandOptions extends RemoteOptions {
  /** A streamable HTTP MCP server instead of a command. */
  url?: string | undefined;
  header?: string[] | undefined;
  cwd?: string | undefined;
  env?: string[] | undefined;
  logFile?: string | undefined;
  logLevel?: string | undefined;
  /** `auto`: follow a loopback authorization server's sign-in link headlessly (tests). */
  oauthConsent?: string | undefined;
}

/** `KEY=VALUE` pairs (repeatable flags) to a record. */
function pairs(list: string[] | undefined, sep: string, flag: string): Record<string, string> | undefined {
  if (!list?.length) return undefined;
  const out: Record<string, string> = {};
  for (const item of list) {
    const i = item.indexOf(sep);
    if (i <= 0) throw new CliError(`${flag} "${item}": expected NAME${sep}VALUE`);
    out[item.slice(0, i).trim()] = item.slice(i + sep.length).trim();
  }
  return out;
}

export function runBridge(command: string[], opts: BridgeCommandOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    if (command.length > 0 === Boolean(opts.url)) {
      throw new CliError(
        "give the MCP server as a command after -- (mewgate bridge … -- npx -y some-mcp-server) or as --url http://…, one of the two",
      );
    }
    const o = withEnvDefaults(opts, io.env);
    const id = o.as ?? io.env["MEWGATE_PARTICIPANT"];
    if (!id) throw new CliError("which participant is this MCP server? give --as <id> (its id in the space)");
    const target = await resolveTarget({ ...o, as: id }, io.env);
    const declared = target.loaded?.config.participants[id]?.mcp;
    const server = opts.url
      ? {
          url: opts.url,
          headers: pairs(opts.header, ":", "--header"),
          ...(declared?.url !== undefined && declared.oauth !== undefined ? { oauth: declared.oauth } : {}),
        }
      : { command: command[0]!, args: command.slice(1), cwd: opts.cwd, env: pairs(opts.env, "=", "--env") };
    const oauth = opts.url ? bridgeOAuth(server, opts, target.loaded?.stateDir ?? o.stateDir, target.space, io.env) : undefined;
    const logger = createLogger({ file: opts.logFile ?? "-", level: opts.logLevel ?? "warn" });
    // Its own process: CLIENT spans of its calls out to the server go where the space's traces go (space.yaml or OTEL_*).
    const tracing = Tracing.from(target.loaded?.config.gateway.telemetry, io.env, logger);
    const signals = onSignals();
    let bridge: Awaited<ReturnType<typeof import("../participants/bridge/bridge.js").startBridge>>;
    try {
      const { startBridge } = await import("../participants/bridge/bridge.js");
      const client = { url: target.url, space: target.space, token: target.token };
      bridge = await startBridge({ id, server, client, logger, oauth, ...(tracing.on ? { tracing } : {}) });
    } catch (err) {
      await tracing.shutdown();
      signals.off();
      if (err instanceof ParticipantError) throw await explainConnectError(err, target);
      throw new CliError(`could not start the MCP server: ${(err as Error).message}`);
    }
    io.stderr.write(`mewgate: ${opts.url ?? command.join(" ")} joined space ${target.space} as ${id} at ${target.url}; Ctrl-C stops it\n`);
    const stopped = new Promise<void>((resolve) => bridge.on("status", (s) => s === "stopped" && resolve()));
    try {
      await Promise.race([signals.signalled, stopped]);
      return bridge.status === "stopped" ? 1 : 0;
    } finally {
      signals.off();
      await bridge.stop();
      await tracing.shutdown();
    }
  });
}
