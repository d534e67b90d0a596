/**
 * The gateway's half of a reload (`Gateway.reload`, SIGHUP, `POST /api/spaces/<space>/reload`):
 * every space's file is read, parsed and validated with the code a start uses — its tool
 * rules admitted by the same `admitPolicy` (policy/check.ts), so a `when:` that does not
 * compile is refused here as at a start — and its tokens loaded, before any space changes:
 * an invalid file (a `ConfigError` with file:line:col) or an unreadable token file changes
 * nothing anywhere. Then each space applies its own (space/reload.ts), and its report
 * carries the rules' warnings, for the operator to read where they asked.
 */
import { loadSpaceConfig } from "../config/config.js";
import { TokenBook } from "../identity/tokens.js";
import { admitPolicy, formatFinding } from "../policy/check.js";
import type { ReloadReport } from "../space/reload.js";
import type { Space } from "../space/space.js";

export async function reloadSpaces(spaces: Space[], env: NodeJS.ProcessEnv, by: string): Promise<ReloadReport[]> {
  const prepared = [];
  for (const space of spaces) {
    const next = await loadSpaceConfig(space.config.file, env);
    // Where the state lives was decided at start (--state-dir); it does not move.
    next.gateway.state_dir = space.config.gateway.state_dir;
    // With the tools registered now, so a rule that matches none of them is said too.
    const findings = admitPolicy(next, space.registry);
    const { book } = TokenBook.load(Object.entries(next.participants), { stateDir: next.gateway.state_dir, env });
    prepared.push({ space, next, book, findings });
  }
  const reports: ReloadReport[] = [];
  for (const { space, next, book, findings } of prepared) {
    const report = await space.reload(next, book, by);
    space.findings = findings;
    report.findings = findings.map(formatFinding);
    reports.push(report);
  }
  return reports;
}
