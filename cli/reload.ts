/**
 * `mewgate reload [space.yaml]` and `mewgate sessions [list | end <participant>]`: asking
 * a running gateway, through its operator API, as the space's human (or `--as`), to read
 * its space.yaml and tokens again, to list who is connected from where, or to end one
 * participant's session. The gateway reads the file it was started from; an invalid file
 * changes nothing and the error says where (file:line:col).
 */
import { ApiClient } from "./api.js";
import { withEnvDefaults } from "./commands.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { resolveTarget, type RemoteOptions } from "./remote.js";
import { CliError } from "./space.js";
import type { ReloadReport } from "../gateway/index.js";

/** What a reload did, as the gateway reports it (gateway/space/reload.ts). */
export type ReloadSummary = ReloadReport;

export function describeReload(r: ReloadSummary): string[] {
  const lines = [`reloaded space ${r.space}`];
  const say = (label: string, list: string[]) => list.length && lines.push(`  ${label}: ${list.join(", ")}`);
  say("participants added", r.added);
  say("participants removed", r.removed);
  say("participants changed", r.changed);
  say("tokens changed", r.tokens);
  say("sections changed", r.sections);
  say("not applied until a restart", r.needs_restart);
  say("sessions closed", r.closed);
  say("told their rights changed", r.told);
  say("pending proposals cancelled (now denied)", r.cancelled);
  say("grants no longer standing", r.grants_fallen);
  say("approvals dropped (their approver may no longer decide)", r.approvals_dropped ?? []);
  if (lines.length === 1) lines.push("  nothing changed");
  // What the rules were found to hold short of an error: said where the operator looks, not only in the log.
  for (const f of r.findings ?? []) lines.push(`  ${f}`);
  return lines;
}

/** Asks the gateway to reload; the reports, or a `CliError` saying why not (nothing changed then). */
export async function askReload(api: ApiClient): Promise<ReloadSummary[]> {
  try {
    return (await api.post<{ reloaded: ReloadSummary[] }>("reload", {})).reloaded;
  } catch (err) {
    throw new CliError((err as Error).message.replace(/^the gateway refused it: /, ""));
  }
}

export function runReload(file: string | undefined, opts: RemoteOptions & { json?: boolean }, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const api = new ApiClient(await resolveTarget(withEnvDefaults({ ...opts, config: opts.config ?? file }, io.env), io.env));
    const reports = await askReload(api);
    if (opts.json) io.stdout.write(`${JSON.stringify(reports)}\n`);
    else for (const r of reports) io.stdout.write(`${describeReload(r).join("\n")}\n`);
    return 0;
  });
}

export function runSessions(
  action: string | undefined,
  id: string | undefined,
  opts: RemoteOptions & { json?: boolean },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    const verb = action ?? "list";
    if (verb !== "list" && verb !== "end") throw new CliError(`unknown action "${verb}": mewgate sessions [list | end <participant>]`);
    const api = new ApiClient(await resolveTarget(withEnvDefaults(opts, io.env), io.env, { readOnly: verb === "list" }));
    if (verb === "end") {
      if (!id) throw new CliError("mewgate sessions end <participant>");
      await api.delete(`sessions/${encodeURIComponent(id)}`);
      io.stdout.write(`ended the session of ${id}\n`);
      return 0;
    }
    const { sessions } = await api.get<{ sessions: Array<Record<string, string>> }>("sessions");
    if (opts.json) io.stdout.write(`${JSON.stringify(sessions, null, 2)}\n`);
    else if (sessions.length === 0) io.stdout.write("nobody is connected\n");
    else
      for (const s of sessions)
        io.stdout.write(
          `  ${s["participant"]} (${s["kind"]}) from ${s["address"]} since ${s["joined_at"]}${s["token"] ? `, token ${s["token"]}` : ""}${s["token_expires_at"] ? ` until ${s["token_expires_at"]}` : ""}\n`,
        );
    return 0;
  });
}
