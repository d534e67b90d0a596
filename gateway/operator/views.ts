/**
 * What the operator API shows of a space's state, and how its errors map to HTTP.
 */
import {
  DEFINITION_CHANGED_KEY,
  GUARDS_KEY,
  heldFindings,
  INTERRUPTED_TEXT,
  type Proposal,
  runningParams,
  whatRuns,
} from "../proposals/book.js";
import type { AuditEntry } from "../audit/entry.js";
import type { Space } from "../space/space.js";
import { approversNow, approvalsView } from "../proposals/approvals.js";
import { limitOptions } from "../policy/scope.js";
import { compileCapabilities } from "../policy/capabilities.js";
import { INTENT_MAX } from "../wire/envelope.js";
import { learnView, reviewNote } from "./learn-api.js";
import { turnOf } from "../wire/turn.js";
import { decidersOf } from "./deciders.js";

/** The MCP annotation hints a card shows as badges, in this order. */
export const HINTS = ["destructiveHint", "readOnlyHint", "idempotentHint", "openWorldHint"] as const;

/** How many recent envelopes are searched for a proposer's last message. */
const LAST_MESSAGE_SCAN = 500;

/**
 * A proposal awaiting a decision as an approver needs to see it — the one card model the
 * console, the terminal's `mewgate proposals show` and the API share: who, what tool (its
 * title, description and annotation hints), the rule that made it wait, why the proposer
 * wants it (its intent, or else its last message), when, until when, and everything it
 * would do. An interrupted one (approved before the gateway stopped) says so, who approved
 * it, and the arguments that approval carried, which approving it again reuses.
 * Texts are as participants wrote them: every reader sanitises what it draws.
 */
export function proposalView(space: Space, viewer: string, p: Proposal): Record<string, unknown> {
  const entry = p.tool === undefined ? undefined : (space.registry.get(p.owner, p.tool) as Record<string, unknown> | undefined);
  // What will run (book.ts `whatRuns`): an approver's edits, with who and when, else what was proposed.
  const runs = whatRuns(p);
  return {
    id: p.id,
    shortId: p.id.slice(0, 8),
    proposer: p.proposer,
    intent: intentOf(space, viewer, p),
    owner: p.owner,
    method: p.method,
    // Held open (it named no target): `*`, whoever fulfils it picks. Why, with the arguments that will run.
    ...(p.tool !== undefined
      ? { tool: `${p.owner || "*"}/${p.tool}`, why: space.authority.why(p.proposer, p.owner, p.tool, runs.arguments) }
      : {}),
    // The arguments an approval runs; when an approver edited them, who and when, and what was proposed.
    arguments: p.method === "tools/call" ? runs.arguments : (p.params["arguments"] ?? {}),
    ...(runs.edited ? { edited: { by: runs.edited.by, at: runs.edited.at }, proposedArguments: p.params["arguments"] ?? {} } : {}),
    ...(p.method !== "tools/call" ? { params: p.params } : {}),
    state: p.state,
    ...(p.state === "interrupted"
      ? {
          interrupted: {
            reason: p.reason ?? "gateway_restarted",
            message: INTERRUPTED_TEXT,
            approvedBy: p.decidedBy,
            ...(runs.edited ? { arguments: runs.arguments } : {}),
          },
        }
      : {}),
    ...definitionChanged(p),
    // What the space's guards found in the arguments (masked), and what they do (policy/guards.ts).
    ...guardsOf(p),
    createdAt: p.createdAt,
    expiresAt: new Date(p.expiresAt).toISOString(),
    ...(entry
      ? {
          inputSchema: entry["inputSchema"],
          description: entry["description"],
          ...(typeof entry["title"] === "string" ? { title: entry["title"] } : {}),
          hints: hintsOf(entry["annotations"]),
        }
      : {}),
    // Approving it needs the approver's passkey (proposals/passkey-bar.ts), and where to give it.
    ...(space.passkeyBar.needs(p) ? { passkey: { required: true, where: space.passkeyBar.where(p) } } : {}),
    // What the gateway found wrong with the tool's texts (tools/inspect.ts): the card shows it.
    ...(entry?.["findings"] ? { findings: entry["findings"] } : {}),
    // Whether the viewer may decide: not its own, and it could make the call itself.
    mine: p.proposer === viewer,
    // Who may decide it, and whether the viewer may (deciders.ts): buttons only for those who may.
    ...decidersOf(space, viewer, p),
    // What an "always" may be limited to (policy/scope.ts), for the approve confirmation.
    ...(p.tool !== undefined && (p.required ?? 1) <= 1 ? { always_limits: limitOptions(runs.arguments) } : {}),
    // A two-person rule: "1 of 2", who approved, and whether it can still be met (proposals/approvals.ts).
    ...approvalsOf(space, p),
    // What approving "always" grants from now on: the console and the terminal say it and ask
    // first. Where grants carry an argument scope, it goes here as `arguments` (in words).
    ...(p.tool !== undefined ? { alwaysScope: { participant: p.proposer, tool: `${p.owner}/${p.tool}` } } : {}),
    // How people decided calls like this before ("you approved 5 like this"), and the risk with its reasons (gateway/policy/learn/).
    // A reviewer's verdict, risk and reason, cleaned (policy/learn/review.ts).
    ...(reviewNote(space, p.id) ? { review: reviewNote(space, p.id) } : {}),
    // One agent turn, one card: calls the model asked for in one reply (gateway/wire/turn.ts); display only.
    ...(turnOf(p.params) ? { turn: turnOf(p.params) } : {}),
    ...learnView(space, viewer, p, {
      annotations: entry?.["annotations"] as Record<string, unknown> | undefined,
      definitionChanged: definitionChanged(p)["definitionChanged"] !== undefined,
      flagged: Boolean((entry?.["findings"] as unknown[] | undefined)?.length),
      guarded: heldFindings((p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload),
    }),
  };
}

/**
 * Why the proposer wants the call: the `intent` it sent with the proposal, or else its last
 * chat message before it (that the viewer may see), or nothing. Bounded like an intent.
 */
function intentOf(
  space: Space,
  viewer: string,
  p: Proposal,
): { text: string; source: "proposal" | "last_message"; at?: string } | undefined {
  const payload = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
  if (typeof payload?.["intent"] === "string" && payload["intent"].trim() !== "")
    return { text: payload["intent"].slice(0, INTENT_MAX), source: "proposal" };
  const before = Date.parse(p.createdAt);
  const said = space.delivery
    .recentFor(viewer, LAST_MESSAGE_SCAN, (e) => e.kind === "chat" && e.from === p.proposer && Date.parse(e.ts) <= before + 1000)
    .at(-1);
  const text = (said?.payload as { text?: unknown } | undefined)?.text;
  return said && typeof text === "string" && text.trim() !== ""
    ? { text: text.slice(0, INTENT_MAX), source: "last_message", at: said.ts }
    : undefined;
}

/** The annotation hints a tool declares (true or false), by name; the rest is the tool's business. */
export function hintsOf(annotations: unknown): Record<string, boolean> {
  const out: Record<string, boolean> = {};
  if (typeof annotations !== "object" || annotations === null) return out;
  for (const h of HINTS) {
    const v = (annotations as Record<string, unknown>)[h];
    if (typeof v === "boolean") out[h] = v;
  }
  return out;
}

/**
 * Decided proposals, newest first, from the audit trail (durable: who decided, when, with
 * edited arguments or not, the call's outcome) and, while the gateway remembers it, the
 * call's result as text (calls/outcomes.ts).
 */
export function decidedView(space: Space, entries: AuditEntry[], max: number): Array<Record<string, unknown>> {
  const byId = new Map<string, AuditEntry[]>();
  for (const e of entries) {
    if (!e.proposal) continue;
    const list = byId.get(e.proposal) ?? [];
    list.push(e);
    byId.set(e.proposal, list);
  }
  const out: Array<Record<string, unknown>> = [];
  for (const [id, list] of byId) {
    const proposed = list.find((e) => e.event === "proposed");
    const decision = list.filter((e) => ["approved", "rejected", "withdrawn", "expired"].includes(e.event)).at(-1);
    if (!decision) continue;
    const end = list.filter((e) => e.event === "answered" || e.event === "failed" || e.event === "interrupted").at(-1);
    const state = end && Date.parse(end.ts) >= Date.parse(decision.ts) ? end.event : decision.event;
    const result = space.proposals.results.get(id);
    out.push({
      id,
      shortId: id.slice(0, 8),
      proposer: decision.proposer,
      owner: decision.owner,
      ...(decision.tool !== undefined ? { tool: `${decision.owner}/${decision.tool}` } : {}),
      method: decision.method,
      state,
      decision: decision.event,
      ...(decision.by !== undefined ? { decidedBy: decision.by } : {}),
      // Every approver of a two-person decision, in order (its `approval` records, then the last).
      ...(decision.event === "approved"
        ? {
            approvedBy: [
              ...new Set(list.filter((e) => (e.event === "approval" || e.event === "approved") && e.by !== undefined).map((e) => e.by!)),
            ],
          }
        : {}),
      decidedAt: decision.ts,
      ...(proposed ? { proposedAt: proposed.ts, proposedArguments: proposed.arguments } : {}),
      arguments: decision.arguments,
      edited: decision.edited === true,
      ...(decision.scope !== undefined ? { scope: decision.scope } : {}),
      ...(decision.reason !== undefined ? { reason: decision.reason } : {}),
      ...(decision.text !== undefined ? { text: decision.text } : {}),
      ...(end?.outcome !== undefined ? { outcome: end.outcome } : result ? { outcome: result.outcome } : {}),
      ...(end?.reason !== undefined && end.event === "failed" ? { failure: end.reason } : {}),
      ...(result ? { result: { text: result.text, ...(result.cut ? { cut: result.cut } : {}), at: result.at } } : {}),
    });
  }
  out.sort((a, b) => String(b["decidedAt"]).localeCompare(String(a["decidedAt"])));
  return out.slice(0, max);
}

/** A proposal made while its tool's definition was unconfirmed carries what changed (tools/pins.ts). */
function definitionChanged(p: Proposal): Record<string, unknown> {
  const payload = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload;
  const mark = payload?.[DEFINITION_CHANGED_KEY];
  return mark && typeof mark === "object" ? { definitionChanged: mark } : {};
}

/** What the guards found in a proposal's arguments, and their action (proposals/propose.ts records it when it holds one). */
function guardsOf(p: Proposal): Record<string, unknown> {
  const mark = (p.envelope as { payload?: Record<string, unknown> } | undefined)?.payload?.[GUARDS_KEY];
  return mark && typeof mark === "object" ? { guards: mark } : {};
}

/** The HTTP status for a `system/error` code an API action earned. */
export function statusOf(code: string): number {
  switch (code) {
    case "unknown_proposal":
    case "unknown_grant":
    case "unknown_recipient":
    case "unknown_tool":
      return 404;
    case "proposal_not_pending":
    case "duplicate_id":
    case "target_offline":
    case "tool_changed":
    case "already_approved":
    case "approval_mismatch":
    case "approvals_needed":
      return 409;
    case "quota_exceeded":
    case "rate_limited":
      return 429;
    case "store_failed":
      return 503;
    case "invalid_payload":
    case "invalid_envelope":
    case "reserved_kind":
    case "payload_too_large":
      return 400;
    default:
      // self_approval, not_an_approver, approver_lacks_capability, capability_violation,
      // revoke_not_allowed, not_proposer, denied, grant_exceeds_*: not yours to do.
      return 403;
  }
}

function approvalsOf(space: Space, p: Proposal): Record<string, unknown> {
  // Could `id` approve: may it send mcp/approve at all, and make the call itself?
  // With the arguments that run: an approver whose own rules deny them could not approve it.
  const mayApprove = (id: string) =>
    p.tool !== undefined &&
    compileCapabilities(space.authority.configured(id))({ kind: "mcp/approve", payload: {} }) &&
    space.authority.call(id, () => false, p.owner, p.method, runningParams(p), true).decision === "direct";
  const view = approvalsView(space.config, space.authority.groups, p, mayApprove);
  // Who may decide now: the proposer's approvers, widened by escalation stages reached.
  const approvers = approversNow(space.config, p);
  return { ...(view ? { approvals: view } : {}), ...(approvers ? { approvers } : {}) };
}
