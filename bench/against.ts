/**
 * `npm run bench -- --against <git-ref> [scenarios] [--rounds N]`: this working tree's build
 * against the build of another commit, side by side, on the same machine in the same run.
 *
 * The ref is checked out (`git archive`) into a directory of its own under the system's
 * temporary directory and built there with its own build script; a build is kept per commit
 * and used again by later runs (a commit's build never changes). Its node_modules is this
 * tree's when the two lockfiles are the same, else its own `npm ci`.
 *
 * Both sides run this tree's bench code (the load clients, the naive forwarder, the
 * figures): for the ref, a copy of this dist/bench is put beside the ref's dist, so the
 * gateway it starts is the ref's and so is what an in-process scenario imports. Each
 * scenario runs in a child process per side, the sides alternating (this, ref, ref, this,
 * …) so that a busy moment on a shared machine falls on both; each figure is the median of
 * its side's rounds, printed beside the other's with their ratio, and under each scenario
 * the CPU each side used: its gateway processes' (user + system, from /proc) and the bench
 * process's own (the clients, and the gateway of an in-process scenario).
 *
 * A scenario the ref cannot run (its gateway lacks what the scenario uses) prints as failed
 * for that side; the other side's figures still print.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { cpSync, existsSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ChildReport, JsonRow } from "./report.js";
import { median } from "./stats.js";

/** dist/bench of this tree. */
const HERE = dirname(fileURLToPath(import.meta.url));
/** This working tree: dist/bench/../.. */
const ROOT = join(HERE, "..", "..");
/** One scenario's run on one side may take this long before it is killed (idle and attention are the long ones). */
const CHILD_TIMEOUT_MS = 30 * 60_000;

interface Side {
  /** "this" or the ref as given. */
  name: string;
  /** The run.js to start. */
  runJs: string;
}

interface SideRun {
  report?: ChildReport | undefined;
  error?: string | undefined;
}

function git(args: string[], cwd = ROOT): string {
  return execFileSync("git", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
}

function run(cmd: string, args: string[], cwd: string, log: (s: string) => void): void {
  log(`${cmd} ${args.join(" ")}  (in ${cwd})`);
  execFileSync(cmd, args, { cwd, stdio: ["ignore", "inherit", "inherit"] });
}

/**
 * The ref's build, made once per commit: returns the directory holding its package.json
 * and dist/. Built in a directory of its own and renamed into place, so a run interrupted
 * half-way, or two runs at once, never leave or use a half-built tree.
 */
export function buildRef(sha: string, log: (s: string) => void): string {
  const cache = join(tmpdir(), "mewgate-bench-against");
  const dir = join(cache, sha);
  const lock = readFileSync(join(ROOT, "package-lock.json"), "utf8");
  if (existsSync(join(dir, ".built"))) {
    // A build that borrowed this tree's node_modules is only good while the lockfiles agree.
    const linked = lstatSync(join(dir, "node_modules")).isSymbolicLink();
    if (!linked || readFileSync(join(dir, "package-lock.json"), "utf8") === lock) return dir;
    log(`the build of ${sha.slice(0, 12)} used this tree's node_modules and the lockfiles now differ: building it again`);
    rmSync(dir, { recursive: true, force: true });
  }
  mkdirSync(cache, { recursive: true });
  const work = `${dir}.building-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work);
  try {
    log(`checking out ${sha.slice(0, 12)} into ${work}`);
    const tar = `${work}.tar`;
    try {
      git(["archive", "--format=tar", "-o", tar, sha]);
      execFileSync("tar", ["-xf", tar, "-C", work]);
    } finally {
      rmSync(tar, { force: true });
    }
    if (readFileSync(join(work, "package-lock.json"), "utf8") === lock && existsSync(join(ROOT, "node_modules"))) {
      log("same package-lock.json as this tree: using its node_modules");
      execFileSync("ln", ["-s", join(ROOT, "node_modules"), join(work, "node_modules")]);
    } else {
      // Install scripts are not run: the build needs none (esbuild's binary comes as a package).
      run("npm", ["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"], work, log);
    }
    run("npm", ["run", "build"], work, log);
    writeFileSync(join(work, ".built"), `${new Date().toISOString()}\n`);
    try {
      renameSync(work, dir);
    } catch (err) {
      // Another run built it meanwhile: use theirs.
      if (!existsSync(join(dir, ".built"))) throw err;
      rmSync(work, { recursive: true, force: true });
    }
  } catch (err) {
    rmSync(work, { recursive: true, force: true });
    throw err;
  }
  return dir;
}

/**
 * This tree's build as it is now, copied aside: a rebuild while the run goes on (the next
 * change being made) must not change what "this" measures half-way. What the bench reads
 * beside dist/ (node_modules, the test fixtures a scenario starts) is linked, not copied.
 */
function snapshotThis(): string {
  const dir = join(tmpdir(), `mewgate-bench-this-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  cpSync(join(ROOT, "dist"), join(dir, "dist"), { recursive: true });
  cpSync(join(ROOT, "package.json"), join(dir, "package.json"));
  for (const name of ["node_modules", "test", "ui", "spaces"])
    if (existsSync(join(ROOT, name))) symlinkSync(join(ROOT, name), join(dir, name));
  return dir;
}

/** The side running now, stopped if this process is interrupted. */
let current: ChildProcess | undefined;

/** Runs one scenario on one side in a child process: its progress goes to stderr, its report comes back. */
function runSide(side: Side, scenario: string): Promise<SideRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [side.runJs, scenario, "--child"], { stdio: ["ignore", "pipe", "pipe"] });
    current = child;
    let stdout = "";
    let tail = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (s: string) => {
      stdout += s;
    });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (s: string) => {
      tail = (tail + s).slice(-2000);
      for (const line of s.split("\n")) if (line.trim()) process.stderr.write(`  [${side.name}] ${line}\n`);
    });
    const timer = setTimeout(() => child.kill("SIGTERM"), CHILD_TIMEOUT_MS);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      current = undefined;
      const last = stdout.trim().split("\n").pop() ?? "";
      try {
        const report = JSON.parse(last) as ChildReport;
        resolve({ report, error: report.failed ? "a scenario failed (its error is above)" : undefined });
      } catch {
        resolve({
          error: `exited with ${signal ?? code} and no report${tail ? `: ${tail.trim().split("\n").slice(-3).join(" | ")}` : ""}`,
        });
      }
    });
  });
}

type Direction = "higher" | "lower" | undefined;

/** Which way is better for a figure: rates up, times and sizes down; anything else is left to the reader. */
function direction(r: JsonRow): Direction {
  if (r.unit === "del/s" || /per second/.test(r.label)) return "higher";
  if (r.unit === "µs" || r.unit === "ms" || r.unit === "KiB" || r.unit === "MiB") return "lower";
  return undefined;
}

function fmt(v: number, unit: string): string {
  const n = Math.abs(v) >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(Math.abs(v) >= 10 ? 1 : 2);
  return unit ? `${n} ${unit}` : n;
}

export interface MergedRow {
  scenario: string;
  label: string;
  unit: string;
  /** Per side, each round's figure (a string figure as printed). */
  rounds: Record<string, Array<number | string>>;
  /** Per side, each round's ratio to its own baseline (the row's "naive"). */
  baseRatios: Record<string, number[]>;
  /** Per side, the median figure (numbers only). */
  median: Record<string, number | undefined>;
  /** this / ref of the medians. */
  ratio?: number | undefined;
  better?: Direction;
}

/** Rows of every round of both sides, matched by scenario and label, in the order first seen. */
export function merge(runs: Record<string, ChildReport[]>): MergedRow[] {
  const out = new Map<string, MergedRow>();
  const sides = Object.keys(runs);
  for (const side of sides) {
    for (const report of runs[side]!) {
      for (const r of report.rows) {
        const key = `${r.scenario}\u0000${r.label}`;
        let m = out.get(key);
        if (!m) {
          m = {
            scenario: r.scenario,
            label: r.label,
            unit: r.unit,
            rounds: Object.fromEntries(sides.map((s) => [s, []])),
            baseRatios: Object.fromEntries(sides.map((s) => [s, []])),
            median: {},
            better: direction(r),
          };
          out.set(key, m);
        }
        m.rounds[side]!.push(r.gateway);
        if (typeof r.ratio === "number" && Number.isFinite(r.ratio)) m.baseRatios[side]!.push(r.ratio);
      }
    }
  }
  for (const m of out.values()) {
    for (const side of sides) {
      const nums = m.rounds[side]!.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
      m.median[side] = nums.length ? median(nums) : undefined;
    }
    const [a, b] = sides.map((s) => m.median[s]);
    if (a !== undefined && b !== undefined && b !== 0) m.ratio = a / b;
  }
  return [...out.values()];
}

function verdict(m: MergedRow): string {
  if (m.ratio === undefined || m.better === undefined) return "";
  if (Math.abs(m.ratio - 1) < 0.05) return "within 5%";
  return m.ratio < 1 === (m.better === "lower") ? "better" : "worse";
}

/** A figure given as text (a scenario's "not run: …") kept to a column's width. */
function clipCell(s: string): string {
  return s.length > 48 ? `${s.slice(0, 47)}…` : s;
}

/** The side-by-side table: figure on each side (with its ratio to its own baseline), this / ref, and which way. */
export function sideBySide(rows: MergedRow[], sides: [string, string]): string {
  const cell = (m: MergedRow, side: string): string => {
    const med = m.median[side];
    const rounds = m.rounds[side]!;
    if (med === undefined) return rounds.length ? clipCell(String(rounds[0])) : "failed";
    const base = m.baseRatios[side]!;
    return `${fmt(med, m.unit)}${base.length ? ` (${median(base).toFixed(2)}× base)` : ""}`;
  };
  const head = ["", sides[0], sides[1], `${sides[0]} / ${sides[1]}`, ""];
  const cells = rows.map((m) => [
    m.label,
    cell(m, sides[0]),
    cell(m, sides[1]),
    m.ratio === undefined ? "" : m.ratio.toFixed(2),
    verdict(m),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    c
      .map((x, i) => x.padEnd(widths[i]!))
      .join("   ")
      .trimEnd();
  const lines = [line(head)];
  rows.forEach((m, i) => {
    lines.push(line(cells[i]!));
    const each = sides.map((s) => `${s} ${m.rounds[s]!.map((v) => (typeof v === "number" ? fmt(v, "") : clipCell(v))).join(" / ")}`);
    lines.push(`    rounds: ${each.join("; ")}`);
  });
  return lines.join("\n");
}

function cpuLine(runs: Record<string, ChildReport[]>, sides: [string, string]): string {
  const med = (side: string, k: "gatewayCpuMs" | "benchCpuMs") => median(runs[side]!.map((r) => r[k]));
  const part = (k: "gatewayCpuMs" | "benchCpuMs") => {
    const [a, b] = sides.map((s) => (runs[s]!.length ? med(s, k) : Number.NaN)) as [number, number];
    const ratio = b > 0 ? ` (${(a / b).toFixed(2)})` : "";
    return `${sides[0]} ${Math.round(a).toLocaleString("en-US")} ms, ${sides[1]} ${Math.round(b).toLocaleString("en-US")} ms${ratio}`;
  };
  return `CPU per run, medians: gateway processes ${part("gatewayCpuMs")}; bench process (clients, in-process gateways) ${part("benchCpuMs")}`;
}

/**
 * The whole `--against` run; resolves to the exit code (non-zero only if the bench itself
 * broke: a ref that does not build, or a scenario that failed on this side).
 */
export async function against(ref: string, scenarios: readonly string[], opts: { rounds: number; json: boolean }): Promise<number> {
  const out = (s: string) => (opts.json ? process.stderr : process.stdout).write(`${s}\n`);
  const log = (s: string) => process.stderr.write(`  .. ${s}\n`);
  let sha: string;
  try {
    sha = git(["rev-parse", "--verify", `${ref}^{commit}`]);
  } catch {
    process.stderr.write(`bench: --against ${ref}: not a commit in ${ROOT}\n`);
    return 2;
  }
  const head = git(["rev-parse", "--short=12", "HEAD"]);
  const dirty = git(["status", "--porcelain", "--untracked-files=no"]) !== "";
  const refDir = buildRef(sha, log);
  // This tree's bench beside the ref's dist: its imports of ../gateway and ../cli reach the ref's.
  const overlay = join(refDir, "dist", `bench-against-${process.pid}`);
  rmSync(overlay, { recursive: true, force: true });
  cpSync(HERE, overlay, { recursive: true });
  const snapshot = snapshotThis();
  const cleanUp = () => {
    current?.kill("SIGTERM");
    rmSync(overlay, { recursive: true, force: true });
    rmSync(snapshot, { recursive: true, force: true });
  };
  // Interrupted, the process exits (procs.ts turns SIGINT and SIGTERM into an exit): the side running stops too.
  process.once("exit", cleanUp);
  const sides: [Side, Side] = [
    { name: "this", runJs: join(snapshot, "dist", "bench", "run.js") },
    { name: ref, runJs: join(overlay, "run.js") },
  ];
  const names: [string, string] = [sides[0].name, sides[1].name];
  const merged: MergedRow[] = [];
  let code = 0;
  const began = performance.now();
  try {
    out(`mewgate bench --against ${ref}: node ${process.version}, ${opts.rounds} rounds of each scenario on each side, alternating`);
    out(`this: ${ROOT} at ${head}${dirty ? " with uncommitted changes" : ""} (its dist/ as it was at the start, copied aside)`);
    out(`${ref}: ${sha.slice(0, 12)}, built in ${refDir}`);
    out(`both sides run this tree's bench code; "× base" is a figure's ratio to the baseline its scenario measured in the same run`);
    for (const scenario of scenarios) {
      out(`\n${scenario}`);
      const runs: Record<string, ChildReport[]> = { [names[0]]: [], [names[1]]: [] };
      const errors: string[] = [];
      for (let round = 0; round < opts.rounds; round++) {
        // this, ref, ref, this, …: a drift in the machine's load falls on both.
        for (const side of round % 2 === 0 ? sides : [sides[1], sides[0]]) {
          log(`${scenario}: round ${round + 1} of ${opts.rounds}, ${side.name}`);
          const r = await runSide(side, scenario);
          if (r.report) runs[side.name]!.push(r.report);
          if (r.error) {
            errors.push(`${side.name}, round ${round + 1}: ${r.error}`);
            if (side === sides[0]) code = 1;
          }
        }
      }
      const rows = merge(runs);
      merged.push(...rows);
      if (rows.length) out(sideBySide(rows, names));
      out(cpuLine(runs, names));
      const noise = Math.max(0, ...Object.values(runs).flatMap((rs) => rs.map((r) => r.noise)));
      if (noise >= 0.1) out(`other processes kept up to ${Math.round(noise * 100)}% of a core busy during some measurements`);
      for (const e of errors) out(`failed: ${e}`);
    }
    out(`\n(${((performance.now() - began) / 1000).toFixed(0)} s)`);
    if (opts.json) process.stdout.write(`${JSON.stringify({ this: head, against: { ref, sha }, rows: merged }, null, 2)}\n`);
  } finally {
    cleanUp();
    process.off("exit", cleanUp);
  }
  return code;
}
