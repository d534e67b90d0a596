/**
 * `mewgate token show | rotate | revoke | expire <id>`.
 *
 * Only generated tokens (`<state>/tokens/<id>.token`) can be rotated here; a token set in
 * space.yaml or in `MEWGATE_TOKEN_<ID>` belongs to whoever set it — but any token can be
 * revoked or given an expiry: what is known about a token is kept beside it, by digest
 * (`<id>.meta.json`, gateway/identity/tokens.ts). After writing, the command asks a
 * running gateway to reload (as the space's human, with the token it had before the
 * change), so the change takes effect at once: sessions using a token no longer accepted
 * are closed (4412), and a rotation's `--grace` keeps the old token working until then.
 */
import { selfCommand } from "./invocation.js";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { readTokenMeta, TokenBook, tokenEnvName, tokenFile, type TokenMeta, writeTokenMeta } from "../gateway/index.js";
import { ApiClient } from "./api.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { askReload, describeReload } from "./reload.js";
import { resolveTarget, type Target } from "./remote.js";
import { CliError, loadSpace, spaceFile } from "./space.js";

export interface TokenOptions {
  config?: string | undefined;
  /** The positional space.yaml (`token show you s2/space.yaml`): the same as `-c`. */
  file?: string | undefined;
  stateDir?: string | undefined;
  /** rotate: how long the old token still works (10m, 1h). */
  grace?: string | undefined;
  /** rotate, expire: when the (new) token stops working, from now (30d). */
  expires?: string | undefined;
  /** The operator who asks the gateway to reload (default: the space's only human). */
  as?: string | undefined;
}

const ACTIONS = "mewgate token show <id> | rotate <id> [--grace 10m] [--expires 30d] | revoke <id> | expire <id> --expires 30d";

/** A duration forward from now: `90s`, `10m`, `2h`, `30d`, `1w`. */
export function parseDuration(value: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$/i.exec(value.trim());
  if (!m) throw new CliError(`${flag} "${value}": expected a duration such as 90s, 10m, 2h, 30d or 1w`);
  return Number(m[1]) * { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 7 * 86400e3 }[m[2]!.toLowerCase() as "s"]!;
}

export function runToken(action: string, id: string, opts: TokenOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    if (!["show", "rotate", "revoke", "expire"].includes(action)) throw new CliError(`unknown action "${action}": ${ACTIONS}`);
    if (opts.file && opts.config && resolve(opts.file) !== resolve(opts.config))
      throw new CliError(`two space files given: ${opts.file} and -c ${opts.config}; give one`);
    opts = { ...opts, config: opts.file ?? opts.config };
    const loaded = await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env });
    const { config, stateDir } = loaded;
    const p = config.participants[id];
    if (!p) throw new CliError(`no participant "${id}" in ${config.file}; participants: ${Object.keys(config.participants).join(", ")}`);
    const envName = tokenEnvName(id);
    const file = tokenFile(stateDir, id);
    const fromEnv = loaded.env[envName];
    const current = (): string | undefined => p.token ?? fromEnv ?? (existsSync(file) ? readFileSync(file, "utf8").trim() : undefined);

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

    const grace = opts.grace ? parseDuration(opts.grace, "--grace") : 0;
    const expires = opts.expires ? parseDuration(opts.expires, "--expires") : undefined;
    if (action === "expire" && expires === undefined) throw new CliError(`${selfCommand()} token expire ${id} --expires <duration>`);
    // The operator's token as it is now: after the change it may no longer be accepted until the gateway reloads.
    const operator = await gatewayTarget(opts, io);
    const meta = readTokenMeta(stateDir, id);
    const now = Date.now();
    const live = (meta.tokens ?? []).filter((t) => t.expires_at !== undefined && Date.parse(t.expires_at) > now);
    const old = current();
    const oldDigest = old === undefined ? undefined : TokenBook.digestOf(old);
    let next: TokenMeta;
    if (action === "rotate") {
      if (p.token)
        throw new CliError(
          `the token of "${id}" is set in ${config.file} (participants.${id}.token); change it there and run mewgate reload — mewgate only rotates tokens it generated (mewgate token revoke works on any)`,
        );
      if (fromEnv)
        throw new CliError(
          `the token of "${id}" comes from ${envName}; change that variable — mewgate only rotates tokens it generated (mewgate token revoke works on any)`,
        );
      const token = randomBytes(24).toString("base64url");
      const newDigest = TokenBook.digestOf(token);
      const kept = live.filter((t) => t.digest !== oldDigest && t.digest !== newDigest);
      next = {
        ...meta,
        tokens: [
          { digest: newDigest, ...(expires !== undefined ? { expires_at: new Date(now + expires).toISOString() } : {}) },
          ...(oldDigest !== undefined && grace > 0
            ? [{ digest: oldDigest, expires_at: new Date(now + grace).toISOString(), note: "rotated out; accepted until then" }]
            : []),
          ...kept,
        ],
      };
      // The digests first: a gateway that reads the new token must know its expiry and the old one's grace.
      writeTokenMeta(stateDir, id, next);
      writeToken(file, token);
      io.stdout.write(
        `rotated the token of ${id} (${file})${grace > 0 ? `; the old one works for ${opts.grace} more` : "; the old one is refused from now on"}${expires !== undefined ? `; the new one expires in ${opts.expires}` : ""}\n`,
      );
    } else if (action === "revoke") {
      if (oldDigest === undefined) throw new CliError(`"${id}" has no token to revoke`);
      // Every token of the participant is refused: the current one and any still in its grace.
      next = { tokens: [], revoked: [...new Set([...(meta.revoked ?? []), oldDigest, ...(meta.tokens ?? []).map((t) => t.digest)])] };
      writeTokenMeta(stateDir, id, next);
      if (!p.token && !fromEnv) {
        writeToken(file, randomBytes(24).toString("base64url"));
        io.stdout.write(`revoked the token of ${id}; a new one is in ${file} (mewgate token show ${id})\n`);
      } else
        io.stdout.write(
          `revoked the token of ${id}; it joins again only once ${p.token ? `participants.${id}.token in ${config.file}` : envName} holds a new one\n`,
        );
    } else {
      if (oldDigest === undefined) throw new CliError(`"${id}" has no token yet`);
      next = {
        ...meta,
        tokens: [{ digest: oldDigest, expires_at: new Date(now + expires!).toISOString() }, ...live.filter((t) => t.digest !== oldDigest)],
      };
      writeTokenMeta(stateDir, id, next);
      io.stdout.write(`the token of ${id} expires in ${opts.expires} (${next.tokens![0]!.expires_at})\n`);
    }
    if (!operator) return 0;
    try {
      for (const r of await askReload(new ApiClient(operator))) io.stdout.write(`${describeReload(r).join("\n")}\n`);
    } catch (err) {
      if (/cannot reach the gateway/.test((err as Error).message)) {
        io.stdout.write(`no gateway answers at ${operator.url}: the change takes effect when it starts\n`);
        return 0;
      }
      io.stderr.write(
        `mewgate: the change is written, but the running gateway did not reload: ${(err as Error).message}; run mewgate reload (or send it SIGHUP)\n`,
      );
      return 1;
    }
    return 0;
  });
}

/** The gateway to ask to reload, as the operator (the space's human or `--as`); its token read before any change. */
async function gatewayTarget(opts: TokenOptions, io: Io): Promise<Target | undefined> {
  try {
    return await resolveTarget({ config: opts.config, stateDir: opts.stateDir, as: opts.as }, io.env);
  } catch (err) {
    io.stderr.write(
      `mewgate: cannot ask the running gateway to reload (${(err as Error).message}); run mewgate reload --as <operator> after this\n`,
    );
    return undefined;
  }
}

/** Write-then-rename, so a gateway reading at this moment reads the old or the new token, never half of one. */
function writeToken(file: string, token: string): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${token}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}
