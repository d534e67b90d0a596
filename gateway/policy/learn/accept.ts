/**
 * Accepting a suggested rule: the rule written into space.yaml in place (config/rule-edit.ts
 * keeps comments, anchors and layout), after checking that the file so changed means exactly
 * what it meant plus that one rule, with the file as it was kept in the state directory
 * (`policy-backups/`, owner-only: a space.yaml may hold tokens).
 *
 * What it does not do is reload: the caller runs the gateway's one reload path afterwards,
 * which reads the file again. Accepts of one file run one after another.
 */
import { chmod, mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { parseSpaceConfig, type ToolRule } from "../../config/config.js";
import { addToolRule } from "../../config/rule-edit.js";
import { canonical } from "../../store/chain.js";
import type { RuleKind } from "./suggest.js";

const queues = new Map<string, Promise<unknown>>();

/** Runs `task` after every earlier one for the same file. */
export function serialised<T>(file: string, task: () => Promise<T>): Promise<T> {
  const run = (queues.get(file) ?? Promise.resolve()).then(task, task);
  const tail = run.catch(() => {});
  queues.set(file, tail);
  void tail.then(() => {
    if (queues.get(file) === tail) queues.delete(file);
  });
  return run;
}

export interface Written {
  /** Where the file as it was is kept. */
  backup: string;
  /** The file's text before, to put back if what follows fails. */
  before: string;
}

/** Why the edited text would mean more than the rule, if it would. */
function sameButRule(
  beforeText: string,
  afterText: string,
  file: string,
  env: NodeJS.ProcessEnv,
  participant: string,
  kind: RuleKind,
  rule: ToolRule,
): string | undefined {
  const a = parseSpaceConfig(beforeText, { file, env });
  const b = parseSpaceConfig(afterText, { file, env });
  const list = b.participants[participant]?.tools?.[kind];
  if (!list || canonical(list.at(-1)) !== canonical(rule)) return "the rule is not where it was written";
  const tools = b.participants[participant]!.tools!;
  const without =
    list.length === 1 && !a.participants[participant]?.tools?.[kind]
      ? (({ [kind]: _drop, ...rest }) => rest)(tools)
      : { ...tools, [kind]: list.slice(0, -1) };
  const bp = { ...b.participants[participant]!, tools: without };
  const ap = a.participants[participant]!;
  const apTools = ap.tools && Object.keys(ap.tools).length ? ap.tools : undefined;
  const bpTools = Object.keys(without).length ? without : undefined;
  if (canonical({ ...ap, tools: apTools }) !== canonical({ ...bp, tools: bpTools }))
    return `participants.${participant} would change beyond the rule`;
  if (
    canonical({ ...a, participants: { ...a.participants, [participant]: null } }) !==
    canonical({ ...b, participants: { ...b.participants, [participant]: null } })
  )
    return "the file would change beyond the rule";
  return undefined;
}

/** Adds the rule to `file` (checked, with a backup in `stateDir`). Throws with a reason a person can act on. */
export async function writeRule(
  file: string,
  stateDir: string,
  env: NodeJS.ProcessEnv,
  participant: string,
  kind: RuleKind,
  rule: ToolRule,
): Promise<Written> {
  const before = await readFile(file, "utf8");
  const after = addToolRule(before, participant, kind, rule);
  const wrong = sameButRule(before, after, file, env, participant, kind, rule);
  if (wrong) throw new Error(`not written: ${wrong}; add the rule by hand`);
  const dir = path.join(stateDir, "policy-backups");
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const backup = path.join(dir, `${path.basename(file)}.${new Date().toISOString().replace(/[:.]/g, "-")}.${process.pid}`);
  await writeFile(backup, before, { mode: 0o600, flag: "wx" });
  const mode = (await stat(file)).mode & 0o777;
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, after, { mode });
  await chmod(tmp, mode);
  await rename(tmp, file);
  return { backup, before };
}

/** Puts the file back as it was (the audit record of an accept could not be written). */
export async function restore(file: string, w: Written): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, w.before, { mode: (await stat(file)).mode & 0o777 });
  await rename(tmp, file);
}
