/**
 * `mewgate mcp`: serve a space to an MCP client over stdio, as one of its participants.
 *
 *   mewgate mcp --gateway ws://127.0.0.1:7420 --space lab --token-file ~/.lab-token
 *   mewgate mcp --config space.yaml --as claude
 *
 * Where the token comes from, first that applies: `--token`, `--token-file`; with
 * `--config`, the same sources the gateway uses for that participant (its `token` in
 * space.yaml, `MEWGATE_TOKEN_<ID>`, `<state_dir>/tokens/<id>.token`); then `MEWGATE_TOKEN`.
 * stdout carries MCP only; logs go to stderr (or `--log-file`), never a token.
 */
import { readFile } from "node:fs/promises";
import { InvalidArgumentError, type Command } from "commander";
import { ConfigError, loadSpaceConfig } from "../gateway/config.js";
import { createLogger } from "../gateway/log.js";
import { tokenEnvName, tokenFile } from "../gateway/tokens.js";
import { ParticipantError } from "../participants/errors.js";
import { runStdio } from "../participants/mcp-server.js";

export interface McpCommandOptions {
  gateway?: string | undefined;
  space?: string | undefined;
  token?: string | undefined;
  tokenFile?: string | undefined;
  config?: string | undefined;
  as?: string | undefined;
  stateDir?: string | undefined;
  name?: string | undefined;
  logFile?: string | undefined;
  logLevel?: string | undefined;
  approvalProgressMs?: number | undefined;
}

/** Where to connect and as whom. */
export interface McpTarget {
  url: string;
  space: string;
  token: string;
  /** Known with `--config --as`; otherwise the token decides. */
  participant?: string | undefined;
  /** Where the token came from (for messages; never the token). */
  tokenSource: string;
}

/** Resolves flags (and space.yaml) to a gateway address, space and token. Throws an Error whose message says what to fix. */
export async function resolveMcpTarget(opts: McpCommandOptions, env: NodeJS.ProcessEnv = process.env): Promise<McpTarget> {
  let url = opts.gateway;
  let space = opts.space;
  let token: string | undefined;
  let tokenSource = "";
  if (opts.token) {
    token = opts.token;
    tokenSource = "--token";
  } else if (opts.tokenFile) {
    token = await readTokenFile(opts.tokenFile, "--token-file");
    tokenSource = opts.tokenFile;
  }
  let participant: string | undefined;
  if (opts.config) {
    const config = await loadSpaceConfig(opts.config, env);
    participant = opts.as;
    if (!participant) throw new Error(`--config needs --as <participant>: one of ${Object.keys(config.participants).join(", ")}`);
    const p = config.participants[participant];
    if (!p) throw new Error(`no participant "${participant}" in ${opts.config}; it has ${Object.keys(config.participants).join(", ")}`);
    if (space !== undefined && space !== config.space.id) throw new Error(`--space ${space} does not match ${opts.config}, which defines space "${config.space.id}"`);
    space = config.space.id;
    url ??= `ws://${connectHost(config.gateway.host)}:${config.gateway.port}`;
    if (token === undefined) {
      const stateDir = opts.stateDir ?? config.gateway.state_dir;
      const file = tokenFile(stateDir, participant);
      if (p.token) {
        token = p.token;
        tokenSource = `the token of "${participant}" in ${opts.config}`;
      } else if (env[tokenEnvName(participant)]) {
        token = env[tokenEnvName(participant)]!;
        tokenSource = tokenEnvName(participant);
      } else {
        token = await readTokenFile(file, "the gateway's token file").catch(() => undefined);
        tokenSource = file;
        if (token === undefined && !env["MEWGATE_TOKEN"]) {
          throw new Error(
            `no token for "${participant}": set ${tokenEnvName(participant)}, pass --token-file, or start the gateway once so that it writes ${file}`,
          );
        }
      }
    }
  } else if (opts.as) {
    throw new Error("--as needs --config <space.yaml>; without it the token alone decides who you are");
  }
  if (token === undefined && env["MEWGATE_TOKEN"]) {
    token = env["MEWGATE_TOKEN"];
    tokenSource = "MEWGATE_TOKEN";
  }
  if (!url) throw new Error("no gateway address: pass --gateway ws://HOST:PORT, or --config space.yaml --as <participant>");
  if (!space) throw new Error("no space: pass --space ID, or --config space.yaml --as <participant>");
  if (token === undefined) throw new Error("no token: pass --token-file FILE (or --token, or set MEWGATE_TOKEN)");
  return { url: wsUrl(url), space, token, participant, tokenSource };
}

/** The command: resolves, then serves until the MCP client goes away. Returns the exit code. */
export async function runMcp(opts: McpCommandOptions, env: NodeJS.ProcessEnv = process.env, stderr: NodeJS.WritableStream = process.stderr): Promise<number> {
  let target: McpTarget;
  try {
    target = await resolveMcpTarget(opts, env);
  } catch (err) {
    stderr.write(`mewgate mcp: ${(err as Error).message}\n`);
    return 1;
  }
  const logger = createLogger({ file: opts.logFile ?? "-", level: opts.logLevel ?? "warn" });
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    await runStdio({
      client: { url: target.url, space: target.space, token: target.token, participantId: target.participant, logger },
      logger,
      name: opts.name,
      approvalProgressMs: opts.approvalProgressMs,
      signal: stop.signal,
    });
    return 0;
  } catch (err) {
    stderr.write(`mewgate mcp: ${describe(err, target)}\n`);
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
    .option("-g, --gateway <url>", "gateway address, e.g. ws://127.0.0.1:7420 (default: host and port from --config)")
    .option("-s, --space <id>", "space id (default: from --config)")
    .option("--token-file <file>", "file holding the participant's token")
    .option("-t, --token <token>", "the participant's token (visible to other local users; prefer --token-file or MEWGATE_TOKEN)")
    .option("-c, --config <space.yaml>", "read the gateway address and the participant's token the way the gateway does")
    .option("--as <participant>", "with --config: the participant to act as")
    .option("--state-dir <dir>", "with --config: the gateway's state directory, if it was started with --state-dir")
    .option("--name <name>", "server name reported to the MCP client (default: mewgate-<space>)")
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

async function readTokenFile(file: string, what: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const token = text.trim();
  if (!token) throw new Error(`${what} ${file} is empty`);
  return token;
}

/** A listening address as an address to connect to. */
function connectHost(host: string): string {
  if (host === "0.0.0.0" || host === "") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** Accepts http(s):// too, since the gateway serves both on one port. */
function wsUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`--gateway ${url} is not a URL like ws://127.0.0.1:7420`);
  }
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") throw new Error(`--gateway ${url}: expected ws://, wss://, http:// or https://`);
  return u.toString();
}

function describe(err: unknown, target: McpTarget): string {
  if (err instanceof ConfigError) return err.message;
  if (!(err instanceof ParticipantError)) return (err as Error).message;
  switch (err.code) {
    case "unauthorized":
      return `the gateway refused the token from ${target.tokenSource} for space "${target.space}" (${err.message})`;
    case "unknown_space":
      return `the gateway at ${target.url} has no space "${target.space}"`;
    case "identity_mismatch":
      return `the token from ${target.tokenSource} does not belong to "${target.participant}"`;
    case "connect_failed":
      return `could not reach the gateway at ${target.url} (${err.message})`;
    case "replaced":
      return `another connection took over this participant (${err.message})`;
    default:
      return `${err.code}: ${err.message}`;
  }
}
