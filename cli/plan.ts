/**
 * `mewgate up`'s launch plan: which declared participants it starts as agents, as MCP
 * bridges or as `run:` child processes, which it leaves to join on their own, whom it
 * greets, and the checks on that (one way to run each; a state directory not handed out).
 */
import { existsSync, statSync } from "node:fs";
import { dirname, resolve, sep } from "node:path";
import type { ParticipantConfig, SpaceConfig } from "../gateway/index.js";
import { CliError, pickHuman } from "./space.js";

export interface Plan {
  human: ParticipantConfig | undefined;
  agents: ParticipantConfig[];
  bridges: ParticipantConfig[];
  children: ParticipantConfig[];
  /** Declared, but nothing for `up` to start: they connect on their own. */
  external: ParticipantConfig[];
}

/**
 * Who `up` starts, and how. A participant gets one way to run. Without a terminal to
 * attach (`--detach`) a space of several humans needs no `--as`: nobody is attached.
 */
export function planParticipants(config: SpaceConfig, as: string | undefined, opts: { terminal?: boolean } = {}): Plan {
  const plan: Plan = { human: undefined, agents: [], bridges: [], children: [], external: [] };
  const humans = Object.values(config.participants).filter((p) => p.kind === "human");
  const attachNobody = opts.terminal === false && as === undefined && humans.length > 1;
  if (!attachNobody && (as !== undefined || humans.length > 0)) plan.human = pickHuman(config, as);
  for (const p of Object.values(config.participants)) {
    const ways = [p.run && "run", p.agent && "agent", p.mcp && "mcp"].filter(Boolean);
    if (ways.length > 1) {
      throw new CliError(`${config.file}: participants.${p.id} has ${ways.join(" and ")} sections; give it one way to run`);
    }
    if (p === plan.human) {
      if (ways.length)
        throw new CliError(`${config.file}: participants.${p.id} is the human at the terminal; it cannot also have a ${ways[0]} section`);
      continue;
    }
    if (p.run) plan.children.push(p);
    else if (p.agent) plan.agents.push(p);
    else if (p.mcp) plan.bridges.push(p);
    else if (p.kind !== "human") plan.external.push(p);
  }
  return plan;
}

/**
 * Who gets the greeting: the agents that started, except specialists that offer
 * themselves as tools (they are called by the others, not chatted with) — unless every
 * agent is one.
 */
export function greeted(configured: ParticipantConfig[], started: string[]): string[] {
  const specialist = (id: string) => {
    const offer = configured.find((p) => p.id === id)?.agent?.offer;
    return offer !== undefined && offer.enabled !== false;
  };
  const chatty = started.filter((id) => !specialist(id));
  return chatty.length > 0 ? chatty : started;
}

/**
 * A stdio MCP server given a directory that contains the state directory (a filesystem
 * server over the project, say) could hand out every participant's token. Said loudly;
 * not refused, since the operator may know better.
 */
export function exposedStateDir(config: SpaceConfig, stateDir: string): string[] {
  const warnings: string[] = [];
  for (const p of Object.values(config.participants)) {
    if (!p.mcp?.command) continue;
    const cwd = p.mcp.cwd ?? dirname(config.file);
    for (const arg of p.mcp.args ?? []) {
      if (arg.startsWith("-")) continue;
      const dir = resolve(cwd, arg);
      if (stateDir === dir || stateDir.startsWith(dir.endsWith(sep) ? dir : dir + sep)) {
        if (!existsSync(dir) || !statSync(dir).isDirectory()) continue;
        warnings.push(
          `${p.id} is given ${dir}, which contains the state directory ${stateDir} (tokens!); move one of them (gateway.state_dir or --state-dir)`,
        );
      }
    }
  }
  return warnings;
}
