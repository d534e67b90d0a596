/**
 * The read side of a face: `resources/list`, `resources/templates/list`, `resources/read`,
 * `prompts/list`, `prompts/get` and `completion/complete`, answered by the space's MCP
 * servers through `SpaceResources` (resources.ts). The results are the owners' own, passed
 * on as they came (the space's face prefixes names); serving one participant, only what its
 * server declared is offered, in its own pages with its own cursors.
 *
 * server.ts builds the face and installs these once.
 */
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ReadResourceRequestSchema,
  type CompleteResult,
  type GetPromptResult,
  type ListPromptsResult,
  type ListResourcesResult,
  type ListResourceTemplatesResult,
  type ReadResourceResult,
  type ServerCapabilities,
} from "@modelcontextprotocol/sdk/types.js";
import { forwardedMeta } from "./face.js";
import { retryParams, TAKES_INPUT } from "../held/input.js";
import { requestOf, traced, type FaceTrace } from "./face-trace.js";
import type { SpaceResources } from "./resources.js";

/** Installs the read handlers the face's `capabilities` declare; each waits for the space connection (`ready`). */
export function serveReads(
  server: Server,
  resources: SpaceResources,
  capabilities: ServerCapabilities,
  ready: Promise<void>,
  trace?: FaceTrace,
  takesInput = false,
): void {
  // The client's _meta as it may go on (face.ts), under the face's span when traced (face-trace.ts); a 2026-07-28
  // client takes a server's input_required itself, and its retry params go on as they came (held/input.ts).
  const metaFor = (meta: unknown, traceparent: string | undefined) => {
    const m = forwardedMeta(meta);
    if (traceparent === undefined && !takesInput) return m;
    return { ...m, ...(traceparent === undefined ? {} : { traceparent }), ...(takesInput ? { [TAKES_INPUT]: true } : {}) };
  };
  const more = (meta: unknown) => (takesInput ? retryParams(meta) : {});
  if (capabilities.resources) {
    server.setRequestHandler(ListResourcesRequestSchema, async (request) => {
      await ready;
      return (await resources.listResources(request.params?.cursor)) as ListResourcesResult;
    });
    server.setRequestHandler(ListResourceTemplatesRequestSchema, async (request) => {
      await ready;
      return (await resources.listTemplates(request.params?.cursor)) as ListResourceTemplatesResult;
    });
    server.setRequestHandler(ReadResourceRequestSchema, async (request, extra) => {
      await ready;
      const { uri, _meta } = request.params;
      return (await traced(trace, { ...requestOf("resources/read", extra), resourceUri: uri }, _meta, (tp) =>
        resources.readResource(uri, metaFor(_meta, tp), more(_meta)),
      )) as ReadResourceResult;
    });
  }
  if (capabilities.prompts) {
    server.setRequestHandler(ListPromptsRequestSchema, async (request) => {
      await ready;
      return (await resources.listPrompts(request.params?.cursor)) as ListPromptsResult;
    });
    server.setRequestHandler(GetPromptRequestSchema, async (request, extra) => {
      await ready;
      const { name, arguments: args, _meta } = request.params;
      return (await traced(trace, { ...requestOf("prompts/get", extra), prompt: name }, _meta, (tp) =>
        resources.getPrompt(name, args, metaFor(_meta, tp), more(_meta)),
      )) as GetPromptResult;
    });
  }
  if (capabilities.completions) {
    server.setRequestHandler(CompleteRequestSchema, async (request, extra) => {
      await ready;
      // The client's _meta as it may go on, not as it came (no progressToken, no key of the gateway's).
      const { _meta, ...params } = request.params as Record<string, unknown>;
      return (await traced(trace, requestOf("completion/complete", extra), _meta, (tp) => {
        const meta = metaFor(_meta, tp);
        return resources.complete({ ...params, ...(meta ? { _meta: meta } : {}) });
      })) as CompleteResult;
    });
  }
}
