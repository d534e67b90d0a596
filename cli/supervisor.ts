/**
 * External participants (`run:` in space.yaml) as child processes: started with their
 * connection details in the environment, output appended to a log file, restarted with
 * exponential backoff and full jitter when they exit on their own (a bounded number of
 * times in a row), and stopped with SIGTERM, then SIGKILL after a grace period.
 *
 * Each child leads its own process group, so stopping it also stops whatever it started,
 * and a Ctrl-C at the terminal reaches `up` alone, which then stops everyone in order.
 *
 * Should `up` itself be killed (kill -9 leaves it no time to stop anyone), a watchdog stops
 * the children: a small process of its own group, reading on its stdin which groups are
 * running; the kernel closes that pipe when `up` dies, however it dies, and the watchdog
 * then stops each group (SIGTERM, SIGKILL after a moment) and exits.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { backoffDelay } from "../participants/index.js";
import { lastErrorLine, spawnFailure } from "./failure.js";

export interface ChildSpec {
  id: string;
  command: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  logFile: string;
}

export interface SupervisorOptions {
  /** First restart waits up to this long (full jitter). Default 500. */
  initialDelayMs?: number;
  /** Cap of the backoff ceiling. Default 30 000. */
  maxDelayMs?: number;
  /** Restarts in a row (without a stable run in between) before giving up. Default 5. */
  maxRestarts?: number;
  /** A run this long counts as stable and resets the count. Default 10 000. */
  stableMs?: number;
  /** SIGTERM → SIGKILL grace on stop. Default 5 000. */
  graceMs?: number;
  /** Things a person should know: exits, restarts, giving up. */
  onNotice?: (text: string, level: "info" | "error") => void;
}

interface Supervised {
  spec: ChildSpec;
  child: ChildProcess | undefined;
  startedAt: number;
  restarts: number;
  timer: NodeJS.Timeout | undefined;
  exited: Promise<void> | undefined;
}

/** The watchdog (run with `node -e`): `+pid` / `-pid` lines name the running groups; at end of input, stop them all. */
const WATCHDOG = `
const groups = new Set();
let buf = "", done = false;
const kill = (sig) => { for (const g of groups) { try { process.kill(-g, sig); } catch {} } };
const end = () => {
  if (done) return;
  done = true;
  kill("SIGTERM");
  setTimeout(() => { kill("SIGKILL"); process.exit(0); }, groups.size ? 2000 : 0);
};
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => {
  buf += d;
  for (let i = buf.indexOf("\\n"); i >= 0; i = buf.indexOf("\\n")) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    const pid = Number(line.slice(1));
    if (!Number.isInteger(pid) || pid <= 1) continue;
    if (line[0] === "+") groups.add(pid);
    else groups.delete(pid);
  }
});
process.stdin.on("end", end);
process.stdin.on("close", end);
process.stdin.on("error", end);
const parent = process.ppid;
setInterval(() => { if (process.ppid !== parent) end(); }, 500);
`;

export class Supervisor {
  private readonly children = new Map<string, Supervised>();
  private watchdog: ChildProcess | undefined;
  private stopping = false;
  private readonly o: Required<Omit<SupervisorOptions, "onNotice">> & Pick<SupervisorOptions, "onNotice">;
  /** Last resort if `up` exits without `stop()`: never leave a process group behind. */
  private readonly onExit = () => {
    for (const s of this.children.values()) if (s.child?.pid && s.child.exitCode === null) killGroup(s.child.pid, "SIGKILL");
  };

  constructor(opts: SupervisorOptions = {}) {
    this.o = {
      initialDelayMs: opts.initialDelayMs ?? 500,
      maxDelayMs: opts.maxDelayMs ?? 30_000,
      maxRestarts: opts.maxRestarts ?? 5,
      stableMs: opts.stableMs ?? 10_000,
      graceMs: opts.graceMs ?? 5_000,
      onNotice: opts.onNotice,
    };
    process.on("exit", this.onExit);
  }

  /** pids of the children running now (for tests and `status`). */
  pids(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [id, s] of this.children)
      if (s.child?.pid && s.child.exitCode === null && s.child.signalCode === null) out.set(id, s.child.pid);
    return out;
  }

  start(spec: ChildSpec): void {
    if (this.children.has(spec.id)) throw new Error(`${spec.id} is already supervised`);
    const s: Supervised = { spec, child: undefined, startedAt: 0, restarts: 0, timer: undefined, exited: undefined };
    this.children.set(spec.id, s);
    this.launch(s);
  }

  private launch(s: Supervised): void {
    if (this.stopping) return;
    const { spec } = s;
    mkdirSync(dirname(spec.logFile), { recursive: true, mode: 0o700 });
    const fd = openSync(spec.logFile, "a", 0o600);
    writeSync(fd, `--- ${new Date().toISOString()} mewgate up: starting ${spec.id}: ${[spec.command, ...spec.args].join(" ")}\n`);
    let child: ChildProcess;
    try {
      child = spawn(spec.command, spec.args, { cwd: spec.cwd, env: spec.env, stdio: ["ignore", fd, fd], detached: true });
    } finally {
      // The child holds its own copy of the descriptor.
      closeSync(fd);
    }
    s.child = child;
    s.startedAt = Date.now();
    if (child.pid) this.tellWatchdog(`+${child.pid}`);
    s.exited = new Promise((resolve) => {
      let settled = false;
      const done = (code: number | null, signal: NodeJS.Signals | null, error?: Error) => {
        if (settled) return;
        settled = true;
        resolve();
        this.exited(s, child, code, signal, error);
      };
      child.once("exit", (code, signal) => done(code, signal));
      child.once("error", (err) => done(null, null, err));
    });
  }

  private exited(s: Supervised, child: ChildProcess, code: number | null, signal: NodeJS.Signals | null, error: Error | undefined): void {
    if (s.child !== child) return;
    s.child = undefined;
    if (child.pid) this.tellWatchdog(`-${child.pid}`);
    // Whatever it started dies with it; a restart starts afresh.
    if (child.pid) killGroup(child.pid, "SIGKILL", false);
    if (this.stopping) return;
    // One line with the cause: the command missing, or what its log last said went wrong.
    const said = !error && !signal ? lastErrorLine(s.spec.logFile) : undefined;
    const how = error
      ? spawnFailure(s.spec.command, error)
      : signal
        ? `was killed by ${signal}`
        : `exited with code ${code}${said ? `: ${said}` : ""}`;
    if (Date.now() - s.startedAt >= this.o.stableMs) s.restarts = 0;
    if (s.restarts >= this.o.maxRestarts) {
      this.o.onNotice?.(
        `${s.spec.id}${error ? ":" : ""} ${how}; gave up after ${s.restarts} restarts in a row (log: ${s.spec.logFile})`,
        "error",
      );
      return;
    }
    const delay = Math.max(50, backoffDelay(s.restarts, this.o.initialDelayMs, this.o.maxDelayMs));
    s.restarts++;
    this.o.onNotice?.(
      `${s.spec.id}${error ? ":" : ""} ${how}; restarting in ${(delay / 1000).toFixed(1)} s (attempt ${s.restarts} of ${this.o.maxRestarts}; log: ${s.spec.logFile})`,
      "error",
    );
    s.timer = setTimeout(() => this.launch(s), delay);
  }

  /** Tells the watchdog of a group started (`+pid`) or gone (`-pid`), starting it the first time. */
  private tellWatchdog(line: string): void {
    if (!this.watchdog) {
      try {
        this.watchdog = spawn(process.execPath, ["-e", WATCHDOG], { stdio: ["pipe", "ignore", "ignore"], detached: true });
      } catch {
        return;
      }
      this.watchdog.on("error", () => {});
      this.watchdog.stdin?.on("error", () => {});
      // Neither keeps `up` running.
      this.watchdog.unref();
      (this.watchdog.stdin as unknown as { unref?: () => void } | null)?.unref?.();
    }
    this.watchdog.stdin?.write(`${line}\n`);
  }

  /** Stops every child: SIGTERM to its process group, SIGKILL after the grace period; resolves when all have exited. */
  async stop(): Promise<void> {
    this.stopping = true;
    const waits: Promise<void>[] = [];
    for (const s of this.children.values()) {
      clearTimeout(s.timer);
      const child = s.child;
      if (!child?.pid || child.exitCode !== null || child.signalCode !== null) continue;
      const pid = child.pid;
      killGroup(pid, "SIGTERM");
      const exited = s.exited!;
      waits.push(
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            killGroup(pid, "SIGKILL");
            this.o.onNotice?.(`${s.spec.id} did not stop within ${this.o.graceMs} ms; killed`, "error");
          }, this.o.graceMs);
          void exited.then(() => {
            clearTimeout(timer);
            // The leader is gone; anything it left in its group goes too. (Only the group: the
            // pid alone may already belong to someone else.)
            killGroup(pid, "SIGKILL", false);
            resolve();
          });
        }),
      );
    }
    await Promise.all(waits);
    this.watchdog?.stdin?.end();
    process.off("exit", this.onExit);
  }
}

function killGroup(pid: number, signal: NodeJS.Signals, orLeader = true): void {
  try {
    process.kill(-pid, signal);
  } catch {
    if (!orLeader) return;
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}
