/**
 * Which handler each envelope kind goes to: the space's dispatch table.
 *
 * The pipeline (pipeline.ts) checks what every frame must pass — JSON, schema, `from`,
 * reserved kinds, recipients — and then looks the kind up here. A route whose handler
 * checks the sender itself (its check depends on the payload: a tool call is decided by
 * the tool policy, a takeover by space.yaml's `agent.takeover`) says so with `checksItself`;
 * every other kind is checked against the sender's capabilities first. A kind with no
 * route is delivered as it came, stamped (chat-like kinds of MEW and of participants).
 *
 * A new kind is one handler (a method of a module below, or a function in a file of its
 * own taking `Handlers`) and one line in `ROUTES`. Handlers get the space's modules and
 * the delivery port, never the space itself.
 */
import type { Conversations } from "../agents/conversations.js";
import type { Invites } from "../agents/invites.js";
import type { Streams } from "../agents/streams.js";
import type { Switches } from "../agents/switches.js";
import type { McpRouter } from "../calls/router.js";
import type { Requests } from "../requests/requests.js";
import type { Lending } from "../agents/lending.js";
import type { Member } from "../ports/member.js";
import type { Answer } from "../ports/host.js";
import type { Decisions } from "../proposals/decisions.js";
import type { Deciders } from "../proposals/deciders.js";
import type { Proposing } from "../proposals/propose.js";
import type { Ends } from "../proposals/ends.js";
import { type Envelope, type InboundEnvelope, stamp } from "../wire/envelope.js";

/** What a handler may use: the space's modules, and delivery. */
export interface Handlers {
  readonly mcp: McpRouter;
  readonly requests: Requests;
  readonly proposing: Proposing;
  readonly deciders: Deciders;
  readonly decisions: Decisions;
  readonly ends: Ends;
  readonly lending: Lending;
  readonly invites: Invites;
  readonly switches: Switches;
  readonly streams: Streams;
  readonly conversations: Conversations;
  /** Routes an envelope by visibility (`Delivery.deliver`, space/delivery.ts). */
  deliver(env: Envelope, sender?: Member): void;
}

/** A handler: the refusal it returns is sent to the sender by the pipeline (ports/host.ts `Answer`). */
export type Handler = (h: Handlers, member: Member, inbound: InboundEnvelope) => Answer;

export interface Route {
  readonly handle: Handler;
  /** The handler checks the sender itself; the pipeline does not check capabilities first. */
  readonly checksItself?: true;
}

/** A kind nobody handles: delivered as it came, with `from` set by the gateway. */
export const deliverAsIs: Handler = (h, member, inbound) => h.deliver(stamp(inbound, member.id), member);

/** A Map, not an object: a kind such as `constructor` or `__proto__` must find no route. */
export const ROUTES: ReadonlyMap<string, Route> = new Map<string, Route>([
  // An mcp/request is checked once its payload is parsed (requests/requests.ts): tools/call by the
  // tool policy, the rest by capability.
  ["mcp/request", { handle: (h, m, e) => h.requests.onRequest(m, e), checksItself: true }],
  ["mcp/response", { handle: (h, m, e) => h.mcp.onResponse(m, e) }],
  ["mcp/proposal", { handle: (h, m, e) => h.proposing.onProposal(m, e) }],
  ["mcp/approve", { handle: (h, m, e) => h.decisions.onApprove(m, e) }],
  ["mcp/reject", { handle: (h, m, e) => h.ends.onReject(m, e) }],
  ["mcp/withdraw", { handle: (h, m, e) => h.ends.onWithdraw(m, e) }],
  ["capability/grant", { handle: (h, m, e) => h.lending.onGrant(m, e) }],
  ["capability/revoke", { handle: (h, m, e) => h.lending.onRevoke(m, e) }],
  ["space/invite", { handle: (h, m, e) => h.invites.onInvite(m, e) }],
  ["space/kick", { handle: (h, m, e) => h.invites.onKick(m, e) }],
  // A takeover is allowed by space.yaml's agent.takeover and the call it names, not by a capability.
  ["space/takeover", { handle: (h, m, e) => h.conversations.onTakeover(m, e), checksItself: true }],
  ["space/disable", { handle: (h, m, e) => h.switches.onSwitch(m, e, "disable") }],
  ["space/enable", { handle: (h, m, e) => h.switches.onSwitch(m, e, "enable") }],
  ["stream/request", { handle: (h, m, e) => h.streams.request(m, e) }],
  ["stream/close", { handle: (h, m, e) => h.streams.close(m, e) }],
  ["stream/grant-write", { handle: (h, m, e) => h.streams.rights(m, e) }],
  ["stream/revoke-write", { handle: (h, m, e) => h.streams.rights(m, e) }],
  ["stream/transfer-ownership", { handle: (h, m, e) => h.streams.rights(m, e) }],
  [
    "chat",
    {
      handle(h, member, inbound) {
        // Who is talking with whom, idle clocks, and "stop" (conversations.ts). A chat tied to a
        // proposal is a Respond only from someone who may decide it (deciders.ts respondMark).
        const chat = h.deciders.respondMark(member, stamp(inbound, member.id));
        h.conversations.onChat(member, chat);
        h.deliver(chat, member);
      },
    },
  ],
]);
