/**
 * The MEW v0.4 envelope and the payloads of the kinds the gateway itself acts on.
 *
 * A frame is parsed exactly once, at the edge (`parseFrame`): JSON, then the envelope
 * schema, then — for the few kinds the gateway interprets — the payload schema. Everything
 * inward works on the typed result and branches on `kind` with a switch.
 */
import { randomUUID } from "node:crypto";
import * as z from "zod";
import { type Capability, CapabilitySchema } from "../config/config.js";
import { type ErrorCode, ErrorCodes } from "./error-codes.js";

export const PROTOCOL = "mew/v0.4";
/** The sender id of everything the gateway itself says. */
export const GATEWAY_ID = "system:gateway";

const Id = z.string().min(1).max(256);
/** Kinds are short path-like names: `chat`, `mcp/request`, `participant/request-status`. */
const Kind = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$/, 'a kind like "chat" or "mcp/request"');

/**
 * What a participant may send. `id`, `ts`, `from` and `protocol` may be left out: the
 * gateway fills them in. Unknown top-level fields are dropped, so what reaches the other
 * participants is exactly the documented envelope.
 */
export const InboundEnvelopeSchema = z.object({
  protocol: z.literal(PROTOCOL).optional(),
  id: Id.optional(),
  ts: z.string().max(64).optional(),
  from: z.string().max(256).optional(),
  to: z.array(Id).max(256).optional(),
  kind: Kind,
  // MEW says "always an array"; a lone string is accepted and normalised, since
  // early clients send one.
  correlation_id: z
    .union([Id, z.array(Id).max(64)])
    .transform((v) => (typeof v === "string" ? [v] : v))
    .optional(),
  context: z.string().max(1024).optional(),
  payload: z.unknown().optional(),
});

export type InboundEnvelope = z.infer<typeof InboundEnvelopeSchema>;

/** A routed envelope: every header field present, `from` stamped by the gateway. */
export interface Envelope {
  protocol: typeof PROTOCOL;
  id: string;
  ts: string;
  from: string;
  to?: string[];
  kind: string;
  correlation_id?: string[];
  context?: string;
  payload: unknown;
}

export type { Capability };

export const GrantPayloadSchema = z.object({
  recipient: Id,
  capabilities: z.array(CapabilitySchema).min(1).max(64),
  reason: z.string().max(2000).optional(),
});
export type GrantPayload = z.infer<typeof GrantPayloadSchema>;

export const RevokePayloadSchema = z
  .object({
    recipient: Id,
    grant_id: Id.optional(),
    capabilities: z.array(CapabilitySchema).min(1).max(64).optional(),
    reason: z.string().max(2000).optional(),
  })
  .refine((p) => (p.grant_id === undefined) !== (p.capabilities === undefined), {
    message: "give exactly one of grant_id or capabilities",
  });
export type RevokePayload = z.infer<typeof RevokePayloadSchema>;

const JsonRpcId = z.union([z.string().max(256), z.number()]);
const Params = z.record(z.string(), z.unknown());

/** The JSON-RPC body of an `mcp/request`: a request when it has an id, else a notification. */
export const McpRequestPayloadSchema = z.object({
  jsonrpc: z.literal("2.0").optional(),
  id: JsonRpcId.optional(),
  method: z.string().min(1).max(256),
  params: Params.optional(),
});
export type McpRequestPayload = z.infer<typeof McpRequestPayloadSchema>;

export const McpResponsePayloadSchema = z.object({
  jsonrpc: z.literal("2.0").optional(),
  id: JsonRpcId.nullable().optional(),
  result: z.unknown().optional(),
  error: z.object({ code: z.number(), message: z.string(), data: z.unknown().optional() }).optional(),
});
export type McpResponsePayload = z.infer<typeof McpResponsePayloadSchema>;

/** Most characters of a proposal's `intent`: a few paragraphs, not a document. */
export const INTENT_MAX = 4000;

/**
 * Why the proposer wants the call, in its own words, shown on the approval card (a mewgate
 * field MEW clients may send or ignore): `payload.intent` of an `mcp/proposal`, or
 * `params._meta["mewgate/intent"]` of a `tools/call` the gateway turns into a proposal.
 */
export const Intent = z.string().max(INTENT_MAX, `intent: at most ${INTENT_MAX} characters`);

/** The `_meta` key under which a `tools/call` through the gateway carries its intent. */
export const INTENT_META_KEY = "mewgate/intent";

/**
 * The payload key the gateway puts on a chat correlated to an awaiting proposal when its sender
 * may decide that proposal (a Respond: `{proposal, by}`), and takes off any other chat.
 */
export const RESPOND_KEY = "mewgate/respond";

/** The payload key of a shown proposal whose arguments an approver edited: `{arguments, by?, at?}`, what an approval now runs. */
export const EDITED_KEY = "mewgate/edited";

/** MEW proposals carry the request's method and params, without JSON-RPC framing; ours may add an intent. */
export const ProposalPayloadSchema = z.object({ method: z.string().min(1).max(256), params: Params.optional(), intent: Intent.optional() });

export const ApprovePayloadSchema = z.object({
  scope: z.enum(["once", "always"]).default("once"),
  /** With scope "always": what the grant is limited to (policy/scope.ts); the whole tool when absent. */
  limit: z
    .union([
      z.enum(["tool", "exact"]),
      z.strictObject({ field: z.string().min(1).max(256), prefix: z.string().min(1).max(4096).optional() }),
    ])
    .optional(),
  arguments: Params.optional(),
  reason: z.string().max(2000).optional(),
  /** A WebAuthn assertion (AuthenticationResponseJSON) confirming this approval, where policy asks for one. */
  passkey: z.record(z.string(), z.unknown()).optional(),
});
export type ApprovePayload = z.infer<typeof ApprovePayloadSchema>;

export const RejectPayloadSchema = z.object({
  reason: z.string().max(128).default("disagree"),
  text: z.string().max(4000).optional(),
});

export const WithdrawPayloadSchema = z.object({ reason: z.string().max(128).optional() });

/**
 * The MEW first-frame join, either bare (`{"type":"join",...}`) or as a `system/join` payload.
 * Its token is optional only to the schema: a client that authenticated at the door
 * (`Authorization: Bearer` on `GET /`) names just its space here.
 */
export const JoinSchema = z.object({
  space: z.string().min(1).max(256).optional(),
  token: z.string().min(1).max(4096).optional(),
  participantId: z.string().min(1).max(256).optional(),
  participant_id: z.string().min(1).max(256).optional(),
});
export type Join = z.infer<typeof JoinSchema>;

export { CloseCodes } from "./close-codes.js";
export { ErrorCodes, RpcErrors } from "./error-codes.js";
export type { ErrorCode } from "./error-codes.js";

export type ParsedFrame =
  | { ok: true; envelope: InboundEnvelope }
  | { ok: true; join: Join }
  | { ok: false; code: ErrorCode; message: string; id?: string };

/** How deeply a frame may nest when the space does not say (`gateway.limits.max_depth`). */
export const DEFAULT_MAX_DEPTH = 64;

/**
 * Whether `value` nests arrays and objects at most `max` deep, counting itself as `depth`.
 * Recursive, but never deeper than `max` (at most 1000 by the config), so it cannot
 * overflow the stack whatever it is given; stops at the first level too deep.
 */
export function nestsWithin(value: object, max: number, depth = 1): boolean {
  if (depth > max) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      if (typeof v === "object" && v !== null && !nestsWithin(v, max, depth + 1)) return false;
    }
    return true;
  }
  for (const k in value) {
    const v = (value as Record<string, unknown>)[k];
    if (typeof v === "object" && v !== null && !nestsWithin(v, max, depth + 1)) return false;
  }
  return true;
}

/**
 * Whether `text` holds at most `max` opening brackets: then nothing parsed from it can nest
 * deeper than `max` (each level opens with one; those inside strings only count too many),
 * and the walk over what was parsed (`nestsWithin`) can be skipped. Native searches, no
 * more than `max + 1` of them: an envelope has a dozen brackets, a limit is 8 or more.
 */
function fewBrackets(text: string, max: number): boolean {
  let n = 0;
  for (let at = text.indexOf("{"); at >= 0; at = text.indexOf("{", at + 1)) if (++n > max) return false;
  for (let at = text.indexOf("["); at >= 0; at = text.indexOf("[", at + 1)) if (++n > max) return false;
  return true;
}

/**
 * Parses one text frame. Never throws: a bad frame yields an error code and a message
 * naming the first offending field. A frame nesting deeper than `maxDepth` is refused
 * here, before anything can register, store or serialize it.
 */
export function parseFrame(text: string, maxDepth = DEFAULT_MAX_DEPTH): ParsedFrame {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, code: ErrorCodes.invalidJson, message: `frame is not valid JSON: ${(err as Error).message}` };
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return { ok: false, code: ErrorCodes.invalidEnvelope, message: "frame must be a JSON object (a MEW envelope)" };
  }
  const obj = raw as Record<string, unknown>;
  if (!fewBrackets(text, maxDepth) && !nestsWithin(obj, maxDepth)) {
    const id = typeof obj["id"] === "string" && obj["id"].length <= 256 ? obj["id"] : undefined;
    return {
      ok: false,
      code: ErrorCodes.tooDeep,
      message: `frame nests arrays and objects more than ${maxDepth} deep (gateway.limits.max_depth)`,
      ...(id ? { id } : {}),
    };
  }
  if (obj["type"] === "join" && obj["kind"] === undefined) return parseJoin(obj);
  if (obj["kind"] === "system/join") return parseJoin(obj["payload"]);
  const quick = quickEnvelope(obj);
  if (quick !== undefined) return { ok: true, envelope: quick };
  const result = InboundEnvelopeSchema.safeParse(obj);
  if (!result.success) {
    const id = typeof obj["id"] === "string" ? obj["id"] : undefined;
    return { ok: false, code: ErrorCodes.invalidEnvelope, message: describeIssue(result.error), ...(id ? { id } : {}) };
  }
  return { ok: true, envelope: result.data };
}

// --- the common shapes, read by hand --------------------------------------------------------
//
// Every routed envelope and every call crosses the schemas above, and zod's generic
// machinery costs more than the rest of the gateway's work on a small envelope. The readers
// below accept the well-formed common case and build exactly what the schema would; for
// anything else they answer undefined and the schema decides, so that errors keep the
// schema's words. test/envelope-quick.test.ts holds the two to the same answers.

const KIND = /^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$/;

function isId(v: unknown): v is string {
  return typeof v === "string" && v.length >= 1 && v.length <= 256;
}

function ids(v: unknown, max: number): string[] | undefined {
  if (!Array.isArray(v) || v.length > max) return undefined;
  for (let i = 0; i < v.length; i++) if (!isId(v[i])) return undefined;
  return v.slice();
}

function isShortString(v: unknown, max: number): v is string {
  return typeof v === "string" && v.length <= max;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

/** The envelope schema's answer for a well-formed envelope, or undefined to ask the schema. */
export function quickEnvelope(o: Record<string, unknown>): InboundEnvelope | undefined {
  const { protocol, id, ts, from, to, kind, correlation_id, context, payload } = o;
  if (typeof kind !== "string" || !KIND.test(kind)) return undefined;
  const env: InboundEnvelope = { kind };
  if (protocol !== undefined) {
    if (protocol !== PROTOCOL) return undefined;
    env.protocol = PROTOCOL;
  }
  if (id !== undefined) {
    if (!isId(id)) return undefined;
    env.id = id;
  }
  if (ts !== undefined) {
    if (!isShortString(ts, 64)) return undefined;
    env.ts = ts;
  }
  if (from !== undefined) {
    if (!isShortString(from, 256)) return undefined;
    env.from = from;
  }
  if (to !== undefined) {
    const list = ids(to, 256);
    if (list === undefined) return undefined;
    env.to = list;
  }
  if (correlation_id !== undefined) {
    const list = isId(correlation_id) ? [correlation_id] : ids(correlation_id, 64);
    if (list === undefined) return undefined;
    env.correlation_id = list;
  }
  if (context !== undefined) {
    if (!isShortString(context, 1024)) return undefined;
    env.context = context;
  }
  if (payload !== undefined) env.payload = payload;
  return env;
}

function isRpcId(v: unknown): v is string | number {
  return typeof v === "number" ? Number.isFinite(v) : isShortString(v, 256);
}

/** The request schema's answer for a well-formed JSON-RPC request, or undefined to ask the schema. */
export function quickMcpRequest(p: unknown): McpRequestPayload | undefined {
  if (!isPlainObject(p)) return undefined;
  const { jsonrpc, id, method, params } = p;
  if (typeof method !== "string" || method.length < 1 || method.length > 256) return undefined;
  const out: McpRequestPayload = { method };
  if (jsonrpc !== undefined) {
    if (jsonrpc !== "2.0") return undefined;
    out.jsonrpc = "2.0";
  }
  if (id !== undefined) {
    if (!isRpcId(id)) return undefined;
    out.id = id;
  }
  if (params !== undefined) {
    if (!isPlainObject(params)) return undefined;
    out.params = { ...params };
  }
  return out;
}

/** The response schema's answer for a well-formed JSON-RPC response, or undefined to ask the schema. */
export function quickMcpResponse(p: unknown): McpResponsePayload | undefined {
  if (!isPlainObject(p)) return undefined;
  const { jsonrpc, id, result, error } = p;
  const out: McpResponsePayload = {};
  if (jsonrpc !== undefined) {
    if (jsonrpc !== "2.0") return undefined;
    out.jsonrpc = "2.0";
  }
  if (id !== undefined) {
    if (id !== null && !isRpcId(id)) return undefined;
    out.id = id;
  }
  if (result !== undefined) out.result = result;
  if (error !== undefined) {
    if (!isPlainObject(error)) return undefined;
    const { code, message, data } = error;
    if (typeof code !== "number" || !Number.isFinite(code) || typeof message !== "string") return undefined;
    out.error = data === undefined ? { code, message } : { code, message, data };
  }
  return out;
}

/** The JSON-RPC code a responder's error carries when its own code is not a number. */
export const FOREIGN_ERROR_CODE = -32000;

/**
 * A responder's JSON-RPC error made readable to any JSON-RPC caller. MEW's gateway does not
 * validate JSON-RPC payloads (spec §4.2), so MEW participants answer with codes such as
 * `"NOT_FOUND"`; dropping such an answer would leave the caller waiting for a timeout. A
 * code that is not a number becomes FOREIGN_ERROR_CODE with the original kept in
 * `data.code`; a missing message gets one. Anything that is no error at all is undefined.
 */
function rpcError(error: unknown): { code: number; message: string; data?: unknown } | undefined {
  if (typeof error === "string") return { code: FOREIGN_ERROR_CODE, message: error.slice(0, 4096) };
  if (!isPlainObject(error)) return undefined;
  const { code, message, data } = error;
  const text = typeof message === "string" ? message : "the responder's error had no message";
  if (typeof code === "number" && Number.isFinite(code))
    return data === undefined ? { code, message: text } : { code, message: text, data };
  if (code !== undefined && typeof code !== "string" && typeof code !== "number") return undefined;
  const kept = typeof code === "string" ? { code: code.slice(0, 256) } : {};
  return { code: FOREIGN_ERROR_CODE, message: text, data: data === undefined ? kept : { ...kept, data } };
}

type Parsed<T> = { success: true; data: T } | { success: false; error: z.ZodError };

/** An `mcp/request` payload, read by hand when it is well formed, else by its schema. */
export function parseMcpRequest(payload: unknown): Parsed<McpRequestPayload> {
  const quick = quickMcpRequest(payload);
  return quick !== undefined ? { success: true, data: quick } : McpRequestPayloadSchema.safeParse(payload);
}

/** An `mcp/response` payload, read by hand when it is well formed, else by its schema. */
export function parseMcpResponse(payload: unknown): Parsed<McpResponsePayload> {
  const quick = quickMcpResponse(payload);
  if (quick !== undefined) return { success: true, data: quick };
  // An error in MEW's loose shape (a string code, no message) is made readable, not dropped.
  const error = isPlainObject(payload) ? payload["error"] : undefined;
  const normal = error === undefined ? undefined : rpcError(error);
  const loose = normal && quickMcpResponse({ ...(payload as Record<string, unknown>), error: normal });
  return loose !== undefined ? { success: true, data: loose } : McpResponsePayloadSchema.safeParse(payload);
}

function parseJoin(value: unknown): ParsedFrame {
  const result = JoinSchema.safeParse(value);
  if (!result.success) return { ok: false, code: ErrorCodes.invalidEnvelope, message: `invalid join: ${describeIssue(result.error)}` };
  return { ok: true, join: result.data };
}

/** One readable line for the first issue: `to.0: expected string, received number`. */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return "invalid";
  const path = issue.path.length ? issue.path.join(".") : "envelope";
  return `${path}: ${issue.message}`;
}

let lastMs = 0;
let lastIso = "";
/** The current time as RFC 3339, formatted at most once per millisecond: every envelope needs one. */
export function now(): string {
  const ms = Date.now();
  if (ms !== lastMs) {
    lastMs = ms;
    lastIso = isoTime(ms);
  }
  return lastIso;
}

let minuteStart = Number.NaN;
let minutePrefix = "";
/**
 * `new Date(ms).toISOString()`, with the date, hour and minute ("2026-07-28T10:15:") made
 * once a minute and the seconds and milliseconds written by hand: toISOString formats the
 * whole date each time, and a call stamps two or three envelopes and records.
 */
export function isoTime(ms: number): string {
  const into = ms - minuteStart;
  if (!(into >= 0 && into < 60_000)) {
    const iso = new Date(ms).toISOString();
    // Years past 9999 (or before 0) are written longer: those are formatted whole, every time.
    if (iso.length !== 24) return iso;
    minuteStart = ms - (((ms % 60_000) + 60_000) % 60_000);
    minutePrefix = iso.slice(0, 17);
    return iso;
  }
  const s = Math.floor(into / 1000);
  const m = into - s * 1000;
  return `${minutePrefix}${s < 10 ? "0" : ""}${s}.${m < 10 ? "00" : m < 100 ? "0" : ""}${m}Z`;
}

/** Stamps the header fields the gateway owns onto a validated inbound envelope. */
export function stamp(inbound: InboundEnvelope, from: string): Envelope {
  const env: Envelope = {
    protocol: PROTOCOL,
    id: inbound.id ?? randomUUID(),
    ts: inbound.ts ?? now(),
    from,
    kind: inbound.kind,
    payload: inbound.payload ?? {},
  };
  if (inbound.to !== undefined) env.to = inbound.to;
  if (inbound.correlation_id !== undefined) env.correlation_id = inbound.correlation_id;
  if (inbound.context !== undefined) env.context = inbound.context;
  return env;
}

/** An envelope from the gateway itself. */
export function systemEnvelope(kind: string, payload: unknown, extra?: { to?: string[]; correlation_id?: string[] }): Envelope {
  const env: Envelope = { protocol: PROTOCOL, id: randomUUID(), ts: now(), from: GATEWAY_ID, kind, payload };
  if (extra?.to) env.to = extra.to;
  if (extra?.correlation_id) env.correlation_id = extra.correlation_id;
  return env;
}

export function errorEnvelope(
  to: string,
  code: ErrorCode,
  message: string,
  detail?: { correlationId?: string | undefined; [k: string]: unknown },
): Envelope {
  const { correlationId, ...rest } = detail ?? {};
  // `error` repeats `code` because MEW clients read `payload.error`.
  const payload = { code, error: code, message, ...rest };
  return systemEnvelope("system/error", payload, { to: [to], ...(correlationId ? { correlation_id: [correlationId] } : {}) });
}
