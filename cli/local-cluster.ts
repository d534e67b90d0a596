/**
 * `mewgate up --nodes N`: a cluster on this machine, for trying one. A nats-server with
 * JetStream (its store under `<state>/cluster/nats`), this process as node n1 — it owns
 * the space at first and hosts the agents, MCP servers and terminal — and N-1 more
 * gateway processes that serve the same space to anyone who connects to them.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { tokenEnvName } from "../gateway/identity/tokens.js";
import { NatsServer, natsServerPath } from "./nats.js";
import { CliError } from "./space.js";

export interface LocalCluster {
  nats: NatsServer;
  /** Nodes n2..nN: name and ws:// address. */
  nodes: Array<{ name: string; url: string; child: ChildProcess }>;
  /** Stops nodes n2..nN (before n1, so they do not take the space over as it leaves). */
  stopNodes(): Promise<void>;
}

/** Starts the bus; the nodes beyond this one come once this one owns the space (`startNodes`). */
export async function startBus(stateDir: string): Promise<NatsServer> {
  const bin = natsServerPath();
  if (!bin) throw new CliError("--nodes needs nats-server on this machine (Debian: apt-get install nats-server)");
  const nats = new NatsServer(bin, join(stateDir, "cluster", "nats"), true);
  await nats.start();
  return nats;
}

/**
 * Starts nodes n2..n`count` as `mewgate gateway` processes on free loopback ports. They get
 * the participants' tokens through the environment (MEWGATE_TOKEN_<ID>), the same ones
 * this process uses, so a member is admitted whichever node owns the space.
 */
export async function startNodes(opts: { nats: NatsServer; count: number; file: string; stateDir: string; tokens: Map<string, string>; env: NodeJS.ProcessEnv }): Promise<LocalCluster> {
  const main = process.argv[1]!;
  const env: NodeJS.ProcessEnv = { ...opts.env };
  for (const [id, token] of opts.tokens) env[tokenEnvName(id)] = token;
  const nodes: LocalCluster["nodes"] = [];
  const stopNodes = async () => {
    await Promise.all(
      nodes.map(
        (n) =>
          new Promise<void>((resolve) => {
            if (n.child.exitCode !== null || n.child.signalCode !== null) return resolve();
            const t = setTimeout(() => n.child.kill("SIGKILL"), 4000);
            n.child.once("exit", () => (clearTimeout(t), resolve()));
            n.child.kill("SIGTERM");
          }),
      ),
    );
  };
  try {
    for (let i = 2; i <= opts.count; i++) {
      const name = `n${i}`;
      const dir = join(opts.stateDir, "cluster", name);
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const args = [main, "gateway", "--config", opts.file, "--state-dir", dir, "--port", "0", "--cluster", opts.nats.url, "--node", name, "--log-file", join(opts.stateDir, "logs", `${name}.log`)];
      // Their own process group, like the bus: `up` stops them in order when it stops.
      const child = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "pipe"], detached: true });
      const url = await new Promise<string>((resolve, reject) => {
        let out = "";
        let err = "";
        const timer = setTimeout(() => reject(new CliError(`cluster node ${name} did not start: ${err.slice(-500)}`)), 15_000);
        child.stderr!.on("data", (d) => (err += d));
        child.stdout!.on("data", (d) => {
          out += d;
          const m = /(ws:\/\/\S+)\/ws/.exec(out);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
        child.once("exit", (code) => {
          clearTimeout(timer);
          reject(new CliError(`cluster node ${name} exited (${code}): ${err.slice(-500)}`));
        });
      });
      nodes.push({ name, url, child });
    }
  } catch (err) {
    await stopNodes();
    throw err;
  }
  return { nats: opts.nats, nodes, stopNodes };
}
