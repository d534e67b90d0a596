/**
 * The wire facts MEW's stream scenarios check (16, stream ownership; 18, targeted streams),
 * written from those scenarios' checks against a mewgate space: clients that connect to
 * `/` with the token in a header and name the space in a join frame, confirm their own
 * writes by hearing them, and recognise a refused write by `unauthorized_stream_write`.
 * No MEW code runs here.
 */
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { sleep, startGateway, TestClient, waitFor, type Env, type TestGateway } from "./helpers.js";

const T = {
  owner: "stream-owner-tok",
  writer: "stream-writer-tk",
  verifier: "verifier-token-1",
  pub: "publisher-token1",
  agg: "aggregator-tok-1",
  obs: "observer-token-1",
};

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

/** Joins as MEW's test participants do: `GET /` with a bearer header, then `{type: "join", space, token, participantId}`. */
async function mewJoin(space: string, id: string, token: string): Promise<TestClient> {
  const c = new TestClient(new WebSocket(`ws://127.0.0.1:${gw!.port}/`, { headers: { authorization: `Bearer ${token}` } }));
  clients.push(c);
  await c.opened;
  c.send({ type: "join", space, token, participantId: id, capabilities: [] });
  await c.next((e) => e.kind === "system/welcome");
  return c;
}

const texts = (c: TestClient) => c.frames.map((f) => f.data.toString());

async function request(c: TestClient, id: string, payload: Record<string, unknown>): Promise<Env> {
  c.send({ id, kind: "stream/request", to: ["gateway"], payload });
  return c.next((e) => e.kind === "stream/open" && e.correlation_id?.includes(id) === true);
}

describe("MEW scenario 16: stream ownership", () => {
  it("confirms writes by echo, refuses a writer until granted and after revoked, and shows writers to late joiners", async () => {
    gw = await startGateway(`
space: {id: scenario-16}
participants:
  stream-owner: {kind: agent, token: ${T.owner}, capabilities: [{kind: "*"}]}
  stream-writer: {kind: agent, token: ${T.writer}, capabilities: [{kind: "*"}]}
  verifier: {kind: agent, token: ${T.verifier}, capabilities: [{kind: "*"}]}
`);
    const owner = await mewJoin("scenario-16", "stream-owner", T.owner);
    const writer = await mewJoin("scenario-16", "stream-writer", T.writer);
    const opened = await request(owner, "req-16", { direction: "upload", description: "ownership" });
    const sid = opened.payload.stream_id as string;
    expect(opened.payload.authorized_writers).toEqual(["stream-owner"]);
    // The owner publishes and hears its own frame: that is how MEW's participant confirms it.
    owner.ws.send(`#${sid}#owner-frame`);
    await waitFor(() => texts(owner).includes(`#${sid}#owner-frame`), 3000, "the owner's echo");
    // The writer may not yet: refused in the words MEW's participant recognises.
    writer.ws.send(`#${sid}#too-early`);
    const refused = await writer.next((e) => e.kind === "system/error" && e.payload.error === "unauthorized_stream_write");
    expect(refused.payload.stream_id).toBe(sid);
    owner.send({
      id: "grant-16",
      kind: "stream/grant-write",
      to: ["gateway"],
      payload: { stream_id: sid, participant_id: "stream-writer", reason: "help" },
    });
    const granted = await writer.next((e) => e.kind === "stream/write-granted");
    expect(granted.payload.authorized_writers).toEqual(["stream-owner", "stream-writer"]);
    writer.ws.send(`#${sid}#writer-frame`);
    await waitFor(
      () => texts(writer).includes(`#${sid}#writer-frame`) && texts(owner).includes(`#${sid}#writer-frame`),
      3000,
      "the writer's frame",
    );
    // A late joiner sees both writers.
    const verifier = await mewJoin("scenario-16", "verifier", T.verifier);
    const welcome = verifier.received.find((e) => e.kind === "system/welcome")!;
    expect(welcome.payload.active_streams).toEqual([
      expect.objectContaining({ stream_id: sid, owner: "stream-owner", authorized_writers: ["stream-owner", "stream-writer"] }),
    ]);
    owner.send({
      id: "revoke-16",
      kind: "stream/revoke-write",
      to: ["gateway"],
      payload: { stream_id: sid, participant_id: "stream-writer" },
    });
    await writer.next((e) => e.kind === "stream/write-revoked");
    const before = writer.received.filter((e) => e.kind === "system/error").length;
    writer.ws.send(`#${sid}#after-revoke`);
    await waitFor(() => writer.received.filter((e) => e.kind === "system/error").length > before, 3000, "the refusal after the revoke");
    await sleep(50);
    expect(texts(verifier).some((t) => t.includes("after-revoke"))).toBe(false);
    owner.send({
      id: "transfer-16",
      kind: "stream/transfer-ownership",
      to: ["gateway"],
      payload: { stream_id: sid, new_owner: "verifier" },
    });
    const moved = await verifier.next((e) => e.kind === "stream/ownership-transferred");
    expect(moved.payload).toMatchObject({ previous_owner: "stream-owner", new_owner: "verifier" });
  });
});

describe("MEW scenario 18: targeted streams", () => {
  it("delivers a targeted stream's frames to its targets only, a broadcast's to everyone, its writer too, and ignores a request's forged writers", async () => {
    gw = await startGateway(`
space: {id: scenario-18}
participants:
  publisher: {kind: agent, token: ${T.pub}, capabilities: [{kind: "*"}]}
  aggregator: {kind: agent, token: ${T.agg}, capabilities: [{kind: "*"}]}
  observer: {kind: agent, token: ${T.obs}, capabilities: [{kind: "*"}]}
`);
    const pub = await mewJoin("scenario-18", "publisher", T.pub);
    const agg = await mewJoin("scenario-18", "aggregator", T.agg);
    const obs = await mewJoin("scenario-18", "observer", T.obs);
    const targeted = await request(pub, "req-t", { direction: "upload", target: ["aggregator"], description: "positions" });
    expect(targeted.payload.target).toEqual(["aggregator"]);
    const tid = targeted.payload.stream_id as string;
    for (const n of [1, 2, 3]) pub.ws.send(`#${tid}#pos-${n}`);
    await waitFor(() => texts(agg).filter((t) => t.startsWith(`#${tid}#`)).length === 3, 3000, "the aggregator's three frames");
    await sleep(50);
    expect(texts(obs).filter((t) => t.startsWith(`#${tid}#`))).toEqual([]);

    const broadcast = await request(agg, "req-b", { direction: "upload", description: "world state" });
    expect(broadcast.payload.target).toBeUndefined();
    const bid = broadcast.payload.stream_id as string;
    agg.ws.send(`#${bid}#world`);
    await waitFor(
      () => [pub, obs, agg].every((c) => texts(c).includes(`#${bid}#world`)),
      3000,
      "the broadcast at everyone, its writer too",
    );

    // A request that names its own owner and writers changes neither.
    const forged = await request(pub, "req-m", {
      direction: "upload",
      target: ["observer"],
      owner: "attacker",
      authorized_writers: ["observer", "attacker"],
      authorizedWriters: ["observer"],
    });
    expect(forged.payload.owner).toBe("publisher");
    expect(forged.payload.authorized_writers).toEqual(["publisher"]);
    const mid = forged.payload.stream_id as string;
    obs.ws.send(`#${mid}#UNAUTHORIZED`);
    await obs.next((e) => e.kind === "system/error" && e.payload.error === "unauthorized_stream_write");
    pub.ws.send(`#${mid}#by-owner`);
    await waitFor(() => texts(obs).includes(`#${mid}#by-owner`), 3000, "the owner's frame at its target");
    expect([...texts(pub), ...texts(agg), ...texts(obs)].some((t) => t.includes("UNAUTHORIZED"))).toBe(false);
  });
});

describe("stream rights after a transfer, and a close over HTTP injection", () => {
  const yaml = (id: string) => `
space: {id: ${id}}
participants:
  stream-owner: {kind: agent, token: ${T.owner}, capabilities: [{kind: "*"}]}
  stream-writer: {kind: agent, token: ${T.writer}, capabilities: [{kind: "*"}]}
  verifier: {kind: agent, token: ${T.verifier}, capabilities: [{kind: "*"}]}
`;

  it("refuses the old owner's write after it handed the stream over, until the new owner grants it again (scenario 16)", async () => {
    gw = await startGateway(yaml("transfer-rights"));
    const owner = await mewJoin("transfer-rights", "stream-owner", T.owner);
    const verifier = await mewJoin("transfer-rights", "verifier", T.verifier);
    const opened = await request(owner, "req-t", { direction: "upload" });
    const sid = opened.payload.stream_id as string;
    owner.send({
      id: "transfer-t",
      kind: "stream/transfer-ownership",
      to: ["gateway"],
      payload: { stream_id: sid, new_owner: "verifier" },
    });
    const moved = await verifier.next((e) => e.kind === "stream/ownership-transferred");
    expect(moved.payload.authorized_writers).toEqual(["verifier"]);
    owner.ws.send(`#${sid}#old-owner-write`);
    const refused = await owner.next((e) => e.kind === "system/error" && e.payload.error === "unauthorized_stream_write");
    expect(refused.payload.stream_id).toBe(sid);
    await sleep(50);
    expect(texts(verifier).some((t) => t.includes("old-owner-write"))).toBe(false);
    // The old owner no longer holds the owner's rights either.
    owner.send({
      id: "grant-self",
      kind: "stream/grant-write",
      to: ["gateway"],
      payload: { stream_id: sid, participant_id: "stream-owner" },
    });
    await owner.next((e) => e.kind === "system/error" && e.correlation_id?.includes("grant-self") === true);
    // Granted again by the new owner, it writes.
    verifier.send({
      id: "grant-back",
      kind: "stream/grant-write",
      to: ["gateway"],
      payload: { stream_id: sid, participant_id: "stream-owner" },
    });
    await owner.next((e) => e.kind === "stream/write-granted");
    owner.ws.send(`#${sid}#granted-again`);
    await waitFor(() => texts(verifier).includes(`#${sid}#granted-again`), 3000, "the write granted again");
  });

  it("delivers a stream/close sent over HTTP injection correlated to the participant's own stream/open (scenario 12)", async () => {
    gw = await startGateway(yaml("close-http"));
    const owner = await mewJoin("close-http", "stream-owner", T.owner);
    const watcher = await mewJoin("close-http", "verifier", T.verifier);
    const opened = await request(owner, "req-h", { direction: "upload", description: "for closing" });
    const post = (body: unknown, token = T.owner, who = "stream-owner") =>
      fetch(`http://127.0.0.1:${gw!.port}/participants/${who}/messages?space=close-http`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    // Someone else's close by correlation is refused.
    const other = await post(
      { kind: "stream/close", correlation_id: [opened.id], payload: { reason: "not mine" } },
      T.verifier,
      "verifier",
    );
    expect(other.status).toBeGreaterThanOrEqual(400);
    const res = await post({ kind: "stream/close", correlation_id: [opened.id], payload: { reason: "complete" } });
    const body = (await res.json()) as Record<string, unknown>;
    expect({ status: res.status, body }).toMatchObject({ status: 200, body: { status: "accepted" } });
    const closed = await watcher.next((e) => e.kind === "stream/close" && e.from === "stream-owner");
    expect(closed.payload).toMatchObject({ stream_id: opened.payload.stream_id, reason: "complete" });
    const welcome = await mewJoin("close-http", "stream-writer", T.writer);
    expect(welcome.received.find((e) => e.kind === "system/welcome")!.payload.active_streams ?? []).toEqual([]);
  });
});
