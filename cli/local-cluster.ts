/**
 * `mewgate up --nodes N`: a cluster on this machine, for trying one. A nats-server with
 * JetStream (its store under `<state>/cluster/nats`), this process as node n1 — it owns
 * the space at first and hosts the agents, MCP servers and terminal (the first two join
 * through the other nodes, `memberRoute`) — and N-1 more gateway processes that serve the
 * same space to anyone who connects to them.
 *
 * One unit: a node that dies is said and started again on its address, with backoff; and
 * every child watches this process (it holds the write end of their stdin), so a kill -9
 * of `up` stops the bus and the nodes too instead of leaving them orphaned.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { tokenEnvName } from "../gateway/index.js";
import { NatsServer, natsServerPath } from "./nats.js";
import { CliError } from "./space.js";

export interface ClusterNode {
  name: string;
  url: string;
  child: ChildProcess;
  restarts: number;
}

export interface LocalCluster {
  nats: NatsServer;
  /** Nodes n2..nN: name and ws:// address (the same across restarts), and the current process. */
  nodes: ClusterNode[];
  /** Stops nodes n2..nN (before n1, so they do not take the space over as it leaves). */
  stopNodes(): Promise<void>;
}

/** Starts the bus; the nodes beyond this one come once this one owns the space (`startNodes`). */
export async function startBus(stateDir: string): Promise<NatsServer> {
  const bin = natsServerPath();
  if (!bin) throw new CliError("--nodes needs nats-server on this machine (Debian: apt-get install nats-server)");
  const nats = new NatsServer(bin, join(stateDir, "cluster", "nats"), true, true);
  await nats.start();
  return nats;
}

/** A restarted node waits this long at first, doubling up to RESTART_MAX_MS; a node that ran a minute starts over. */
const RESTART_FIRST_MS = 500;
const RESTART_MAX_MS = 30_000;
const STABLE_MS = 60_000;

/**
 * Starts nodes n2..n`count` as `mewgate gateway` processes on free loopback ports. They get
 * the participants' tokens through the environment (MEWGATE_TOKEN_<ID>), the same ones
 * this process uses, so a member is admitted whichever node owns the space.
 */
export async function startNodes(opts: {
  nats: NatsServer;
  count: number;
  file: string;
  stateDir: string;
  tokens: Map<string, string>;
  env: NodeJS.ProcessEnv;
  /** A node died, or came back: for the person running `up`. */
  onNotice?: (text: string, level: "info" | "error") => void;
}): Promise<LocalCluster> {
  const main = process.argv[1]!;
  const env: NodeJS.ProcessEnv = { ...opts.env, MEWGATE_WATCH_PARENT: "1" };
  for (const [id, token] of opts.tokens) env[tokenEnvName(id)] = token;
  const nodes: ClusterNode[] = [];
  let stopping = false;
  const timers = new Set<NodeJS.Timeout>();
  const stopNodes = async () => {
    stopping = true;
    for (const t of timers) clearTimeout(t);
    await Promise.all(
      nodes.map(
        (n) =>
          new Promise<void>((resolve) => {
            if (n.child.exitCode !== null || n.child.signalCode !== null) return resolve();
            const t = setTimeout(() => n.child.kill("SIGKILL"), 6000);
            n.child.once("exit", () => {
              clearTimeout(t);
              return resolve();
            });
            n.child.kill("SIGTERM");
          }),
      ),
    );
  };
  const launch = (name: string, port: number): Promise<{ url: string; child: ChildProcess }> => {
    const dir = join(opts.stateDir, "cluster", name);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const args = [
      main,
      "gateway",
      "--config",
      opts.file,
      "--state-dir",
      dir,
      "--port",
      String(port),
      "--cluster",
      opts.nats.url,
      "--node",
      name,
      "--log-file",
      join(opts.stateDir, "logs", `${name}.log`),
    ];
    // Their own process group, like the bus: `up` stops them in order when it stops. Stdin
    // is a pipe from this process: its end is how a node knows `up` is gone.
    const child = spawn(process.execPath, args, { env, stdio: ["pipe", "pipe", "pipe"], detached: true });
    return new Promise((resolve, reject) => {
      let out = "";
      let err = "";
      const timer = setTimeout(() => reject(new CliError(`cluster node ${name} did not start: ${err.slice(-500)}`)), 15_000);
      child.stderr!.on("data", (d) => (err = (err + d).slice(-4000)));
      child.stdout!.on("data", (d) => {
        out += d;
        const m = /(ws:\/\/\S+)\/ws/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve({ url: m[1]!, child });
        }
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new CliError(`cluster node ${name} exited (${signal ?? code}): ${err.slice(-500)}`));
      });
    });
  };
  const supervise = (node: ClusterNode, startedAt: number) => {
    node.child.once("exit", (code, signal) => {
      if (stopping) return;
      if (Date.now() - startedAt > STABLE_MS) node.restarts = 0;
      const delay = Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** node.restarts);
      node.restarts++;
      opts.onNotice?.(
        `cluster node ${node.name} exited (${signal ?? `code ${code}`}); restarting it in ${(delay / 1000).toFixed(1)} s`,
        "error",
      );
      const port = Number(new URL(node.url).port);
      const again = () => {
        const t = setTimeout(
          () => {
            timers.delete(t);
            if (stopping) return;
            const at = Date.now();
            launch(node.name, port).then(
              ({ child }) => {
                if (stopping) return void child.kill("SIGTERM");
                node.child = child;
                opts.onNotice?.(`cluster node ${node.name} restarted on ${node.url}/ws`, "info");
                supervise(node, at);
              },
              (err: Error) => {
                opts.onNotice?.(`cluster node ${node.name} did not restart: ${err.message}`, "error");
                node.restarts++;
                again();
              },
            );
          },
          Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** Math.max(0, node.restarts - 1)),
        );
        timers.add(t);
      };
      again();
    });
  };
  try {
    for (let i = 2; i <= opts.count; i++) {
      const name = `n${i}`;
      const { url, child } = await launch(name, 0);
      const node = { name, url, child, restarts: 0 };
      nodes.push(node);
      supervise(node, Date.now());
    }
  } catch (err) {
    await stopNodes();
    throw err;
  }
  return { nats: opts.nats, nodes, stopNodes };
}

/**
 * Where the `i`-th participant `up` starts joins a cluster of `nodes` beside n1 (this
 * process, at `n1`): over WebSocket to n2..nN in turn, with every other node as a fallback,
 * n1 last. A node that dies (1006) or leaves (1001) sends it on to the next, so it rides
 * through the loss of any node but this process, which it lives in.
 */
export function memberRoute(
  i: number,
  n1: string,
  nodes: readonly Pick<ClusterNode, "name" | "url">[],
): { node: string; url: string; fallbackUrls: string[] } {
  if (nodes.length === 0) return { node: "n1", url: n1, fallbackUrls: [] };
  const first = i % nodes.length;
  const order = [...nodes.slice(first), ...nodes.slice(0, first)];
  return { node: order[0]!.name, url: order[0]!.url, fallbackUrls: [...order.slice(1).map((n) => n.url), n1] };
}
