/**
 * The two servers under test, each in its own child process so that its RSS and CPU time
 * are its own, read from /proc/<pid>.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { get } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { WebSocket } from "ws";

const here = dirname(fileURLToPath(import.meta.url));
/** dist/cli/main.js and dist/bench/naive.js, next to this compiled file. */
export const GATEWAY_MAIN = join(here, "..", "cli", "main.js");
export const NAIVE_MAIN = join(here, "naive.js");

/** The gateway, the naive forwarder, and the forwarder that stamps (`naive.js --stamp`: the floor of any MEW gateway). */
export type ServerKind = "gateway" | "naive" | "floor";

export interface ServerProc {
  kind: ServerKind;
  pid: number;
  port: number;
  /** `ws://127.0.0.1:PORT` */
  base: string;
  /** ms from spawn() to the printed ws:// line. */
  printedMs: number;
  /** ms from spawn() to a 200 from /healthz. */
  healthyMs: number;
  /** What it printed up to and with its ws:// line. */
  printed: string;
  /** The inspector's ws:// address, when started with `inspect`. */
  inspector?: string | undefined;
  child: ChildProcess;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();

/**
 * CPU time (user + system, ms) the gateway processes this bench started used, read from
 * /proc just before each is stopped: what `--against` prints for each build (bench/against.ts).
 */
let gatewayCpuTotal = 0;

export function gatewayCpuMs(): number {
  return gatewayCpuTotal;
}

/** Last resort on an abnormal exit of the bench: no server outlives it. */
process.on("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});
// Interrupted (Ctrl-C, or `--against` stopping one of its sides): exit, so that the above runs.
for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => process.exit(signal === "SIGINT" ? 130 : 143));

/**
 * Pinning: each server gets the last core to itself and the load clients (this process,
 * all its threads) the others. Without it the scheduler moves four busy processes' worth
 * of work (server, clients, and the kernel's loopback TCP work charged to each) around two
 * cores, and the same run varies by a third from one round to the next. It also makes the
 * figure that matters for sizing: what one gateway does on one core.
 * BENCH_PIN=0 turns it off; it is off where `taskset` is missing or there is one core.
 */
let serverCpu: number | undefined;

export function pinCores(): string {
  const cores = availableParallelism();
  if (process.env["BENCH_PIN"] === "0") return "not pinned (BENCH_PIN=0)";
  if (cores < 2) return "not pinned (one core)";
  try {
    execFileSync("taskset", ["-a", "-p", "-c", `0-${cores - 2}`, String(process.pid)], { stdio: "ignore" });
  } catch {
    return "not pinned (taskset failed or missing)";
  }
  serverCpu = cores - 1;
  return `servers pinned to core ${serverCpu}, load clients to core${cores > 2 ? `s 0-${cores - 2}` : " 0"}`;
}

/** Extra node flags for the gateway child, e.g. BENCH_GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof". */
function gatewayNodeArgs(): string[] {
  return (process.env["BENCH_GATEWAY_NODE_ARGS"] ?? "").split(/\s+/).filter(Boolean);
}

export interface StartOptions {
  /**
   * Open the inspector on 127.0.0.1 (a random port) so the bench can force a full GC before
   * reading RSS (see `collectGarbage`).
   */
  inspect?: boolean;
  /** More arguments for `mewgate gateway` (`--cluster`, `--node`). */
  args?: string[];
  /** More environment (`OTEL_*`). */
  env?: NodeJS.ProcessEnv;
  /** Another build's dist/cli/main.js (bench/profile.ts). */
  main?: string;
  /** A command the node process runs under (`valgrind --tool=callgrind …`). */
  wrap?: string[];
}

const INSPECT = "--inspect=127.0.0.1:0";

export function startGateway(configFile: string, dir: string, opts: StartOptions = {}): Promise<ServerProc> {
  const args = [
    ...(opts.inspect ? [INSPECT] : []),
    ...gatewayNodeArgs(),
    opts.main ?? GATEWAY_MAIN,
    "gateway",
    "--config",
    configFile,
    "--port",
    "0",
    "--log-file",
    join(dir, "gw.log"),
    "--state-dir",
    join(dir, "state"),
    ...(opts.args ?? []),
  ];
  return startServer("gateway", args, opts.wrap ? 120_000 : undefined, opts.env, opts.wrap);
}

export function startNaive(opts: StartOptions & { stamp?: boolean } = {}): Promise<ServerProc> {
  const nodeArgs = (process.env["BENCH_NAIVE_NODE_ARGS"] ?? "").split(/\s+/).filter(Boolean);
  return startServer(opts.stamp ? "floor" : "naive", [
    ...(opts.inspect ? [INSPECT] : []),
    ...nodeArgs,
    NAIVE_MAIN,
    "0",
    ...(opts.stamp ? ["--stamp"] : []),
  ]);
}

/**
 * Spawns a server and resolves once it has printed its ws:// line and answered /healthz.
 * The clock starts just before spawn(), so the figure includes node's own start-up.
 */
function startServer(
  kind: ServerKind,
  args: string[],
  timeoutMs = 15_000,
  env?: NodeJS.ProcessEnv,
  wrap: string[] = [],
): Promise<ServerProc> {
  const t0 = performance.now();
  // taskset (and valgrind) exec node in place, so the child's pid is node's own.
  const command = [...wrap, process.execPath, ...args];
  const [cmd, argv] = serverCpu === undefined ? [command[0]!, command.slice(1)] : ["taskset", ["-c", String(serverCpu), ...command]];
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"], ...(env ? { env: { ...process.env, ...env } } : {}) });
  live.add(child);
  let stderr = "";
  let inspector: string | undefined;
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (s: string) => {
    stderr = (stderr + s).slice(-4000);
    inspector ??= /Debugger listening on (ws:\/\/\S+)/.exec(stderr)?.[1];
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  exited.then(() => live.delete(child));

  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    if (kind === "gateway") {
      try {
        gatewayCpuTotal += cpuMs(child.pid!);
      } catch {
        // Gone between the check and the read: its CPU is not counted.
      }
    }
    child.kill("SIGTERM");
    // The gateway gives its sockets up to 2 s to close; past 6 s it is killed.
    const killed = await Promise.race([exited.then(() => false), sleep(wrap.length ? 60_000 : 6000).then(() => true)]);
    if (killed) {
      child.kill("SIGKILL");
      await exited;
    }
  };

  return new Promise<ServerProc>((resolve, reject) => {
    let stdout = "";
    let settled = false;
    const fail = (why: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void stop();
      reject(new Error(`${kind} did not start: ${why}${stderr ? `\n${stderr.trim()}` : ""}`));
    };
    const timer = setTimeout(() => fail(`no ws:// line within ${timeoutMs} ms`), timeoutMs);
    child.once("exit", (code, signal) => fail(`exited with ${signal ?? code}`));
    child.once("error", (err) => fail(err.message));
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (s: string) => {
      if (settled) return;
      stdout += s;
      const m = /ws:\/\/[^\s/]+:(\d+)/.exec(stdout);
      if (!m) return;
      const printedMs = performance.now() - t0;
      const port = Number(m[1]);
      waitHealthy(port, 5000).then(
        () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          resolve({
            kind,
            pid: child.pid!,
            port,
            base: `ws://127.0.0.1:${port}`,
            printedMs,
            healthyMs: performance.now() - t0,
            printed: stdout,
            inspector,
            child,
            stop,
          });
        },
        (err: Error) => fail(err.message),
      );
    });
  });
}

function healthz(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = get({ host: "127.0.0.1", port, path: "/healthz", agent: false, timeout: 1000 }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode === 200));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
  });
}

async function waitHealthy(port: number, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await healthz(port)) return;
    await sleep(5);
  }
  throw new Error(`/healthz on port ${port} did not answer 200 within ${timeoutMs} ms`);
}

export interface HeapFigures {
  heapUsed: number;
  external: number;
  arrayBuffers: number;
}

/**
 * Forces a full garbage collection in a server started with `inspect`, through the
 * inspector protocol, and returns its heap figures afterwards. Without this, an RSS
 * difference says more about when V8 last collected than about what a connection keeps:
 * a gateway that parsed a 5,000-participant space.yaml at start has tens of MiB of
 * garbage-filled heap that new connections can fill without RSS moving at all.
 */
export async function collectGarbage(server: ServerProc, timeoutMs = 10_000): Promise<HeapFigures> {
  const session = await inspectorSession(server, timeoutMs);
  try {
    await session.call("HeapProfiler.collectGarbage");
    const res = (await session.call("Runtime.evaluate", { expression: "JSON.stringify(process.memoryUsage())", returnByValue: true })) as {
      result?: { value?: unknown };
    };
    const usage = JSON.parse(String(res.result?.value)) as HeapFigures;
    return { heapUsed: usage.heapUsed, external: usage.external, arrayBuffers: usage.arrayBuffers };
  } finally {
    session.close();
  }
}

export interface InspectorSession {
  /** One inspector protocol method; resolves to its result. */
  call(method: string, params?: unknown): Promise<unknown>;
  close(): void;
}

/** A session on the inspector of a server started with `inspect` (GC, the CPU profiler). */
export async function inspectorSession(server: ServerProc, timeoutMs = 10_000): Promise<InspectorSession> {
  if (!server.inspector) throw new Error(`${server.kind} was not started with the inspector`);
  const ws = new WebSocket(server.inspector, { perMessageDeflate: false, maxPayload: 1024 * 1024 * 1024 });
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  let nextId = 0;
  return {
    call: (method, params) =>
      new Promise((resolve, reject) => {
        const id = ++nextId;
        const timer = setTimeout(() => reject(new Error(`inspector: ${method} timed out`)), timeoutMs);
        const onMessage = (data: Buffer) => {
          const msg = JSON.parse(data.toString("utf8")) as { id?: number; error?: { message: string }; result?: unknown };
          if (msg.id !== id) return;
          clearTimeout(timer);
          ws.off("message", onMessage);
          if (msg.error) reject(new Error(`inspector: ${method}: ${msg.error.message}`));
          else resolve(msg.result);
        };
        ws.on("message", onMessage);
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.terminate(),
  };
}

/** Resident set size in bytes (VmRSS of /proc/<pid>/status). */
export function rss(pid: number): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

// USER_HZ is 100 on every Linux this runs on; /proc/<pid>/stat counts in those ticks.
const TICK_MS = 10;

/** User + system CPU time of a process in ms, from /proc/<pid>/stat. */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the parenthesised command name, which may itself contain spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
}

/**
 * CPU time the rest of the machine spent in user mode, in ms: all user time from
 * /proc/stat minus that of this process and of `serverPid`. Other people's builds and
 * tests on a shared box show up here; the report prints it so a noisy figure is known
 * to be one. (User time only: the kernel's loopback TCP work is not reliably charged to
 * the process that caused it, so counting system time would blame others for it.)
 */
export function othersUserMs(serverPid?: number): number {
  const fields = readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!.trim().split(/\s+/);
  const allUser = (Number(fields[1]) + Number(fields[2])) * TICK_MS;
  let serverUser = 0;
  if (serverPid !== undefined) {
    const stat = readFileSync(`/proc/${serverPid}/stat`, "utf8");
    serverUser = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[11]) * TICK_MS;
  }
  return allUser - serverUser - process.cpuUsage().user / 1000;
}

/**
 * Before a timed round on a shared machine: waits (at most `maxMs`) for a 250 ms stretch
 * in which other processes used less than `cores` of CPU. Returns the last reading.
 */
export async function calm(maxMs = 3000, cores = 0.15): Promise<number> {
  const deadline = performance.now() + maxMs;
  let busy = Infinity;
  while (performance.now() < deadline) {
    const a = othersUserMs();
    const t = performance.now();
    await sleep(250);
    busy = Math.max(0, (othersUserMs() - a) / (performance.now() - t));
    if (busy < cores) break;
  }
  return busy;
}

/** The soft limit on open files of this process (inherited by the servers). */
export function openFileLimit(): number {
  const m = /^Max open files\s+(\S+)/m.exec(readFileSync("/proc/self/limits", "utf8"));
  return m && m[1] !== "unlimited" ? Number(m[1]) : Infinity;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
