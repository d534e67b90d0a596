/**
 * What the handlers of requests (requests.ts, endpoint.ts) need of proposals/: a request that is
 * really a decision on a proposal — held (propose.ts), fulfilled (decisions.ts), given up
 * (ends.ts) — and the proposals a request may ask about. space/compose.ts hands them over.
 */
import type { Member } from "../ports/member.js";
import type { Answer } from "../ports/host.js";
import type { Proposal } from "../proposals/book.js";
import type { Envelope, InboundEnvelope, McpRequestPayload } from "../wire/envelope.js";

export interface ProposalDesk {
  /** A request that fulfils `p`: the refusal to send its sender, if refused (proposals/decisions.ts). */
  onFulfil(member: Member, inbound: InboundEnvelope, payload: McpRequestPayload, p: Proposal): Answer;
  hold(
    member: Member,
    env: Envelope,
    method: string,
    params: Record<string, unknown>,
    rpcId: string | number,
    opts: { tellProposer?: boolean; sentId: string | undefined },
  ): Promise<void>;
  withdrawn(member: Member, p: Proposal, reason: string): Promise<void>;
  /** Proposals awaiting a decision, oldest first: pending ones and interrupted ones (proposals/book.ts). */
  pending(): Proposal[];
}
