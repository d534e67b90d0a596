/**
 * The agent's calls of the space's tools: every call goes to the gateway, which routes it
 * or holds it as a proposal; whoever approves a proposal of ours is remembered so the model
 * hears who let it through.
 *
 * Used by the chat turns and the ask server alike.
 */
import { GATEWAY_ID, INTENT_MAX, INTENT_META_KEY, RESPOND_KEY, type Envelope } from "../../gateway/index.js";
import { TURN_META_KEY } from "../../gateway/index.js";
import type { CallOptions, ParticipantClient } from "../client.js";
import type { ToolInfo } from "../wire.js";
import { addDelegated, contractLine, type Spend } from "./contract.js";
import type { CallTool } from "./loop.js";
import { failureOutcome, successOutcome } from "./outcomes.js";
import { INTERACTIVE_WAIT_MS } from "./serve.js";
import { isRecord, clip } from "../../gateway/index.js";

/** What the calls need of the agent. */
export interface ToolCallHost {
  readonly client: ParticipantClient;
  /** The space's tool of this name, as listed. */
  tool(name: string): ToolInfo | undefined;
}

export class ToolCaller {
  // Tool calls waiting on proposals: proposal id → who approved it.
  private readonly myProposals = new Set<string>();
  private readonly approvals = new Map<string, string>();
  // Proposals a person answered instead of deciding: proposal id → who, and what they said.
  private readonly responses = new Map<string, { by: string; text: string }>();

  constructor(private readonly host: ToolCallHost) {}

  /** An `mcp/approve`, or a MEW fulfilment of one of our proposals. */
  noteApproval(env: Envelope): void {
    for (const id of env.correlation_id ?? []) if (this.myProposals.has(id)) this.approvals.set(id, env.from);
  }

  /**
   * A chat tied to one of our waiting proposals (`correlation_id: [proposal]`, a Respond from
   * the console or the terminal): the person asks something of us instead of deciding. The
   * proposal is withdrawn, and its call ends with what they said, so the model can propose
   * again as asked or reply. Returns whether the chat was such an answer (it starts no turn).
   * It counts only with the gateway's mark (`payload["mewgate/respond"]`: its sender may decide
   * that proposal); any other chat tied to it is an ordinary chat and withdraws nothing.
   */
  noteResponse(env: Envelope): boolean {
    const id = env.correlation_id?.[0];
    const text = isRecord(env.payload) && typeof env.payload["text"] === "string" ? env.payload["text"] : undefined;
    const mark = isRecord(env.payload) ? env.payload[RESPOND_KEY] : undefined;
    const marked = isRecord(mark) && mark["proposal"] === id && mark["by"] === env.from;
    if (id === undefined || text === undefined || !marked || !this.myProposals.has(id) || this.responses.has(id)) return false;
    this.responses.set(id, { by: env.from, text: clip(text, 4000) });
    this.host.client.withdraw(id, "answered by a person; proposing again");
    return true;
  }

  /**
   * `callTool` for the loop: every call goes to the gateway, which routes it or holds it
   * as a proposal. A tool that declares `timeout_ms` (an agent's ask) gets its deadline
   * from it; what a delegated call reports it spent is added to `spend`; `announce` tells
   * the person waiting, in plain words, that the work is handed on.
   */
  callTool(deadline?: number, spend?: Spend, announce?: (text: string) => void, human?: string): CallTool {
    return async (name, args, { signal, intent, turn }) => {
      let proposal: string | undefined;
      const opts: CallOptions = {
        signal,
        onProposal: (p) => {
          proposal = p.id;
          this.myProposals.add(p.id);
        },
      };
      const tool = this.host.tool(name);
      const props = isRecord(tool?.inputSchema) && isRecord(tool.inputSchema["properties"]) ? tool.inputSchema["properties"] : {};
      const asked =
        "timeout_ms" in props && typeof args["timeout_ms"] === "number" && args["timeout_ms"] > 0 ? args["timeout_ms"] : undefined;
      const left = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
      if (asked !== undefined || left !== undefined) opts.timeoutMs = Math.min(asked ?? Infinity, left ?? Infinity);
      // An interactive agent's ask, for the person this turn is for: it may take their conversation over.
      const toolMeta = isRecord(tool?.["_meta"]) ? tool["_meta"] : {};
      if (toolMeta["mewgate/interactive"] === true && human !== undefined) {
        args = { ...args, _meta: { ...(isRecord(args["_meta"]) ? args["_meta"] : {}), "mewgate/human": human } };
        opts.timeoutMs = Math.min(opts.timeoutMs ?? INTERACTIVE_WAIT_MS, INTERACTIVE_WAIT_MS);
        if (deadline === undefined) opts.timeoutMs = INTERACTIVE_WAIT_MS;
      }
      const owner = name.slice(0, Math.max(0, name.indexOf("/")));
      if (announce && this.host.client.participants.get(owner)?.kind === "agent" && typeof args["message"] === "string") {
        announce(`Now I will ask ${owner}: ${clip(args["message"], 200)}`);
      }
      try {
        const { _meta: callMeta, ...callArgs } = args;
        // The model's own words from the turn that asked for the call: the card an approver
        // reads shows them (docs/protocol.md, intent); the gateway never passes them to the tool.
        const meta = {
          ...(isRecord(callMeta) ? callMeta : {}),
          ...(intent ? { [INTENT_META_KEY]: clip(intent, INTENT_MAX) } : {}),
          ...(turn ? { [TURN_META_KEY]: turn } : {}),
        };
        const params = Object.keys(meta).length
          ? { name, arguments: isRecord(callMeta) ? callArgs : args, _meta: meta }
          : { name, arguments: args };
        const result = await this.host.client.request(GATEWAY_ID, "tools/call", params, opts);
        if (spend) addDelegated(spend, result);
        const outcome = successOutcome(result, proposal === undefined ? undefined : this.approvals.get(proposal));
        // An agent's answer comes with how sure it is: the model weighs it with that.
        const line = contractLine(result);
        return line && outcome.type === "result" ? { ...outcome, content: `${outcome.content}\n${line}` } : outcome;
      } catch (err) {
        const answered = proposal === undefined ? undefined : this.responses.get(proposal);
        if (answered) return { type: "error", code: "responded", message: answered.text, by: answered.by };
        return failureOutcome(err);
      } finally {
        if (proposal !== undefined) {
          this.myProposals.delete(proposal);
          this.approvals.delete(proposal);
          this.responses.delete(proposal);
        }
      }
    };
  }
}
