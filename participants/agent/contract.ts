/**
 * The delegation contract of `<id>/ask` (after the KDAP inter-agent contract): what a
 * caller sends, what it gets back, and what it cost.
 *
 * Request: `message`, and optionally `context` (text, or a handoff: the original request,
 * where in the workflow this is, the agents before and what they found, the constraints),
 * `priority` (HIGH, NORMAL, LOW: a busy agent takes HIGH first) and `timeout_ms` (the
 * caller's deadline, within the space's bounds; the callee answers before it).
 *
 * Response, as MCP `structuredContent` with an `outputSchema`, so any MCP client reads it:
 * `status` (success, partial, error, timeout), `answer`, `confidence` (high, medium, low,
 * speculative — for success and partial), `warnings` (for partial), `error_code` (for error)
 * and `metadata` (processing time, tokens, cost — its own and everything it delegated).
 */
import * as z from "zod";
import type { Usage } from "./providers/types.js";
import { isRecord } from "../../gateway/index.js";

export const PRIORITIES = ["HIGH", "NORMAL", "LOW"] as const;
export type Priority = (typeof PRIORITIES)[number];
export const CONFIDENCES = ["high", "medium", "low", "speculative"] as const;
export type Confidence = (typeof CONFIDENCES)[number];
export type AskStatus = "success" | "partial" | "error" | "timeout";

const HandoffSchema = z.looseObject({
  original_request: z.string().max(20_000).optional(),
  workflow_position: z.string().max(500).optional(),
  prior_agents: z.array(z.string().max(64)).max(32).optional(),
  prior_outputs: z.record(z.string(), z.unknown()).optional(),
  constraints: z.record(z.string(), z.unknown()).optional(),
});
export type Handoff = z.output<typeof HandoffSchema>;

export const AskArgumentsSchema = z.object({
  message: z.string().min(1),
  context: z.union([z.string(), HandoffSchema]).optional(),
  priority: z.preprocess((v) => (typeof v === "string" ? v.toUpperCase() : v), z.enum(PRIORITIES)).default("NORMAL"),
  timeout_ms: z.number().int().positive().optional(),
});
export type AskArguments = z.output<typeof AskArgumentsSchema>;

/** The `<id>/ask` tool's input schema. */
export const ASK_INPUT_SCHEMA = {
  type: "object",
  properties: {
    message: { type: "string", description: "The task or question, self-contained." },
    context: {
      description: "Background the task needs: text, or a handoff object.",
      anyOf: [
        { type: "string" },
        {
          type: "object",
          properties: {
            original_request: { type: "string", description: "What the person asked originally, in their words." },
            workflow_position: { type: "string", description: "Where this task is in the work, e.g. step 2 of 3 (analysis)." },
            prior_agents: { type: "array", items: { type: "string" }, description: "Who worked on it before." },
            prior_outputs: { type: "object", description: "What they found." },
            constraints: { type: "object", description: "Limits the answer must keep to." },
          },
        },
      ],
    },
    priority: { type: "string", enum: [...PRIORITIES], description: "HIGH is taken first when the agent is busy. Default NORMAL." },
    timeout_ms: { type: "integer", minimum: 1, description: "How long you will wait for the answer, in ms (the space bounds it)." },
  },
  required: ["message"],
} as const;

/** The `<id>/ask` tool's output schema: the shape of `structuredContent`. */
export const ASK_OUTPUT_SCHEMA = {
  type: "object",
  properties: {
    status: { type: "string", enum: ["success", "partial", "error", "timeout"] },
    answer: { type: "string" },
    confidence: { type: "string", enum: [...CONFIDENCES] },
    warnings: { type: "array", items: { type: "string" } },
    error_code: { type: "string" },
    metadata: {
      type: "object",
      properties: {
        processing_time_ms: { type: "number" },
        input_tokens: { type: "number" },
        output_tokens: { type: "number" },
        cost_usd: { type: "number" },
        model: { type: "string" },
      },
    },
  },
  required: ["status", "answer"],
} as const;

/** Tokens and cost of a request, its own and everything it delegated. */
export interface Spend {
  input_tokens: number;
  output_tokens: number;
  /** Absent when no price is known for a model that was used. */
  cost_usd?: number | undefined;
}

export type Prices = Record<string, { input_per_mtok: number; output_per_mtok: number }>;

export function emptySpend(): Spend {
  return { input_tokens: 0, output_tokens: 0, cost_usd: 0 };
}

/** Adds a model's usage at its price; an unknown price leaves the cost unknown. */
export function addUsage(spend: Spend, usage: Usage, model: string, prices: Prices): void {
  spend.input_tokens += usage.input;
  spend.output_tokens += usage.output;
  const price = prices[model];
  if (!price) {
    if (usage.input + usage.output > 0) spend.cost_usd = undefined;
    return;
  }
  if (spend.cost_usd !== undefined) spend.cost_usd += (usage.input * price.input_per_mtok + usage.output * price.output_per_mtok) / 1e6;
}

/** Adds what a delegated call reported (its `metadata`), if it is an ask result. */
export function addDelegated(spend: Spend, result: unknown): void {
  const sc = isRecord(result) && isRecord(result["structuredContent"]) ? result["structuredContent"] : undefined;
  const meta = sc && isRecord(sc["metadata"]) ? sc["metadata"] : undefined;
  if (!meta || typeof meta["input_tokens"] !== "number" || typeof meta["output_tokens"] !== "number") return;
  spend.input_tokens += meta["input_tokens"];
  spend.output_tokens += meta["output_tokens"];
  if (typeof meta["cost_usd"] === "number" && spend.cost_usd !== undefined) spend.cost_usd += meta["cost_usd"];
  else spend.cost_usd = undefined;
}

/**
 * What the caller's model reads besides the answer, from an ask result's structured
 * content: status, confidence and error code (warnings are in the text already).
 */
export function contractLine(result: unknown): string | undefined {
  const sc = isRecord(result) && isRecord(result["structuredContent"]) ? result["structuredContent"] : undefined;
  if (!sc || typeof sc["status"] !== "string" || typeof sc["answer"] !== "string") return undefined;
  const parts = [`status ${sc["status"]}`];
  if (typeof sc["confidence"] === "string") parts.push(`confidence ${sc["confidence"]}`);
  if (typeof sc["error_code"] === "string") parts.push(`error ${sc["error_code"]}`);
  return `(${parts.join(", ")})`;
}

/** Cost rounded for people: a millionth of a dollar is the finest that matters. */
export function roundCost(usd: number | undefined): number | undefined {
  return usd === undefined ? undefined : Math.round(usd * 1e6) / 1e6;
}

/** The lines the callee's model is told to end with, read back and taken off the answer. */
export const ANSWER_NOTE =
  "End your reply with a line `Confidence: high`, `medium`, `low` or `speculative` (how sure you are), and, if the answer is incomplete or rests on doubtful data, one line `Warning: …` per limitation.";

export function readAnswer(text: string): { answer: string; confidence: Confidence | undefined; warnings: string[] } {
  const warnings: string[] = [];
  let confidence: Confidence | undefined;
  const keep: string[] = [];
  for (const line of text.split("\n")) {
    const c = /^\s*\**confidence\**\s*:\s*\**\s*(high|medium|low|speculative)\b/i.exec(line);
    const w = /^\s*\**warning\**\s*:\s*(.+)$/i.exec(line);
    if (c) confidence = c[1]!.toLowerCase() as Confidence;
    else if (w) warnings.push(w[1]!.trim().slice(0, 500));
    else keep.push(line);
  }
  return { answer: keep.join("\n").trim(), confidence, warnings: warnings.slice(0, 20) };
}

export interface AskOutcome {
  status: AskStatus;
  answer: string;
  confidence?: Confidence | undefined;
  warnings?: string[] | undefined;
  error_code?: string | undefined;
  metadata?: Record<string, unknown> | undefined;
}

/** An ask result: text for every client, `structuredContent` per the output schema. */
export function askResult(o: AskOutcome): Record<string, unknown> {
  const structured: Record<string, unknown> = { status: o.status, answer: o.answer };
  if (o.status === "success" || o.status === "partial") structured["confidence"] = o.confidence ?? "medium";
  if (o.warnings && o.warnings.length > 0) structured["warnings"] = o.warnings;
  if (o.status === "error") structured["error_code"] = o.error_code ?? "AGENT_ERROR";
  if (o.metadata) structured["metadata"] = o.metadata;
  const warn = o.warnings?.length ? `\n\nWarnings:\n${o.warnings.map((w) => `- ${w}`).join("\n")}` : "";
  return {
    content: [{ type: "text", text: `${o.status === "success" ? o.answer : `[${o.status}] ${o.answer}`}${warn}` }],
    structuredContent: structured,
    ...(o.status === "error" ? { isError: true } : {}),
  };
}

/** A handoff, or plain context, as the callee's model reads it. */
export function handoffText(from: string, context: AskArguments["context"]): string {
  if (context === undefined) return "";
  if (typeof context === "string") return context.trim() ? `\n\nContext from ${from}:\n${context.trim()}` : "";
  const lines = [`\n\nHandoff from ${from}:`];
  if (context.original_request) lines.push(`Original request: ${context.original_request}`);
  if (context.workflow_position) lines.push(`Where this is in the work: ${context.workflow_position}`);
  if (context.prior_agents?.length) lines.push(`Worked on before by: ${context.prior_agents.join(", ")}`);
  if (context.prior_outputs) lines.push(`What they found: ${JSON.stringify(context.prior_outputs).slice(0, 20_000)}`);
  if (context.constraints) lines.push(`Constraints: ${JSON.stringify(context.constraints).slice(0, 5_000)}`);
  return lines.join("\n");
}

/**
 * How many asks an agent works on at once; the rest wait, HIGH before NORMAL before LOW,
 * first come first served within a priority. A waiting ask whose caller gives up leaves.
 */
export class AskQueue {
  private running = 0;
  private readonly waiting: Array<{ rank: number; seq: number; start: () => void }> = [];
  private seq = 0;

  constructor(private readonly limit: number) {}

  get queued(): number {
    return this.waiting.length;
  }

  /** Resolves with the function to call when done, once it is this ask's turn. */
  enter(priority: Priority, signal: AbortSignal): Promise<() => void> {
    const release = () => {
      this.running--;
      this.next();
    };
    if (this.running < this.limit && this.waiting.length === 0) {
      this.running++;
      return Promise.resolve(release);
    }
    return new Promise((resolve, reject) => {
      const entry = { rank: PRIORITIES.indexOf(priority), seq: this.seq++, start: () => resolve(release) };
      this.waiting.push(entry);
      this.waiting.sort((a, b) => a.rank - b.rank || a.seq - b.seq);
      signal.addEventListener(
        "abort",
        () => {
          const i = this.waiting.indexOf(entry);
          if (i >= 0) {
            this.waiting.splice(i, 1);
            reject(signal.reason ?? new Error("aborted"));
          }
        },
        { once: true },
      );
    });
  }

  private next(): void {
    while (this.running < this.limit && this.waiting.length > 0) {
      this.running++;
      this.waiting.shift()!.start();
    }
  }
}
