// space.yaml: the schema (with limits.ts, built from schema.ts) and errors that point at FILE:LINE:COL (positions and ${ENV} in yaml.ts).
// Past 500 lines because the space's own sections (space, participants, policy with its escalation
// stages, groups) read better whole than split to stay under it; sections with a concern of their
// own sit beside it (limits.ts, previews.ts, gateway.ts, identity.ts), and so do the checks of what
// names a group (groups.ts).
import { readFile } from "node:fs/promises";
import path from "node:path";
import { type Document, LineCounter, parseDocument } from "yaml";
import * as z from "zod";
import {
  CallsSchema,
  DEFAULT_CALLS,
  DEFAULT_LIMITS,
  DEFAULT_PRESENCE,
  DEFAULT_QUOTAS,
  type Limits,
  LimitsSchema,
  PresenceSchema,
  QuotasSchema,
} from "./limits.js";
import { boolean, defaultMessage, expected, int, kindOf, MAX_TIMER_MS, numeric, section, suggest } from "./schema.js";
import { formatPath, locate, substituteEnv } from "./yaml.js";
import { recordRulePositions } from "./rule-positions.js";

export { rulePosition, type RulePosition } from "./rule-positions.js";
import { PreviewsSchema } from "./previews.js";
import { ClusterSchema, TelemetrySchema, WebhookSchema } from "./gateway.js";
import { webhookSecretIssues } from "./webhook-secret.js";
import { Lookalikes } from "./confusables.js";
import { identitySchema } from "./identity.js";
import { allowSignInCards, OAuthSchema, resolveSecretFile } from "./oauth.js";
export type { OAuthConfig, SecretValue } from "./oauth.js";
import { checkGroups, nullProto } from "./groups.js";
import { CapsSchema, CostsSchema, GuardsSchema } from "./guards.js";
export type { CapConfig, GuardConfig } from "./guards.js";

export { DEFAULT_CALLS, DEFAULT_LIMITS, DEFAULT_PRESENCE, DEFAULT_QUOTAS, type Limits };

// ---------------------------------------------------------------------------------------------
// Errors

export interface ConfigIssue {
  file: string;
  /** 1-based; 0 when the issue concerns the whole file (e.g. it cannot be read). */
  line: number;
  column: number;
  /** Dotted path into the document, e.g. `participants.alice.visibility`; "" for the file itself. */
  path: string;
  message: string;
}

export function formatIssue(i: ConfigIssue): string {
  const where = i.line > 0 ? `${i.file}:${i.line}:${i.column}` : i.file;
  return `${where}: ${i.path ? `${i.path}: ` : ""}${i.message}`;
}

export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(readonly issues: ConfigIssue[]) {
    super(issues.map(formatIssue).join("\n"));
  }
}

// ---------------------------------------------------------------------------------------------
// Schema

export const CapabilitySchema = z.looseObject(
  {
    kind: z.string({ error: expected("a non-empty string") }).min(1),
    payload: z.unknown().optional(),
  },
  { error: expected(`a capability mapping like {kind: "chat"}`) },
);
/** A MEW capability: a pattern over an envelope's `kind` and `payload` (matched by policy/capabilities.ts). */
export type Capability = { kind: string; payload?: unknown; [k: string]: unknown };

export const PARTICIPANT_KINDS = ["human", "agent", "mcp", "service"] as const;
export type ParticipantKind = (typeof PARTICIPANT_KINDS)[number];
export const VISIBILITIES = ["all", "addressed"] as const;
export type Visibility = (typeof VISIBILITIES)[number];

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 7420;
export const DEFAULT_STATE_DIR = ".mewgate";

const AGENT_CAPABILITIES: readonly Capability[] = [
  { kind: "chat" },
  { kind: "chat/*" },
  { kind: "mcp/proposal" },
  { kind: "mcp/withdraw" },
  { kind: "mcp/response" },
  { kind: "mcp/request", payload: { method: "tools/list" } },
  { kind: "mcp/request", payload: { method: "notifications/*" } },
  { kind: "reasoning/*" },
  { kind: "participant/status" },
  { kind: "participant/compact-done" },
  { kind: "capability/grant-ack" },
];

const deepFreeze = <T>(value: T): T => {
  if (value && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
};

/** Capabilities of a participant whose config (and the space's `defaults`) does not set any. */
export const DEFAULT_CAPABILITIES: Readonly<Record<ParticipantKind, readonly Capability[]>> = deepFreeze({
  human: [{ kind: "*" }],
  agent: AGENT_CAPABILITIES,
  service: AGENT_CAPABILITIES,
  mcp: [{ kind: "mcp/response" }, { kind: "mcp/request", payload: { method: "notifications/*" } }, { kind: "capability/grant-ack" }],
});

/** A fresh, mutable copy. */
export function defaultCapabilities(kind: ParticipantKind): Capability[] {
  return structuredClone(DEFAULT_CAPABILITIES[kind]) as Capability[];
}

export function defaultVisibility(kind: ParticipantKind): Visibility {
  return kind === "mcp" ? "addressed" : "all";
}

const SPACE_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const PARTICIPANT_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

const FALLBACKS = ["allow", "ask", "deny"] as const;
const PolicySchema = section({
  /** What a tool that matches no rule and is not read-only gets. */
  fallback: z.enum(FALLBACKS).default("ask"),
  proposal_ttl_ms: int(1, MAX_TIMER_MS).default(600_000),
  /** What an unanswered proposal becomes at its TTL: rejected (the safe default), or kept pending until someone decides. */
  expires_action: z.enum(["reject", "keep"]).default("reject"),
  /** What a tool whose texts the gateway flagged (tools/inspect.ts) gets: shown with its findings, called only with approval, or refused. */
  tool_checks: z.enum(["warn", "ask", "deny"]).default("warn"),
  /** Who else may decide, and who is told again, when a proposal waits unanswered: stages, each `after_ms` from a proposal's creation (proposals/escalation.ts). */
  escalate: z
    .array(
      section({
        after_ms: int(1, MAX_TIMER_MS),
        /** Tell the `gateway.notify` webhooks again (event `escalated`). */
        notify: boolean().default(true),
        /** Participants and `@group`s who may decide from then on, besides the proposer's approvers. */
        approvers: z.array(z.string()).default([]),
      }),
    )
    .max(8)
    .default([]),
  /** Whether a rule naming a participant that is not in the space (policy/check.ts) stops the space from loading, rather than being a warning. */
  strict: boolean().optional(),
  /** Approvals confirmed with the approver's passkey (proposals/passkey-bar.ts): calls of these `owner/tool` globs, and calls the gateway rates at or above `risk`. */
  passkey: section({
    tools: z.array(z.string().min(1)).max(256).default([]),
    risk: z.enum(["medium", "high"]).optional(),
  }).optional(),
});

/** A tool rule: a `participant/tool` glob, or `{tool: glob, when: CEL expression}` (policy/conditions.ts). */
const ToolRuleSchema = z.union(
  [
    z.string(),
    section({
      tool: z.string({ error: expected("a participant/tool glob") }).min(1),
      when: z.string({ error: expected("a CEL expression") }).min(1),
    }),
  ],
  { error: expected(`a glob like "files/*", or {tool: "files/*", when: "<CEL expression>"}`) },
);
export type ToolRule = z.output<typeof ToolRuleSchema>;
const ToolPolicySchema = section({
  allow: z.array(ToolRuleSchema).optional(),
  ask: z.array(ToolRuleSchema).optional(),
  deny: z.array(ToolRuleSchema).optional(),
  /** Calls that skip the `ask` rules (an accepted suggestion narrowing them): decided after `deny` and grants, before `ask`. */
  except: z.array(ToolRuleSchema).optional(),
});
export type ToolPolicy = z.output<typeof ToolPolicySchema>;

/**
 * An MCP server to bridge into the space, in the shape common MCP client configs use
 * (`command`/`args`/`env` for stdio, `url`/`headers` for streamable HTTP), so a user can
 * paste theirs under `mcpServers:`.
 */
const McpServerSchema = section({
  /** `sse`: a legacy HTTP+SSE server (the MCP spec of 2024-11-05); other URLs speak streamable HTTP. */
  type: z.enum(["stdio", "http", "streamable-http", "streamableHttp", "sse"]).optional(),
  command: z.string().min(1).optional(),
  args: z.array(z.string()).optional(),
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().optional(),
  url: z.url({ error: expected("an http(s) URL") }).optional(),
  headers: z.record(z.string(), z.string()).optional(),
  oauth: z.union([z.literal(false), OAuthSchema]).optional(), // signing in behind OAuth (oauth.ts); false: never
  description: z.string().optional(),
  disabled: boolean().optional(),
  /** Cline's list of this server's tools to call without asking: they need no approval (a participant's own ask or deny still wins). */
  autoApprove: z.array(z.string().min(1)).optional(),
  /** The server may ask the caller of a call it serves for a model completion (MCP sampling). Default true. */
  sampling: boolean().optional(),
  /** The server may ask the caller of a call it serves to fill in a form or visit a URL (MCP elicitation). Default true. */
  elicitation: boolean().optional(),
  /**
   * The roots the server is told of: a list of URIs (or `{uri, name}`), or `{from: participant}`
   * to ask that participant (a `mewgate mcp` session passes its MCP client's roots on). Without
   * it the server is not offered roots, so a server that would widen its reach to the client's
   * roots keeps to its own configuration.
   */
  roots: z
    .union(
      [
        z
          .array(
            z.union([z.string().min(1).max(4096), section({ uri: z.string().min(1).max(4096), name: z.string().max(256).optional() })]),
          )
          .max(256),
        section({ from: z.string().regex(PARTICIPANT_ID, { error: expected("a participant id") }) }),
      ],
      { error: expected("a list of root URIs, or {from: participant}") },
    )
    .optional(),
})
  .refine((m) => (m.command === undefined) !== (m.url === undefined), { error: "give either command (stdio) or url (streamable HTTP)" })
  .refine((m) => m.oauth === undefined || m.oauth === false || m.url !== undefined, {
    error: "oauth: is for url: servers",
    path: ["oauth"],
  });
export type McpServerConfig = z.output<typeof McpServerSchema>;

export const PROVIDERS = ["auto", "openai", "anthropic", "scripted"] as const;

const PriceSchema = section({
  input_per_mtok: numeric(z.number().min(0)),
  output_per_mtok: numeric(z.number().min(0)),
});

/** An LLM participant run by `mewgate up`. */
const AgentSchema = section({
  /** `auto`: anthropic with ANTHROPIC_API_KEY, else openai with OPENAI_API_KEY, else the script. */
  provider: z.enum(PROVIDERS).default("auto"),
  model: z.string().optional(),
  base_url: z.string().optional(),
  api_key: z.string().optional(),
  temperature: numeric(
    z
      .number({ error: expected("a number from 0 to 2") })
      .min(0)
      .max(2),
  ).optional(),
  max_tokens: int(1, 1_000_000).optional(),
  instructions: z.string().optional(),
  /** A scripted provider's script, relative to the space.yaml. */
  script: z.string().optional(),
  max_iterations: int(1, 100).default(8),
  context_tokens: int(256, 10_000_000).default(32_000),
  reasoning: boolean().default(false),
  /** The space's primary agent: it answers a human's broadcast chat (one that addresses and mentions nobody) even with other agents present. One per space. */
  primary: boolean().default(false),
  /** Offer this agent to the others as a tool `<id>/<name>` (delegation). */
  offer: section({
    name: z.string().min(1).default("ask"),
    description: z.string().optional(),
    enabled: boolean().default(true),
    /** Asks worked on at once; the rest wait, HIGH priority first. */
    max_concurrent: int(1, 64).default(4),
    /** Asked for a person, take their conversation over until done (needs agent.takeover to allow that person). */
    interactive: boolean().default(false),
  }).optional(),
  /** Whether a tool server this agent calls may borrow its model (MCP sampling). Default true. */
  sampling: boolean().default(true),
  /** People whose conversation this agent may take over when asked interactively (or "*"); see conversations.ts. */
  takeover: z.array(z.string().min(1)).optional(),
  /** USD per million tokens by model, for what requests cost; the space's `prices` fill in what is not here. */
  prices: z.record(z.string(), PriceSchema).optional(),
});
export type AgentConfig = z.output<typeof AgentSchema>;

/** An external program `mewgate up` starts as a participant (it gets MEWGATE_URL, MEWGATE_SPACE, MEWGATE_TOKEN). */
const RunSchema = section({
  command: z.string().min(1),
  args: z.array(z.string()).optional(),
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().optional(),
});
export type RunConfig = z.output<typeof RunSchema>;

const ParticipantSchema = section({
  kind: z.enum(PARTICIPANT_KINDS).default("service"),
  description: z.string().optional(),
  // Never echo a token back in a message: it may be a real secret with a typo elsewhere.
  token: z
    .string({ error: expected("a string of at least 8 characters", kindOf) })
    .min(8, { error: expected("a string of at least 8 characters", (t) => `${String(t).length} characters`) })
    .optional(),
  capabilities: z.array(CapabilitySchema).optional(),
  visibility: z.enum(VISIBILITIES).optional(),
  echo: boolean().default(false),
  tools: ToolPolicySchema.optional(),
  approvers: z.array(z.string()).optional(),
  /** A first-stage reviewer of this participant's proposals (proposals/reviewer-bound.ts): `by` a participant or `@group`; it approves by itself only up to `may_approve` risk, else hands the card to people with its note. */
  review: section({ by: z.string().min(1), may_approve: z.enum(["none", "low", "medium"]).default("none") }).optional(),
  /** How many distinct approvers (never the proposer) a proposal of this participant needs: a number, or `{tool glob: number}` (the first glob that matches; 1 otherwise). */
  approvals: z
    .union([int(1, 16), z.record(z.string().min(1), int(1, 16))], { error: expected("a number from 1 to 16, or {tool glob: number}") })
    .optional(),
  /** Whether a change to this participant's tool definitions suspends what was allowed on the old one (tools/pins.ts): `false` for none of its tools, `{skip: [globs]}` for some. */
  pin: z
    .union([boolean(), section({ skip: z.array(z.string().min(1)) })], { error: expected("true, false, or {skip: [tool globs]}") })
    .optional(),
  agent: AgentSchema.optional(),
  mcp: McpServerSchema.optional(),
  run: RunSchema.optional(),
});

/** The default of `gateway.audit_flush_ms`: how long a direct call's audit record may wait for company. */
export const DEFAULT_AUDIT_FLUSH_MS = 50;

const SpaceConfigSchema = section({
  space: section({
    id: z.string({ error: expected("a space id") }).regex(SPACE_ID, {
      error: expected(`a space id (a-z or 0-9, then up to 63 of a-z, 0-9, "_", "-")`),
    }),
    name: z.string().optional(),
    description: z.string().optional(),
  }),
  gateway: section({
    host: z
      .string({ error: expected("a host name or address") })
      .min(1)
      .default(DEFAULT_HOST),
    port: int(0, 65535).default(DEFAULT_PORT),
    state_dir: z
      .string({ error: expected("a directory path") })
      .min(1)
      .default(DEFAULT_STATE_DIR),
    limits: LimitsSchema.prefault({}),
    /**
     * How long the record of a call that went straight through (event "called") may wait to
     * be written together with others (space/ledger.ts `later`); 0 writes each at once.
     */
    audit_flush_ms: int(0, 1000).default(DEFAULT_AUDIT_FLUSH_MS),
    /** Web origins (besides loopback and the gateway's own) whose pages may reach the gateway. */
    allowed_origins: z.array(z.string().url({ error: expected("an origin like https://console.example.com") })).default([]),
    /** Host names (besides loopback, IP literals and the configured host) the gateway answers to. */
    allowed_hosts: z.array(z.string().min(1)).default([]),
    /** The gateway's address as people reach it (https://gw.example.com), for the links in notices; default: the address it listens on. */
    public_url: z
      .string()
      .url({ error: expected("an http(s) URL like https://gateway.example.com") })
      .refine((u) => /^https?:\/\//i.test(u), { error: expected("an http(s) URL") })
      .optional(),
    /** Webhooks told of each new proposal and its outcome (operator/notify.ts). */
    notify: z.array(WebhookSchema).max(16).default([]),
    /** Serve the space together with other gateway processes over NATS (cluster/index.ts). */
    cluster: ClusterSchema.optional(),
    /** OpenTelemetry traces of call chains, exported over OTLP/HTTP (ports/tracing.ts); off when absent, unless OTEL_* names an endpoint. */
    telemetry: TelemetrySchema.optional(),
  }).prefault({}),
  policy: PolicySchema.prefault({}),
  /** What every call's arguments and results are read for, and what a find does (config/guards.ts, policy/guards.ts). */
  guards: GuardsSchema,
  /** Calls (and cost) per minute, per person, agent, tool or caller, counted across the cluster (policy/caps.ts). */
  caps: CapsSchema,
  /** The cost of one call, by tool glob (for caps' cost_per_minute). */
  costs: CostsSchema,
  /** Named groups of participants, usable as `@name` wherever participants are named (policy/groups.ts). */
  groups: z.record(z.string().regex(PARTICIPANT_ID, { error: expected("a group name") }), z.array(z.string())).default({}),
  calls: CallsSchema.prefault({}),
  /** USD per million input and output tokens, by model name: what agents' requests cost, totalled per request. */
  prices: z.record(z.string(), PriceSchema).default({}),
  quotas: QuotasSchema.prefault({}),
  /** How joins and leaves are told: each to everyone in a small space, summed up in a large one (limits.ts `DEFAULT_PRESENCE`). */
  presence: PresenceSchema.prefault({}),
  /** Read-only companion calls shown beside a proposal's arguments (config/previews.ts). */
  previews: PreviewsSchema,
  defaults: section({
    visibility: z.enum(VISIBILITIES).optional(),
    capabilities: z.array(CapabilitySchema).optional(),
  }).optional(),
  mcpServers: z.record(z.string().regex(PARTICIPANT_ID, { error: expected("a participant id") }), McpServerSchema).optional(),
  participants: z
    .record(
      z.string().regex(PARTICIPANT_ID, {
        error: expected(`a participant id (a letter or digit, then up to 63 letters, digits, "_", ".", "-")`),
      }),
      ParticipantSchema,
    )
    .default({}),
  /** The organisation's OpenID provider: console sign-in and JWT access tokens (config/identity.ts). */
  identity: identitySchema(CapabilitySchema, ToolPolicySchema).optional(),
})
  .superRefine(({ participants, mcpServers, identity, groups, policy }, ctx) => {
    // A space of pasted mcpServers alone is a space too (its tools, for MCP clients).
    if (Object.keys(participants).length === 0 && Object.keys(mcpServers ?? {}).length === 0) {
      ctx.addIssue({
        code: "custom",
        path: ["participants"],
        message: "expected at least one participant (under participants or mcpServers)",
      });
    }
    for (const id of Object.keys(mcpServers ?? {})) {
      if (id in participants)
        ctx.addIssue({ code: "custom", path: ["mcpServers", id], message: `"${id}" is also under participants; give it one place` });
    }
    const ids = [...Object.keys(participants), ...Object.keys(mcpServers ?? {})];
    const tokenOwner = new Map<string, string>();
    const servers: Array<[string[], z.output<typeof McpServerSchema> | undefined]> = [
      ...Object.entries(participants).map(([id, p]): [string[], typeof p.mcp] => [["participants", id, "mcp"], p.mcp]),
      ...Object.entries(mcpServers ?? {}).map(([id, m]): [string[], typeof m] => [["mcpServers", id], m]),
    ];
    const primaries = Object.entries(participants).filter(([, p]) => p.agent?.primary);
    for (const [id] of primaries.slice(1)) {
      ctx.addIssue({
        code: "custom",
        path: ["participants", id, "agent", "primary"],
        message: `"${primaries[0]![0]}" is already the primary agent; a space has one`,
      });
    }
    for (const [path, m] of servers) {
      const from = m?.roots !== undefined && !Array.isArray(m.roots) ? m.roots.from : undefined;
      if (from === undefined || ids.includes(from)) continue;
      const near = suggest(from, ids);
      ctx.addIssue({
        code: "custom",
        path: [...path, "roots", "from"],
        message: `unknown participant ${JSON.stringify(from)}${near ? `; did you mean ${JSON.stringify(near)}?` : ""}`,
      });
    }
    for (const [id, p] of Object.entries(participants)) {
      if (p.token !== undefined) {
        const owner = tokenOwner.get(p.token);
        if (owner === undefined) tokenOwner.set(p.token, id);
        // The token decides who a connection is, so a shared token would make identity ambiguous.
        else ctx.addIssue({ code: "custom", path: ["participants", id, "token"], message: `same token as participant "${owner}"` });
      }
      p.approvers?.forEach((approver, i) => {
        if (ids.includes(approver) || approver.startsWith("@")) return; // groups: checkGroups
        const near = suggest(approver, ids);
        const hint = near ? `; did you mean ${JSON.stringify(near)}?` : "";
        ctx.addIssue({
          code: "custom",
          path: ["participants", id, "approvers", i],
          message: `unknown participant ${JSON.stringify(approver)}${hint}`,
        });
      });
    }
    const mapped = new Set(Object.values(identity?.groups ?? {}));
    for (const g of Object.keys(identity?.guests ?? {})) {
      if (!mapped.has(g))
        ctx.addIssue({
          code: "custom",
          path: ["identity", "guests", g],
          message: `no claim value maps to ${JSON.stringify(g)}; add it under identity.groups`,
        });
    }
    for (const [claim, id] of Object.entries(identity?.people ?? {})) {
      if (ids.includes(id)) continue;
      const near = suggest(id, ids);
      ctx.addIssue({
        code: "custom",
        path: ["identity", "people", claim],
        message: `unknown participant ${JSON.stringify(id)}${near ? `; did you mean ${JSON.stringify(near)}?` : ""}`,
      });
    }
    // Groups named in space.yaml, or mapped from the identity provider's claims (identity.groups).
    checkGroups(
      ctx,
      ids,
      groups,
      participants,
      policy.escalate,
      Object.values(identity?.groups ?? {}).map((g) => g.replace(/^@/, "")),
    );
    // Ids that read alike (`files`, `fiIes`, `fi1es`, `Files`) could pass for each other on every
    // screen that names a participant or its tools (config/confusables.ts). Reported at the
    // later key, naming the earlier one and where it is (`see`, resolved in parseSpaceConfig).
    const alike = new Lookalikes();
    const pathOf = new Map<string, string[]>();
    for (const path of [
      ...Object.keys(participants).map((id) => ["participants", id]),
      ...Object.keys(mcpServers ?? {}).map((id) => ["mcpServers", id]),
    ]) {
      const id = path[1]!;
      const like = alike.clash(id);
      if (like !== undefined) {
        ctx.addIssue({
          code: "custom",
          path,
          message: `${JSON.stringify(id)} reads like participant ${JSON.stringify(like)}`,
          params: { atKey: true, see: pathOf.get(like) },
        });
      }
      alike.add(id);
      if (!pathOf.has(id)) pathOf.set(id, path);
    }
  })
  .transform(
    ({
      space,
      gateway,
      policy,
      guards,
      caps,
      costs,
      groups,
      calls,
      quotas,
      presence,
      defaults,
      participants,
      mcpServers,
      prices,
      identity,
      previews,
    }) => {
      // Null prototype: ids like "constructor" are legal and must not hit Object.prototype.
      const resolved: Record<string, ParticipantConfig> = Object.create(null);
      // A pasted mcpServers entry is an `mcp` participant with every default.
      const fromMcpServers = Object.entries(mcpServers ?? {})
        .filter(([, m]) => !m.disabled)
        .map(([id, m]): [string, z.output<typeof ParticipantSchema>] => [
          id,
          { kind: "mcp", echo: false, description: m.description, mcp: m },
        ]);
      for (const [id, p] of [...Object.entries(participants), ...fromMcpServers]) {
        resolved[id] = {
          id,
          ...p,
          visibility: p.visibility ?? defaults?.visibility ?? defaultVisibility(p.kind),
          capabilities: p.capabilities ?? structuredClone(defaults?.capabilities) ?? defaultCapabilities(p.kind),
          ...(p.agent ? { agent: { ...p.agent, prices: { ...prices, ...p.agent.prices } } } : {}),
        };
        // The operator named where the server's roots come from: asking there is allowed, and only that.
        const rootsFrom = p.mcp?.roots !== undefined && !Array.isArray(p.mcp.roots) ? p.mcp.roots.from : undefined;
        if (rootsFrom !== undefined)
          resolved[id]!.capabilities.push({ kind: "mcp/request", to: [rootsFrom], payload: { method: "roots/list" } });
      }
      allowSignInCards(resolved);
      // `file` is set by parseSpaceConfig once the path is known.
      return {
        file: "",
        space: { ...space, name: space.name ?? space.id },
        gateway,
        policy,
        guards,
        caps,
        costs: nullProto(costs),
        groups: nullProto(groups),
        calls,
        quotas,
        presence,
        defaults,
        participants: resolved,
        ...(identity ? { identity } : {}),
        previews,
      };
    },
  );

export type ParticipantConfig = Omit<z.output<typeof ParticipantSchema>, "capabilities" | "visibility"> & {
  /** The key under `participants`, repeated here for convenience. */
  id: string;
  capabilities: Capability[];
  visibility: Visibility;
  /**
   * Set for a participant invited at run time (agents/invites.ts): who invited it. Its
   * capabilities are then a loan from the inviter, worth for a tool call only what the
   * inviter may call directly at the time (policy/authority.ts).
   */
  invitedBy?: string;
};

/** The resolved config: defaults applied, `gateway.state_dir` absolute. */
export type SpaceConfig = z.output<typeof SpaceConfigSchema>;

// ---------------------------------------------------------------------------------------------
// Entry points

/**
 * `signs`: the file is read by what signs webhook notices (a gateway: the default), so each
 * signing webhook's secret must be in the environment now. A command that only reads the
 * file (`policy check`, `status`, `proposals`) passes false: it signs nothing, and a secret
 * held only where the gateway runs must not stop it.
 */
export function parseSpaceConfig(text: string, opts: { file: string; env?: NodeJS.ProcessEnv; signs?: boolean }): SpaceConfig {
  const { file, env = process.env } = opts;
  const lineCounter = new LineCounter();
  const at = (offset: number | undefined, path: string, message: string): ConfigIssue => {
    const { line, col } = offset === undefined ? { line: 1, col: 1 } : lineCounter.linePos(offset);
    return { file, line, column: col, path, message };
  };
  const fail = (issues: ConfigIssue[]): never => {
    throw new ConfigError(issues.sort((a, b) => a.line - b.line || a.column - b.column));
  };

  const issues: ConfigIssue[] = [];
  const envErrorPaths = new Set<string>();
  let doc: Document;
  let data: unknown;
  try {
    doc = parseDocument(text, { lineCounter, prettyErrors: false });
    if (!doc.errors.length) {
      substituteEnv(doc.contents, [], env, (node, path, message) => {
        envErrorPaths.add(formatPath(path));
        issues.push(at(node.range?.[0], formatPath(path), message));
      });
      data = doc.toJS();
    }
  } catch (err) {
    // e.g. the alias-expansion guard against "billion laughs" documents
    return fail([{ file, line: 0, column: 0, path: "", message: `cannot parse: ${(err as Error).message}` }]);
  }
  // Past a syntax error the tree is a guess; schema messages about it would mislead.
  if (doc.errors.length) return fail(doc.errors.map((e) => at(e.pos[0], "", e.message.replace(/\s+/g, " ").trim())));

  const result = SpaceConfigSchema.safeParse(data, { error: defaultMessage });
  if (!result.success) {
    for (const issue of result.error.issues) {
      // zod's paths may hold symbols in theory; YAML data never produces them.
      const base = issue.path.filter((s): s is string | number => typeof s !== "symbol");
      if (issue.code === "unrecognized_keys") {
        const messages = issue.message.split("\n");
        issue.keys.forEach((k, i) => {
          const p = [...base, k];
          issues.push(at(locate(doc, p, true)?.range?.[0], formatPath(p), messages[i] ?? "unknown key"));
        });
        continue;
      }
      const p = formatPath(base);
      // A scalar whose ${VAR} failed already has an issue; its leftover text would only add noise.
      if (envErrorPaths.has(p)) continue;
      // A custom issue may point at a key (`atKey`) and name another place in the file (`see`).
      const params = issue.code === "custom" ? (issue.params as { atKey?: boolean; see?: string[] } | undefined) : undefined;
      let message = issue.message;
      if (params?.see) {
        const { line, column } = at(locate(doc, params.see, true)?.range?.[0], "", "");
        message += ` (${formatPath(params.see)} at ${line}:${column}); rename one, since ids that read alike could pass for each other`;
      }
      issues.push(at(locate(doc, base, issue.code === "invalid_key" || params?.atKey === true)?.range?.[0], p, message));
    }
  }
  if (issues.length || !result.success) return fail(issues);

  const config = result.data;
  const dir = path.dirname(path.resolve(file));
  config.file = path.resolve(file);
  config.gateway.state_dir = path.resolve(dir, config.gateway.state_dir);
  // Paths in the file mean paths next to the file, wherever mewgate is started from.
  for (const p of Object.values(config.participants)) {
    if (p.agent?.script) p.agent.script = path.resolve(dir, p.agent.script);
    if (p.mcp?.cwd) p.mcp.cwd = path.resolve(dir, p.mcp.cwd);
    if (p.mcp?.oauth) resolveSecretFile(p.mcp.oauth, dir);
    if (p.run) p.run.cwd = path.resolve(dir, p.run.cwd ?? ".");
  }
  for (const [id, p] of Object.entries(config.participants)) if (p.tools) recordRulePositions(doc, lineCounter, file, id, p.tools);
  // A webhook that signs its notices has its secret in the environment now, or the file is refused.
  if (opts.signs !== false)
    for (const [where, error] of webhookSecretIssues(config.gateway.notify, env))
      issues.push(at(locate(doc, where, false)?.range?.[0], formatPath(where), error));
  if (issues.length) return fail(issues);
  return config;
}

export async function loadSpaceConfig(file: string, env: NodeJS.ProcessEnv = process.env, signs = true): Promise<SpaceConfig> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const reason =
      e.code === "ENOENT" ? "no such file" : e.code === "EISDIR" ? "is a directory" : e.code === "EACCES" ? "permission denied" : e.message;
    throw new ConfigError([{ file, line: 0, column: 0, path: "", message: `cannot read: ${reason}` }]);
  }
  return parseSpaceConfig(text, { file, env, signs });
}
