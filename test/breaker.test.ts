/**
 * A target's circuit breaker, however its trial call ends: after five failures and the
 * cool-down, one trial call is let through; whether its caller disconnects or cancels, it
 * times out, or the target leaves, the breaker goes on working — a later call is let
 * through and succeeds once the target answers — rather than answering `circuit_open`
 * until the gateway restarts.
 */
import { afterEach, describe, expect, it } from "vitest";
import { Calls } from "../gateway/calls/calls.js";
import { type Env, errorFor, responseFor, sleep, startGateway, TestClient, type TestGateway } from "./helpers.js";

const T = { a: "breaker-a-token-1", b: "breaker-b-token-1", c: "breaker-c-token-1" };
const COOLDOWN_MS = 300;
const SPACE = `
space: {id: br}
calls: {timeout_ms: 30000, breaker_failures: 5, breaker_cooldown_ms: ${COOLDOWN_MS}}
defaults:
  capabilities: [{kind: "*"}]
participants:
  a: {kind: service, token: ${T.a}}
  b: {kind: service, token: ${T.b}}
  c: {kind: service, token: ${T.c}}
`;

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function join(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "br", token);
  clients.push(c);
  return c;
}

/** The target: answers every tools/call with an error, not at all, or with a result, as `mode` says now. */
async function target(): Promise<{ c: TestClient; mode: { now: "fail" | "hold" | "ok" } }> {
  const c = await join(T.b);
  const mode = { now: "fail" as "fail" | "hold" | "ok" };
  c.ws.on("message", (data) => {
    const env = JSON.parse(data.toString()) as Env;
    if (env.kind !== "mcp/request" || env.payload.method !== "tools/call" || mode.now === "hold") return;
    const body = mode.now === "ok" ? { result: { served: env.id } } : { error: { code: -32000, message: "broken" } };
    c.send({ kind: "mcp/response", to: [env.from], correlation_id: [env.id], payload: { jsonrpc: "2.0", id: env.payload.id, ...body } });
  });
  return { c, mode };
}

const ask = (c: TestClient, id: string, timeoutMs?: number) =>
  c.send({
    id,
    kind: "mcp/request",
    to: ["b"],
    payload: {
      jsonrpc: "2.0",
      id,
      method: "tools/call",
      params: { name: "x", ...(timeoutMs ? { _meta: { "mewgate/timeout_ms": timeoutMs } } : {}) },
    },
  });

/** Five failed calls in a row, then the circuit is open: the sixth fails fast. */
async function trip(a: TestClient, round: string): Promise<void> {
  for (let i = 1; i <= 5; i++) {
    ask(a, `${round}-f${i}`);
    expect((await responseFor(a, `${round}-f${i}`)).payload.error.message).toBe("broken");
  }
  ask(a, `${round}-open`);
  expect((await errorFor(a, `${round}-open`)).payload.code).toBe("circuit_open");
}

/** A call the target answers: let through, and its result comes back. */
async function letThrough(a: TestClient, id: string): Promise<void> {
  ask(a, id);
  const answer = await a.next((e) => e.correlation_id?.includes(id) === true && (e.kind === "mcp/response" || e.kind === "system/error"));
  expect(answer.kind === "system/error" ? answer.payload.code : "answered").toBe("answered");
  expect(answer.payload.result).toEqual({ served: id });
}

/** The cool-down is time on the gateway's clock: waiting it out (plus a margin) is a bound, not a race. */
const coolDown = () => sleep(COOLDOWN_MS + 50);

describe("the circuit breaker's trial call", () => {
  it("is let through again after the trial's caller disconnects mid-call, and after it cancels", async () => {
    gw = await startGateway(SPACE);
    const a = await join(T.a);
    const b = await target();
    await trip(a, "r1");
    await coolDown();

    // The trial: its caller goes away while the target holds it.
    b.mode.now = "hold";
    const c = await join(T.c);
    ask(c, "trial-1");
    await b.c.next((e) => e.id === "trial-1");
    // Only one trial at a time: a second call meanwhile fails fast.
    ask(a, "during-trial");
    expect((await errorFor(a, "during-trial")).payload.message).toMatch(/while a probe call is out/);
    c.ws.terminate();
    await b.c.next((e) => e.payload?.method === "notifications/cancelled" && e.correlation_id?.[0] === "trial-1");

    // The next call is the trial now, and the target answers it: the circuit is closed.
    b.mode.now = "ok";
    await letThrough(a, "after-leave");
    await letThrough(a, "closed-again");

    // Again, with the trial cancelled by its caller rather than the caller leaving.
    b.mode.now = "fail";
    await trip(a, "r2");
    await coolDown();
    b.mode.now = "hold";
    ask(a, "trial-2");
    await b.c.next((e) => e.id === "trial-2");
    a.send({
      kind: "mcp/request",
      to: ["b"],
      correlation_id: ["trial-2"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "trial-2" } },
    });
    await b.c.next((e) => e.payload?.method === "notifications/cancelled" && e.correlation_id?.[0] === "trial-2");
    b.mode.now = "ok";
    await letThrough(a, "after-cancel");
  });

  it("opens the circuit again when the trial times out, and lets the next trial through after the cool-down", async () => {
    gw = await startGateway(SPACE);
    const a = await join(T.a);
    const b = await target();
    await trip(a, "r1");
    await coolDown();
    b.mode.now = "hold";
    ask(a, "trial", 100);
    expect((await responseFor(a, "trial")).payload.error.data.reason).toBe("timeout");
    // A failed trial is a failure of the target: another cool-down.
    ask(a, "right-after");
    expect((await errorFor(a, "right-after")).payload.code).toBe("circuit_open");
    await coolDown();
    b.mode.now = "ok";
    await letThrough(a, "next-trial");
    await letThrough(a, "closed");
  });

  it("opens the circuit again when the target leaves during the trial, and lets a call through once it is back and cooled down", async () => {
    gw = await startGateway(SPACE);
    const a = await join(T.a);
    const b = await target();
    await trip(a, "r1");
    await coolDown();
    b.mode.now = "hold";
    ask(a, "trial");
    await b.c.next((e) => e.id === "trial");
    b.c.ws.terminate();
    expect((await responseFor(a, "trial")).payload.error.data.reason).toBe("target_left");
    const back = await target();
    back.mode.now = "ok";
    ask(a, "right-after");
    expect((await errorFor(a, "right-after")).payload.code).toBe("circuit_open");
    await coolDown();
    await letThrough(a, "next-trial");
    await letThrough(a, "closed");
  });
});

describe("what counts against a target", () => {
  it("never opens the circuit for a caller's own bad requests (invalid params, request, unknown method): the target answered them", async () => {
    gw = await startGateway(SPACE);
    const a = await join(T.a);
    const b = await join(T.b);
    let code = -32602;
    b.ws.on("message", (data) => {
      const env = JSON.parse(data.toString()) as Env;
      if (env.kind !== "mcp/request" || env.payload.method !== "tools/call") return;
      const body = code === 0 ? { result: { served: env.id } } : { error: { code, message: "Task not found: forged" } };
      b.send({ kind: "mcp/response", to: [env.from], correlation_id: [env.id], payload: { jsonrpc: "2.0", id: env.payload.id, ...body } });
    });
    for (const c of [-32602, -32600, -32601]) {
      code = c;
      for (let i = 1; i <= 6; i++) {
        ask(a, `bad${c}-${i}`);
        expect((await responseFor(a, `bad${c}-${i}`)).payload.error.code).toBe(c);
      }
    }
    code = 0;
    await letThrough(a, "still-served");
    // A failure of the target itself still counts: five, and the circuit opens.
    code = -32603;
    for (let i = 1; i <= 5; i++) {
      ask(a, `down-${i}`);
      expect((await responseFor(a, `down-${i}`)).payload.error.code).toBe(-32603);
    }
    ask(a, "down-open");
    expect((await errorFor(a, "down-open")).payload.code).toBe("circuit_open");
  });
});

describe("the breaker's trial in Calls, however the call is closed", () => {
  const limits = {
    timeout_ms: 30_000,
    max_timeout_ms: 300_000,
    max_call_depth: 5,
    max_pending: 64,
    breaker_failures: 5,
    breaker_cooldown_ms: 0,
  };
  let n = 0;
  const open = (calls: Calls, caller = "a") =>
    calls.open({ id: `c${++n}`, caller, target: "b", rpcId: n, method: "tools/call", chain: [caller] }, 30_000);
  function tripped(): Calls {
    const calls = new Calls(limits);
    for (let i = 0; i < 5; i++) calls.close(open(calls), false);
    return calls;
  }

  it("lets the next call be the trial after one aborted by the gateway or dropped at shutdown, and keeps the trial its own", () => {
    const calls = tripped();
    const trial = open(calls);
    expect(trial.probe).toBe(true);
    expect(calls.refuse("a", "b", ["a"])?.code).toBe("circuit_open");
    // Another call to the target meanwhile (the gateway's own tools/list skips `refuse`) is no second trial, and its end does not end the trial.
    const other = calls.open({ id: "older", caller: "c", target: "b", rpcId: 0, method: "tools/call", chain: ["c"] }, 30_000);
    expect(other.probe).toBe(false);
    calls.close(other, undefined);
    expect(calls.refuse("a", "b", ["a"])?.code).toBe("circuit_open");
    // The gateway's abort (router.ts `abort` → `cancel`) closes it as not the target's doing.
    calls.close(trial, undefined);
    expect(calls.refuse("a", "b", ["a"])).toBeUndefined();
    const next = open(calls);
    expect(next.probe).toBe(true);
    // The space shutting down drops every call, the trial with it.
    calls.clear();
    expect(calls.refuse("a", "b", ["a"])).toBeUndefined();
    calls.close(open(calls), true);
    expect(open(calls).probe).toBe(false);
  });
});
