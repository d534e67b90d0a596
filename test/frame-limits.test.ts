/**
 * A frame the space would refuse is never sent to be lost. The gateway answers a frame
 * larger than `gateway.limits.max_payload_bytes` (or nesting deeper than `max_depth`) with an
 * error that no call is correlated to, so an answer sent anyway left its caller waiting until
 * the call timed out. The welcome now says the space's limits (`space.limits`), and a
 * participant client refuses to send past them: an answer becomes an error naming the limit,
 * a request fails at once with `too_large`. A real gateway on port 0, a real bridge (over a
 * WebSocket and in-process) to a real stdio MCP server, real clients.
 */
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { ParticipantClient, ParticipantError } from "../participants/index.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { startGateway, TestClient, type TestGateway } from "./helpers.js";

const SIZED = fileURLToPath(new URL("./fixtures/bridge/sized.mjs", import.meta.url));
const T = { caller: "caller-token-0001", sized: "sized-token-00002", plain: "plain-token-00003" };
const SPACE = `
space: {id: lim}
gateway:
  limits: {max_payload_bytes: 200000, max_depth: 16}
participants:
  caller: {kind: human, token: ${T.caller}}
  sized: {kind: mcp, token: ${T.sized}}
  plain: {kind: service, token: ${T.plain}}
`;

let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const clients: ParticipantClient[] = [];
const raw: TestClient[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  for (const c of raw.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function space(bridgeOver: "websocket" | "in-process"): Promise<ParticipantClient> {
  gw = await startGateway(SPACE);
  const g = gw;
  bridges.push(
    await startBridge({
      id: "sized",
      server: { command: process.execPath, args: [SIZED] },
      client:
        bridgeOver === "in-process"
          ? { transport: () => connectInProcess(g.gateway.spaces.get("lim")!, "sized"), reconnect: false }
          : { url: g.url, space: "lim", token: T.sized },
    }),
  );
  const caller = await ParticipantClient.connect({ url: g.url, space: "lim", token: T.caller });
  clients.push(caller);
  return caller;
}

/** The call's outcome within 10 s: a result, an error, or "still waiting" (the bug this file is about). */
async function outcome(p: Promise<unknown>): Promise<{ result?: unknown; error?: ParticipantError | Error; waiting?: true }> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<{ waiting: true }>((resolve) => {
    timer = setTimeout(() => resolve({ waiting: true }), 10_000);
  });
  try {
    return await Promise.race([
      p.then(
        (result) => ({ result }),
        (error: Error) => ({ error }),
      ),
      waited,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The text of a tool error result (`isError`), or what came instead. */
function toolError(o: { result?: unknown; error?: Error; waiting?: true }): string {
  const r = o.result as { isError?: boolean; content?: { text?: string }[] } | undefined;
  if (r?.isError !== true) return `not a tool error: ${JSON.stringify({ ...o, error: o.error?.message }).slice(0, 300)}`;
  return r.content?.[0]?.text ?? "";
}

describe("an answer larger or deeper than the space's frames", () => {
  for (const over of ["websocket", "in-process"] as const) {
    it(`fails the call at once, naming the limit, and the next call is served (bridge over ${over})`, { timeout: 60_000 }, async () => {
      const caller = await space(over);
      const big = await outcome(caller.request("sized", "tools/call", { name: "big", arguments: { n: 300_000 } }));
      expect(big.waiting).toBeUndefined();
      // A tool's failure, as a tool error the caller's model can read.
      expect(toolError(big)).toMatch(
        /^"sized" answered tools\/call with \d+ bytes, more than a frame of the space carries \(200000 bytes: gateway\.limits\.max_payload_bytes\); it is not passed on$/,
      );

      const deep = await outcome(caller.request("sized", "tools/call", { name: "deep", arguments: { n: 40 } }));
      expect(deep.waiting).toBeUndefined();
      expect(toolError(deep)).toMatch(/answered tools\/call with an answer nested more than 14 levels deep \(gateway\.limits\.max_depth\)/);

      // Thousands deep: refused the same way, the bridge and the gateway unharmed.
      const deeper = await outcome(caller.request("sized", "tools/call", { name: "deep", arguments: { n: 2000 } }));
      expect(toolError(deeper)).toMatch(/nested more than 14 levels deep/);

      // Just inside both limits: passed whole.
      const fits = (await caller.request("sized", "tools/call", { name: "big", arguments: { n: 150_000 } })) as {
        content: { text: string }[];
      };
      expect(fits.content[0]!.text).toHaveLength(150_000);
      const nested = (await caller.request("sized", "tools/call", { name: "deep", arguments: { n: 8 } })) as { structuredContent: unknown };
      expect(JSON.stringify(nested.structuredContent)).toBe(`${'{"v":'.repeat(8)}{"leaf":true}${"}".repeat(8)}`);
    });
  }

  it("a participant's own handler answering too much fails its caller at once too", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE);
    const plain = await ParticipantClient.connect({ url: gw.url, space: "lim", token: T.plain });
    clients.push(plain);
    plain.onRequest(async (r) => ({ echoed: "y".repeat(Number((r.params as { n: number }).n)) }));
    const caller = await ParticipantClient.connect({ url: gw.url, space: "lim", token: T.caller });
    clients.push(caller);
    const big = await outcome(caller.request("plain", "custom/echo", { n: 250_000 }));
    expect(big.waiting).toBeUndefined();
    expect(big.error?.message).toMatch(/"plain" answered custom\/echo with \d+ bytes/);
    // Not a tool: a JSON-RPC error, with the reason and the limit.
    expect((big.error as ParticipantError).data).toMatchObject({ reason: "too_large", limit: 200000 });
    expect(await caller.request("plain", "custom/echo", { n: 10 })).toEqual({ echoed: "yyyyyyyyyy" });
  });
});

describe("a request larger than the space's frames", () => {
  it("is refused before it is sent (too_large), and nothing reaches the gateway", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE);
    const watcher = await TestClient.join(gw, "lim", T.plain);
    raw.push(watcher);
    const caller = await ParticipantClient.connect({ url: gw.url, space: "lim", token: T.caller });
    clients.push(caller);
    const errors: unknown[] = [];
    caller.on("error", (e) => errors.push(e));
    let thrown: unknown;
    try {
      await caller.request("plain", "custom/echo", { text: "z".repeat(300_000) });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ParticipantError);
    expect((thrown as ParticipantError).code).toBe("too_large");
    expect((thrown as Error).message).toMatch(/more than the space takes \(200000 bytes: gateway\.limits\.max_payload_bytes\)/);
    // A frame that fits still goes, and the watcher (visibility all) sees it, not the refused one.
    caller.notify("plain", "notifications/hello", { n: 1 });
    const seen = await watcher.next((e) => e.kind === "mcp/request" && e.payload?.method === "notifications/hello");
    expect(seen.from).toBe("caller");
    expect(watcher.received.some((e) => JSON.stringify(e).includes("zzzzzzzzzz"))).toBe(false);
    expect(errors).toEqual([]);
  });

  it("the welcome says the space's limits", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE);
    const caller = await ParticipantClient.connect({ url: gw.url, space: "lim", token: T.caller });
    clients.push(caller);
    expect(caller.welcome?.space?.limits).toEqual({ max_payload_bytes: 200000, max_depth: 16 });
  });
});
