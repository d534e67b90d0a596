/**
 * The capabilities of the MCP client at the other end of a call, as a face of the space
 * states them for one session (`_meta["mewgate/client_capabilities"]`,
 * mcp-server/face/client-caps.ts): what the bridged server may ask back about that call. The
 * bridge holds one session with its server for the whole space, so at 2025-era revisions
 * the server was offered the bridge's capabilities at `initialize`; per call, the bridge
 * then answers a form or a sampling request itself ("not supported") when
 * the caller's client does not offer it, so one client's capabilities never stand in for
 * another's (roots are the operator's, from space.yaml, whoever calls). A 2026-07-28 request carries client capabilities of its own:
 * `perRequestCapabilities` gives them for the request's `_meta` envelope.
 *
 * A caller that states nothing (an agent, a person's terminal) is taken at the bridge's
 * own offer, as before. What is stated is read in a bounded shape, never copied as sent.
 */
import type { ClientCapabilities } from "@modelcontextprotocol/sdk/types.js";
import { isRecord } from "../../gateway/index.js";

export const CLIENT_CAPS_KEY = "mewgate/client_capabilities";

/** The capability a server's request to its client needs, when the caller is asked it. */
const NEEDS: Readonly<Record<string, "sampling" | "elicitation">> = {
  "sampling/createMessage": "sampling",
  "elicitation/create": "elicitation",
};

/** What the caller of a request stated its client offers; `undefined` when it stated nothing. */
export function statedCapabilities(params: unknown): ClientCapabilities | undefined {
  const meta = isRecord(params) ? params["_meta"] : undefined;
  const stated = isRecord(meta) ? meta[CLIENT_CAPS_KEY] : undefined;
  if (!isRecord(stated)) return undefined;
  const out: ClientCapabilities = {};
  const subs = (v: unknown, names: string[]) => {
    const o: Record<string, object> = {};
    if (isRecord(v)) for (const n of names) if (isRecord(v[n])) o[n] = {};
    return o;
  };
  if (isRecord(stated["sampling"])) out.sampling = subs(stated["sampling"], ["context", "tools"]);
  if (isRecord(stated["elicitation"])) out.elicitation = subs(stated["elicitation"], ["form", "url"]);
  if (isRecord(stated["roots"])) out.roots = stated["roots"]["listChanged"] === true ? { listChanged: true } : {};
  return out;
}

/**
 * Whether a server's `method` to its client may go to the caller of these requests: not
 * when every one of them stated capabilities and none offers what `method` needs.
 */
export function callerOffers(method: string, requests: readonly { params: unknown }[]): boolean {
  const needs = NEEDS[method];
  if (needs === undefined) return true;
  const stated = requests.map((r) => statedCapabilities(r.params));
  if (stated.length === 0 || stated.some((s) => s === undefined)) return true;
  return stated.some((s) => s?.[needs] !== undefined);
}

/** A request's params without the stated capabilities: the server gets them in its own protocol's terms, or not at all. */
export function withoutStated(params: unknown): unknown {
  if (!isRecord(params) || !isRecord(params["_meta"]) || !(CLIENT_CAPS_KEY in params["_meta"])) return params;
  const { [CLIENT_CAPS_KEY]: _, ...meta } = params["_meta"];
  return { ...params, _meta: meta };
}

/**
 * The client capabilities a 2026-07-28 request to the server carries for this caller: what
 * its client offers, within what the bridge relays (`bridge`, from space.yaml); the
 * bridge's own when the caller stated nothing. Roots stay the operator's (space.yaml).
 */
export function perRequestCapabilities(params: unknown, bridge: ClientCapabilities): ClientCapabilities {
  const stated = statedCapabilities(params);
  if (stated === undefined) return bridge;
  return {
    ...(bridge.sampling && stated.sampling ? { sampling: stated.sampling } : {}),
    ...(bridge.elicitation && stated.elicitation ? { elicitation: stated.elicitation } : {}),
    ...(bridge.roots ? { roots: bridge.roots } : {}),
  };
}
