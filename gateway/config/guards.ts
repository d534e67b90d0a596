/**
 * space.yaml's `guards:` and `caps:`, beside the rules: what the decision point
 * (policy/authority.ts) reads in every call's arguments and result, and how many calls (and
 * how much cost) a person, an agent or a tool may run in a minute.
 *
 *   guards:
 *     - detect: [secrets, personal]      # secrets | personal | egress
 *       action: hold                     # hold for a person | deny | redact
 *       on: [arguments, results]         # the default: both
 *       tools: ["*"]                     # participant/tool globs it applies to (default all)
 *       callers: ["*"]                   # participants and @groups it applies to (default all)
 *     - detect: [egress]
 *       hosts: [api.github.com, "*.example.com"]   # the allowlist: a URL or host elsewhere is found
 *       action: deny
 *       tools: ["web/*"]
 *   caps:
 *     - per: agent                       # person | agent | tool | caller: what is counted apart
 *       calls_per_minute: 60
 *       cost_per_minute: 2.5             # with costs: below, or a tool's own _meta["mewgate/cost"]
 *       action: hold                     # hold for a person | refuse
 *   costs: {"search/*": 0.01}            # the cost of one call, by tool glob
 */
import * as z from "zod";
import { expected, int, numeric, section } from "./schema.js";

export const DETECTORS = ["secrets", "personal", "egress"] as const;
export const GUARD_ACTIONS = ["hold", "deny", "redact"] as const;
export const GUARD_ON = ["arguments", "results"] as const;
export const PERSONAL = ["email", "phone", "card"] as const;

const list = <T extends z.ZodType>(item: T) => z.union([item.transform((x) => [x]), z.array(item)]);

export const GuardSchema = section({
  /** A name for the audit, the cards and explain; `guards[N]` when none. */
  name: z.string().min(1).max(64).optional(),
  detect: list(z.enum(DETECTORS)).pipe(z.array(z.enum(DETECTORS)).min(1, { error: "expected at least one of secrets, personal, egress" })),
  /** Which personal data (`detect: personal`): all three when not given. */
  personal: z.array(z.enum(PERSONAL)).min(1).optional(),
  /** The hosts a call's URLs may go to (`detect: egress`): `api.github.com`, `*.example.com`, `.example.com`, `*`. */
  hosts: z
    .array(
      z
        .string({ error: expected("a host like api.github.com or *.example.com") })
        .min(1)
        .max(253),
    )
    .max(256)
    .optional(),
  action: z.enum(GUARD_ACTIONS),
  on: list(z.enum(GUARD_ON)).default(["arguments", "results"]),
  tools: z.array(z.string().min(1)).default(["*"]),
  callers: z.array(z.string().min(1)).default(["*"]),
}).refine((g) => !g.detect.includes("egress") || g.hosts !== undefined, {
  error: "detect: egress needs hosts: (the allowlist; [] allows none)",
  path: ["hosts"],
});
export type GuardConfig = z.output<typeof GuardSchema>;

export const CAP_PER = ["person", "agent", "tool", "caller"] as const;

export const CapSchema = section({
  name: z.string().min(1).max(64).optional(),
  /** What is counted apart: each person (the caller, or the person a call acts for), each agent, each tool, each caller. */
  per: z.enum(CAP_PER),
  calls_per_minute: int(1, 1_000_000).optional(),
  cost_per_minute: numeric(z.number().positive()).optional(),
  /** What a call past the cap gets: held for a person, or refused. */
  action: z.enum(["hold", "refuse"]).default("refuse"),
  tools: z.array(z.string().min(1)).default(["*"]),
  callers: z.array(z.string().min(1)).default(["*"]),
}).refine((c) => c.calls_per_minute !== undefined || c.cost_per_minute !== undefined, {
  error: "a cap needs calls_per_minute, cost_per_minute or both",
});
export type CapConfig = z.output<typeof CapSchema>;

export const GuardsSchema = z.array(GuardSchema).max(32).default([]);
export const CapsSchema = z.array(CapSchema).max(32).default([]);
/** The cost of one call by `participant/tool` glob (the first that matches); a tool's `_meta["mewgate/cost"]` when none does. */
export const CostsSchema = z.record(z.string().min(1), numeric(z.number().min(0))).default({});
