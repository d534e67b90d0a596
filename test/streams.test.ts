/**
 * MEW v0.4 streams against a real gateway, written from the spec: negotiation, frames,
 * write rights and ownership, late joiners, targeted streams, cleanup — and frames from
 * those who may not write.
 */
import { afterEach, describe, expect, it } from "vitest";
import { errorFor, sleep, startGateway, TestClient, waitFor, type Env, type TestGateway } from "./helpers.js";

const T = { a: "a-token-1111", b: "b-token-2222", c: "c-token-3333" };
const SPACE = `
space: {id: str}
participants:
  a: {kind: human, token: ${T.a}}
  b: {kind: human, token: ${T.b}}
  c: {kind: human, token: ${T.c}}
`;

let gw: TestGateway | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function join(token: string): Promise<TestClient> {
  const c = await TestClient.join(gw!, "str", token);
  clients.push(c);
  return c;
}

async function open(owner: TestClient, id: string, payload: Record<string, unknown> = { direction: "upload" }): Promise<string> {
  owner.send({ id, kind: "stream/request", to: ["gateway"], payload });
  const opened = await owner.next((e) => e.kind === "stream/open" && e.correlation_id?.includes(id) === true);
  return opened.payload.stream_id as string;
}

const texts = (c: TestClient) => c.frames.map((f) => f.data.toString());

describe("MEW streams", () => {
  it("opens a stream on request, forwards its owner's frames to everyone, the writer too, and refuses frames from anyone else", async () => {
    gw = await startGateway(SPACE);
    const [a, b, c] = [await join(T.a), await join(T.b), await join(T.c)];
    const sid = await open(a, "r1", { direction: "upload", content_type: "application/json", format: "jsonl" });
    await b.next((e) => e.kind === "stream/open" && e.payload.stream_id === sid);
    a.ws.send(`#${sid}#{"x":1}`);
    a.ws.send(Buffer.from(`#${sid}#\u0001\u0002`), { binary: true });
    await waitFor(() => b.frames.length === 2 && c.frames.length === 2 && a.frames.length === 2, 3000, "the frames");
    expect(texts(b)[0]).toBe(`#${sid}#{"x":1}`);
    expect(b.frames[1]!.binary).toBe(true);
    // Spec §3.10.3: a broadcast stream's frames reach every participant; MEW's participants
    // confirm their own writes by hearing them.
    expect(texts(a)[0]).toBe(`#${sid}#{"x":1}`);

    // Hostile: a frame from a non-writer, and one to a stream that does not exist.
    b.ws.send(`#${sid}#forged`);
    b.ws.send("#stream-999#nothing");
    const errs = await waitFor(() => b.received.filter((e) => e.kind === "system/error").length >= 2, 3000, "the refusals").then(() =>
      b.received.filter((e) => e.kind === "system/error"),
    );
    expect(errs.map((e: Env) => e.payload.error)).toEqual(["unauthorized_stream_write", "stream_not_found"]);
    expect(errs[0]!.payload.stream_id).toBe(sid);
    await sleep(50);
    expect(texts(c).some((t) => t.includes("forged"))).toBe(false);
  });

  it("lets the owner grant and revoke write access and hand the stream over; only the owner may", async () => {
    gw = await startGateway(SPACE);
    const [a, b, c] = [await join(T.a), await join(T.b), await join(T.c)];
    const sid = await open(a, "r2");
    b.send({ id: "steal", kind: "stream/grant-write", payload: { stream_id: sid, participant_id: "b" } });
    expect((await errorFor(b, "steal")).payload.error).toBe("unauthorized");
    a.send({ id: "g", kind: "stream/grant-write", payload: { stream_id: sid, participant_id: "b" } });
    const granted = await c.next((e) => e.kind === "stream/write-granted");
    expect(granted.payload.authorized_writers).toEqual(["a", "b"]);
    b.ws.send(`#${sid}#from-b`);
    await waitFor(() => texts(c).includes(`#${sid}#from-b`), 3000, "b's frame");
    a.send({ id: "rv", kind: "stream/revoke-write", payload: { stream_id: sid, participant_id: "b" } });
    await c.next((e) => e.kind === "stream/write-revoked");
    a.send({ id: "self", kind: "stream/revoke-write", payload: { stream_id: sid, participant_id: "a" } });
    expect((await errorFor(a, "self")).payload.error).toBe("invalid_operation");
    a.send({ id: "t", kind: "stream/transfer-ownership", payload: { stream_id: sid, new_owner: "c" } });
    const moved = await b.next((e) => e.kind === "stream/ownership-transferred");
    expect(moved.payload.owner).toBe("c");
    // The new owner may close it; the old one no longer may.
    a.send({ id: "old", kind: "stream/close", payload: { stream_id: sid, reason: "complete" } });
    expect((await errorFor(a, "old")).payload.error).toBe("unauthorized");
    c.send({ id: "new", kind: "stream/close", payload: { stream_id: sid, reason: "complete" } });
    await b.next((e) => e.kind === "stream/close" && e.payload.stream_id === sid);
    c.ws.send(`#${sid}#after-close`);
    expect((await c.next((e) => e.kind === "system/error")).payload.error).toBe("stream_not_found");
  });

  it("shows open streams to late joiners with owner, writers and the request's fields, and closes a stream when its owner leaves", async () => {
    gw = await startGateway(SPACE);
    const a = await join(T.a);
    const sid = await open(a, "r3", { direction: "upload", content_type: "application/x-positions", metadata: { character: "c1" } });
    const b = await join(T.b);
    const welcome = b.received.find((e) => e.kind === "system/welcome")!;
    expect(welcome.payload.active_streams).toEqual([
      expect.objectContaining({
        stream_id: sid,
        owner: "a",
        authorized_writers: ["a"],
        direction: "upload",
        content_type: "application/x-positions",
        metadata: { character: "c1" },
      }),
    ]);
    a.ws.close();
    const closed = await b.next((e) => e.kind === "stream/close");
    expect(closed.payload).toMatchObject({ stream_id: sid, reason: "owner_left" });
    const c = await join(T.c);
    // Present and empty: MEW's clients read the list rather than test for it.
    expect(c.received.find((e) => e.kind === "system/welcome")!.payload.active_streams).toEqual([]);
  });

  it("sends a targeted stream's frames only to its targets", async () => {
    gw = await startGateway(SPACE);
    const [a, b, c] = [await join(T.a), await join(T.b), await join(T.c)];
    const sid = await open(a, "r4", { direction: "upload", target: ["b"] });
    a.ws.send(`#${sid}#for-b`);
    await waitFor(() => texts(b).includes(`#${sid}#for-b`), 3000, "b's frame");
    await sleep(50);
    // Only the targets (§3.10.3): neither a bystander nor the owner, who is not one.
    expect(c.frames).toEqual([]);
    expect(a.frames).toEqual([]);
  });
});
