/**
 * Reads a V8 CPU profile (`node --cpu-prof`, e.g. the gateway under the bench with
 * BENCH_GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof") and prints where its time
 * went: the functions with the most self time, and self time summed by file (the gateway's
 * own files by path, a package's by its name), each as a share of the time not idle.
 *
 *   node dist/bench/profile-summary.js /tmp/prof/CPU.*.cpuprofile [--top 40] [--calls N]
 *
 * `--calls N` also prints the time per call (µs) for N calls handled during the profile.
 */
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** `file:///…/node_modules/@scope/pkg/…` → `@scope/pkg`; `…/dist/gateway/space/x.js` → `gateway/space/x.js`. */
export function where(url: string): string {
  if (!url) return "(native)";
  const nm = url.lastIndexOf("node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + "node_modules/".length).split("/");
    return rest[0]!.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (url.startsWith("node:")) return url;
  const dist = url.lastIndexOf("/dist/");
  if (dist >= 0) return url.slice(dist + "/dist/".length);
  return url.replace(/^file:\/\//, "");
}

const IDLE = new Set(["(idle)", "(program)", "(garbage collector)"]);

export function summarise(profile: Profile, top = 40, calls?: number): string {
  const self = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]!;
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
  const byFn = new Map<string, number>();
  const byFile = new Map<string, number>();
  let busy = 0;
  let idle = 0;
  let gc = 0;
  for (const n of profile.nodes) {
    const us = self.get(n.id) ?? 0;
    if (!us) continue;
    const name = n.callFrame.functionName || "(anonymous)";
    if (name === "(idle)") {
      idle += us;
      continue;
    }
    if (name === "(garbage collector)") gc += us;
    busy += us;
    const file = IDLE.has(name) ? name : where(n.callFrame.url);
    const fn = `${name}  ${file}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ""}`;
    byFn.set(fn, (byFn.get(fn) ?? 0) + us);
    byFile.set(file, (byFile.get(file) ?? 0) + us);
  }
  const pct = (us: number) => `${((us / busy) * 100).toFixed(1).padStart(5)}%`;
  const ms = (us: number) => `${(us / 1000).toFixed(0).padStart(6)} ms`;
  const per = (us: number) => (calls ? `  ${(us / calls).toFixed(1).padStart(7)} µs/call` : "");
  const lines = [
    `busy ${ms(busy)} (idle ${ms(idle)}, garbage collector ${ms(gc)} of the busy time)${calls ? `, ${calls} calls: ${(busy / calls).toFixed(1)} µs of CPU per call` : ""}`,
    "",
    "self time by file:",
  ];
  for (const [file, us] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(us)} ${ms(us)}${per(us)}  ${file}`);
  lines.push("", "self time by function:");
  for (const [fn, us] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(us)} ${ms(us)}${per(us)}  ${fn}`);
  return lines.join("\n");
}

if (process.argv[1]?.endsWith("profile-summary.js")) {
  const args = process.argv.slice(2);
  const opt = (name: string) => {
    const i = args.indexOf(name);
    if (i < 0) return undefined;
    const v = Number(args[i + 1]);
    args.splice(i, 2);
    return v;
  };
  const top = opt("--top") ?? 40;
  const calls = opt("--calls");
  if (args.length === 0) {
    process.stderr.write("usage: node dist/bench/profile-summary.js <file.cpuprofile> [--top N] [--calls N]\n");
    process.exit(2);
  }
  for (const file of args) {
    process.stdout.write(`${file}\n${summarise(JSON.parse(readFileSync(file, "utf8")) as Profile, top, calls)}\n\n`);
  }
}
