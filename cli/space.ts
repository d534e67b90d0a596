/**
 * What every space.yaml-based command needs: loading the file with the variables `mewgate`
 * offers to it, finding the state directory, the human to act as, its token, and where the
 * gateway runs.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { loadSpaceConfig, type ParticipantConfig, type SpaceConfig } from "../gateway/index.js";
import * as z from "zod";
import { tokenEnvName, tokenFile } from "../gateway/index.js";

/** The command's own error: its message is printed as is (`mewgate: <message>`), exit code 1. */
export class CliError extends Error {
  override readonly name = "CliError";
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

export const DEFAULT_SPACE_FILE = "space.yaml";

/** The mewgate package root (holds `spaces/` and, in a checkout, `node_modules/`). */
export const INSTALL_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Where mewgate's dependencies resolve from: the node_modules holding the MCP SDK. */
export const MODULES_DIR = (() => {
  try {
    const sdk = createRequire(import.meta.url).resolve("@modelcontextprotocol/sdk/package.json");
    return sdk.slice(0, sdk.lastIndexOf(`${sep}@modelcontextprotocol${sep}`));
  } catch {
    return join(INSTALL_DIR, "node_modules");
  }
})();

export interface LoadedSpace {
  config: SpaceConfig;
  /** The environment the file was read with, including the variables below; pass it on to the gateway. */
  env: NodeJS.ProcessEnv;
  stateDir: string;
  /** `<state>/sandbox`: a scratch directory `up` creates for MCP servers (the demo's filesystem). */
  sandbox: string;
}

/**
 * Loads a space.yaml. Besides the caller's environment, the file may use:
 *   ${MEWGATE_STATE_DIR}   the state directory of this run (absolute)
 *   ${MEWGATE_SANDBOX}     `<state>/sandbox`, created by `mewgate up`
 *   ${MEWGATE_INSTALL_DIR} where mewgate is installed
 *   ${MEWGATE_MODULES}     the node_modules its dependencies are in (to run the MCP servers it
 *                          ships with: nested when installed globally, hoisted when installed
 *                          into a project)
 *   ${MEWGATE_SPACE_DIR}   the directory of the space.yaml
 * `--state-dir` wins over `gateway.state_dir`. The state directory is not known before the
 * file is read, so the file is read again in the rare case where the first guess was wrong.
 */
export async function loadSpace(
  file: string,
  opts: { stateDir?: string | undefined; env?: NodeJS.ProcessEnv; signs?: boolean } = {},
): Promise<LoadedSpace> {
  const base = opts.env ?? process.env;
  const spaceDir = dirname(resolve(file));
  const withDirs = (stateDir: string): NodeJS.ProcessEnv => ({
    ...base,
    MEWGATE_STATE_DIR: stateDir,
    MEWGATE_SANDBOX: join(stateDir, "sandbox"),
    MEWGATE_INSTALL_DIR: INSTALL_DIR,
    MEWGATE_MODULES: MODULES_DIR,
    MEWGATE_SPACE_DIR: spaceDir,
  });
  const guess = opts.stateDir ? resolve(opts.stateDir) : resolve(spaceDir, ".mewgate");
  let env = withDirs(guess);
  // Only a command that runs the gateway signs webhook notices, so only it needs their secrets (`signs`).
  const signs = opts.signs ?? false;
  let config = await loadSpaceConfig(file, env, signs);
  const stateDir = opts.stateDir ? resolve(opts.stateDir) : config.gateway.state_dir;
  if (stateDir !== guess) {
    env = withDirs(stateDir);
    config = await loadSpaceConfig(file, env, signs);
  }
  config.gateway.state_dir = stateDir;
  return { config, env, stateDir, sandbox: join(stateDir, "sandbox") };
}

/** The human to act as: `as`, else the space's only human. */
export function pickHuman(config: SpaceConfig, as: string | undefined): ParticipantConfig {
  const all = Object.values(config.participants);
  if (as !== undefined) {
    const p = config.participants[as];
    if (!p) throw new CliError(`no participant "${as}" in ${config.file}; participants: ${all.map((x) => x.id).join(", ")}`);
    return p;
  }
  const humans = all.filter((p) => p.kind === "human");
  if (humans.length === 1) return humans[0]!;
  if (humans.length === 0)
    throw new CliError(
      `space "${config.space.id}" has no human participant; pick one to act as with --as <id>: one of ${all.map((x) => x.id).join(", ")}`,
    );
  throw new CliError(`space "${config.space.id}" has several humans (${humans.map((h) => h.id).join(", ")}); pick one with --as <id>`);
}

/** A token and where it came from: a flag, a variable, a file (for messages; never the token). */
export interface FoundToken {
  token: string;
  source: string;
}

/**
 * A participant's token, found the way the gateway finds it: its `token` in space.yaml,
 * `MEWGATE_TOKEN_<ID>`, or the token file the gateway generated; undefined when there is
 * none (a missing file means no gateway has run with this state directory yet). Never
 * generates one. Throws when the file exists but cannot be read.
 */
export function resolveToken(config: SpaceConfig, id: string, env: NodeJS.ProcessEnv): FoundToken | undefined {
  const p = config.participants[id];
  if (p?.token) return { token: p.token, source: `the token of "${id}" in ${config.file}` };
  const fromEnv = env[tokenEnvName(id)];
  if (fromEnv) return { token: fromEnv, source: tokenEnvName(id) };
  const file = tokenFile(config.gateway.state_dir, id);
  try {
    const token = readFileSync(file, "utf8").trim();
    if (token) return { token, source: file };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT")
      throw new CliError(`cannot read the token of "${id}" from ${file}: ${(err as Error).message}`);
  }
  return undefined;
}

/** What to do when `resolveToken` finds nothing. */
export function noTokenError(config: SpaceConfig, id: string): CliError {
  const file = tokenFile(config.gateway.state_dir, id);
  return new CliError(
    `no token for "${id}": set ${tokenEnvName(id)}, pass --token-file, or start the gateway once so that it writes ${file} (${config.file} sets none; is this the right --state-dir?)`,
  );
}

/** What `up` records in `<state>/up.json` for `status`, `down` and the other commands. */
export interface UpRecord {
  pid: number;
  url?: string | undefined;
  space?: string | undefined;
  config?: string | undefined;
  stateDir: string;
  /** The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), to tell it from a recycled pid. */
  startTicks?: number | undefined;
  /** Absent in files written by older versions. */
  argv?: string[] | undefined;
  startedAt?: string | undefined;
  /** `up --nodes`: every node of the local cluster, n1 (the up process) first. */
  nodes?: Array<{ name: string; url: string }> | undefined;
}

/**
 * What up.json holds, checked: only `pid` is required, since files written by older
 * versions, edited by hand or cut short by a crash must still let `down` stop what they
 * name — and nothing else.
 */
const UpRecordSchema = z.looseObject({
  pid: z.int().positive(),
  url: z.string().optional(),
  space: z.string().optional(),
  config: z.string().optional(),
  stateDir: z.string().optional(),
  startTicks: z.number().optional(),
  argv: z.array(z.string()).optional(),
  startedAt: z.string().optional(),
  nodes: z.array(z.object({ name: z.string(), url: z.string() })).optional(),
});

export function upFiles(stateDir: string): { pid: string; json: string; log: string } {
  return { pid: join(stateDir, "up.pid"), json: join(stateDir, "up.json"), log: join(stateDir, "logs", "up.log") };
}

/** The up.json of a state directory: the record, or what is wrong with the file (`missing` when there is none). */
export function inspectUpRecord(stateDir: string): { rec: UpRecord } | { problem: string; missing?: true } {
  const file = upFiles(stateDir).json;
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { problem: `no ${file}`, missing: true };
    return { problem: `cannot read ${file}: ${(err as Error).message}` };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { problem: `${file} is not JSON (${text.length} bytes; cut short by a crash?)` };
  }
  const parsed = UpRecordSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { problem: `${file}: ${issue?.path.join(".") || "the record"}: ${issue?.message ?? "invalid"}` };
  }
  return { rec: { ...parsed.data, stateDir: parsed.data.stateDir ?? stateDir } };
}

export function readUpRecord(stateDir: string): UpRecord | undefined {
  const found = inspectUpRecord(stateDir);
  return "rec" in found ? found.rec : undefined;
}

/**
 * Where the gateway of this space listens: the URL a running `up` recorded (it may have
 * picked a free port), else the space.yaml's host and port.
 */
export function gatewayUrlFor(config: SpaceConfig): { url: string; recorded: boolean } {
  const rec = readUpRecord(config.gateway.state_dir);
  if (rec?.url && rec.space === config.space.id && isAlive(rec.pid)) return { url: rec.url, recorded: true };
  const host = config.gateway.host === "0.0.0.0" ? "127.0.0.1" : config.gateway.host === "::" ? "[::1]" : config.gateway.host;
  const shown = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  return { url: `ws://${shown}:${config.gateway.port}`, recorded: false };
}

/** Whether a process with this pid exists (and we may signal it). */
export function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Start time of a process in clock ticks since boot, from /proc (Linux); undefined elsewhere. */
export function processStartTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may contain spaces and parentheses; fields resume after the last ")".
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(rest[19]);
    return Number.isFinite(ticks) ? ticks : undefined;
  } catch {
    return undefined;
  }
}

/** The command line of a process, from /proc (Linux); undefined elsewhere. */
export function processArgv(pid: number): string[] | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    return raw.split("\0").filter((s) => s.length > 0);
  } catch {
    return undefined;
  }
}

/** The space file a command works on: the argument, else ./space.yaml, with a hint (`how` to give one) when it is missing. */
export function spaceFile(arg: string | undefined, how = "give the file (mewgate <command> path/to/space.yaml)"): string {
  const file = arg ?? DEFAULT_SPACE_FILE;
  if (arg === undefined && !existsSync(file)) {
    throw new CliError(`no ${DEFAULT_SPACE_FILE} in ${process.cwd()}: ${how}, or write one with mewgate init`);
  }
  return file;
}

/** Whether the process a record names is alive and is that very `up` (not a recycled pid). */
export function isOurUp(rec: UpRecord): boolean {
  if (!isAlive(rec.pid)) return false;
  const ticks = processStartTicks(rec.pid);
  if (ticks !== undefined && rec.startTicks !== undefined && ticks !== rec.startTicks) return false;
  const argv = processArgv(rec.pid);
  if (argv !== undefined) {
    if (rec.argv !== undefined) return argv.join("\0") === rec.argv.join("\0");
    // An older record names no command line: settle for one that is a mewgate up.
    return argv.some((a) => /(^|\/)(mewgate|main\.js)$/.test(a)) && argv.includes("up");
  }
  // Without /proc (not Linux) all we know is that the pid is alive and the record is ours.
  return true;
}
