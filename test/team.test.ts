/**
 * The team example, end to end and offline (scripted models): the lead asks the primary
 * agent for a plan; the planner takes the conversation over and asks a question; it hands
 * a sub-task to the researcher, who also talks with the lead and reads the shared files;
 * both complete, and the coordinator reports the plan with what the request cost.
 */
import { cpSync, mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connectInProcess } from "../gateway/space/inprocess.js";
import type { Envelope } from "../gateway/wire/envelope.js";
import { startAgent, type AgentHandle } from "../participants/agent/index.js";
import { ParticipantClient } from "../participants/client.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ROOT } from "./fixtures/cli/harness.js";
import { startGateway, waitFor, type TestGateway } from "./helpers.js";

let gw: TestGateway | undefined;
let dir: string | undefined;
const agents: AgentHandle[] = [];
const bridges: Bridge[] = [];
const clients: ParticipantClient[] = [];
afterEach(async () => {
  await Promise.all(agents.splice(0).map((a) => a.stop()));
  for (const b of bridges.splice(0)) await b.stop();
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await gw?.stop();
  gw = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("spaces/team", () => {
  it("plans with the lead through two takeovers and reports the plan with its cost", { timeout: 40_000 }, async () => {
    dir = mkdtempSync(join(tmpdir(), "mewgate-team-"));
    cpSync(join(ROOT, "spaces", "team"), dir, { recursive: true });
    const sandbox = join(dir, "sandbox");
    mkdirSync(sandbox);
    const { readFileSync } = await import("node:fs");
    const yaml = readFileSync(join(dir, "space.yaml"), "utf8");
    gw = await startGateway(yaml, { dir, env: { MEWGATE_MODULES: join(ROOT, "node_modules"), MEWGATE_SANDBOX: sandbox } });
    const space = gw.gateway.spaces.get("team")!;
    const config = space.config;
    bridges.push(
      await startBridge({
        id: "files",
        server: config.participants["files"]!.mcp!,
        client: { transport: () => connectInProcess(space, "files"), reconnect: false },
      }),
    );
    for (const id of ["researcher", "planner", "coordinator"]) {
      agents.push(
        await startAgent({
          id,
          config: config.participants[id]!.agent!,
          description: config.participants[id]!.description,
          client: { transport: () => connectInProcess(space, id), reconnect: false },
          env: {},
        }),
      );
    }
    const lead = new ParticipantClient({ transport: () => connectInProcess(space, "lead", { echo: true }), reconnect: false });
    clients.push(lead);
    const seen: Envelope[] = [];
    lead.on("envelope", (e) => seen.push(e));
    await lead.connect();
    await waitFor(
      async () =>
        (await lead.listTools()).some((t) => t.name === "planner/ask") && (await lead.listTools()).some((t) => t.name === "researcher/ask"),
      10_000,
      "the specialists",
    );

    const chats = () =>
      seen.filter((e) => e.kind === "chat" && e.from !== "lead").map((e) => `${e.from}: ${(e.payload as { text: string }).text}`);
    const say = async (text: string, next: RegExp) => {
      lead.send({ kind: "chat", payload: { text } });
      await waitFor(() => chats().some((c) => next.test(c)), 10_000, `a chat matching ${next}`);
    };
    await say("plan our team offsite", /^planner: .*What budget/);
    await say("5000 euros", /^researcher: .*which city/);
    await say("Lisbon", /^coordinator: Here is the plan/);

    const holders = seen.filter((e) => e.kind === "space/conversation").map((e) => (e.payload as { holder: string | null }).holder);
    expect(holders).toEqual(["planner", "researcher", "planner", null]);
    const transcript = chats();
    expect(transcript).toEqual([
      "coordinator: Now I will ask planner: Make a plan for the lead's request: lead: plan our team offsite",
      "planner: Happy to plan this with you. What budget should I keep to?",
      "planner: Now I will ask researcher: Find what the shared files tell us for the offsite. The budget is lead: 5000 euros.",
      "researcher: Before I look — which city is the offsite in?",
      "coordinator: Here is the plan. Plan: two days in the city you named, within your budget. The researcher found no earlier notes, so everything is booked fresh.\n(status success, confidence medium)",
    ]);
    const final = seen.filter((e) => e.kind === "chat" && e.from === "coordinator").at(-1)!;
    const usage = (final.payload as { usage: { input_tokens: number; output_tokens: number; cost_usd: number } }).usage;
    expect(usage.input_tokens).toBeGreaterThan(0);
    expect(usage.cost_usd).toBeGreaterThan(0);
    if (process.env["SHOW_TRANSCRIPT"]) {
      // The exchange as the lead's terminal draws it (the README shows it).
      const { formatEnvelope, PLAIN } = await import("../cli/terminal/format.js");
      const view = { me: "lead", width: 100, style: PLAIN, calls: new Map(), proposals: new Set<string>() };
      console.log(
        seen
          .filter((e) => e.kind === "chat" || e.kind === "space/conversation")
          .flatMap((e) => (e.from === "lead" ? [`lead> ${(e.payload as { text: string }).text}`] : formatEnvelope(e, view)))
          .join("\n"),
      );
    }
  });
});
