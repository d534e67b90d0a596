/** The LLM agent's building blocks: what other folders may use. */
export {
  Conversation,
  estimateRequestTokens,
  estimateTokens,
  type ConversationOptions,
  type ConversationStats,
  type Summarize,
} from "./context.js";
export {
  DEFAULT_MAX_ITERATIONS,
  formatOutcome,
  runTurn,
  type CallTool,
  type LoopEvent,
  type RunTurnOptions,
  type ToolFailure,
  type ToolFailureCode,
  type ToolOutcome,
  type ToolSuccess,
  type TurnContext,
  type TurnResult,
  type TurnStatus,
} from "./loop.js";
export { decodeToolName, encodeToolName, FUNCTION_NAME_PATTERN, ToolNameMap, type NameCollision } from "./names.js";
export { buildSystemPrompt, type PromptInput, type PromptParticipant } from "./prompt.js";
export { buildToolSet, SpaceToolSchema, type SpaceTool, type ToolPolicy, type ToolSet } from "./tools.js";
export { AnthropicProvider, type AnthropicProviderOptions } from "./providers/anthropic.js";
export type { RetryOptions } from "./providers/http.js";
export { createProvider, type CreatedProvider, type ProviderSettings } from "./providers/index.js";
export { OpenAIProvider, type OpenAIProviderOptions } from "./providers/openai.js";
export { DEFAULT_FALLBACK, parseScript, ScriptedProvider, ScriptError, type Script, type ScriptStep } from "./providers/scripted.js";
export {
  ProviderError,
  type Message,
  type ModelOptions,
  type ModelRequest,
  type ModelResponse,
  type Provider,
  type ProviderErrorCode,
  type StopReason,
  type ToolCall,
  type ToolDefinition,
  type Usage,
} from "./providers/types.js";
export { AskArgumentsSchema, ASK_INPUT_SCHEMA, ASK_OUTPUT_SCHEMA, type AskStatus, type Priority, type Spend } from "./contract.js";
export {
  startAgent,
  type AgentHandle,
  type AgentOptions,
  type AgentState,
  type AgentStatus,
  type AgentStopReason,
} from "./participant.js";
export { DEFAULT_MODELS, resolveProvider, UnavailableProvider, type ProviderKind, type ResolvedProvider } from "./configure.js";
export { failureOutcome, resultText, successOutcome } from "./outcomes.js";
export { HopTracker, mentioned, mentionPattern } from "./triggers.js";
