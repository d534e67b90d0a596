/**
 * `mewgate token show <id>` and `mewgate token rotate <id>`.
 *
 * Only generated tokens (`<state>/tokens/<id>.token`) can be rotated here; a token set in
 * space.yaml or in `MEWGATE_TOKEN_<ID>` belongs to whoever set it. The gateway reads
 * tokens when it starts, so a running one keeps accepting the old token until restarted.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { tokenEnvName, tokenFile } from "../gateway/identity/tokens.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { CliError, isAlive, loadSpace, readUpRecord, spaceFile } from "./space.js";

export interface TokenOptions {
  config?: string | undefined;
  /** The positional space.yaml (`token show you s2/space.yaml`): the same as `-c`. */
  file?: string | undefined;
  stateDir?: string | undefined;
}

export function runToken(action: string, id: string, opts: TokenOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    if (action !== "show" && action !== "rotate") throw new CliError(`unknown action "${action}": mewgate token show <id> | mewgate token rotate <id>`);
    if (opts.file && opts.config && resolve(opts.file) !== resolve(opts.config)) throw new CliError(`two space files given: ${opts.file} and -c ${opts.config}; give one`);
    const loaded = await loadSpace(spaceFile(opts.file ?? opts.config), { stateDir: opts.stateDir, env: io.env });
    const { config, stateDir } = loaded;
    const p = config.participants[id];
    if (!p) throw new CliError(`no participant "${id}" in ${config.file}; participants: ${Object.keys(config.participants).join(", ")}`);
    const envName = tokenEnvName(id);
    const file = tokenFile(stateDir, id);
    const fromEnv = loaded.env[envName];

    if (action === "show") {
      let token: string;
      let source: string;
      if (p.token) [token, source] = [p.token, `participants.${id}.token in ${config.file}`];
      else if (fromEnv) [token, source] = [fromEnv, `the environment variable ${envName}`];
      else if (existsSync(file)) [token, source] = [readFileSync(file, "utf8").trim(), file];
      else throw new CliError(`"${id}" has no token yet: the gateway generates ${file} on its first start (mewgate up), or set ${envName}`);
      io.stdout.write(`${token}\n`);
      io.stderr.write(`(token of ${id}, from ${source})\n`);
      return 0;
    }

    if (p.token) throw new CliError(`the token of "${id}" is set in ${config.file} (participants.${id}.token); change it there — mewgate only rotates tokens it generated`);
    if (fromEnv) throw new CliError(`the token of "${id}" comes from ${envName}; change that variable — mewgate only rotates tokens it generated`);
    const token = randomBytes(24).toString("base64url");
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    // Write-then-rename, so a gateway starting at this moment reads the old or the new token, never half of one.
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${token}\n`, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, file);
    io.stdout.write(`rotated the token of ${id} (${file})\n`);
    const rec = readUpRecord(stateDir);
    const running = rec && isAlive(rec.pid) ? ` (one is running now: pid ${rec.pid}; mewgate down, then mewgate up)` : "";
    io.stdout.write(`a running gateway keeps accepting the old token until it is restarted${running}; anything that connects as ${id} needs the new one (mewgate token show ${id})\n`);
    return 0;
  });
}
