/**
 * `mewgate policy suggest [accept|dismiss <id>]` and `mewgate policy dry-run <changed space.yaml>`:
 * rules learnt from what people decided, and what a change of the rules would have decided.
 *
 * `suggest` asks the running gateway (GET policy/suggestions), which knows the tools' hints;
 * accepting writes space.yaml there, records it and reloads. `dry-run` reads the space's
 * audit trail from its state directory and needs no gateway: every recorded call whose
 * decision the changed file would change, and how. Offline it knows no tool's annotations, so
 * a call a read-only hint lets through is counted as the rules alone decide it.
 * What participants wrote (arguments, ids) is sanitised before it reaches the terminal.
 */
import { selfCommand } from "./invocation.js";
import { personIn, replayedCalls } from "../gateway/index.js";
import { dryRunView } from "../gateway/index.js";
import type { Suggestion, Withheld } from "../gateway/index.js";
import { readAudit } from "../gateway/index.js";
import { withApi } from "./commands.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import type { RemoteOptions } from "./remote.js";
import { CliError, loadSpace, spaceFile } from "./space.js";
import { sanitize } from "./terminal/format.js";
import { clip } from "../gateway/index.js";

const text = (v: unknown, n = 160) => clip(sanitize(typeof v === "string" ? v : JSON.stringify(v)), n);

type Shown = Suggestion & { confirmed?: string[]; seconded?: string[] };

/** A suggestion for a person: what it lets through in words, why, what it would have changed; the rule itself last. */
export function suggestionText(s: Shown): string {
  const lines = [`[${s.id}] ${text(s.summary, 600)}`, `  why: ${text(s.why, 300)}`];
  lines.push("  allows, field by field:");
  for (const sc of s.scope) lines.push(`    - ${text(sc, 300)}`);
  for (const n of s.notes) lines.push(`  note: ${text(n, 300)}`);
  lines.push(
    `  covers: ${s.covers.approved} approved, ${s.covers.rejected} rejected, ${s.covers.edited} edited, ${s.covers.undecided} undecided`,
  );
  for (const [how, c] of Object.entries(s.changes))
    lines.push(`  would change: ${how} for ${c.total} recorded call(s) (${c.approved} approved, ${c.rejected} rejected by a person)`);
  for (const c of s.listed.rejected.slice(0, 10))
    lines.push(`    rejected ${text(c.id, 40)} by ${text(c.by ?? "?", 40)}: ${text(c.args, 120)}`);
  if (s.confirm)
    lines.push(
      `  needs confirmation from ${s.confirm.by.map((b) => text(b, 40)).join(", ")} (each rejected a call it covers)${s.confirmed?.length ? `; confirmed by ${s.confirmed.join(", ")}` : ""}`,
    );
  if (s.second && s.second.people.length > 1)
    lines.push(
      `  needs a second person's word: one of ${s.second.people.map((b) => text(b, 40)).join(", ")} besides whoever accepts${s.seconded?.length ? `; given by ${s.seconded.join(", ")}` : ""}`,
    );
  lines.push(`  the rule (tools.${s.kind} of ${text(s.participant, 64)}): ${text(s.rule, 1200)}`);
  return lines.join("\n");
}

export function runPolicySuggest(
  action: string | undefined,
  id: string | undefined,
  opts: RemoteOptions & { json?: boolean; confirm?: boolean },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    if (action === undefined || action === "list") {
      const body = await withApi(opts, io, (api) =>
        api.get<{ suggestions: Shown[]; withheld?: Withheld[]; dismissed: number; calls: number }>("policy/suggestions"),
      );
      if (opts.json) {
        io.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
        return 0;
      }
      if (!body.suggestions.length)
        io.stdout.write(`no suggestions from ${body.calls} recorded call(s)${body.dismissed ? ` (${body.dismissed} dismissed)` : ""}\n`);
      else
        io.stdout.write(
          `${body.suggestions.map(suggestionText).join("\n\n")}\n\naccept one: ${selfCommand()} policy suggest accept <id>; dismiss: ${selfCommand()} policy suggest dismiss <id>\n`,
        );
      const withheld = body.withheld ?? [];
      if (withheld.length)
        io.stdout.write(
          `\nrepeated, with no suggestion:\n${withheld.map((w) => `  ${text(w.participant, 64)} → ${text(w.tool, 120)} (${w.approved} approved): ${text(w.why, 300)}`).join("\n")}\n`,
        );
      return 0;
    }
    if (action !== "accept" && action !== "dismiss")
      throw new CliError(`unknown action "${action}"; ${selfCommand()} policy suggest [list | accept <id> | dismiss <id>]`);
    if (!id) throw new CliError(`give the suggestion's id: mewgate policy suggest ${action} <id>`);
    const body = await withApi(opts, io, (api) =>
      api.post<Record<string, unknown>>(`policy/suggestions/${encodeURIComponent(id)}/${action}`, opts.confirm ? { confirm: true } : {}),
    );
    if (opts.json) io.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
    else
      io.stdout.write(
        action === "dismiss"
          ? `dismissed ${id}\n`
          : `accepted ${id}: written to space.yaml (the file as it was is in ${text(body["backup"], 300)}), recorded, reloaded\n`,
      );
    return 0;
  });
}

/** A guard's and a cap's part in a replayed decision, for the listing (`  guard hold: a GitHub token in message`). */
function guardOf(o: unknown): string {
  const { guard: g, cap: c } = (o ?? {}) as { guard?: unknown; cap?: unknown };
  return `${typeof g === "string" ? `  guard ${text(g, 200)}` : ""}${typeof c === "string" ? `  cap ${text(c, 200)}` : ""}`;
}

export function runPolicyDryRun(
  changed: string,
  opts: { config?: string; stateDir?: string; json?: boolean },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    const current = await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env });
    const next = (await loadSpace(changed, { stateDir: current.stateDir, env: io.env })).config;
    const calls = replayedCalls(readAudit(current.stateDir, {}, 100_000), personIn(current.config));
    const view = dryRunView(current.config, next, calls, []) as {
      replayed: number;
      changed: number;
      summary: Record<string, Record<string, number>>;
      changes: Array<Record<string, unknown>>;
    };
    if (opts.json) {
      io.stdout.write(`${JSON.stringify(view, null, 2)}\n`);
      return 0;
    }
    io.stdout.write(`${view.replayed} recorded call(s) replayed; ${view.changed} would be decided otherwise\n`);
    for (const [how, c] of Object.entries(view.summary))
      io.stdout.write(
        `  ${how}: ${c["total"]} (${c["approved"]} approved, ${c["rejected"]} rejected, ${c["edited"]} edited, ${c["undecided"]} undecided by people)\n`,
      );
    for (const c of view.changes)
      io.stdout.write(
        `${text(c["ts"], 30)}  ${text(c["how"], 40)}  ${text(c["proposer"], 40)} → ${text(c["tool"], 80)}  people: ${c["direct"] ? "never asked (direct)" : text(c["said"], 12)}${c["by"] ? ` by ${text(c["by"], 40)}` : ""}  ${text(c["args"], 100)}${guardOf(c["after"])}\n`,
      );
    return 0;
  });
}
