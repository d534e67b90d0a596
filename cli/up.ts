/**
 * `mewgate up`: the whole space in one process. The gateway, then every declared
 * participant that mewgate can run — MCP servers through in-process bridges, agents
 * in-process, `run:` commands as supervised child processes — then the terminal as the
 * space's human. With `--nodes`, the bridges and agents join over WebSocket through the
 * other nodes, so the loss of one does not take them with it. Ctrl-C (or SIGTERM, or
 * `mewgate down`) stops all of it, in reverse order.
 *
 * `--detach` runs the same thing in the background (up-detach.ts).
 */
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { ConfigError } from "../gateway/index.js";
import { connectInProcess } from "../gateway/index.js";
import { createLogger } from "../gateway/index.js";
import type { Space } from "../gateway/index.js";
import { TokenBook } from "../gateway/index.js";
import { startAgent, type AgentHandle } from "../participants/agent/participant.js";
import { ParticipantClient } from "../participants/index.js";
import { prepareOAuth } from "./oauth.js";
import { findingLines, hearFindings, reloadOnSignal, startGateway, type RunningGateway } from "./gateway.js";
import { type ClusterNode, memberRoute, startBus, startNodes } from "./local-cluster.js";
import { exposedStateDir, greeted, planParticipants } from "./plan.js";
import { shortPath } from "./invocation.js";
import { CliError, loadSpace, spaceFile } from "./space.js";
import { Supervisor, type SupervisorOptions } from "./supervisor.js";
import { createTerminal, isJsonMode, type TerminalSession } from "./terminal/index.js";
import type { TerminalInput, TerminalOutput } from "./terminal/session.js";
import { refuseIfRunning, removeUpRecord, writeUpRecord } from "./up-record.js";
import { runDetached } from "./up-detach.js";
import { UpServers } from "./up-servers.js";

// The launch plan moved to plan.ts; `up` still answers for it (tests import it from here).
export { exposedStateDir, planParticipants } from "./plan.js";

export interface UpOptions {
  file?: string | undefined;
  stateDir?: string | undefined;
  port?: number | undefined;
  host?: string | undefined;
  /** Run a local cluster of this many gateway nodes over NATS (local-cluster.ts). */
  nodes?: number | undefined;
  /** The human to attach the terminal as (default: the space's only human). */
  as?: string | undefined;
  json?: boolean | undefined;
  detach?: boolean | undefined;
  /** Hidden: this process is the background half of `--detach`. */
  detachedChild?: boolean | undefined;
  /** Send the agents a greeting from the human once everything runs, so they start on their own. Default true. */
  greet?: boolean | undefined;
  logLevel?: string | undefined;
}

export interface UpIo {
  stdin: TerminalInput;
  stdout: TerminalOutput;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  /** Stop when this resolves (tests); signals stop it too. */
  stop?: Promise<void> | undefined;
  supervisor?: SupervisorOptions | undefined;
}

const defaultIo = (): UpIo => ({ stdin: process.stdin, stdout: process.stdout, stderr: process.stderr, env: process.env });

/** The greeting `up` sends as the human, addressed to the agents it started. */
export function greeting(agents: string[]): string {
  return `Hello ${agents.map((a) => `@${a}`).join(" ")}, I just joined the space. What would you like to do first?`;
}

export async function runUp(opts: UpOptions, io: UpIo = defaultIo()): Promise<number> {
  const err = (message: string) => io.stderr.write(`mewgate: ${message}\n`);
  try {
    if (opts.detach && !opts.detachedChild) return await runDetached(opts, io);
    return await runForeground(opts, io);
  } catch (e) {
    const message = e instanceof ConfigError || e instanceof CliError ? e.message : (e as Error).message;
    if (opts.detachedChild && process.connected) process.send?.({ type: "error", message });
    err(message);
    return e instanceof CliError ? e.exitCode : 1;
  }
}

// ---------------------------------------------------------------------------------------
// Foreground

/** A signal (or a stop) came while the space was still starting: everything started so far stops. */
class StoppedDuringStart extends Error {}

interface Running {
  gateway: RunningGateway | undefined;
  /** The MCP servers (up-servers.ts), once they start. */
  servers: UpServers | undefined;
  agents: AgentHandle[];
  supervisor: Supervisor | undefined;
  human: ParticipantClient | undefined;
  terminal: TerminalSession | undefined;
  files: { pid: string; json: string } | undefined;
  /** `--nodes`: the bus and the other nodes (local-cluster.ts). */
  cluster: { stopNodes(): Promise<void>; bus: { stop(): Promise<void> } } | undefined;
}

async function runForeground(opts: UpOptions, io: UpIo): Promise<number> {
  const file = spaceFile(opts.file);
  const loaded = await loadSpace(file, { stateDir: opts.stateDir, env: io.env, signs: true });
  const { config, stateDir } = loaded;
  refuseIfRunning(stateDir);
  const plan = planParticipants(config, opts.as, { terminal: !opts.detachedChild });
  const json = !opts.detachedChild && isJsonMode({ json: opts.json, input: io.stdin });
  // Lines for a person: stdout when the terminal is interactive; stderr when stdout carries JSON.
  const say = (text: string) => (json || opts.detachedChild ? io.stderr : io.stdout).write(`${text}\n`);

  const running: Running = {
    gateway: undefined,
    servers: undefined,
    agents: [],
    supervisor: undefined,
    human: undefined,
    terminal: undefined,
    files: undefined,
    cluster: undefined,
  };
  let notify: (text: string, level: "info" | "error") => void = (text, level) => {
    say(level === "error" ? `! ${text}` : `· ${text}`);
    // In the background half of --detach, the foreground half prints them too, until it leaves.
    if (opts.detachedChild && process.connected) process.send?.({ type: "notice", text, level });
  };
  const notice = (text: string, level: "info" | "error" = "info") => notify(text, level);

  // Signals stop everything; installed first so a Ctrl-C during start-up still cleans up:
  // each wait of the start (a sign-in nobody completes, say) gives way to it (`untilStopped`).
  let stopRequested: (why: string) => void = () => {};
  const stopped = new Promise<string>((resolve) => (stopRequested = resolve));
  const untilStopped = <T>(p: Promise<T>): Promise<T> =>
    Promise.race([
      p,
      stopped.then((why) => {
        throw new StoppedDuringStart(why);
      }),
    ]);
  const onSignal = (signal: NodeJS.Signals) => stopRequested(signal);
  for (const s of ["SIGINT", "SIGTERM"] as const) process.on(s, onSignal);
  // SIGHUP reloads the space.yaml and tokens (gateway/space/reload.ts); before the gateway runs, it stops.
  const onHup = () => (running.gateway ? void reloadOnSignal(running.gateway.gateway, (line) => notice(line)) : stopRequested("SIGHUP"));
  process.on("SIGHUP", onHup);
  void io.stop?.then(() => stopRequested("stop"));

  try {
    mkdirSync(loaded.sandbox, { recursive: true, mode: 0o700 });
    const nodes = opts.nodes ?? 1;
    let clusterNodes: ClusterNode[] | undefined;
    const bus = nodes > 1 ? await startBus(stateDir) : undefined;
    if (bus) running.cluster = { stopNodes: async () => {}, bus };
    running.gateway = await startGateway(
      {
        config: [file],
        stateDir,
        port: opts.port,
        host: opts.host,
        logLevel: opts.logLevel,
        ...(bus ? { cluster: bus.url, node: "n1" } : {}),
      },
      loaded.env,
    );
    const url = running.gateway.url;
    // In a cluster this node owns the space once any lease a crashed earlier run left behind has run out.
    const gw = running.gateway.gateway;
    if (bus) await waitFor(() => gw.spaces.has(config.space.id), { timeoutMs: 15_000, intervalMs: 50 });
    const space = gw.spaces.get(config.space.id);
    if (!space) throw new CliError(`node n1 could not take space "${config.space.id}" over from an earlier run within 15 s`);
    // The same tokens the gateway loaded (it generated any that were missing): for `run:` children.
    const { tokens } = TokenBook.load(Object.entries(config.participants), { stateDir, env: loaded.env });
    if (bus) {
      const cluster = await startNodes({
        nats: bus,
        count: nodes,
        file,
        stateDir,
        tokens,
        env: loaded.env,
        onNotice: (t, l) => notice(t, l),
      });
      clusterNodes = cluster.nodes;
      running.cluster = { stopNodes: () => cluster.stopNodes(), bus };
      say(
        `local cluster: NATS at ${bus.url}; n1 ${url}/ws (this process, owns the space now)${cluster.nodes.map((n) => `, ${n.name} ${n.url}/ws`).join("")}`,
      );
      say(`members may connect to any node; kill the owner and another takes the space over`);
    }
    if (json) io.stdout.write(`${JSON.stringify({ event: "listening", url, space: config.space.id })}\n`);
    say(`mewgate gateway listening on ${url}/ws (space ${config.space.id}; state in ${shortPath(stateDir)})`);
    for (const line of findingLines(gw)) notice(line, "error");
    hearFindings(gw, (line) => notice(line, "error"));

    const logFor = (id: string) => createLogger({ file: join(stateDir, "logs", `${id}.log`), level: opts.logLevel });
    const inProcess = (id: string) => ({ transport: () => connectInProcess(space, id), reconnect: false as const });
    // In a cluster the agents and MCP servers join over WebSocket, spread over the other
    // nodes with every node as a fallback (memberRoute): they ride through a node's loss.
    const routes: string[] = [];
    const joinAs = (id: string) => {
      if (!clusterNodes) return inProcess(id);
      const r = memberRoute(routes.length, url, clusterNodes);
      routes.push(`${id} via ${r.node}`);
      const reconnect = { initialDelayMs: 100, maxDelayMs: 2000, retryFirstConnect: true };
      // Read again for each connection: `mewgate token rotate` closes the session on the old one.
      const token = () =>
        TokenBook.load([[id, (gw.spaces.get(config.space.id)?.config ?? config).participants[id] ?? {}]], {
          stateDir,
          env: loaded.env,
        }).tokens.get(id)!;
      return { url: r.url, fallbackUrls: r.fallbackUrls, space: config.space.id, token, participantId: id, heartbeatMs: 5000, reconnect };
    };
    const sayMoves = (id: string, client: ParticipantClient) => {
      if (!clusterNodes) return;
      let away = false; // said once per outage, not once per attempt
      client.on("close", (e) => {
        if (!e.reconnecting || away) return;
        away = true;
        notice(`${id}: its node went away (${e.code}); joining through another`);
      });
      client.on("welcome", (w) => {
        if (!w.reconnected || !away) return;
        away = false;
        notice(`${id}: back in the space`);
      });
    };

    // MCP servers first, so their tools are in the registry when the agents start.
    // Recorded before anything that may wait (a sign-in): `down` and `status` find this run from here on.
    running.files = writeUpRecord(stateDir, {
      url,
      config,
      file,
      nodes: clusterNodes && [{ name: "n1", url }, ...clusterNodes.map((n) => ({ name: n.name, url: n.url }))],
    });
    const signIn = prepareOAuth(config, stateDir, gw, url, loaded.env);
    // A start waits for its sign-in: the link is shown from the start, not once the bridge is up;
    // in the background half of --detach it goes to the foreground half, which prints it and returns.
    const oauth = signIn && {
      ...signIn,
      onSignIn: (s: { server: string; issuer: string; url: string }) => {
        notice(`${s.server} needs you to sign in at ${s.issuer}: ${s.url}`);
        if (opts.detachedChild && process.connected) process.send?.({ type: "signin", ...s, gateway: url, pid: process.pid });
      },
    };
    const servers = new UpServers({
      space: config.space.id,
      stateDir,
      callTimeoutMs: config.calls.timeout_ms,
      joinAs,
      logger: logFor,
      oauth,
      tracing: () => gw.spaces.get(config.space.id)?.tracing,
      notice,
      sayMoves,
    });
    running.servers = servers;
    const bridgeResults = await untilStopped(servers.startAll(plan.bridges));
    servers.followReloads(gw);

    const agentResults = await untilStopped(
      Promise.allSettled(
        plan.agents.map((p) =>
          startAgent({
            id: p.id,
            config: p.agent!,
            description: p.description,
            client: joinAs(p.id),
            env: loaded.env,
            logger: logFor(p.id),
            baseDir: dirname(config.file),
            callTimeoutMs: config.calls.timeout_ms,
          }),
        ),
      ),
    );
    agentResults.forEach((r, i) => {
      if (r.status === "fulfilled") {
        running.agents.push(r.value);
        sayMoves(plan.agents[i]!.id, r.value.client);
      } else notice(`could not start agent ${plan.agents[i]!.id}: ${(r.reason as Error).message}`, "error");
    });

    if (routes.length) say(`in the cluster: ${routes.join(", ")}; each joins through another node if its own goes`);

    if (plan.children.length) {
      running.supervisor = new Supervisor({ ...io.supervisor, onNotice: (t, l) => notice(t, l) });
      for (const p of plan.children) {
        running.supervisor.start({
          id: p.id,
          command: p.run!.command,
          args: p.run!.args ?? [],
          cwd: p.run!.cwd ?? dirname(config.file),
          env: {
            ...loaded.env,
            ...p.run!.env,
            MEWGATE_URL: url,
            MEWGATE_SPACE: config.space.id,
            MEWGATE_TOKEN: tokens.get(p.id)!,
            MEWGATE_PARTICIPANT: p.id,
          },
          logFile: join(stateDir, "logs", `${p.id}.log`),
        });
      }
    }
    for (const warning of exposedStateDir(config, stateDir)) notice(warning, "error");
    for (const p of plan.external)
      notice(`${p.id} (${p.kind}) is not started by up (no agent:, mcp: or run: section); it joins with its token`);

    // In the background nobody watches the notices: a declared participant that did not
    // start fails `up --detach` with its error, rather than a success that is not one.
    const failedToStart = [
      ...bridgeResults.flatMap((r, i) =>
        r.status === "rejected" ? [`${plan.bridges[i]!.id}: ${servers.failure(plan.bridges[i]!, r.reason as Error)}`] : [],
      ),
      ...agentResults.flatMap((r, i) => (r.status === "rejected" ? [`agent ${plan.agents[i]!.id}: ${(r.reason as Error).message}`] : [])),
    ];
    if (opts.detachedChild && failedToStart.length)
      throw new CliError(`could not start ${failedToStart.join("; ")} (logs: ${shortPath(join(stateDir, "logs"))}/)`);
    // The foreground half may have left already (it returns once it printed a sign-in link).
    if (opts.detachedChild && process.connected) {
      process.send?.({ type: "ready", url, pid: process.pid });
      process.disconnect?.();
    }

    let terminalDone: Promise<unknown> = new Promise(() => {});
    if (plan.human && !opts.detachedChild) {
      const humanId = plan.human.id;
      const connectHuman = async () => {
        const client = new ParticipantClient(inProcess(humanId));
        await client.connect();
        return client;
      };
      running.human = await connectHuman();
      const terminal = createTerminal({
        client: running.human,
        input: io.stdin,
        output: io.stdout,
        json: opts.json,
        config: space.config,
        env: io.env,
        exitOnEof: false,
        // Someone ran a one-shot command (status, send, …) as this human: take the seat back once it has left.
        reclaim: async () => {
          await waitFor(() => space.delivery.members.get(humanId) === undefined, { timeoutMs: 24 * 3600_000, intervalMs: 200 });
          running.human = await connectHuman();
          return running.human;
        },
      });
      running.terminal = terminal;
      notify = (text, level) => terminal.notice(text, level);
      terminal.start();
      // The token is not printed: terminals get logged. `token show` prints it on demand.
      if (!json)
        terminal.notice(
          `web console: ${url.replace(/^ws/, "http")}/ui/ (sign in as ${humanId} with the token from: mewgate token show ${humanId})`,
        );
      if (json) io.stdout.write(`${JSON.stringify({ event: "ready", url, space: config.space.id, participant: humanId })}\n`);
      terminalDone = terminal.done;
      const agents = greeted(
        plan.agents,
        running.agents.map((a) => a.client.welcome?.id).filter((id): id is string => id !== undefined),
      );
      if (opts.greet !== false && agents.length > 0) {
        await toolsRegistered(
          space,
          servers.running.map((b) => b.id),
        );
        if (!terminal.isEnded) {
          try {
            terminal.chat(greeting(agents), agents);
            if (!json) terminal.notice(`greeted ${agents.join(", ")} (turn this off with --no-greet)`);
          } catch {
            // the terminal has gone meanwhile
          }
        }
      }
    } else if (!opts.detachedChild) {
      say("no human participant to attach the terminal to; the space runs until Ctrl-C");
      if (json) io.stdout.write(`${JSON.stringify({ event: "ready", url, space: config.space.id })}\n`);
    }

    const end = await Promise.race([
      stopped.then(() => undefined),
      terminalDone as Promise<{ reason: string; message?: string } | undefined>,
    ]);
    if (end?.reason === "closed") {
      notice(`${end.message ?? "the terminal's connection to the space ended"}; stopping`, "error");
      return 1;
    }
    return 0;
  } catch (e) {
    if (e instanceof StoppedDuringStart) return 0;
    throw e;
  } finally {
    for (const s of ["SIGINT", "SIGTERM"] as const) process.off(s, onSignal);
    process.off("SIGHUP", onHup);
    notify = (text, level) => say(level === "error" ? `! ${text}` : `· ${text}`);
    // A second Ctrl-C while stopping means "now": the supervisor's exit hook kills the
    // children's process groups, and MCP servers see their stdin close.
    const force = () => {
      say("stopping now (forced)");
      process.exit(130);
    };
    for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(s, force);
    try {
      await shutdown(running, say);
    } finally {
      for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.off(s, force);
    }
  }
}

/** Stops in reverse order of start; never throws. */
async function shutdown(r: Running, say: (text: string) => void): Promise<void> {
  const quietly = async (what: Promise<unknown> | undefined) => {
    try {
      await what;
    } catch {
      // shutting down: nothing to do about it
    }
  };
  if (!r.gateway) return void (await quietly(r.cluster?.bus.stop()));
  say("stopping…");
  r.terminal?.finish({ reason: "quit" });
  await quietly(r.human?.close());
  await Promise.all(r.agents.map((a) => quietly(a.stop())));
  await quietly(r.supervisor?.stop());
  // Bridges still starting (waiting for a sign-in) stop with the rest.
  await Promise.all((r.servers?.all() ?? []).map((b) => quietly(b.stop())));
  await quietly(r.cluster?.stopNodes());
  await quietly(r.gateway.stop());
  await quietly(r.cluster?.bus.stop());
  if (r.files) removeUpRecord(r.files);
  say("stopped");
}

/** Until every bridge has its tools in the registry (or a few seconds have passed): what the agents will want to use. */
async function toolsRegistered(space: Space, bridges: string[]): Promise<void> {
  const ready = () => bridges.every((id) => space.registry.list().some((t) => t.participant === id));
  await waitFor(ready, { timeoutMs: 10_000, intervalMs: 50 });
  // The agents re-list on the same change notification; give that round trip a moment.
  await new Promise((r) => setTimeout(r, 150));
}

function waitFor(cond: () => boolean, o: { timeoutMs: number; intervalMs: number }): Promise<boolean> {
  return new Promise((resolve) => {
    if (cond()) return resolve(true);
    const started = Date.now();
    const timer = setInterval(() => {
      if (cond()) {
        clearInterval(timer);
        resolve(true);
      } else if (Date.now() - started > o.timeoutMs) {
        clearInterval(timer);
        resolve(false);
      }
    }, o.intervalMs);
  });
}
