/**
 * `mewgate up --detach`: the same space in the background. This command starts itself again
 * (`up … --detached-child`, its output to the space's up log), waits until that process says
 * over IPC that it is ready (or why it is not, within 60 s), prints the warnings it sent and
 * how to join, watch and stop it, and exits. A server behind OAuth that waits for a person
 * to sign in ends the wait too: the link is printed with the rest, and the background half
 * finishes starting once the sign-in is done (`down` stops it meanwhile). The background
 * half is `up.ts`'s foreground run.
 */
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { planParticipants } from "./plan.js";
import { selfCommand, shortPath } from "./invocation.js";
import { CliError, loadSpace, spaceFile, upFiles, type LoadedSpace } from "./space.js";
import { sanitize } from "./terminal/format.js";
import { refuseIfRunning } from "./up-record.js";

/** What of `up`'s options the background process is started with. */
export interface DetachOptions {
  file?: string | undefined;
  stateDir?: string | undefined;
  port?: number | undefined;
  host?: string | undefined;
  nodes?: number | undefined;
  as?: string | undefined;
  logLevel?: string | undefined;
}

export interface DetachIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
}

const MAIN = join(dirname(fileURLToPath(import.meta.url)), "main.js");

export async function runDetached(opts: DetachOptions, io: DetachIo): Promise<number> {
  const file = resolve(spaceFile(opts.file));
  // Read the file here too: a bad space.yaml is reported right away, not in a log.
  const loaded: LoadedSpace = await loadSpace(file, { stateDir: opts.stateDir, env: io.env, signs: true });
  refuseIfRunning(loaded.stateDir);
  const plan = planParticipants(loaded.config, opts.as, { terminal: false });
  const args = [MAIN, "up", file, "--state-dir", loaded.stateDir, "--detached-child"];
  if (opts.port !== undefined) args.push("--port", String(opts.port));
  if (opts.host !== undefined) args.push("--host", opts.host);
  if (opts.nodes !== undefined) args.push("--nodes", String(opts.nodes));
  if (opts.as !== undefined) args.push("--as", opts.as);
  if (opts.logLevel !== undefined) args.push("--log-level", opts.logLevel);
  const log = upFiles(loaded.stateDir).log;
  mkdirSync(dirname(log), { recursive: true, mode: 0o700 });
  const fd = openSync(log, "a", 0o600);
  const child = spawn(process.execPath, args, { detached: true, stdio: ["ignore", fd, fd, "ipc"], env: io.env, cwd: process.cwd() });
  closeSync(fd);
  const notices: string[] = [];
  const signIns: string[] = [];
  const outcome = await new Promise<{ ok: true; url: string; pid: number; waiting?: true } | { ok: false; message: string }>((resolve) => {
    const timer = setTimeout(
      () => resolve({ ok: false, message: `the background process did not get ready within 60 s (log: ${log})` }),
      60_000,
    );
    child.on("message", (m: { type?: string; url?: string; pid?: number; message?: string; text?: string; level?: string }) => {
      // The warnings a foreground up prints (a state directory an MCP server can read, …).
      // Printed once it is ready: a failure says it all in its own message.
      if (m.type === "notice" && typeof m.text === "string")
        return void notices.push(`mewgate: ${m.level === "error" ? "warning: " : ""}${sanitize(m.text)}\n`);
      // A sign-in to wait for: nobody would see it in the log, so it is printed, and this half returns.
      const s = m as { type?: string; server?: string; url?: string; gateway?: string; pid?: number };
      if (s.type === "signin" && typeof s.url === "string" && typeof s.gateway === "string") {
        signIns.push(`  sign in:   ${sanitize(String(s.server))} waits for you to sign in: ${sanitize(s.url)}`);
        for (const n of notices) io.stderr.write(n);
        clearTimeout(timer);
        return resolve({ ok: true, url: s.gateway, pid: s.pid ?? child.pid!, waiting: true });
      }
      if (m.type === "ready") {
        for (const n of notices) io.stderr.write(n);
        clearTimeout(timer);
        resolve({ ok: true, url: m.url!, pid: m.pid ?? child.pid! });
      } else if (m.type === "error") {
        clearTimeout(timer);
        resolve({ ok: false, message: m.message ?? "failed" });
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ ok: false, message: `the background process exited with code ${code} before it was ready (log: ${log})` });
    });
  });
  if (!outcome.ok) {
    if (child.exitCode === null && child.pid) {
      try {
        process.kill(child.pid, "SIGTERM");
      } catch {
        // gone
      }
    }
    throw new CliError(outcome.message);
  }
  if (child.connected) child.disconnect();
  child.unref();
  const f = shortPath(file);
  const sd = opts.stateDir ? ` --state-dir ${shortPath(loaded.stateDir)}` : "";
  const me = selfCommand();
  // Whose token signs in: the one named, the only human, or (several) the choice between them.
  const humans = Object.values(loaded.config.participants)
    .filter((p) => p.kind === "human")
    .map((p) => p.id);
  const who = plan.human?.id ?? (humans.length ? undefined : "<participant>");
  const tokenHint = who
    ? `the token from: ${me} token show ${who} -c ${f}${sd}`
    : `the token of one of ${humans.join(", ")}: ${me} token show <id> -c ${f}${sd}`;
  io.stdout.write(
    [
      `mewgate: space ${loaded.config.space.id} is running in the background (pid ${outcome.pid}) on ${outcome.url}/ws`,
      `  join it:   ${me} connect --config ${f}${sd}${opts.as ? ` --as ${opts.as}` : who ? "" : " --as <id>"}`,
      `  status:    ${me} status ${f}${sd}`,
      `  console:   ${outcome.url.replace(/^ws/, "http")}/ui/  (sign in with ${tokenHint})`,
      `  stop it:   ${me} down ${f}${sd}`,
      `  logs:      ${shortPath(join(loaded.stateDir, "logs"))}/`,
      ...signIns,
      ...(outcome.waiting ? ["  (it finishes starting once you have signed in)"] : []),
      "",
    ].join("\n"),
  );
  return 0;
}
