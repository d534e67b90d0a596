/**
 * The space as the agent's model sees it: the space's tools (listed again when the gateway
 * says they changed), the participants not switched off, and the system prompt built from
 * both, rebuilt only when one of them changed.
 *
 * participant.ts tells it what arrived (welcome, presence, switches).
 */
import type { Logger } from "pino";
import type { AgentConfig } from "../../gateway/index.js";
import { GATEWAY_ID, type Envelope } from "../../gateway/index.js";
import type { ParticipantClient, WelcomeInfo } from "../client.js";
import type { ToolInfo } from "../wire.js";
import type { TurnContext } from "./loop.js";
import { buildSystemPrompt } from "./prompt.js";
import { buildToolSet, forModel, SpaceToolSchema, type SpaceTool, type ToolSet } from "./tools.js";
import { isRecord } from "../../gateway/index.js";

/** What the view needs of the agent. */
export interface SpaceViewHost {
  readonly id: string;
  readonly description: string | undefined;
  readonly config: AgentConfig;
  readonly client: ParticipantClient;
  readonly log: Logger | undefined;
  readonly stopped: boolean;
}

export class SpaceView {
  private rawTools: readonly ToolInfo[] = [];
  private spaceTools: SpaceTool[] = [];
  private toolsDirty = true;
  private promptDirty = true;
  private toolSet: ToolSet = buildToolSet([]);
  private system = "";
  private relisting: Promise<void> | undefined;
  private relistAgain = false;
  /** Participants switched off in the space: left out of the prompt. */
  private readonly switchedOff = new Set<string>();

  constructor(private readonly host: SpaceViewHost) {}

  /** The welcome's tools, as the gateway listed them. */
  setTools(tools: readonly ToolInfo[]): void {
    this.rawTools = tools;
  }

  /** The welcome's participants: who is switched off; tools and prompt are rebuilt. */
  welcome(info: WelcomeInfo): void {
    this.switchedOff.clear();
    for (const p of info.participants) if ((p as { disabled?: unknown }).disabled === true) this.switchedOff.add(p.id);
    this.toolsDirty = true;
    this.promptDirty = true;
  }

  /** Someone joined or left: the prompt names the participants. */
  presenceChanged(): void {
    this.promptDirty = true;
  }

  /** `space/disable` and `space/enable`, delivered only once the gateway has recorded them. */
  switched(env: Envelope): void {
    const who = isRecord(env.payload) ? env.payload["participant_id"] : undefined;
    if (typeof who === "string" && env.from !== GATEWAY_ID) {
      if (env.kind === "space/disable") this.switchedOff.add(who);
      else this.switchedOff.delete(who);
      this.promptDirty = true;
    }
  }

  /** The space's tool of this name, as listed. */
  tool(name: string): ToolInfo | undefined {
    return this.rawTools.find((t) => t.name === name);
  }

  /** The space's name of a tool the model called by its function name. */
  toolName(functionName: string): string {
    return this.toolSet.names.toolName(functionName) ?? functionName;
  }

  /** Re-lists the space's tools; overlapping requests collapse into one more run. */
  relist(): void {
    if (this.relisting) {
      this.relistAgain = true;
      return;
    }
    this.relisting = (async () => {
      do {
        this.relistAgain = false;
        try {
          this.rawTools = await this.host.client.listTools();
          this.toolsDirty = true;
        } catch (err) {
          this.host.log?.warn({ err: (err as Error).message }, "could not list the space's tools; keeping the previous list");
        }
      } while (this.relistAgain && !this.host.stopped);
    })().finally(() => {
      this.relisting = undefined;
    });
  }

  /** Waits for a re-listing in progress, so a turn never starts with a stale tool list it was told about. */
  async toolsReady(): Promise<void> {
    while (this.relisting) await this.relisting;
  }

  /** The prompt and tools, rebuilt only when the space changed. */
  turnContext(): TurnContext {
    if (this.toolsDirty) {
      const tools: SpaceTool[] = [];
      for (const t of this.rawTools) {
        const parsed = SpaceToolSchema.safeParse(t);
        if (parsed.success) tools.push(forModel(parsed.data));
      }
      this.toolSet = buildToolSet(tools, { self: this.host.id });
      this.spaceTools = tools;
      this.toolsDirty = false;
      this.promptDirty = true;
    }
    if (this.promptDirty) {
      const welcome = this.host.client.welcome;
      this.system = buildSystemPrompt({
        self: { id: this.host.id, description: this.host.description, instructions: this.host.config.instructions },
        space: welcome?.space ?? { id: "space" },
        // A participant switched off (space/disable) is not offered to the model.
        participants: [...this.host.client.participants.values()]
          .filter((p) => !this.switchedOff.has(p.id))
          .map((p) => ({ id: p.id, kind: p.kind ?? "participant", description: p.description })),
        tools: this.spaceTools,
      });
      this.promptDirty = false;
    }
    return { system: this.system, tools: this.toolSet };
  }
}
