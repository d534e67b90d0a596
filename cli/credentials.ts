/**
 * `mewgate credentials list | revoke <server> | rotate-key`: the upstream sign-ins the
 * bridges keep (participants/bridge/oauth-vault.ts), seen and managed from the command line.
 *
 * `list` says which server, authorization server and subject, what is held (by name) and
 * when it expires: never a token or a secret. `revoke` forgets a server's tokens (and with
 * `--client` its registration): its next call asks for a sign-in again. `rotate-key`
 * encrypts the same data under a new key (a new key file; or, with the key in
 * MEWGATE_CREDENTIALS_KEY, prints the new key once for the operator to set).
 */
import { selfCommand } from "./invocation.js";
import { CredentialVault, KEY_ENV, VaultError, type Subject } from "../participants/bridge/oauth-vault.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { sanitize } from "./terminal/format.js";
import { CliError, loadSpace, spaceFile } from "./space.js";

export interface CredentialsOptions {
  config?: string | undefined;
  stateDir?: string | undefined;
  /** revoke: only this subject (`space`, or a participant id). */
  subject?: string | undefined;
  /** revoke: the client registration too. */
  client?: boolean | undefined;
  json?: boolean | undefined;
}

const ACTIONS = `${selfCommand()} credentials list | revoke <server> [--subject space|<participant>] [--client] | rotate-key`;

export function runCredentials(
  action: string,
  server: string | undefined,
  opts: CredentialsOptions,
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    if (!["list", "revoke", "rotate-key"].includes(action)) throw new CliError(`unknown action "${action}": ${ACTIONS}`);
    const { stateDir } = await loadSpace(spaceFile(opts.config), { stateDir: opts.stateDir, env: io.env });
    let vault: CredentialVault;
    try {
      vault = new CredentialVault(stateDir, io.env);
    } catch (err) {
      if (err instanceof VaultError) throw new CliError(err.message);
      throw err;
    }
    if (action === "list") {
      const rows = vault.list();
      if (opts.json) {
        io.stdout.write(`${JSON.stringify({ credentials: rows })}\n`);
        return 0;
      }
      if (!rows.length) io.stdout.write("no stored credentials\n");
      for (const r of rows) {
        const expires = r.expires_at === undefined ? "" : ` · expires ${new Date(r.expires_at).toISOString()}`;
        io.stdout.write(
          `${sanitize(r.server)}  ${sanitize(r.issuer)}  ${r.subject === "client" ? "client registration" : sanitize(r.subject)}  holds ${r.holds.join(", ")}${expires}\n`,
        );
      }
      return 0;
    }
    if (action === "revoke") {
      if (!server) throw new CliError(`which server? ${ACTIONS}`);
      const subject = opts.subject === undefined ? undefined : ((opts.subject === "space" ? "space" : `caller:${opts.subject}`) as Subject);
      const n = vault.revoke(server, { subject, client: opts.client === true });
      io.stdout.write(
        n
          ? `forgot ${n} stored credential${n === 1 ? "" : "s"} of ${server}; its next call asks for a sign-in\n`
          : `nothing stored for ${server}\n`,
      );
      return 0;
    }
    const { key } = vault.rotateKey();
    if (key) {
      io.stdout.write(`${key}\n`);
      io.stderr.write(`mewgate: the credentials are now encrypted under the key above: set ${KEY_ENV} to it before the next start\n`);
    } else io.stdout.write(`new key in ${vault.keyFile}; the credentials are encrypted under it\n`);
    return 0;
  });
}
