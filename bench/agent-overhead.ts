/**
 * The LLM agent's own overhead per turn, model time excluded.
 *
 * A space with 200 tools (one in-process owner), a human and the agent, all joined
 * in-process to a real `Space` (no sockets: this measures the agent, not the network).
 * Each sample is one real chat turn through `startAgent`: the human's chat is routed to
 * the agent, which starts a turn; the model (the scripted provider, no delay) answers with
 * a tool call; the agent maps the function name back, calls the tool through the gateway,
 * which routes it to the owner and the answer back; the model is asked again and answers;
 * the agent posts the reply, which is routed to the human. The sample is the wall time
 * from sending the chat to receiving the reply minus the time spent inside the provider.
 *
 The agent rebuilds its system prompt and tool set (schema checks, name encoding for the
 * 200 tools) only when the space's tools or participants change, so a steady-state turn
 * reuses both. With `rebuildPrompt` every sample also pays for one rebuild: the worst
 * case, as if the tools changed before every turn.
 *
 * Some of the loop's bookkeeping grows with the conversation, so the conversation is
 * cleared (`participant/clear`, not timed) every `clearEvery` turns: the figure is for a
 * conversation of up to 4 × `clearEvery` messages.
 *
 *   node dist/bench/agent-overhead.js [--rebuild] [--turns N] [--clear-every N]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { parseSpaceConfig } from "../gateway/index.js";
import { connectInProcess } from "../gateway/index.js";
import { Gateway } from "../gateway/index.js";
import { startAgent } from "../participants/agent/participant.js";
import { buildSystemPrompt } from "../participants/agent/prompt.js";
import { ScriptedProvider } from "../participants/agent/providers/scripted.js";
import type { ModelRequest, Provider } from "../participants/agent/providers/types.js";
import { buildToolSet, SpaceToolSchema, type SpaceTool } from "../participants/agent/tools.js";
import { ParticipantClient } from "../participants/client.js";
import { percentile } from "./stats.js";

export interface AgentOverheadOptions {
  /** Tools in the space. Default 200. */
  tools?: number;
  /** Measured turns. Default 400. */
  turns?: number;
  /** Turns run first and not measured. Default 100. */
  warmup?: number;
  /** Add a prompt and tool-set rebuild to every sample (see the header). Default false. */
  rebuildPrompt?: boolean;
  /** Clear the agent's conversation (`participant/clear`, not timed) every this many turns. Default 25. */
  clearEvery?: number;
}

export async function benchAgentOverhead(opts: AgentOverheadOptions = {}): Promise<{ p50Ms: number; p99Ms: number; tools: number }> {
  const toolCount = opts.tools ?? 200;
  const turns = opts.turns ?? 400;
  const warmup = opts.warmup ?? 100;
  const rebuild = opts.rebuildPrompt ?? false;
  const clearEvery = opts.clearEvery ?? 25;

  const dir = mkdtempSync(join(tmpdir(), "mewgate-bench-agent-"));
  const yaml = `
space: {id: bench, name: Agent overhead bench}
participants:
  alice: {kind: human}
  owner: {kind: mcp, description: owns many tools}
  agent:
    kind: agent
    description: the agent under test
    tools: {allow: ["owner/*"]}
    agent: {provider: scripted, context_tokens: 32000}
`;
  const config = parseSpaceConfig(yaml, { file: join(dir, "space.yaml"), env: {} });
  const gateway = new Gateway({ spaces: [config], env: {} });
  const space = gateway.spaces.get("bench")!;
  const inProcess = (id: string) => ({ transport: () => connectInProcess(space, id), reconnect: false as const });

  const tools = Array.from({ length: toolCount }, (_, i) => ({
    name: `tool_${String(i).padStart(3, "0")}`,
    description: `Tool number ${i}: does one small thing with its input and returns a short text.`,
    inputSchema: {
      type: "object",
      properties: { path: { type: "string", description: "A path" }, count: { type: "integer", minimum: 0 } },
      required: ["path"],
    },
    annotations: { readOnlyHint: i % 2 === 0 },
  }));
  const owner = new ParticipantClient(inProcess("owner"));
  owner.onRequest(({ method }) => (method === "tools/list" ? { tools } : { content: [{ type: "text", text: "ok" }] }));
  await owner.connect();
  const alice = new ParticipantClient(inProcess("alice"));
  await alice.connect();
  // kind mcp: the gateway lists the owner's tools on join.
  while ((await alice.listTools()).length < toolCount) await new Promise((r) => setTimeout(r, 5));

  // The model: a tool call, then an answer once the result is in; timed, so its time is left out.
  const scripted = new ScriptedProvider({
    steps: [
      { when: { after_tool_result: false }, tool_calls: [{ name: "owner/tool_007", arguments: { path: "a.txt" } }], repeat: true },
      { when: { after_tool_result: true }, text: "done", repeat: true },
    ],
  });
  let providerMs = 0;
  const provider: Provider = {
    name: "scripted",
    async complete(request: ModelRequest) {
      const t = performance.now();
      try {
        return await scripted.complete(request);
      } finally {
        providerMs += performance.now() - t;
        // The scripted provider keeps every request for tests; a bench must not grow it.
        scripted.requests.length = 0;
      }
    },
  };
  const agent = await startAgent({ id: "agent", config: config.participants["agent"]!.agent!, client: inProcess("agent"), provider });

  // The rebuild the agent does when tools change, on the same list it holds.
  const listed = await alice.listTools();
  const rebuildOnce = () => {
    const parsed: SpaceTool[] = [];
    for (const t of listed) {
      const r = SpaceToolSchema.safeParse({ ...t, policy: "direct" });
      if (r.success) parsed.push(r.data);
    }
    buildToolSet(parsed, { self: "agent" });
    buildSystemPrompt({
      self: { id: "agent", description: "the agent under test" },
      space: { id: "bench", name: "Agent overhead bench" },
      participants: [...alice.participants.values()].map((p) => ({ id: p.id, kind: p.kind ?? "participant", description: p.description })),
      tools: parsed,
    });
  };

  let waiting: ((text: string) => void) | undefined;
  let cleared: (() => void) | undefined;
  alice.on("envelope", (env) => {
    if (env.kind === "chat" && env.from === "agent") waiting?.((env.payload as { text: string }).text);
    if (env.kind === "participant/status" && env.from === "agent") cleared?.();
  });
  let done = 0;
  const turn = async (): Promise<number> => {
    if (++done % clearEvery === 0) {
      const ack = new Promise<void>((resolve) => (cleared = resolve));
      alice.send({ kind: "participant/clear", to: ["agent"] });
      await ack;
    }
    providerMs = 0;
    const reply = new Promise<string>((resolve) => (waiting = resolve));
    const start = performance.now();
    alice.send({ kind: "chat", to: ["agent"], payload: { text: "use tool 7 on a.txt" } });
    const text = await reply;
    const wall = performance.now() - start;
    if (text !== "done") throw new Error(`agent bench: unexpected reply ${JSON.stringify(text)}`);
    let extra = 0;
    if (rebuild) {
      const t = performance.now();
      rebuildOnce();
      extra = performance.now() - t;
    }
    return wall - providerMs + extra;
  };

  const samples: number[] = [];
  try {
    for (let i = 0; i < warmup; i++) await turn();
    for (let i = 0; i < turns; i++) samples.push(await turn());
  } finally {
    await agent.stop();
    await Promise.all([alice.close(), owner.close()]);
    await gateway.close();
    rmSync(dir, { recursive: true, force: true });
  }
  samples.sort((a, b) => a - b);
  return { p50Ms: percentile(samples, 50), p99Ms: percentile(samples, 99), tools: toolCount };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  const flag = (name: string) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : undefined);
  const result = await benchAgentOverhead({
    rebuildPrompt: args.includes("--rebuild"),
    ...(flag("--turns") !== undefined ? { turns: flag("--turns")! } : {}),
    ...(flag("--clear-every") !== undefined ? { clearEvery: flag("--clear-every")! } : {}),
  });
  process.stdout.write(
    `agent overhead per turn (${result.tools} tools, model time excluded): p50 ${result.p50Ms.toFixed(3)} ms, p99 ${result.p99Ms.toFixed(3)} ms (goal p50 <= 2 ms)\n`,
  );
}
