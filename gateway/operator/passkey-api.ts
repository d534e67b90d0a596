/**
 * Passkeys in the operator API (identity/passkeys.ts, proposals/passkey-bar.ts):
 *
 *   GET  passkeys                    the caller's registered passkeys (ids and dates)
 *   POST passkeys/options            options to register one (navigator.credentials.create); people only;
 *                                    with `confirm` (options for navigator.credentials.get) when they have one
 *   POST passkeys/register {response, confirm?}  keeps it once its attestation verifies, and `confirm`
 *                                    (an assertion by a passkey they have) when they had one
 *   GET  proposals/<id>/passkey      whether approving needs one, where, and the options to sign
 *                                    this call (navigator.credentials.get), challenge and all
 *
 * The approval itself is `POST proposals/<id>/approve {passkey: <assertion>}` (api.ts).
 */
import type { Space } from "../space/space.js";
import { PasskeyError } from "../identity/passkeys.js";
import { clip } from "../ports/host.js";
import { passkeyPlace } from "../space/compose.js";

type Reply = { status: number; body: unknown };
const fail = (status: number, code: string, message: string): Reply => ({ status, body: { error: { code, message } } });

export async function passkeyRoute(
  space: Space,
  caller: string,
  route: string,
  id: string | undefined,
  body: Record<string, unknown>,
  host: string | undefined,
): Promise<Reply | undefined> {
  const bar = space.passkeyBar;
  const place = () => passkeyPlace(space.config.gateway.public_url, space.consoleUrl);
  switch (route) {
    case "GET passkeys":
      return { status: 200, body: { passkeys: space.passkeys.of(caller).map((k) => ({ id: k.id, createdAt: k.createdAt })) } };
    case "POST passkeys/options":
    case "POST passkeys/register": {
      // A passkey is a person's: an agent, a service or a server never has one to confirm with.
      if (space.config.participants[caller]?.kind !== "human") return fail(403, "not_a_person", "only a person registers a passkey");
      try {
        if (route === "POST passkeys/options")
          return { status: 200, body: await space.passkeys.registrationOptions(caller, place(), bar.rpId(host)) };
        const key = await space.passkeys.register(caller, body["response"], place(), body["confirm"]);
        space.log.info({ participant: caller, passkey: key.id.slice(0, 16) }, "passkey registered");
        return { status: 200, body: { id: key.id, createdAt: key.createdAt } };
      } catch (err) {
        if (err instanceof PasskeyError) return fail(400, "passkey_invalid", err.message);
        throw err;
      }
    }
    case "GET proposals/:id/passkey": {
      const p = space.proposals.pending().find((x) => x.id === id);
      if (!p) return fail(404, "unknown_proposal", `no pending proposal "${clip(id ?? "")}"`);
      if (!bar.needs(p)) return { status: 200, body: { required: false } };
      const options = await bar.options(p, caller, host);
      return {
        status: 200,
        body: { required: true, where: bar.where(p), has_passkey: options !== undefined, ...(options ? { options } : {}) },
      };
    }
    default:
      return undefined;
  }
}
