/**
 * A provider that replays a script instead of calling a model: for the offline demo and
 * for tests.
 *
 * Script format (YAML or JSON; a bare list of steps is accepted too):
 *
 *   steps:
 *     - when: {user_contains: "files"}        # optional; every condition given must hold
 *       text: "Let me look."                  # optional assistant text
 *       tool_calls:                           # optional; REAL names, participant/tool
 *         - name: fs/list_directory
 *           arguments: {path: "."}
 *     - when: {after_tool_result: true, tool_error: false}
 *       text: "Here is what I found: {{tool_results}}"
 *     - when: {tool_error: true}
 *       text: "That did not work: {{tool_results}}"
 *       repeat: true                          # stays in the script; may match again
 *   fallback: "I have nothing further to add."  # reply once no step matches
 *
 * On every model turn the provider takes the first step, in file order, that has not
 * been used yet (or has `repeat: true`) and whose `when` holds; a step without `when`
 * always holds, so a script without conditions simply replays in order. When no step
 * matches, it replies with `fallback` and no tool calls.
 *
 * Conditions look at what arrived since the model last spoke (the messages after the
 * last assistant message):
 *   user_contains: TEXT        a new user message contains TEXT (case-insensitive)
 *   user_matches: REGEX        a new user message matches REGEX (case-insensitive)
 *   after_tool_result: BOOL    tool results arrived (true) or did not (false)
 *   tool_error: BOOL           one of them is an error (true) or none is (false)
 *   tool_result_contains: TEXT one of them contains TEXT (case-insensitive)
 *
 * In `text` and in the string values of `arguments`, `{{user}}` stands for the new user
 * messages and `{{tool_results}}` for the new tool results, one per line. `delay_ms` waits before replying (for demos).
 *
 * Tool names are written as the space shows them (`participant/tool`); the provider turns
 * them into function names with the same encoder the agent uses, exactly as a real model
 * would answer with the function names it was offered.
 */
import { readFile } from "node:fs/promises";
import { parse as parseYaml } from "yaml";
import * as z from "zod";
import { estimateRequestTokens, estimateTokens } from "../context.js";
import { encodeToolName } from "../names.js";
import { ProviderError, type Message, type ModelRequest, type ModelResponse, type Provider, type ToolCall } from "./types.js";

export const DEFAULT_FALLBACK = "I have nothing further to add.";

const WhenSchema = z.strictObject({
  user_contains: z.string().min(1).optional(),
  user_matches: z.string().min(1).optional(),
  after_tool_result: z.boolean().optional(),
  tool_error: z.boolean().optional(),
  tool_result_contains: z.string().min(1).optional(),
});

const StepSchema = z.strictObject({
  when: WhenSchema.optional(),
  text: z.string().optional(),
  tool_calls: z.array(z.strictObject({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown()).optional() })).optional(),
  repeat: z.boolean().optional(),
  delay_ms: z.number().int().min(0).max(600_000).optional(),
});

const ScriptObjectSchema = z.strictObject({ steps: z.array(StepSchema), fallback: z.string().optional() });

export type ScriptStep = z.input<typeof StepSchema>;
export type Script = z.input<typeof ScriptObjectSchema>;

export class ScriptError extends Error {
  override readonly name = "ScriptError";
}

/** Validates a script (already parsed from YAML/JSON); `source` prefixes the message. */
export function parseScript(value: unknown, source = "script"): Script {
  // A bare list is `{steps: list}`; choosing the schema by shape keeps error paths precise.
  const result = ScriptObjectSchema.safeParse(Array.isArray(value) ? { steps: value } : value);
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
    throw new ScriptError(`${source}: ${where}${issue?.message ?? "invalid script"}`);
  }
  for (const [i, step] of result.data.steps.entries()) {
    const pattern = step.when?.user_matches;
    if (pattern === undefined) continue;
    try {
      new RegExp(pattern, "i");
    } catch (err) {
      throw new ScriptError(`${source}: steps.${i}.when.user_matches: ${(err as Error).message}`);
    }
  }
  return result.data;
}

export class ScriptedProvider implements Provider {
  readonly name = "scripted";
  /** Every request seen, in order (messages copied), for tests and debugging. */
  readonly requests: ModelRequest[] = [];
  private readonly steps: ScriptStep[];
  private readonly fallback: string;
  private readonly used = new Set<number>();
  private calls = 0;

  constructor(script: Script | ScriptStep[]) {
    const parsed = parseScript(script);
    this.steps = parsed.steps;
    this.fallback = parsed.fallback ?? DEFAULT_FALLBACK;
  }

  static async fromFile(file: string): Promise<ScriptedProvider> {
    let text: string;
    try {
      text = await readFile(file, "utf8");
    } catch (err) {
      throw new ScriptError(`${file}: cannot read the script: ${(err as Error).message}`);
    }
    let value: unknown;
    try {
      value = parseYaml(text); // JSON is YAML
    } catch (err) {
      throw new ScriptError(`${file}: ${(err as Error).message}`);
    }
    return new ScriptedProvider(parseScript(value, file));
  }

  /** Steps not used yet (repeatable ones count as unused). */
  get remaining(): number {
    return this.steps.length - this.used.size;
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push({ ...request, messages: [...request.messages] });
    const fresh = sinceLastReply(request.messages);
    const index = this.steps.findIndex((s, i) => !this.used.has(i) && matches(s, fresh));
    const step = index >= 0 ? this.steps[index]! : undefined;
    if (step && !step.repeat) this.used.add(index);

    if (step?.delay_ms) await sleep(step.delay_ms, request.options.signal);
    if (request.options.signal?.aborted) throw new ProviderError("aborted", "scripted: request aborted", { provider: this.name });

    const text = step ? fill(step.text ?? "", fresh) : this.fallback;
    const toolCalls: ToolCall[] = (step?.tool_calls ?? []).map((c) => ({
      id: `call_${++this.calls}`,
      name: encodeToolName(c.name),
      arguments: fillArguments(c.arguments ?? {}, fresh),
    }));
    return {
      text,
      toolCalls,
      stopReason: toolCalls.length > 0 ? "tool_use" : "end_turn",
      usage: {
        input: estimateRequestTokens(request),
        output: estimateTokens(text + toolCalls.map((c) => c.name + JSON.stringify(c.arguments)).join("")),
      },
    };
  }
}

interface Fresh {
  users: string[];
  results: { content: string; isError: boolean }[];
}

function sinceLastReply(messages: readonly Message[]): Fresh {
  const fresh: Fresh = { users: [], results: [] };
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === "assistant") break;
    if (m.role === "user") fresh.users.unshift(m.text);
    else fresh.results.unshift({ content: m.content, isError: m.isError });
  }
  return fresh;
}

function matches(step: ScriptStep, fresh: Fresh): boolean {
  const when = step.when;
  if (!when) return true;
  const has = (haystack: string, needle: string) => haystack.toLowerCase().includes(needle.toLowerCase());
  if (when.user_contains !== undefined && !fresh.users.some((u) => has(u, when.user_contains!))) return false;
  if (when.user_matches !== undefined) {
    const re = new RegExp(when.user_matches, "i");
    if (!fresh.users.some((u) => re.test(u))) return false;
  }
  if (when.after_tool_result !== undefined && when.after_tool_result !== fresh.results.length > 0) return false;
  if (when.tool_error !== undefined && when.tool_error !== fresh.results.some((r) => r.isError)) return false;
  if (when.tool_result_contains !== undefined && !fresh.results.some((r) => has(r.content, when.tool_result_contains!))) return false;
  return true;
}

function fill(text: string, fresh: Fresh): string {
  return text.replaceAll("{{user}}", fresh.users.join("\n")).replaceAll("{{tool_results}}", fresh.results.map((r) => r.content).join("\n"));
}

/** `{{user}}` and `{{tool_results}}` in the string values of a tool call's arguments, as in `text`. */
function fillArguments(args: Record<string, unknown>, fresh: Fresh): Record<string, unknown> {
  return Object.fromEntries(Object.entries(args).map(([k, v]) => [k, typeof v === "string" ? fill(v, fresh) : v]));
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
