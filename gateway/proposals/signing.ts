/**
 * Webhook notices signed as the Standard Webhooks convention has it, so a receiver can tell
 * a notice came from this gateway, unaltered, and recently:
 *
 *   webhook-id         one id per notice, the same on every retry (a receiver drops repeats)
 *   webhook-timestamp  seconds since the epoch when this attempt was sent
 *   webhook-signature  `v1,` then the base64 of HMAC-SHA256, keyed with the secret's bytes,
 *                      over `<webhook-id>.<webhook-timestamp>.<body>`
 *
 * The secret (config/webhook-secret.ts) comes from the environment variable a webhook's
 * `secret_env` names. A receiver recomputes the signature over the raw body, compares in
 * constant time, and refuses a timestamp far from its clock (docs/security.md).
 */
import { createHmac } from "node:crypto";

/** The three headers for one attempt of a notice. */
export function signatureHeaders(key: Buffer, id: string, body: string, now = Date.now()): Record<string, string> {
  const timestamp = String(Math.floor(now / 1000));
  const signature = createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64");
  return { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": `v1,${signature}` };
}
