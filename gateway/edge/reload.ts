/**
 * The gateway's half of a reload (`Gateway.reload`, SIGHUP, `POST /api/spaces/<space>/reload`):
 * every space's file is read, parsed and validated with the code a start uses, and its
 * tokens loaded, before any space changes — so an invalid file (a `ConfigError` with
 * file:line:col) or an unreadable token file changes nothing anywhere. Then each space
 * applies its own (space/reload.ts).
 */
import { loadSpaceConfig } from "../config/config.js";
import { TokenBook } from "../identity/tokens.js";
import type { ReloadReport } from "../space/reload.js";
import type { Space } from "../space/space.js";

export async function reloadSpaces(spaces: Space[], env: NodeJS.ProcessEnv, by: string): Promise<ReloadReport[]> {
  const prepared = [];
  for (const space of spaces) {
    const next = await loadSpaceConfig(space.config.file, env);
    // Where the state lives was decided at start (--state-dir); it does not move.
    next.gateway.state_dir = space.config.gateway.state_dir;
    const { book } = TokenBook.load(Object.entries(next.participants), { stateDir: next.gateway.state_dir, env });
    prepared.push({ space, next, book });
  }
  const reports: ReloadReport[] = [];
  for (const { space, next, book } of prepared) reports.push(await space.reload(next, book, by));
  return reports;
}
