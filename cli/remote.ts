/**
 * Connecting to a running gateway from the command line, with errors a person can act on,
 * and the options every remote command shares (`--gateway/--space/--token` or
 * `--config/--as`).
 */
import { readFileSync, statSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import type { Logger } from "pino";
import type { SpaceConfig } from "../gateway/index.js";
// Light on purpose (`mewgate mcp` is registered at start): the client, and the MCP SDK
// behind it, load when a command connects.
import type { ParticipantClient } from "../participants/client.js";
import type { ReconnectOptions } from "../participants/client/types.js";
import { ParticipantError } from "../participants/errors.js";
import {
  CliError,
  DEFAULT_SPACE_FILE,
  gatewayUrlFor,
  loadSpace,
  noTokenError,
  pickHuman,
  resolveToken,
  spaceFile,
  type FoundToken,
  type LoadedSpace,
} from "./space.js";

export interface RemoteOptions {
  gateway?: string | undefined;
  space?: string | undefined;
  token?: string | undefined;
  /** A file holding the token (keeps it out of `ps`). */
  tokenFile?: string | undefined;
  config?: string | undefined;
  as?: string | undefined;
  stateDir?: string | undefined;
}

/** What a command wants where the flags leave it open. The defaults suit the terminal and the one-shot commands. */
export interface ResolveRules {
  /**
   * With a space.yaml and neither `--as` nor a token: act as the space's only human (the
   * default), or refuse and ask for `--as` (`mewgate mcp`: its client is usually a model,
   * and a human may call every tool without approval, so that is never a default there).
   */
  actAsHuman?: boolean | undefined;
  /** When no other source gives a token, use `MEWGATE_TOKEN` (`mewgate mcp`). */
  envToken?: boolean | undefined;
  /**
   * The command only reads (`status`, `proposals` list/show/decided, `tools`, `grants`,
   * `sessions`): in a space of several humans, with no `--as`, it reads as the first of
   * them that has a token (and says so on stderr) instead of refusing.
   */
  readOnly?: boolean | undefined;
}

export interface Target {
  url: string;
  space: string;
  token: string;
  /** Where the token came from: `--token`, `MEWGATE_TOKEN_ALICE`, a file… (for messages; never the token). */
  tokenSource: string;
  /** Claimed id (checked by the gateway against the token), when known. */
  participant?: string | undefined;
  /** The space.yaml, when the target came from one. */
  loaded?: LoadedSpace | undefined;
}

/**
 * Where to connect and as whom. Without `--config`, `--gateway/--space/--token` (or
 * `--token-file`) are used as given; with it, or with none of them (./space.yaml), what is
 * missing comes from the space.yaml: the URL a running `up` recorded or the file's
 * host:port, the space id, and the token of `--as` (else of the only human) the way the
 * gateway finds it. `rules` says what a command does differently.
 */
export async function resolveTarget(opts: RemoteOptions, env: NodeJS.ProcessEnv = process.env, rules: ResolveRules = {}): Promise<Target> {
  const actAsHuman = rules.actAsHuman ?? true;
  const given = tokenFromFlags(opts, env);
  const lastResort: FoundToken | undefined =
    rules.envToken && env["MEWGATE_TOKEN"] ? { token: env["MEWGATE_TOKEN"], source: "MEWGATE_TOKEN" } : undefined;
  const configHint = `--config space.yaml ${actAsHuman ? "[--as <participant>]" : "--as <participant>"}`;
  if (!opts.config && (opts.gateway || opts.space || given)) {
    const found = given ?? lastResort;
    if (!opts.gateway || !opts.space || !found) {
      const missing = [opts.gateway ? "" : "--gateway", opts.space ? "" : "--space", found ? "" : "--token"].filter(Boolean);
      throw new CliError(
        `missing ${missing.join(", ")}: give --gateway, --space and --token${rules.envToken ? " (or MEWGATE_TOKEN)" : ""}, or ${configHint}`,
      );
    }
    return { url: normalizeUrl(opts.gateway), space: opts.space, token: found.token, tokenSource: found.source, participant: opts.as };
  }
  const loaded = await loadSpace(spaceFile(opts.config, `give --gateway, --space and --token, or ${configHint}`), {
    stateDir: opts.stateDir,
    env,
  });
  const { config } = loaded;
  if (opts.space !== undefined && opts.space !== config.space.id) {
    throw new CliError(`--space ${opts.space} does not match ${config.file}, which defines space "${config.space.id}"`);
  }
  let who = opts.as === undefined ? undefined : pickHuman(config, opts.as).id;
  if (who === undefined && !given) {
    if (actAsHuman) who = rules.readOnly ? readerFor(config, loaded.env) : pickHuman(config, undefined).id;
    else if (!lastResort) {
      const tokens = rules.envToken ? "--token, --token-file or MEWGATE_TOKEN" : "--token or --token-file";
      throw new CliError(
        `${opts.config ? "--config" : `./${DEFAULT_SPACE_FILE}`} needs --as <participant>: one of ${Object.keys(config.participants).join(", ")} (or a token that says who you are: ${tokens})`,
      );
    }
  }
  const found = given ?? (who === undefined ? undefined : resolveToken(config, who, loaded.env)) ?? lastResort;
  if (!found) throw noTokenError(config, who!);
  return {
    url: opts.gateway ? normalizeUrl(opts.gateway) : gatewayUrlFor(config).url,
    space: config.space.id,
    token: found.token,
    tokenSource: found.source,
    participant: who,
    loaded,
  };
}

/**
 * Who a read-only command reads as when `--as` is not given: the only human, or, in a
 * space of several, the first declared one with a token (what they see is the same view
 * any of them has with `visibility: all`; `--as` picks another).
 */
function readerFor(config: SpaceConfig, env: NodeJS.ProcessEnv): string {
  const humans = Object.values(config.participants).filter((p) => p.kind === "human");
  if (humans.length <= 1) return pickHuman(config, undefined).id;
  const reader = humans.find((h) => resolveToken(config, h.id, env) !== undefined) ?? humans[0]!;
  warn(`reading as ${reader.id}, the first of the space's humans (${humans.map((h) => h.id).join(", ")}); --as <id> to look as another`);
  return reader.id;
}

/** `--token`, else `--token-file`. */
function tokenFromFlags(opts: RemoteOptions, env: NodeJS.ProcessEnv): FoundToken | undefined {
  // `withEnvDefaults` passes MEWGATE_TOKEN on as `token`: name it for what it is.
  if (opts.token) {
    if (opts.token === env["MEWGATE_TOKEN"]) return { token: opts.token, source: "MEWGATE_TOKEN" };
    warn(
      "--token puts the token in the command line, where other users of this machine can read it (ps, /proc); prefer --token-file <file> or MEWGATE_TOKEN",
    );
    return { token: opts.token, source: "--token" };
  }
  if (!opts.tokenFile) return undefined;
  let token: string;
  try {
    token = readFileSync(opts.tokenFile, "utf8").trim();
    // Like ssh with a private key: a token others can read is no secret any more.
    if ((statSync(opts.tokenFile).mode & 0o077) !== 0) warn(`--token-file ${opts.tokenFile} can be read by other users; chmod 600 it`);
  } catch (err) {
    throw new CliError(`cannot read --token-file ${opts.tokenFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if (!token) throw new CliError(`--token-file ${opts.tokenFile} is empty`);
  return { token, source: `--token-file ${opts.tokenFile}` };
}

function warn(message: string): void {
  process.stderr.write(`mewgate: warning: ${message}\n`);
}

/** Accepts `host:port`, `http(s)://` and `ws(s)://`. */
export function normalizeUrl(url: string): string {
  let u = url.trim();
  if (!/^[a-z]+:\/\//i.test(u)) u = `ws://${u}`;
  u = u.replace(/^http:/i, "ws:").replace(/^https:/i, "wss:");
  let valid: boolean;
  try {
    valid = /^wss?:$/.test(new URL(u).protocol);
  } catch {
    valid = false;
  }
  if (!valid) throw new CliError(`not a gateway URL: "${url}" (expected ws://host:port; wss://, http:// and https:// work too)`);
  return u.replace(/\/ws\/?$/, "").replace(/\/$/, "");
}

/** Connects and waits for the welcome; every failure becomes a `CliError` that says what to do. */
export async function openClient(
  target: Target,
  opts: { logger?: Logger; echo?: boolean; reconnect?: ReconnectOptions } = {},
): Promise<ParticipantClient> {
  const { ParticipantClient } = await import("../participants/client.js");
  const client = new ParticipantClient({
    url: target.url,
    space: target.space,
    token: target.token,
    participantId: target.participant,
    echo: opts.echo,
    // One-shot commands end with their connection; `connect` comes back (a take-over, a node restarting).
    reconnect: opts.reconnect ?? false,
    connectTimeoutMs: 10_000,
    logger: opts.logger,
  });
  try {
    await client.connect();
    return client;
  } catch (err) {
    throw await explainConnectError(err, target);
  }
}

/** A connection failure (or the end of a connection) as one sentence. */
export async function explainConnectError(
  err: unknown,
  target: Pick<Target, "url" | "space" | "participant" | "tokenSource">,
): Promise<CliError> {
  if (!(err instanceof ParticipantError)) return new CliError((err as Error)?.message ?? String(err));
  switch (err.code) {
    case "unauthorized":
      return new CliError(
        `the gateway refused the token from ${target.tokenSource} for space "${target.space}" (close 4401: ${err.message})`,
      );
    case "unknown_space":
      return new CliError(`the gateway at ${target.url} has no space "${target.space}" (${err.message})`);
    case "identity_mismatch":
      return new CliError(`the token from ${target.tokenSource} does not belong to "${target.participant}" (${err.message})`);
    case "unknown_participant":
      return new CliError(`no participant "${target.participant}" in space "${target.space}" (${err.message})`);
    case "replaced":
      return new CliError(`another connection took over this participant (${err.message})`);
    case "connect_failed": {
      const why = await probe(target.url);
      return new CliError(
        `cannot reach the gateway at ${target.url}${why ? ` (${why})` : ""}: is it running? (mewgate up, or mewgate status)`,
      );
    }
    default:
      return new CliError(`could not join space "${target.space}" at ${target.url}: ${err.message}`);
  }
}

/** Why a TCP connection to the gateway fails, if it does: "connection refused", … */
function probe(url: string): Promise<string | undefined> {
  let host: string;
  let port: number;
  try {
    const u = new URL(url);
    host = u.hostname.replace(/^\[|\]$/g, "");
    port = Number(u.port || (u.protocol === "wss:" ? 443 : 80));
  } catch {
    return Promise.resolve(undefined);
  }
  return new Promise((resolve) => {
    const socket = tcpConnect({ host, port });
    const done = (why: string | undefined) => {
      socket.destroy();
      resolve(why);
    };
    socket.setTimeout(2000, () => done("no answer within 2 s"));
    socket.once("connect", () => done(undefined));
    socket.once("error", (e: NodeJS.ErrnoException) =>
      done(e.code === "ECONNREFUSED" ? "connection refused" : e.code === "ENOTFOUND" ? `unknown host ${host}` : (e.code ?? e.message)),
    );
  });
}
