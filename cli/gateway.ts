/**
 * `mewgate gateway`: run just the gateway for one or more space.yaml files.
 */
import { join } from "node:path";
import { ConfigError, loadSpaceConfig } from "../gateway/index.js";
import { createLogger } from "../gateway/index.js";
import { formatFinding } from "../gateway/index.js";
import { Gateway } from "../gateway/index.js";
// Not the participants/mcp-server.js barrel: that loads the MCP SDK, which this command
// must not pay for at start. http/http.js loads it on the first /mcp request.
import { mountHttp } from "../participants/mcp-server/http/http.js";

export interface GatewayCommandOptions {
  config: string[];
  port?: number | undefined;
  host?: string | undefined;
  stateDir?: string | undefined;
  logFile?: string | undefined;
  logLevel?: string | undefined;
  /** A NATS server: run as one node of a cluster (overrides `gateway.cluster`). */
  cluster?: string | undefined;
  node?: string | undefined;
}

export interface RunningGateway {
  gateway: Gateway;
  url: string;
  stop(): Promise<void>;
}

/** Loads the configs, starts the gateway, and resolves once it accepts connections. Throws a readable Error otherwise. */
export async function startGateway(opts: GatewayCommandOptions, env: NodeJS.ProcessEnv = process.env): Promise<RunningGateway> {
  const entered = performance.now();
  const configs = [];
  for (const file of opts.config) {
    const config = await loadSpaceConfig(file, env);
    if (opts.stateDir) config.gateway.state_dir = configs.length === 0 ? opts.stateDir : join(opts.stateDir, config.space.id);
    configs.push(config);
  }
  const first = configs[0];
  if (!first) throw new Error("no space.yaml given: mewgate gateway --config space.yaml");
  const configured = performance.now();
  const log = createLogger({ file: opts.logFile ?? join(first.gateway.state_dir, "logs", "gateway.log"), level: opts.logLevel });
  const fromYaml = first.gateway.cluster;
  const cluster = opts.cluster
    ? {
        url: opts.cluster,
        node: opts.node ?? fromYaml?.node,
        lease_ms: fromYaml?.lease_ms,
        advertise: fromYaml?.advertise,
        replicas: fromYaml?.replicas,
      }
    : fromYaml && { ...fromYaml, node: opts.node ?? fromYaml.node };
  const gateway = new Gateway({ spaces: configs, host: opts.host, port: opts.port, log, env, cluster });
  // Every space is also an MCP server at /mcp (streamable HTTP, participant bearer token);
  // the MCP machinery behind the route loads on its first request.
  mountHttp(gateway, { logger: log });
  const built = performance.now();
  let address: Awaited<ReturnType<typeof gateway.listen>>;
  try {
    address = await gateway.listen();
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const host = opts.host ?? first.gateway.host;
    const port = opts.port ?? first.gateway.port;
    if (e.code === "EADDRINUSE")
      throw new Error(`port ${port} on ${host} is already in use; pick another with --port (0 picks a free one)`);
    if (e.code === "EADDRNOTAVAIL" || e.code === "ENOTFOUND") throw new Error(`cannot listen on ${host}: no such local address`);
    if (e.code === "EACCES") throw new Error(`not allowed to listen on ${host}:${port} (ports below 1024 need privileges)`);
    throw err;
  }
  log.info({ start_ms: startTimes(entered, configured, built) }, "accepting connections");
  return { gateway, url: address.url, stop: () => gateway.close() };
}

/**
 * Where the start went, in ms since the process began: node's own bootstrap, loading and
 * evaluating our code and its libraries, reading the space files, building the gateway
 * (spaces opened, state read), and listening. For whoever wonders why a start was slow
 * (the log's "accepting connections" line), and for the bench.
 */
function startTimes(entered: number, configured: number, built: number): Record<string, number> {
  const node = performance.nodeTiming.bootstrapComplete;
  const now = performance.now();
  const ms = (x: number) => Math.round(x * 10) / 10;
  return {
    node: ms(node),
    code: ms(entered - node),
    config: ms(configured - entered),
    gateway: ms(built - configured),
    listen: ms(now - built),
    total: ms(now),
  };
}

/** The command itself: prints the address line, stops on SIGINT/SIGTERM. */
export async function runGateway(opts: GatewayCommandOptions, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  let running: RunningGateway;
  try {
    running = await startGateway(opts);
  } catch (err) {
    process.stderr.write(`mewgate: ${err instanceof ConfigError ? err.message : (err as Error).message}\n`);
    return 1;
  }
  const node = running.gateway.clusterNode;
  if (node) {
    const owns = [...running.gateway.spaces.keys()].join(", ") || "none yet";
    out.write(`mewgate gateway listening on ${running.url}/ws (cluster node ${node.node}; owns: ${owns})\n`);
  } else {
    const spaces = [...running.gateway.spaces.keys()].join(", ");
    out.write(`mewgate gateway listening on ${running.url}/ws (spaces: ${spaces})\n`);
  }
  for (const line of findingLines(running.gateway)) process.stderr.write(`mewgate: ${line}\n`);
  hearFindings(running.gateway, (line) => process.stderr.write(`mewgate: ${line}\n`));
  // SIGHUP: read the space.yaml files and tokens again (an invalid file changes nothing).
  const hup = () => void reloadOnSignal(running.gateway, (line) => process.stderr.write(`mewgate: ${line}\n`));
  process.on("SIGHUP", hup);
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = () => {
      if (stopping) return;
      stopping = true;
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      process.off("SIGHUP", hup);
      // Whatever the bus is doing (gone, reconnecting, a write waiting for its ack), the
      // process is gone within STOP_DEADLINE_MS of being asked.
      setTimeout(() => {
        process.stderr.write(`mewgate: the gateway did not stop within ${STOP_DEADLINE_MS / 1000} s; exiting anyway\n`);
        process.exit(1);
      }, STOP_DEADLINE_MS).unref();
      void running.stop().then(resolve);
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
    if (process.env["MEWGATE_WATCH_PARENT"] === "1") watchParent(stop);
  });
  // Stopped: a handle still open (a bus client still reconnecting) must not keep the process.
  setTimeout(() => process.exit(), 300).unref();
  return 0;
}

/** How long a stopping gateway process may take, at most. */
const STOP_DEADLINE_MS = 3500;

/**
 * A node started by `mewgate up --nodes` stops with its parent, however the parent ended
 * (kill -9 included): the parent holds the write end of this process's stdin, and the
 * kernel closes it when the parent dies.
 */
function watchParent(stop: () => void): void {
  const parent = process.ppid;
  process.stdin.on("error", () => stop());
  process.stdin.on("end", () => stop());
  process.stdin.on("close", () => stop());
  process.stdin.resume();
  // And should stdin not be a pipe after all: the parent is gone once this process is re-parented.
  setInterval(() => process.ppid !== parent && stop(), 500).unref();
}

/** What the spaces' tool rules were found to hold at load, short of an error (policy/check.ts): printed, not only logged. */
export function findingLines(gateway: Gateway): string[] {
  return [...gateway.spaces.values()].flatMap((s) => s.findings.map((f) => formatFinding(f)));
}

/** Findings made later (a tool rule still matching nothing once its owner's tools registered), said as they come. */
export function hearFindings(gateway: Gateway, say: (line: string) => void): void {
  for (const s of gateway.spaces.values()) s.findingListeners.add((f) => say(formatFinding(f)));
}

/** SIGHUP's reload, said in lines: what changed, or why nothing did. Never throws. */
export async function reloadOnSignal(gateway: Gateway, say: (line: string) => void): Promise<void> {
  try {
    const { describeReload } = await import("./reload.js");
    for (const r of await gateway.reload({ by: "SIGHUP" })) for (const line of describeReload(r)) say(line);
  } catch (err) {
    say(`reload refused, nothing changed: ${(err as Error).message}`);
  }
}
