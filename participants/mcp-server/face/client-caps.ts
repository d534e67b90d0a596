/**
 * The connected MCP client's own capabilities, as a call of its session carries them to
 * the tool server: `_meta["mewgate/client_capabilities"]` on each `tools/call` the face
 * sends (a key under `mewgate/`, which the face strips from what a client sends, so a
 * client states its capabilities by its `initialize` only). The bridge (bridge/client-caps.ts)
 * reads it to offer the server only what that client offers: it answers a server's form or
 * sampling request about that call with "not supported" itself when
 * the client offers none, and a bridge speaking 2026-07-28 puts them in the request's own
 * client capabilities.
 *
 * Only what a server may ask back is stated (roots, sampling, elicitation), each with the
 * sub-capabilities MCP names and nothing below them: what a client wrote there is not
 * copied on.
 */
import type { ClientCapabilities } from "@modelcontextprotocol/sdk/types.js";
import { isRecord } from "../../../gateway/index.js";

export const CLIENT_CAPS_KEY = "mewgate/client_capabilities";

/** The sub-capabilities MCP names under each capability a server may use. */
const KNOWN: Readonly<Record<"roots" | "sampling" | "elicitation", readonly string[]>> = {
  roots: [],
  sampling: ["context", "tools"],
  elicitation: ["form", "url"],
};

/** What the client of a session offers a server to ask of it, in a bounded shape (`{}` when nothing). */
export function offeredCapabilities(caps: ClientCapabilities | undefined): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [name, subs] of Object.entries(KNOWN)) {
    const own = caps?.[name as keyof ClientCapabilities];
    if (typeof own !== "object" || own === null || Array.isArray(own)) continue;
    const stated: Record<string, unknown> = {};
    for (const sub of subs) {
      const v = (own as Record<string, unknown>)[sub];
      if (isRecord(v)) stated[sub] = {};
    }
    if (name === "roots" && (own as Record<string, unknown>)["listChanged"] === true) stated["listChanged"] = true;
    // A client that says `elicitation: {}` offers forms (MCP's reading of an empty elicitation capability).
    if (name === "elicitation" && Object.keys(stated).length === 0) stated["form"] = {};
    out[name] = stated;
  }
  return out;
}
