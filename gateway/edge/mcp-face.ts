/**
 * What the MCP faces over HTTP (`participants/mcp-server/http/http.ts`: `/mcp` and
 * `/mcp/<participant>`) may use of the gateway that serves them, and the one adapter that
 * gives it. The faces are a participant's code mounted on the gateway's port: they see no
 * `Gateway` or `Space`, only this port: find a space, authenticate a bearer token as the
 * WebSocket door does, connect a seat in process, hold a session to the token that opened
 * it, and the few facts of a space a face answers with. Anything else a face needs is
 * added here, by name, where a reviewer sees it.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Limits } from "../config/config.js";
import type { Tracing } from "../ports/tracing.js";
import { authenticateBearer, type BearerResult } from "../space/bearer.js";
import { connectInProcess, type InProcessConnection } from "../space/inprocess.js";
import type { Space } from "../space/space.js";

/** One space as a face sees it. */
export interface McpFaceSpace {
  readonly id: string;
  /** The space has shut down: a face opens nothing more in it. */
  readonly closed: boolean;
  /** The scope a token needs at the MCP faces (RFC 6750 `scope` on a 401), when the space takes its identity provider's tokens. */
  readonly requiredScope: string | undefined;
  /** How long a proposal waits for its decision (policy.proposal_ttl_ms). */
  readonly proposalTtlMs: number;
  readonly tracing: Tracing;
  /** Whether the space's file declares `participant`. */
  declares(participant: string): boolean;
  /** A static token or the identity provider's JWT, as at the WebSocket door; `audiences`: this path's resource URLs as the request reached it. */
  authenticate(token: string, audiences: string[]): Promise<BearerResult>;
  /** A seat's connection into the space, in process. */
  connect(participant: string): InProcessConnection;
  /** Holds a session to the token that opened it: revoked, rotated or expired, `close` runs. Returns the release. */
  hold(participant: string, digest: string, what: string, close: () => void): () => void;
  /** The signed decision link of a pending proposal that exactly one person may decide, else undefined. */
  linkForOnePerson(proposal: string): string | undefined;
  /** Where a pending proposal of `proposer` stands: how many approvals it needs, whose it has, who may still decide. */
  approvalOf(
    proposal: string,
    proposer: string,
  ): { required: number; approvedBy: string[]; waitingFor: string[]; escalated: number[] } | undefined;
}

/** The gateway as a face sees it. */
export interface McpFaceHost {
  /** The space named `id`, or the only one when `id` is undefined and the gateway hosts exactly one. */
  space(id: string | undefined): McpFaceSpace | undefined;
  /** The limits the gateway runs with (the faces read `mcp_idle_ms` and `mcp_sessions`). */
  readonly limits: Pick<Limits, "mcp_idle_ms" | "mcp_sessions">;
  /** Serves `path` exactly, and every path under `prefix`, after the gateway's Origin and Host checks. */
  route(path: string, prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
}

/** What the gateway hands the adapter: its spaces and routes, nothing of the class itself (edge/server.ts builds it). */
export interface McpFaceSource {
  spaces: ReadonlyMap<string, Space>;
  limits(): Limits;
  addRoute(path: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
  addPrefix(prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
}

export function mcpFaceHost(src: McpFaceSource): McpFaceHost {
  const views = new WeakMap<Space, McpFaceSpace>();
  const view = (space: Space): McpFaceSpace => {
    let v = views.get(space);
    if (!v) {
      v = {
        id: space.id,
        get closed() {
          return space.closed;
        },
        get requiredScope() {
          return space.identity?.config.required_scopes["mcp"];
        },
        get proposalTtlMs() {
          return space.config.policy.proposal_ttl_ms;
        },
        tracing: space.tracing,
        declares: (participant) => Object.hasOwn(space.config.participants, participant),
        authenticate: (token, audiences) => authenticateBearer(space, token, "mcp", audiences),
        connect: (participant) => connectInProcess(space, participant),
        hold: (participant, digest, what, close) => space.sessions.hold(participant, digest, what, close),
        linkForOnePerson: (id) => {
          const p = space.proposals.pending().find((x) => x.id === id);
          return p ? space.aids.linkForOnePerson(p) : undefined;
        },
        approvalOf: (id, proposer) => {
          const p = space.proposals.get(id);
          if (!p || p.proposer !== proposer) return undefined;
          const approvedBy = [...new Set((p.approvals ?? []).map((a) => a.by))];
          return {
            required: p.required ?? 1,
            approvedBy,
            waitingFor: space.aids.deciders(p).filter((who) => !approvedBy.includes(who)),
            escalated: [...(p.escalated ?? [])],
          };
        },
      };
      views.set(space, v);
    }
    return v;
  };
  return {
    space(id) {
      const named = id ?? (src.spaces.size === 1 ? [...src.spaces.keys()][0] : undefined);
      const space = named === undefined ? undefined : src.spaces.get(named);
      return space ? view(space) : undefined;
    },
    get limits() {
      return src.limits();
    },
    route(path, prefix, handler) {
      src.addRoute(path, handler);
      src.addPrefix(prefix, handler);
    },
  };
}
