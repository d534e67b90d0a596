/**
 * Signed decision links in notices (gateway/proposals/links.ts, operator/links.ts) against a
 * real gateway and a loopback webhook receiver: hostile first — a link altered, replayed,
 * expired, used after the arguments changed, used by someone else's session, posted without
 * the page's value — then the webhook and Slack payloads, and a decision by link.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Links } from "../gateway/proposals/links.js";
import { startGateway, TestClient, toolOwner, type TestGateway, waitFor } from "./helpers.js";

const T = { alice: "alice-token-1111", bob: "bob-token-22222", carol: "carol-token-333", agent: "agent-token-444", svc: "svc-token-55555" };
const TOOLS = [{ name: "write", inputSchema: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } } } }];

let gw: TestGateway | undefined;
let receiver: Server | undefined;
const clients: TestClient[] = [];
const cleanups: Array<() => void> = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  await new Promise<void>((r) => (receiver ? receiver.close(() => r()) : r()));
  receiver = undefined;
  for (const c of cleanups.splice(0)) c();
});

interface Hook {
  path: string;
  body: any;
}

/** A loopback HTTP server that keeps every POSTed body. */
async function webhookReceiver(): Promise<{ port: number; hooks: Hook[] }> {
  const hooks: Hook[] = [];
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      hooks.push({ path: req.url ?? "", body: JSON.parse(Buffer.concat(chunks).toString("utf8")) });
      res.writeHead(200).end("ok");
    });
  });
  await new Promise<void>((r) => receiver!.listen(0, "127.0.0.1", () => r()));
  return { port: (receiver.address() as AddressInfo).port, hooks };
}

function space(hookPort: number, publicUrl = ""): string {
  return `
space: {id: lab}
policy: {proposal_ttl_ms: 600000}
gateway:
  ${publicUrl ? `public_url: ${publicUrl}` : ""}
  notify:
    - {url: "http://127.0.0.1:${hookPort}/json", events: [proposed]}
    - {url: "http://127.0.0.1:${hookPort}/slack", format: slack, events: [proposed]}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}}
  carol: {kind: human, token: ${T.carol}, tools: {deny: ["svc/*"]}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["svc/write"]}}
  svc: {kind: mcp, token: ${T.svc}}
`;
}

async function api(token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/lab/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

/** A gateway with a tool owner and an agent; the agent proposes; resolves with the JSON notice's links. */
async function proposed(
  hookPort: number,
  hooks: Hook[],
  opts: { dir?: string; publicUrl?: string; onCall?: () => void } = {},
): Promise<{ id: string; links: Record<string, string>; agent: TestClient }> {
  gw = await startGateway(space(hookPort, opts.publicUrl), opts.dir ? { dir: opts.dir } : {});
  const owner = await toolOwner(gw, "lab", T.svc, TOOLS, opts.onCall ? { onCall: opts.onCall } : {});
  const agent = await TestClient.join(gw, "lab", T.agent);
  clients.push(owner, agent);
  await waitFor(async () => (await api(T.alice, "GET", "tools")).body.tools.length > 0, 5000, "tools");
  const id = `p-${Math.random().toString(36).slice(2)}`;
  agent.send({
    id,
    kind: "mcp/proposal",
    to: ["svc"],
    payload: { method: "tools/call", params: { name: "write", arguments: { path: "notes.txt", content: "hello" } } },
  });
  await waitFor(() => hooks.some((h) => h.path === "/json" && h.body.proposal?.id === id), 5000, "the webhook");
  const hook = hooks.find((h) => h.path === "/json" && h.body.proposal?.id === id)!;
  const links: Record<string, string> = {};
  for (const l of hook.body.links) links[l.approver] = l.url;
  return { id, links, agent };
}

/** The signed link inside a page URL. */
const token = (url: string) => new URL(url).hash.slice(1).split("&")[0]!.replace(/^t=/, "");

async function pending(id: string): Promise<boolean> {
  return (await api(T.alice, "GET", `proposals/${id}`)).status === 200;
}

describe("links that must decide nothing", () => {
  it("an altered link, another person's session, no confirmation value, and a replay all fail; the proposal stays until the one good use", async () => {
    const { port, hooks } = await webhookReceiver();
    const { id, links } = await proposed(port, hooks);
    const link = token(links["alice"]!);

    // Altered: a character of the signature, of the claims, or the claims re-encoded for bob.
    const [v, body, sig] = link.split(".");
    const flip = (s: string) => (s[5] === "A" ? `${s.slice(0, 5)}B${s.slice(6)}` : `${s.slice(0, 5)}A${s.slice(6)}`);
    const claims = JSON.parse(Buffer.from(body!, "base64url").toString());
    const forBob = Buffer.from(JSON.stringify({ ...claims, a: "bob" })).toString("base64url");
    for (const bad of [
      `${v}.${body}.${flip(sig!)}`,
      `${v}.${flip(body!)}.${sig}`,
      `${v}.${forBob}.${sig}`,
      link.slice(0, -3),
      `v2.${link.slice(3)}`,
      "",
    ]) {
      const r = await api(T.bob, "POST", "links/open", { link: bad });
      expect(r.status, bad).toBe(400);
      expect(r.body.error.code).toBe("link_invalid");
    }
    // Forwarded to bob, who may approve himself, but not with alice's link.
    const forwarded = await api(T.bob, "POST", "links/open", { link });
    expect(forwarded).toMatchObject({ status: 403, body: { error: { code: "link_not_yours" } } });
    const open = await api(T.alice, "POST", "links/open", { link });
    expect(open.status).toBe(200);
    expect(open.body.proposal).toMatchObject({ id, tool: "svc/write" });
    expect((await api(T.bob, "POST", "links/decide", { link, confirm: open.body.confirm, decision: "approve" })).body.error.code).toBe(
      "link_not_yours",
    );
    // Without the page's value, or with a made-up one: nothing.
    expect((await api(T.alice, "POST", "links/decide", { link, decision: "approve" })).body.error.code).toBe("link_unconfirmed");
    expect((await api(T.alice, "POST", "links/decide", { link, confirm: "x".repeat(43), decision: "approve" })).body.error.code).toBe(
      "link_unconfirmed",
    );
    expect(await pending(id)).toBe(true);

    const decided = await api(T.alice, "POST", "links/decide", { link, confirm: open.body.confirm, decision: "reject", text: "not now" });
    expect(decided).toMatchObject({ status: 200, body: { ok: true, state: "rejected" } });
    expect(await pending(id)).toBe(false);
    const replay = await api(T.alice, "POST", "links/decide", { link, confirm: open.body.confirm, decision: "approve" });
    expect(replay).toMatchObject({ status: 410, body: { error: { code: "link_used" } } });
    const audit = (await api(T.alice, "GET", "audit")).body.entries.find((e: any) => e.proposal === id && e.event === "rejected");
    expect(audit).toMatchObject({ by: "alice", text: "not now" });
  });

  it("an expired link decides nothing", async () => {
    const { port, hooks } = await webhookReceiver();
    const { id } = await proposed(port, hooks);
    const sp = gw!.gateway.spaces.get("lab")!;
    const p = sp.proposals.pending().find((x) => x.id === id)!;
    const old = sp.aids.links.mint(p, "alice", Date.now() - 25 * 60 * 60 * 1000);
    const r = await api(T.alice, "POST", "links/open", { link: old });
    expect(r).toMatchObject({ status: 410, body: { error: { code: "link_expired" } } });
    expect(await pending(id)).toBe(true);
  });

  it("a used link stays used after a restart, and a link made before the arguments were edited is stale", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-links-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const { port, hooks } = await webhookReceiver();
    // The owner never answers: the approved call is in flight when the gateway stops.
    const { id, links } = await proposed(port, hooks, { dir, onCall: () => {} });
    const bobLink = token(links["bob"]!);
    const aliceLink = token(links["alice"]!);
    const open = await api(T.alice, "POST", "links/open", { link: aliceLink });
    expect(open.status).toBe(200);
    // Alice's link is spent on nothing but being marked used: approved with edits in the console instead.
    const sp = gw!.gateway.spaces.get("lab")!;
    const checked = sp.aids.links.check(aliceLink);
    if (!checked.ok) throw new Error(checked.message);
    expect(sp.aids.links.use(checked.claims)).toBe(true);
    const edited = await api(T.alice, "POST", `proposals/${id}/approve`, { arguments: { path: "other.txt", content: "changed" } });
    expect(edited.status).toBe(200);
    for (const c of clients.splice(0)) c.ws.terminate();
    await gw!.gateway.close();
    hooks.length = 0;
    gw = await startGateway(space(port), { dir });
    // Interrupted, with the edited arguments: a new notice with new links.
    await waitFor(() => hooks.some((h) => h.path === "/json" && h.body.event === "proposal.interrupted"), 5000, "the interrupted notice");
    expect((await api(T.bob, "GET", `proposals/${id}`)).body.state).toBe("interrupted");
    // The used record came back from disk: the code says used, not stale.
    expect((await api(T.alice, "POST", "links/open", { link: aliceLink })).body.error.code).toBe("link_used");
    // Bob's link was made for the arguments as proposed, not as edited.
    expect((await api(T.bob, "POST", "links/open", { link: bobLink })).body.error.code).toBe("link_stale");
    const fresh = hooks
      .find((h) => h.path === "/json" && h.body.event === "proposal.interrupted")!
      .body.links.find((l: any) => l.approver === "bob").url;
    expect((await api(T.bob, "POST", "links/open", { link: token(fresh) })).status).toBe(200);
  });

  it("keeps used nonces in the state directory across instances", () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-links-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const a = new Links("lab", dir);
    const p = {
      id: "p1",
      owner: "svc",
      tool: "write",
      method: "tools/call",
      params: { arguments: { x: 1 } },
      expiresAt: Date.now() + 60_000,
    } as any;
    const link = a.mint(p, "alice");
    const c = a.check(link);
    expect(c.ok).toBe(true);
    expect(a.use((c as any).claims)).toBe(true);
    expect(a.use((c as any).claims)).toBe(false);
    const b = new Links("lab", dir);
    expect(b.check(link)).toMatchObject({ ok: false, code: "link_used" });
    // Another space's instance over the same secret does not take it.
    expect(new Links("other", dir).check(link)).toMatchObject({ ok: false, code: "link_invalid" });
  });
});

describe("notices carry links", () => {
  it("the JSON webhook lists one link per person who may decide, none carrying a token; Slack gets Block Kit url buttons", async () => {
    const { port, hooks } = await webhookReceiver();
    const { id, links } = await proposed(port, hooks, { publicUrl: "https://gw.example.com/" });
    expect(Object.keys(links).sort()).toEqual(["alice", "bob"]);
    for (const url of Object.values(links)) {
      expect(url).toMatch(/^https:\/\/gw\.example\.com\/ui\/link\.html#t=v1\./);
      for (const t of Object.values(T)) expect(url).not.toContain(t);
    }
    const json = hooks.find((h) => h.path === "/json")!.body;
    expect(json.approvers.sort()).toEqual(["alice", "bob"]);
    await waitFor(() => hooks.some((h) => h.path === "/slack"), 5000, "the Slack notice");
    const slack = hooks.find((h) => h.path === "/slack")!.body;
    expect(slack.text).toContain("agent wants to call svc/write");
    expect(slack.blocks[0]).toMatchObject({ type: "section", text: { type: "plain_text" } });
    const actions = slack.blocks.filter((b: any) => b.type === "actions");
    expect(actions).toHaveLength(2);
    for (const a of actions) {
      expect(a.elements.map((e: any) => [e.type, e.style])).toEqual([
        ["button", "primary"],
        ["button", "danger"],
      ]);
      expect(a.elements[0].url).toMatch(/^https:\/\/gw\.example\.com\/ui\/link\.html#t=v1\..*&do=approve$/);
      expect(a.elements[1].url).toMatch(/&do=reject$/);
      expect(a.elements[0].text.type).toBe("plain_text");
    }
    expect(JSON.stringify(slack)).not.toContain(T.alice);
    void id;
  });
});
