/**
 * `mewgate mcp`: serve a space to an MCP client over stdio, as one of its participants.
 *
 *   mewgate mcp --gateway ws://127.0.0.1:7420 --space lab --token-file ~/.lab-token
 *   mewgate mcp --config space.yaml --as claude
 *   mewgate mcp --config space.yaml --as claude --only fs     (the participant fs, as itself)
 *
 * Where to connect and as whom is resolved like every other command (`resolveTarget`),
 * with two differences: `MEWGATE_TOKEN` is the last resort for the token (after `--token`,
 * `--token-file` and, with a space.yaml, the participant's own token found the way the
 * gateway finds it), and a space.yaml needs `--as` (or a token): the MCP client is usually
 * a model, so it never becomes the space's human by default.
 * stdout carries MCP only; logs go to stderr (or `--log-file`), never a token.
 */
import { InvalidArgumentError, type Command } from "commander";
// Types only here: main.ts registers this command at every start, so what it runs (the
// gateway's surface, the space.yaml readers) loads when it runs, not for `mewgate --help`.
import type { RemoteOptions, Target } from "./remote.js";

export interface McpCommandOptions extends RemoteOptions {
  name?: string | undefined;
  logFile?: string | undefined;
  logLevel?: string | undefined;
  approvalProgressMs?: number | undefined;
  only?: string | undefined;
}

/** Resolves flags (and space.yaml) to a gateway address, space and token. Throws a `CliError` whose message says what to fix. */
export async function resolveMcpTarget(opts: McpCommandOptions, env: NodeJS.ProcessEnv = process.env): Promise<Target> {
  const { resolveTarget } = await import("./remote.js");
  return resolveTarget(opts, env, { actAsHuman: false, envToken: true });
}

/** The command: resolves, then serves until the MCP client goes away. Returns the exit code. */
export async function runMcp(
  opts: McpCommandOptions,
  env: NodeJS.ProcessEnv = process.env,
  stderr: NodeJS.WritableStream = process.stderr,
): Promise<number> {
  let target: Target;
  try {
    target = await resolveMcpTarget(opts, env);
  } catch (err) {
    stderr.write(`mewgate mcp: ${(err as Error).message}\n`);
    return 1;
  }
  const { createLogger } = await import("../gateway/index.js");
  const { explainConnectError } = await import("./remote.js");
  const logger = createLogger({ file: opts.logFile ?? "-", level: opts.logLevel ?? "warn" });
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const { runStdio } = await import("../participants/mcp-server/stdio/stdio.js");
    await runStdio({
      client: { url: target.url, space: target.space, token: target.token, participantId: target.participant, logger },
      logger,
      name: opts.name,
      approvalProgressMs: opts.approvalProgressMs,
      onlyParticipant: opts.only,
      signal: stop.signal,
    });
    return 0;
  } catch (err) {
    stderr.write(`mewgate mcp: ${(await explainConnectError(err, target)).message}\n`);
    return 1;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

/** Adds `mewgate mcp` to the program. */
export function registerMcpCommand(program: Command): Command {
  return program
    .command("mcp")
    .description("serve a space's tools to an MCP client over stdio, as one participant of the space")
    .option(
      "-g, --gateway <url>",
      "gateway address, e.g. ws://127.0.0.1:7420 (default: from --config: the URL a running mewgate up recorded, else its host and port)",
    )
    .option("-s, --space <id>", "space id (default: from --config)")
    .option("--token-file <file>", "file holding the participant's token")
    .option("-t, --token <token>", "the participant's token (visible to other local users; prefer --token-file or MEWGATE_TOKEN)")
    .option(
      "-c, --config <space.yaml>",
      "read the gateway address and the participant's token the way the gateway does (default: ./space.yaml without --gateway/--space/--token)",
    )
    .option(
      "--as <participant>",
      "the participant to act as; with --config, required unless a token says who you are (never the space's human by default)",
    )
    .option("--state-dir <dir>", "with --config: the gateway's state directory, if it was started with --state-dir")
    .option(
      "--only <participant>",
      "serve that one participant's MCP server as itself: its own tool, resource and prompt names, nobody else's",
    )
    .option("--name <name>", "server name reported to the MCP client (default: mewgate-<space>, or with --only the server's own)")
    .option("--approval-progress-ms <ms>", "progress notification interval while a call waits for approval", positiveInt, 2000)
    .option("--log-file <file>", "pino log file, or - for stderr", "-")
    .option("--log-level <level>", "trace, debug, info, warn, error", "warn")
    .action(async (opts: McpCommandOptions) => {
      process.exitCode = await runMcp(opts);
    });
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError("expected a positive whole number of milliseconds");
  return n;
}
