/**
 * Presence in a large space (config `presence`, gateway/space/delivery.ts `presenceOf`):
 * past `each_up_to` members, joins and leaves are no longer sent to everyone one by one but
 * summed up once per `summary_ms`; the roster is a request away (`participants/list`).
 * Hostile first: a flood of joins and leaves, ids that try to look like summaries; then the
 * MEW way below the threshold, and the participant SDK keeping its view from summaries.
 */
import { afterEach, describe, expect, it } from "vitest";
import { ParticipantClient } from "../participants/client.js";
import { type Env, sleep, startGateway, TestClient, type TestGateway, waitFor } from "./helpers.js";

const EACH_UP_TO = 3;
const N = 60;
const token = (id: string) => `${id}-token-0123456789`;
const ids = Array.from({ length: N }, (_, i) => `m${i}`);

function yaml(extra = ""): string {
  return [
    "space: {id: big}",
    "gateway: {limits: {rate_per_second: 100000, rate_burst: 100000, max_per_address: 1000, max_unauthenticated: 1000}}",
    `presence: {each_up_to: ${EACH_UP_TO}, summary_ms: 100}`,
    extra,
    "participants:",
    `  watcher: {kind: human, token: ${token("watcher")}}`,
    `  agent: {kind: agent, token: ${token("agent")}, capabilities: [{kind: "mcp/*"}, {kind: chat}]}`,
    ...ids.map((id) => `  ${id}: {kind: human, token: ${token(id)}}`),
    "",
  ].join("\n");
}

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

const summaries = (c: TestClient) => c.received.filter((e) => e.kind === "system/presence" && e.payload.event === "summary");
const joinsSeen = (c: TestClient) =>
  c.received.filter((e) => e.kind === "system/presence" && e.payload.event === "join").map((e) => e.payload.participant.id as string);

async function join(id: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "big", token(id));
  clients.push(c);
  return c;
}

describe("presence in a large space", () => {
  it("a flood of joins: past the threshold nobody gets a frame per join, and the summaries account for every one", {
    timeout: 60_000,
  }, async () => {
    gw = await startGateway(yaml());
    const watcher = await join("watcher");
    // Below the threshold, MEW's way: each join to everyone.
    const early = await Promise.all(ids.slice(0, EACH_UP_TO - 1).map(join));
    await waitFor(() => joinsSeen(watcher).length === EACH_UP_TO - 1, 5000, "the first joins, one by one");
    // The flood.
    const flood = await Promise.all(ids.slice(EACH_UP_TO - 1).map(join));
    const online = 1 + early.length + flood.length;
    await waitFor(() => summaries(watcher).some((e) => e.payload.online === online), 10_000, "a summary counting everyone online");
    // Nothing past the threshold came one by one.
    expect(joinsSeen(watcher)).toEqual(ids.slice(0, EACH_UP_TO - 1));
    const said = summaries(watcher);
    const named = said.flatMap((e) => e.payload.joined as string[]);
    const counted = said.reduce((n, e) => n + (e.payload.joined_more ?? 0), 0);
    // Every join past the threshold is named or counted, none twice.
    expect(new Set(named).size).toBe(named.length);
    expect(named.length + counted).toBe(N - (EACH_UP_TO - 1));
    for (const id of named) expect(ids).toContain(id);
    // A summary names at most 100 of each, whatever the flood.
    for (const e of said) expect((e.payload.joined as string[]).length).toBeLessThanOrEqual(100);
    // Frames per member: a handful of summaries, not one per join.
    expect(said.length).toBeLessThan(N / 4);

    // The roster is a request away, in pages, and names everyone else connected.
    watcher.send({
      id: "pl",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", id: "pl", method: "participants/list" },
    });
    const listed = await watcher.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("pl") === true);
    expect(listed.payload.result.total).toBe(online - 1);
    expect((listed.payload.result.participants as Array<{ id: string }>).map((p) => p.id).sort()).toEqual([...ids].sort());
    watcher.send({
      id: "bad",
      kind: "mcp/request",
      to: ["system:gateway"],
      payload: { jsonrpc: "2.0", id: "bad", method: "participants/list", params: { cursor: "c99999999999" } },
    });
    const bad = await watcher.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("bad") === true);
    expect(bad.payload.error.code).toBe(-32602);

    // A welcome in a large space lists the first few and counts everyone.
    const late = await join("agent");
    const welcome = late.received.find((e) => e.kind === "system/welcome")!;
    expect((welcome.payload.participants as unknown[]).length).toBeLessThanOrEqual(EACH_UP_TO);
    expect(welcome.payload.participants_total).toBe(online);
    late.ws.terminate();
    await waitFor(
      () => summaries(watcher).some((e) => (e.payload.left as string[]).includes("agent")),
      10_000,
      "the late joiner's leave summed up",
    );

    // A flood of leaves: summed up the same way.
    const before = watcher.received.length;
    for (const c of flood.slice(0, 40)) c.ws.terminate();
    await waitFor(() => summaries(watcher).some((e) => e.payload.online === online - 40), 10_000, "a summary after the leaves");
    const after = watcher.received.slice(before).filter((e: Env) => e.kind === "system/presence");
    expect(after.every((e) => e.payload.event === "summary")).toBe(true);
    const left = after.flatMap((e) => e.payload.left as string[]);
    expect(left.length + after.reduce((n, e) => n + (e.payload.left_more ?? 0), 0)).toBe(40);
  });

  it("back under the threshold, joins and leaves go one by one again, after any summary still waiting", async () => {
    gw = await startGateway(yaml());
    const watcher = await join("watcher");
    const some = await Promise.all(ids.slice(0, EACH_UP_TO + 2).map(join));
    await waitFor(() => summaries(watcher).length > 0, 5000, "a summary");
    // Six online; four leave: the first two past the threshold (summed up), the last two under it (one by one).
    const leaving = some.slice(1).map((_, i) => ids[i + 1]!);
    for (const c of some.slice(1)) c.ws.terminate();
    const leaves = () =>
      watcher.received.filter((e) => e.kind === "system/presence" && (e.payload.event === "leave" || e.payload.event === "summary"));
    const leftIn = (e: Env): string[] => (e.payload.event === "leave" ? [e.payload.participant.id] : (e.payload.left as string[]));
    await waitFor(() => leaves().flatMap(leftIn).length === 4, 5000, "all four leaves told");
    expect(leaves().flatMap(leftIn).sort()).toEqual([...leaving].sort());
    // In order: the summary waiting was sent before the first leave told on its own.
    const firstSingle = leaves().findIndex((e) => e.payload.event === "leave");
    const lastSummary = leaves().findLastIndex((e) => e.payload.event === "summary" && (e.payload.left as string[]).length > 0);
    expect(lastSummary).toBeLessThan(firstSingle);
    expect(leaves().filter((e) => e.payload.event === "leave")).toHaveLength(2);
    const late = await join(ids[10]!);
    await waitFor(() => joinsSeen(watcher).includes(ids[10]!), 5000, "a join told on its own");
    late.ws.terminate();
    await waitFor(
      () =>
        watcher.received.some((e) => e.kind === "system/presence" && e.payload.event === "leave" && e.payload.participant.id === ids[10]),
      5000,
      "a leave told on its own",
    );
  });

  it("the participant SDK keeps its view of who is there from summaries, and fetches the roster when a summary only counts", {
    timeout: 60_000,
  }, async () => {
    gw = await startGateway(yaml().replace("summary_ms: 100", "summary_ms: 300"));
    const agent = new ParticipantClient({ url: gw.url, space: "big", token: token("agent"), reconnect: false });
    const events: string[] = [];
    agent.on("presence", (e) => events.push(`${e.event}:${e.participant.id}`));
    await agent.connect();
    try {
      const members = await Promise.all(ids.slice(0, 20).map(join));
      await waitFor(() => agent.participants.size === 20, 10_000, "the SDK's view of 20 members");
      expect([...agent.participants.keys()].sort()).toEqual(ids.slice(0, 20).sort());
      for (const c of members.slice(0, 15)) c.ws.terminate();
      await waitFor(() => agent.participants.size === 5, 10_000, "the SDK's view after 15 left");
      expect(events.filter((e) => e.startsWith("leave:"))).toHaveLength(15);
      const listed = await agent.listParticipants();
      expect(listed.map((p) => p.id).sort()).toEqual(ids.slice(15, 20).sort());
    } finally {
      agent.close();
      await sleep(50);
    }
  });
});
