/**
 * A webhook's signing secret, as the Standard Webhooks convention writes it: `whsec_` then
 * the base64 of the key's bytes (24 to 64 of them). Read from the environment variable a
 * webhook's `secret_env` names (space.yaml never holds it); checked when the file is loaded,
 * so a missing or malformed secret refuses the file at `secret_env`'s line and column rather
 * than sending unsigned notices. proposals/signing.ts signs with the key.
 */

const PREFIX = "whsec_";

/** The key's bytes, or why the value is not a secret of this form (never echoing the value). */
export function parseWebhookSecret(value: string | undefined, name: string): { key: Buffer } | { error: string } {
  if (value === undefined || value === "")
    return { error: `the environment variable ${name} is not set; it must hold the webhook's signing secret (whsec_ then base64)` };
  const body = value.trim().startsWith(PREFIX) ? value.trim().slice(PREFIX.length) : undefined;
  if (body === undefined)
    return {
      error: `the environment variable ${name} does not start with "whsec_"; a webhook secret is whsec_ then the base64 of 24 to 64 random bytes (e.g. whsec_$(openssl rand -base64 32))`,
    };
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(body) || body.length % 4 !== 0)
    return { error: `the environment variable ${name} is not whsec_ then base64` };
  const key = Buffer.from(body, "base64");
  if (key.length < 24 || key.length > 64)
    return { error: `the secret in ${name} is ${key.length} bytes; a webhook secret is 24 to 64 bytes` };
  return { key };
}

/** Each signing webhook whose secret is missing or malformed: where in the file (`secret_env`), and why. */
export function webhookSecretIssues(
  hooks: ReadonlyArray<{ secret_env?: string | undefined }>,
  env: NodeJS.ProcessEnv,
): Array<[Array<string | number>, string]> {
  const out: Array<[Array<string | number>, string]> = [];
  hooks.forEach((hook, i) => {
    if (hook.secret_env === undefined) return;
    const parsed = parseWebhookSecret(env[hook.secret_env], hook.secret_env);
    if ("error" in parsed) out.push([["gateway", "notify", i, "secret_env"], parsed.error]);
  });
  return out;
}
