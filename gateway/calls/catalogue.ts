/**
 * The space's tool catalogue, kept up to date: each participant that offers tools is asked
 * for them (every page of `tools/list`), and what it answers is screened before it goes into
 * the registry (tools/registry.ts) — malformed or oversized tools skipped, names with hidden
 * characters or that read like another tool's refused (tool-names.ts), texts inspected
 * (tools/inspect.ts), a changed definition written to the audit trail — and everyone is
 * told when the catalogue changed. The router (router.ts) asks it, and lends it the way to
 * send the gateway's own requests.
 */
import { describeIssue, systemEnvelope } from "../wire/envelope.js";
import type { SpaceHost } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import { auditable, type DefinitionChange } from "../tools/pins.js";
import { McpToolSchema, type McpTool, type Registry, ToolsListResultSchema, MAX_TOOLS_PER_PARTICIPANT } from "../tools/registry.js";
import { toolChangeAudit } from "../audit/entry.js";
import { inspectTool } from "../tools/inspect.js";
import { unmatchedRules } from "../policy/check.js";
import type { Call } from "./calls.js";
import { screenToolNames } from "./tool-names.js";

/** Most pages of `tools/list` the gateway follows for one participant. */
const MAX_TOOL_PAGES = 100;
/** Largest tool definition (name, description, schemas) the catalogue keeps. */
const MAX_TOOL_BYTES = 64 * 1024;

/** Sends one of the gateway's own requests to `target`; the answer comes back to `done`. */
export type GatewayRequest = (target: Member, method: string, params: Record<string, unknown>, done: NonNullable<Call["internal"]>) => void;

export class Catalogue {
  /** Bumped per tools/list refresh of a participant, so a stale answer is ignored. */
  private readonly toolFetches = new Map<string, number>();

  constructor(
    /** What it uses of the space (ports/host.ts). */
    private readonly space: Pick<SpaceHost, "config" | "deliver" | "fail" | "member" | "note" | "noteFindings">,
    private readonly registry: Registry,
  ) {}

  /** Asks `member` for its tools (every page) and stores them. */
  refresh(member: Member, request: GatewayRequest): void {
    const id = member.id;
    const generation = (this.toolFetches.get(id) ?? 0) + 1;
    this.toolFetches.set(id, generation);
    const tools: McpTool[] = [];
    const page = (cursor: string | undefined, n: number): void => {
      request(member, "tools/list", cursor ? { cursor } : {}, (response, reason) => {
        if (this.toolFetches.get(id) !== generation || this.space.member(id) !== member) return;
        if (!response || response.error !== undefined) {
          member.log.warn({ reason: reason ?? response?.error }, "tools/list failed; keeping its previous tools");
          return;
        }
        const result = ToolsListResultSchema.safeParse(response.result);
        if (!result.success) {
          member.log.warn({ issue: describeIssue(result.error) }, "tools/list answered with a malformed result");
          return;
        }
        for (const t of result.data.tools) {
          const tool = McpToolSchema.safeParse(t);
          if (!tool.success) member.log.warn({ issue: describeIssue(tool.error) }, "skipping a malformed tool");
          // A tool must fit a page of tools/list, and so every welcome and catalogue.
          else if (Buffer.byteLength(JSON.stringify(tool.data)) > MAX_TOOL_BYTES)
            member.log.warn({ tool: tool.data.name, limit: MAX_TOOL_BYTES }, "skipping a tool whose definition is too large");
          else tools.push(tool.data);
        }
        const next = result.data.nextCursor;
        if (next && n + 1 < MAX_TOOL_PAGES && tools.length < MAX_TOOLS_PER_PARTICIPANT) return page(next, n + 1);
        // Names with hidden characters, or that read like another tool's, stay out (tool-names.ts); the owner is told why.
        const screened = screenToolNames(
          id,
          tools.slice(0, MAX_TOOLS_PER_PARTICIPANT),
          this.registry.list(),
          (name) => this.registry.get(id, name) !== undefined,
        );
        for (const r of screened.refused) {
          member.log.warn({ code: r.code, ...r.extra }, "tool refused from the catalogue");
          this.space.fail(member, r.code, r.message, undefined, r.extra);
        }
        const changed: DefinitionChange[] = [];
        const listChanged = this.registry.set(id, screened.kept, inspectTool, (c) => changed.push(c));
        // A changed definition goes into the audit trail (the store bounds it by size and age;
        // `auditable`, the share one flapping tool may take of it).
        const audited = changed.filter((c) => auditable(c.count));
        if (audited.length > 0) {
          member.log.warn({ tools: audited.map((c) => c.tool) }, "tool definitions changed");
          void this.space.note({ records: audited.map(toolChangeAudit), apply: () => {} });
        }
        if (listChanged) {
          const flagged = this.registry
            .list()
            .filter((t) => t.participant === id && t.findings)
            .map((t) => t.tool);
          member.log.info(
            { tools: screened.kept.length, ...(flagged.length ? { flagged: flagged.slice(0, 20) } : {}) },
            "tools registered",
          );
          // A rule naming this participant's tools that still matches none of them (policy/check.ts).
          const unmatched = unmatchedRules(this.space.config, this.registry, id);
          for (const f of unmatched) member.log.warn({ code: f.code, at: `${f.file}:${f.line}:${f.column}`, rule: f.path }, f.message);
          this.space.noteFindings(unmatched);
          this.changed();
        }
      });
    };
    page(undefined, 0);
  }

  /** A participant left: forget its tools, and tell everyone if it had any. */
  forget(left: string): void {
    this.toolFetches.delete(left);
    if (this.registry.remove(left)) this.changed();
  }

  /**
   * Tells everyone the catalogue changed — `addressed` members too, like presence, since an
   * MCP client behind one must hear of it. Welcomes carry the new catalogue from now on.
   */
  changed(): void {
    this.space.deliver(systemEnvelope("mcp/request", { jsonrpc: "2.0", method: "notifications/tools/list_changed" }), undefined, true);
  }
}
