/**
 * `mewgate down` and `mewgate status`: the other ends of `mewgate up`.
 *
 * `down` stops exactly the process named in `<state>/up.pid` — after checking that it is
 * alive and is that `up` (start time and command line against `up.json`, so a recycled
 * pid is never signalled) — and waits for it to exit. That process stops everything it
 * started itself.
 */
import { rmSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { ConfigError } from "../gateway/index.js";
import type { Envelope } from "../gateway/index.js";
import { normalizeUrl, resolveTarget } from "./remote.js";
import { ApiClient, asEnvelope } from "./api.js";
import {
  CliError,
  gatewayUrlFor,
  inspectUpRecord,
  isAlive,
  isOurUp,
  loadSpace,
  readUpRecord,
  spaceFile,
  upFiles,
  type UpRecord,
} from "./space.js";
import { callShape, interruption, oneLine, shortId, truncate } from "./terminal/format.js";

export interface Io {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

export const processIo = (): Io => ({ stdout: process.stdout, stderr: process.stderr, env: process.env });

/** Runs a command body: a thrown `CliError`/`ConfigError` becomes its message on stderr and a non-zero exit code. */
export async function guard(io: Io, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (err) {
    const e = err as Error;
    io.stderr.write(`mewgate: ${e instanceof ConfigError || e instanceof CliError ? e.message : e.message || String(e)}\n`);
    return err instanceof CliError ? err.exitCode : 1;
  }
}

/** The state directory of a space file, even when the file no longer parses (so `down` still works). */
async function stateDirOf(
  file: string | undefined,
  stateDir: string | undefined,
  io: Io,
): Promise<{ stateDir: string; space: string | undefined }> {
  if (stateDir) return { stateDir: resolve(stateDir), space: undefined };
  const f = spaceFile(file);
  try {
    const loaded = await loadSpace(f, { env: io.env });
    return { stateDir: loaded.stateDir, space: loaded.config.space.id };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const fallback = resolve(dirname(resolve(f)), ".mewgate");
    io.stderr.write(`mewgate: warning: ${err.message}\nmewgate: using the default state directory ${fallback}\n`);
    return { stateDir: fallback, space: undefined };
  }
}

export interface DownOptions {
  file?: string | undefined;
  stateDir?: string | undefined;
  /** How long to wait for a clean exit before SIGKILL. Default 20 000. */
  timeoutMs?: number | undefined;
}

export function runDown(opts: DownOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const { stateDir } = await stateDirOf(opts.file, opts.stateDir, io);
    const files = upFiles(stateDir);
    const found = inspectUpRecord(stateDir);
    if ("missing" in found)
      throw new CliError(`nothing to stop: no ${files.json} (was the space started with mewgate up, with this --state-dir?)`);
    if ("problem" in found) {
      throw new CliError(
        `${found.problem}. If a mewgate up is still running, stop it with Ctrl-C or kill <pid> (its pid may be in ${files.pid}); then remove ${files.json}`,
      );
    }
    const rec = found.rec;
    if (!isAlive(rec.pid)) {
      removeRecord(files, rec);
      throw new CliError(
        `nothing to stop: pid ${rec.pid}${rec.space ? ` of space ${rec.space}` : ""} has already exited (removed its stale pid file)`,
      );
    }
    if (!isOurUp(rec)) {
      removeRecord(files, rec);
      throw new CliError(
        `nothing to stop: pid ${rec.pid} is now another process, not the mewgate up that wrote ${files.pid} (removed the stale pid file; that process was left alone)`,
      );
    }
    process.kill(rec.pid, "SIGTERM");
    const timeout = opts.timeoutMs ?? 20_000;
    let gone = await exited(rec, timeout);
    if (!gone) {
      io.stderr.write(`mewgate: pid ${rec.pid} did not stop within ${timeout / 1000} s; killing it\n`);
      if (isOurUp(rec)) process.kill(rec.pid, "SIGKILL");
      gone = await exited(rec, 5000);
    }
    if (!gone) throw new CliError(`pid ${rec.pid} is still running after SIGKILL`);
    removeRecord(files, rec);
    io.stdout.write(`mewgate: stopped ${rec.space ? `space ${rec.space}` : "the space"} (pid ${rec.pid})\n`);
    return 0;
  });
}

async function exited(rec: UpRecord, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isOurUp(rec)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return !isOurUp(rec);
}

/** Removes the pid files if they still describe `rec`. */
function removeRecord(files: { pid: string; json: string }, rec: UpRecord): void {
  const now = readUpRecord(rec.stateDir);
  if (now && now.pid !== rec.pid) return;
  rmSync(files.pid, { force: true });
  rmSync(files.json, { force: true });
}

export interface StatusOptions {
  file?: string | undefined;
  /** `-c`: the same as the positional space.yaml, as the other commands take it. */
  config?: string | undefined;
  /** `-g`: any node's address (a cluster passes the API on to the space's owner). */
  gateway?: string | undefined;
  stateDir?: string | undefined;
  as?: string | undefined;
  json?: boolean | undefined;
}

interface NodeView {
  name: string;
  url: string;
  state: string;
}

/** Each node of the cluster `up --nodes` recorded, as its /health answers (within a second and a half). */
async function clusterNodes(nodes: Array<{ name: string; url: string }>, space: string): Promise<NodeView[]> {
  return Promise.all(
    nodes.map(async (n) => {
      try {
        const res = await fetch(`${n.url.replace(/^ws/, "http")}/health`, { signal: AbortSignal.timeout(1500) });
        const h = (await res.json()) as { cluster?: { owns?: string[] } };
        return { ...n, state: h.cluster?.owns?.includes(space) ? "up, owns the space" : "up" };
      } catch {
        return { ...n, state: "not answering" };
      }
    }),
  );
}

export function runStatus(opts: StatusOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    if (opts.file && opts.config && resolve(opts.file) !== resolve(opts.config))
      throw new CliError(`two space files given: ${opts.file} and -c ${opts.config}; give one`);
    const file = spaceFile(opts.file ?? opts.config);
    const loaded = await loadSpace(file, { stateDir: opts.stateDir, env: io.env });
    const { config, stateDir } = loaded;
    const rec = readUpRecord(stateDir);
    const live = rec !== undefined && isOurUp(rec) ? rec : undefined;
    const nodes = rec?.nodes ? await clusterNodes(rec.nodes, config.space.id) : undefined;
    // The address given, else the recorded one — or, when that node is down, any node of the cluster that answers.
    let url = opts.gateway ? normalizeUrl(opts.gateway) : gatewayUrlFor(config).url;
    if (!opts.gateway && nodes && !nodes.some((n) => n.url === url && n.state !== "not answering"))
      url = nodes.find((n) => n.state !== "not answering")?.url ?? url;
    const target = await resolveTarget({ config: file, as: opts.as, stateDir, gateway: url }, io.env, { readOnly: true }).catch(
      (err: Error) => {
        // No token file yet means no gateway ever ran with this state directory.
        if (!live) throw new CliError(`nothing is running for space ${config.space.id}: no mewgate up in ${stateDir} (${err.message})`);
        throw err;
      },
    );
    // Read through the operator API: a status check never joins, so it cannot log the
    // human's terminal out or replace an in-process agent.
    const api = new ApiClient(target);
    let views: [
      // biome-ignore lint/suspicious/noExplicitAny: API participants as untyped JSON, read by key
      { participants: Array<Record<string, any>> },
      { tools: Array<{ name: string; policy?: string; description?: string }> },
      { proposals: Array<Record<string, unknown>> },
    ];
    try {
      views = await Promise.all([api.get("participants"), api.get("tools"), api.get("proposals")]);
    } catch (err) {
      if (!live && err instanceof CliError && err.message.startsWith("cannot reach")) {
        throw new CliError(
          `nothing is running for space ${config.space.id}: no mewgate up in ${stateDir}, and ${err.message.replace(/: is it running.*$/, "")}`,
        );
      }
      throw err;
    }
    const [{ participants: people }, { tools }, { proposals: pending }] = views;
    const participants = people.map((p) => ({
      id: String(p["id"]),
      kind: String(p["kind"]),
      state: p["online"] ? "connected" : "not connected",
      description: p["description"] as string | undefined,
    }));
    const proposals = pending.map(asEnvelope);
    if (opts.json) {
      const out = {
        space: config.space.id,
        url,
        up: live ? { pid: live.pid, startedAt: live.startedAt, stateDir } : undefined,
        ...(nodes ? { nodes } : {}),
        participants,
        tools: tools.map((t) => ({ name: t.name, policy: t.policy, description: t.description })),
        proposals: proposals.map((p) => ({ id: p.id, from: p.from, ...callShape(p) })),
      };
      io.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
      return 0;
    }
    const nameWidth = Math.min(40, Math.max(0, ...tools.map((t) => t.name.length)));
    const lines = [
      `space ${config.space.id}${config.space.name !== config.space.id ? ` (${config.space.name})` : ""} at ${url}/ws`,
      live
        ? `  mewgate up pid ${live.pid}, since ${live.startedAt}; state in ${stateDir}`
        : `  (not started by mewgate up with this state directory)`,
      ...(nodes ? [`cluster nodes (${nodes.length}):`, ...nodes.map((n) => `  ${n.name.padEnd(4)} ${n.url}/ws  ${n.state}`)] : []),
      `participants:`,
      ...participants.map((p) => `  ${p.id.padEnd(16)} ${p.kind.padEnd(8)} ${p.state}`),
      `tools (${tools.length}; policy for ${target.participant ?? "you"}):`,
      ...(tools.length
        ? tools.map((t) =>
            truncate(`  ${t.name.padEnd(nameWidth)}  ${(t.policy ?? "?").padEnd(9)} ${oneLine(t.description ?? "", 80)}`, 140),
          )
        : ["  none"]),
      `pending proposals (${proposals.length}):`,
      ...(proposals.length ? proposals.map((p) => proposalLine(p)) : ["  none"]),
      `web console: ${url.replace(/^ws/, "http")}/ui/`,
    ];
    io.stdout.write(`${lines.join("\n")}\n`);
    return 0;
  });
}

export function proposalLine(p: Envelope): string {
  const c = callShape(p);
  const cut = interruption(p);
  const mark = cut ? `INTERRUPTED (approved by ${cut.approvedBy ?? "someone"}; ${cut.message}) ` : "";
  return truncate(`  [${shortId(p.id)}] ${mark}${p.from} → ${c.label} ${oneLine(c.arguments, 80)}  (${p.ts})`, 240);
}
