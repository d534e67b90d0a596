/**
 * The space's resources and prompts, as the space-as-MCP-server offers them: gathered from
 * the participants of kind `mcp` (through the gateway, as this participant, so capability
 * rules apply), and read or fetched through the one that owns them.
 *
 * Resources keep their URIs — a `resource_link` a tool returned can be read as it is —
 * and are named `participant/name`; a URI two servers share is read from the first that
 * listed it. Prompts are named `participant__prompt`, like tools. A URI no server listed
 * is read from the one whose resource template matches it (RFC 6570, the SDK's
 * `UriTemplate`); a URI two servers' templates match is refused as ambiguous, not guessed.
 *
 * Serving one participant as itself (`only`), every request goes to that participant
 * under the names it gave: nothing is gathered from, or routed to, anyone else.
 */
import { UriTemplate } from "@modelcontextprotocol/sdk/shared/uriTemplate.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import type { ParticipantClient } from "../../client.js";
import { ParticipantError, RpcError } from "../../errors.js";
import { inspectTool, stripHidden, isRecord } from "../../../gateway/index.js";
import { cleanTexts, flagNote } from "../../agent/tools.js";

const TIMEOUT_MS = 10_000;
/** Most resources or prompts gathered from one participant. */
const MAX_PER_OWNER = 1000;
/** Longest cursor passed on either way. */
const MAX_CURSOR = 4096;
/** Longest URI matched against templates (the SDK's matcher is a regular expression). */
const MAX_MATCH_URI = 4096;

type Item = Record<string, unknown>;

export class SpaceResources {
  /** URI → the participant that listed it. */
  private readonly owners = new Map<string, string>();
  /** Resource templates as last listed: which participant offers which. */
  private templates: { owner: string; template: UriTemplate }[] = [];

  /** `only`: the one participant served as itself. */
  constructor(
    private readonly client: ParticipantClient,
    private readonly only?: string,
  ) {}

  async listResources(cursor?: string): Promise<{ resources: Item[]; nextCursor?: string }> {
    if (this.only !== undefined) return this.page(this.only, "resources/list", "resources", cursor);
    const resources: Item[] = [];
    for (const owner of this.servers()) {
      for (const r of await this.gather(owner, "resources/list", "resources")) {
        if (typeof r["uri"] !== "string") continue;
        if (!this.owners.has(r["uri"])) this.owners.set(r["uri"], owner);
        resources.push(this.only !== undefined ? r : { ...r, name: `${owner}/${String(r["name"] ?? r["uri"])}` });
      }
    }
    return { resources };
  }

  async listTemplates(cursor?: string): Promise<{ resourceTemplates: Item[]; nextCursor?: string }> {
    if (this.only !== undefined) return this.page(this.only, "resources/templates/list", "resourceTemplates", cursor);
    const resourceTemplates: Item[] = [];
    const known: { owner: string; template: UriTemplate }[] = [];
    for (const owner of this.servers()) {
      for (const t of await this.gather(owner, "resources/templates/list", "resourceTemplates")) {
        if (typeof t["uriTemplate"] !== "string") continue;
        try {
          known.push({ owner, template: new UriTemplate(t["uriTemplate"]) });
        } catch {
          continue; // not a template the SDK can match: not offered
        }
        resourceTemplates.push(this.only !== undefined ? t : { ...t, name: `${owner}/${String(t["name"] ?? t["uriTemplate"])}` });
      }
    }
    this.templates = known;
    return { resourceTemplates };
  }

  /** `meta`: the client's `_meta` as it may go on (face.ts `forwardedMeta`); `more`: a 2026-07-28 client's retry params (held/input.ts `retryParams`). */
  async readResource(uri: string, meta?: Record<string, unknown>, more: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.ask(await this.ownerOf(uri), "resources/read", { uri, ...more, ...(meta ? { _meta: meta } : {}) });
  }

  /** Subscribes to `uri` at the participant that owns it; returns that participant. */
  async subscribe(uri: string): Promise<string> {
    const owner = await this.ownerOf(uri);
    await this.ask(owner, "resources/subscribe", { uri });
    return owner;
  }

  /**
   * The participant that serves `uri`: the one served as itself; else the first that listed
   * it; else the one whose template matches it — exactly one, or the read is refused.
   */
  private async ownerOf(uri: string): Promise<string> {
    if (this.only !== undefined) return this.only;
    if (!this.owners.has(uri)) await this.listResources();
    const listed = this.owners.get(uri);
    if (listed) return listed;
    if (uri.length <= MAX_MATCH_URI) {
      await this.listTemplates();
      const matching = [...new Set(this.templates.filter((t) => matches(t.template, uri)).map((t) => t.owner))];
      if (matching.length === 1) return matching[0]!;
      if (matching.length > 1) {
        throw new McpError(
          ErrorCode.InvalidParams,
          `the resource ${uri} matches the templates of ${matching.join(" and ")}: ambiguous, so it is not read; read it through /mcp/<participant>`,
          { reason: "ambiguous_resource", participants: matching },
        );
      }
    }
    throw new McpError(ErrorCode.InvalidParams, `no participant of the space offers the resource ${uri}`);
  }

  /** Ends the subscription to `uri` at its owner (best effort: the owner may be gone). */
  async unsubscribe(uri: string): Promise<void> {
    // Serving one participant as itself, that one (its URIs are never gathered into `owners`).
    const owner = this.only ?? this.owners.get(uri);
    if (owner) await this.ask(owner, "resources/unsubscribe", { uri }).catch(() => {});
  }

  async listPrompts(cursor?: string): Promise<{ prompts: Item[]; nextCursor?: string }> {
    if (this.only !== undefined) {
      const page = await this.page(this.only, "prompts/list", "prompts", cursor);
      return { ...page, prompts: page.prompts.filter((p) => typeof p["name"] === "string").map(forModel) };
    }
    const prompts: Item[] = [];
    for (const owner of this.servers()) {
      for (const p of await this.gather(owner, "prompts/list", "prompts")) {
        if (typeof p["name"] !== "string") continue;
        prompts.push(
          forModel(
            this.only !== undefined ? p : { ...p, name: `${owner}__${p["name"]}`, title: `${String(p["title"] ?? p["name"])} (${owner})` },
          ),
        );
      }
    }
    return { prompts };
  }

  async getPrompt(
    name: string,
    args: Record<string, string> | undefined,
    meta?: Record<string, unknown>,
    more: Record<string, unknown> = {},
  ): Promise<Record<string, unknown>> {
    const passed = { ...(args ? { arguments: args } : {}), ...more, ...(meta ? { _meta: meta } : {}) };
    if (this.only !== undefined) return this.ask(this.only, "prompts/get", { name, ...passed });
    const split = name.indexOf("__");
    const owner = split > 0 ? name.slice(0, split) : "";
    if (!this.servers().includes(owner))
      throw new McpError(ErrorCode.InvalidParams, `unknown prompt: ${name} (prompts are named participant__prompt)`);
    return this.ask(owner, "prompts/get", { name: name.slice(split + 2), ...passed });
  }

  /**
   * `completion/complete` for a prompt's or a resource template's argument, asked of the
   * participant that owns the prompt (by its `participant__` prefix) or the resource.
   */
  async complete(params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const ref = (params["ref"] ?? {}) as Record<string, unknown>;
    if (this.only !== undefined) return this.ask(this.only, "completion/complete", params);
    if (ref["type"] === "ref/prompt" && typeof ref["name"] === "string") {
      const split = ref["name"].indexOf("__");
      const owner = split > 0 ? ref["name"].slice(0, split) : "";
      if (!this.servers().includes(owner)) throw new McpError(ErrorCode.InvalidParams, `unknown prompt: ${ref["name"]}`);
      return this.ask(owner, "completion/complete", { ...params, ref: { ...ref, name: ref["name"].slice(split + 2) } });
    }
    if (ref["type"] === "ref/resource" && typeof ref["uri"] === "string") {
      // A template's URI is not a listed resource: ask each server until one answers.
      const known = this.owners.get(ref["uri"]);
      for (const owner of known ? [known] : this.servers()) {
        try {
          return await this.ask(owner, "completion/complete", params);
        } catch {
          // not this one
        }
      }
      throw new McpError(ErrorCode.InvalidParams, `no participant of the space completes ${ref["uri"]}`);
    }
    throw new McpError(ErrorCode.InvalidParams, "completion/complete: ref must be a ref/prompt or a ref/resource");
  }

  /** Connected participants that are MCP servers. */
  private servers(): string[] {
    if (this.only !== undefined) return [this.only];
    return [...this.client.participants.values()].filter((p) => p.kind === "mcp").map((p) => p.id);
  }

  /**
   * One page of a list, as the one participant served as itself gave it (its order, size and
   * cursor, passed through; its refusal of a cursor in its own words).
   */
  private async page<K extends string>(
    owner: string,
    method: string,
    key: K,
    cursor: string | undefined,
  ): Promise<{ [k in K]: Item[] } & { nextCursor?: string }> {
    if (cursor !== undefined && cursor.length > MAX_CURSOR) throw new RpcError(ErrorCode.InvalidParams, `${method}: cursor too long`);
    let res: Record<string, unknown>;
    try {
      const r = await this.client.request(owner, method, cursor === undefined ? {} : { cursor }, { timeoutMs: TIMEOUT_MS });
      res = typeof r === "object" && r !== null ? (r as Record<string, unknown>) : {};
    } catch (err) {
      if (!(err instanceof ParticipantError)) throw err;
      // The server's own error as it gave it (a cursor it does not know).
      if (err.code === "rpc_error") throw new RpcError(err.rpcCode ?? ErrorCode.InternalError, err.message, err.data);
      // A seat the space does not let ask has nothing listed, as before.
      if (cursor === undefined) return { [key]: [] } as unknown as { [k in K]: Item[] };
      throw new RpcError(ErrorCode.InvalidRequest, `${owner}: ${err.message}`);
    }
    const list = Array.isArray(res[key]) ? (res[key] as unknown[]) : [];
    const items = list.filter((x): x is Item => isRecord(x)).slice(0, MAX_PER_OWNER);
    const next = res["nextCursor"];
    return { [key]: items, ...(typeof next === "string" && next.length > 0 && next.length <= MAX_CURSOR ? { nextCursor: next } : {}) } as {
      [k in K]: Item[];
    } & { nextCursor?: string };
  }

  /** Every page of a list from one participant; one that does not offer it contributes nothing. */
  private async gather(owner: string, method: string, key: string): Promise<Item[]> {
    const items: Item[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 20 && items.length < MAX_PER_OWNER; page++) {
      let res: Record<string, unknown>;
      try {
        res = await this.ask(owner, method, cursor ? { cursor } : {});
      } catch {
        break;
      }
      const list = res[key];
      if (Array.isArray(list)) items.push(...list.filter((x): x is Item => typeof x === "object" && x !== null));
      cursor = typeof res["nextCursor"] === "string" ? res["nextCursor"] : undefined;
      if (!cursor) break;
    }
    return items.slice(0, MAX_PER_OWNER);
  }

  private async ask(owner: string, method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    try {
      const res = await this.client.request(owner, method, params, { timeoutMs: TIMEOUT_MS });
      return typeof res === "object" && res !== null ? (res as Record<string, unknown>) : {};
    } catch (err) {
      if (err instanceof ParticipantError) {
        const code = err.code === "rpc_error" ? (err.rpcCode ?? ErrorCode.InternalError) : ErrorCode.InvalidRequest;
        // Serving one participant as itself, its own error as it gave it (message and data, e.g. a missing resource's uri);
        // on the space's face, the message says whose. (RpcError: an McpError's message would carry the SDK's prefix.)
        if (this.only === owner && err.code === "rpc_error") throw new RpcError(code, err.message, err.data);
        throw new RpcError(code, `${owner}: ${err.message}`, err.code === "rpc_error" ? err.data : undefined);
      }
      throw err;
    }
  }
}

function matches(template: UriTemplate, uri: string): boolean {
  try {
    return template.match(uri) !== null;
  } catch {
    return false;
  }
}

/**
 * A prompt as an MCP client's model may read it. The gateway's catalogue keeps tools only,
 * so prompts are inspected here, as they pass (gateway/tools/inspect.ts): hidden characters
 * out of the title, description and argument descriptions, and a flag stated when found.
 */
function forModel(p: Item): Item {
  const findings = inspectTool({ title: p["title"], description: p["description"], inputSchema: { arguments: p["arguments"] } });
  const description = typeof p["description"] === "string" ? stripHidden(p["description"]) : "";
  const flag = flagNote([...new Set(findings.map((f) => f.code))], findings.length > 0);
  return {
    ...p,
    ...(typeof p["title"] === "string" ? { title: stripHidden(p["title"]) } : {}),
    ...(flag || description ? { description: flag && description ? `${flag} ${description}` : flag || description } : {}),
    ...(Array.isArray(p["arguments"]) ? { arguments: cleanTexts(p["arguments"], 0) } : {}),
  };
}
