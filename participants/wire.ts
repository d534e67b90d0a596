/**
 * Schemas of the payloads a participant reads (declared once, types derived).
 *
 * The welcome, presence and error schemas are deliberately lenient (`looseObject`): the gateway may add fields, and a MEW
 * peer may send more than we use. Only what the client acts on is required.
 */
import * as z from "zod";
import type { Capability } from "../gateway/index.js";

const CapabilityItem = z.custom<Capability>((v) => typeof v === "object" && v !== null && !Array.isArray(v), "a capability pattern");

export const ParticipantInfoSchema = z.looseObject({
  id: z.string(),
  kind: z.string().optional(),
  description: z.string().optional(),
  capabilities: z.array(CapabilityItem).optional(),
});
/** Another participant, as the welcome and presence describe it. */
export type ParticipantInfo = z.infer<typeof ParticipantInfoSchema>;

export const ToolInfoSchema = z.looseObject({
  /** Namespaced: `participant/tool`. */
  name: z.string(),
  participant: z.string().optional(),
  tool: z.string().optional(),
  description: z.string().optional(),
  inputSchema: z.record(z.string(), z.unknown()).optional(),
  annotations: z.record(z.string(), z.unknown()).optional(),
  /** What applies to this participant: `direct`, `proposal` or `denied`. */
  policy: z.string().optional(),
});
/** A tool of the space, from the welcome or `tools/list` on `system:gateway`. */
export type ToolInfo = z.infer<typeof ToolInfoSchema>;

const EnvelopeLike = z.looseObject({ id: z.string(), kind: z.string(), from: z.string() });

export const WelcomePayloadSchema = z.looseObject({
  you: z.looseObject({
    id: z.string(),
    kind: z.string().optional(),
    capabilities: z.array(CapabilityItem).default([]),
    visibility: z.string().optional(),
  }),
  space: z
    .looseObject({
      id: z.string(),
      name: z.string().optional(),
      description: z.string().optional(),
      /** The largest frame the space takes, and how deep it may nest (an older gateway does not say). */
      limits: z
        .object({ max_payload_bytes: z.number().int().positive(), max_depth: z.number().int().positive() })
        .optional()
        .catch(undefined),
    })
    .optional(),
  participants: z.array(ParticipantInfoSchema).default([]),
  tools: z.array(ToolInfoSchema).default([]),
  proposals: z.array(EnvelopeLike).default([]),
  history: z.array(EnvelopeLike).default([]),
  /** Set when the catalogue did not fit the welcome: tools/list continues from here. */
  tools_cursor: z.string().optional(),
  /** Set when pending proposals did not fit: proposals/list continues from here. */
  proposals_cursor: z.string().optional(),
});
export type WelcomePayload = z.infer<typeof WelcomePayloadSchema>;

export const PresencePayloadSchema = z.looseObject({
  event: z.enum(["join", "leave"]),
  participant: ParticipantInfoSchema,
  reason: z.string().optional(),
});
export type PresencePayload = z.infer<typeof PresencePayloadSchema>;

/** A large space's presence (`presence.each_up_to` exceeded): who joined and left since the last one, the first 100 of each. */
export const PresenceSummarySchema = z.looseObject({
  event: z.literal("summary"),
  joined: z.array(z.string()).max(10_000),
  left: z.array(z.string()).max(10_000),
  joined_more: z.number().optional(),
  left_more: z.number().optional(),
  online: z.number().optional(),
});

export const SystemErrorPayloadSchema = z.looseObject({
  code: z.string().optional(),
  error: z.string().optional(),
  message: z.string().optional(),
});

/**
 * The MCP payloads are the gateway's own schemas (the gateway has validated every routed
 * one with them already), re-exported so the participant side reads exactly what the
 * gateway writes.
 */
export { parseMcpRequest, parseMcpResponse, RejectPayloadSchema, WithdrawPayloadSchema } from "../gateway/index.js";

/** A JSON-RPC id. */
export type RpcId = string | number;
