/**
 * The space as an MCP server: any MCP client joins a space as one of its participants and
 * uses every tool of the space, under the space's policy for that participant.
 *
 * - `createSpaceMcpServer({client})`: an MCP SDK `Server` for one MCP connection; connect
 *   it to any server transport.
 * - `runStdio({client})`: serves it over stdio (`mewgate mcp`).
 * - `mountHttp(gateway, {path})`: streamable HTTP on the gateway's own port, one session
 *   per `initialize`, authenticated by the participant's bearer token.
 *
 * What an MCP client sees:
 * - `tools/list`: the space's tools except the ones policy denies this participant and its
 *   own, named `participant__tool` (the reversible encoding of `participant/tool` from
 *   `participants/agent/names.ts`, shortened with a hash past 64 characters); the title and
 *   description show the real name and say when a call needs approval; input schema,
 *   output schema and annotations are the owner's. `_meta["mewgate/name"]` holds the real name.
 * - `tools/call`: `tools/call` on `system:gateway` as this participant, result passed
 *   through. A call that needs approval waits for the decision, sending
 *   `notifications/progress` every `approvalProgressMs` when the request has a
 *   `progressToken` (MCP clients with a request timeout should reset it on progress).
 *   A rejection, an expiry, a denial, a timeout, the owner leaving: a tool result with
 *   `isError: true` and a sentence saying what happened (for a rejection the approver, the
 *   reason and the text). The owner's own JSON-RPC errors stay JSON-RPC errors. Cancelling
 *   the MCP request cancels the call, or withdraws its proposal.
 * - `/mcp/<participant>` and `mewgate mcp --only`: the same face for one participant,
 *   under its server's own names, info and instructions (`only`, face/face.ts).
 * - `notifications/tools/list_changed` when the space's catalogue (or this participant's
 *   policies) changes what it would list.
 */
export { createSpaceMcpServer, SpaceMcpServer, type SpaceMcpServerOptions } from "./mcp-server/face/server.js";
export { runStdio, type StdioServeOptions } from "./mcp-server/stdio/stdio.js";
export { mountHttp, type McpHttpMount, type McpHttpOptions } from "./mcp-server/http/http.js";
export { buildCatalogue, failureText, type Catalogue, type CatalogueEntry } from "./mcp-server/tools/catalogue.js";
export { describeParticipant, type OnlyParticipant } from "./mcp-server/face/face.js";
