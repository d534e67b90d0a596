/**
 * Connecting to a running gateway from the command line, with errors a person can act on,
 * and the options every remote command shares (`--gateway/--space/--token` or
 * `--config/--as`).
 */
import { readFileSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import type { Logger } from "pino";
import { ParticipantClient, ParticipantError } from "../participants/index.js";
import { CliError, gatewayUrlFor, loadSpace, pickHuman, resolveToken, spaceFile, type LoadedSpace } from "./space.js";

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

export interface Target {
  url: string;
  space: string;
  token: string;
  /** Claimed id (checked by the gateway against the token), when known. */
  participant?: string | undefined;
  /** The space.yaml, when the target came from one. */
  loaded?: LoadedSpace | undefined;
}

/**
 * Where to connect and as whom. `--gateway/--space/--token` are used as given; any that is
 * missing comes from the space.yaml (`--config`, else ./space.yaml): the URL a running
 * `up` recorded or the file's host:port, the space id, and the human's token (or `--as`).
 */
export async function resolveTarget(options: RemoteOptions, env: NodeJS.ProcessEnv = process.env): Promise<Target> {
  const opts = { ...options };
  if (opts.tokenFile && !opts.token) {
    try {
      opts.token = readFileSync(opts.tokenFile, "utf8").trim();
    } catch (err) {
      throw new CliError(`cannot read --token-file ${opts.tokenFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (!opts.token) throw new CliError(`--token-file ${opts.tokenFile} is empty`);
  }
  if (opts.gateway && opts.space && opts.token) {
    return { url: normalizeUrl(opts.gateway), space: opts.space, token: opts.token, participant: opts.as };
  }
  if (!opts.config && (opts.gateway || opts.space || opts.token)) {
    const missing = (["gateway", "space", "token"] as const).filter((k) => !opts[k]).map((k) => `--${k}`);
    throw new CliError(`missing ${missing.join(", ")}: give --gateway, --space and --token, or --config space.yaml [--as <participant>]`);
  }
  const loaded = await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env });
  const { config } = loaded;
  const who = opts.as ?? (opts.token ? undefined : pickHuman(config, undefined).id);
  const token = opts.token ?? resolveToken(config, who!, loaded.env);
  return {
    url: opts.gateway ? normalizeUrl(opts.gateway) : gatewayUrlFor(config).url,
    space: opts.space ?? config.space.id,
    token,
    participant: who,
    loaded,
  };
}

/** Accepts `host:port`, `http(s)://` and `ws(s)://`. */
export function normalizeUrl(url: string): string {
  let u = url.trim();
  if (!/^[a-z]+:\/\//i.test(u)) u = `ws://${u}`;
  u = u.replace(/^http:/i, "ws:").replace(/^https:/i, "wss:");
  try {
    new URL(u);
  } catch {
    throw new CliError(`not a gateway URL: "${url}" (expected ws://host:port)`);
  }
  return u.replace(/\/ws\/?$/, "").replace(/\/$/, "");
}

/** Connects and waits for the welcome; every failure becomes a `CliError` that says what to do. */
export async function openClient(target: Target, opts: { logger?: Logger; echo?: boolean } = {}): Promise<ParticipantClient> {
  const client = new ParticipantClient({
    url: target.url,
    space: target.space,
    token: target.token,
    participantId: target.participant,
    echo: opts.echo,
    reconnect: false,
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

/** A connection failure as one sentence. */
export async function explainConnectError(err: unknown, target: Pick<Target, "url" | "space" | "participant">): Promise<CliError> {
  if (!(err instanceof ParticipantError)) return new CliError((err as Error)?.message ?? String(err));
  switch (err.code) {
    case "unauthorized":
      return new CliError(`the gateway refused the token for ${target.space} (close 4401: ${err.message}); check --token, MEWGATE_TOKEN_<ID> or the token file`);
    case "unknown_space":
      return new CliError(`the gateway at ${target.url} has no space "${target.space}" (${err.message})`);
    case "identity_mismatch":
      return new CliError(`the token does not belong to "${target.participant}" (${err.message})`);
    case "unknown_participant":
      return new CliError(`no participant "${target.participant}" in space "${target.space}" (${err.message})`);
    case "connect_failed": {
      const why = await probe(target.url);
      return new CliError(`cannot reach the gateway at ${target.url}${why ? ` (${why})` : ""}: is it running? (mewgate up, or mewgate status)`);
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
