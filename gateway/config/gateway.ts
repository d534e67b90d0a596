/**
 * Sub-schemas of space.yaml's `gateway:` section that are more than a scalar: webhooks
 * (`notify`), the NATS cluster (`cluster`) and OpenTelemetry export (`telemetry`).
 */
import * as z from "zod";
import { expected, int, section } from "./schema.js";

/** A webhook told of each new proposal and its outcome (proposals/notify.ts). */
export const WebhookSchema = section({
  url: z
    .string()
    .url({ error: expected("an http(s) URL") })
    .refine((u) => /^https?:\/\//i.test(u), { error: expected("an http(s) URL") }),
  format: z.enum(["json", "slack"]).default("json"),
  events: z
    .array(z.enum(["proposed", "decided"]))
    .min(1)
    .default(["proposed", "decided"]),
  headers: z.record(z.string(), z.string()).default({}),
  /**
   * The environment variable holding the secret the notices are signed with (Standard
   * Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`; proposals/signing.ts),
   * `whsec_` then base64 of 24 to 64 random bytes. Never the secret itself.
   */
  secret_env: z
    .string({ error: expected("an environment variable name") })
    .regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, { error: expected("an environment variable name like MEWGATE_WEBHOOK_SECRET") })
    .optional(),
});

const NATS_URLS = /^(nats:\/\/)?[A-Za-z0-9.\-[\]:]+(,\s*(nats:\/\/)?[A-Za-z0-9.\-[\]:]+)*$/;
// A bare string is the NATS address: `cluster: nats://127.0.0.1:4222`.
export const ClusterSchema = z.preprocess(
  (v) => (typeof v === "string" ? { url: v } : v),
  section({
    url: z
      .string({ error: expected("a NATS server address like nats://127.0.0.1:4222") })
      .regex(NATS_URLS, { error: expected("a NATS server address like nats://127.0.0.1:4222") }),
    /** This process's name in the cluster; default: host name and port. */
    node: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/, { error: expected("a node name of 1 to 64 of A-Z, a-z, 0-9, _ and -") })
      .optional(),
    /** How long a space's owner may be silent before another node takes the space over. */
    lease_ms: int(300, 60_000).default(1500),
    /** Copies JetStream keeps of the spaces' state and the leases: 3 on a JetStream cluster, so a machine's loss loses nothing. */
    replicas: int(1, 5).default(1),
    /** How other nodes reach this one's HTTP port (requests about spaces it owns); default: its listening address, or the host name when it listens on all. */
    advertise: z
      .string()
      .url({ error: expected("an http:// URL other nodes reach this gateway at, like http://10.0.0.5:7420") })
      .regex(/^https?:\/\//, { error: expected("an http:// or https:// URL") })
      .optional(),
  }),
);

/** OpenTelemetry traces of call chains, exported over OTLP/HTTP (ports/tracing.ts). */
export const TelemetrySchema = section({
  otlp_endpoint: z
    .string()
    .url({ error: expected("an OTLP/HTTP traces URL like http://127.0.0.1:4318/v1/traces") })
    .optional(),
  service_name: z.string().min(1).max(128).optional(),
  headers: z.record(z.string(), z.string()).optional(),
});
