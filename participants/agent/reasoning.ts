/**
 * Reasoning transparency (`agent.reasoning`): a turn's start, each model step that calls
 * tools, and its conclusion, sent to the space as `reasoning/*` in one context.
 *
 * Split from participant.ts; chat turns and delegated asks both report through it.
 */
import type { OutboundEnvelope } from "../client.js";
import type { LoopEvent, TurnResult } from "./loop.js";
import { clip } from "../../gateway/index.js";

/** One turn's reporter: fed the loop's events, then told how the turn ended. */
export interface Reasoning {
  onEvent: (e: LoopEvent) => void;
  conclude: (t: TurnResult) => void;
}

/** What the reporter needs of the agent. */
export interface ReasoningHost {
  send(env: OutboundEnvelope): string | undefined;
  /** The space's name of a tool the model called by its function name. */
  toolName(functionName: string): string;
}

/** Opens a reasoning context for a turn answering `correlation`; undefined when it could not be sent. */
export function startReasoning(host: ReasoningHost, correlation: string, message: string): Reasoning | undefined {
  const context = host.send({ kind: "reasoning/start", correlation_id: [correlation], payload: { message } });
  if (!context) return undefined;
  return {
    onEvent: (e) => {
      if (e.type !== "model" || e.response.toolCalls.length === 0) return;
      const names = e.response.toolCalls.map((c) => host.toolName(c.name));
      const text = e.response.text.trim();
      host.send({ kind: "reasoning/thought", context, payload: { message: `${text ? `${text}\n` : ""}Calling ${names.join(", ")}.` } });
    },
    conclude: (t) => {
      const message =
        t.status === "done"
          ? clip(t.text.trim() || "(no answer)", 2000)
          : t.status === "error"
            ? `Failed: ${t.error?.message ?? "error"}`
            : `Ended: ${t.status}`;
      host.send({ kind: "reasoning/conclusion", context, payload: { message } });
    },
  };
}
