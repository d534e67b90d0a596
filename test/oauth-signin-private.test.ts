/**
 * A sign-in is its person's alone (issue 47): the card reaches only the person it is for
 * (never an agent or a person with `visibility: all`), and the callback completes only in
 * the browser that opened the card's single-use link — not for an agent that followed it,
 * nor for another person signed in at the authorization server as themselves (login CSRF).
 * And the person gets their card wherever they are: a WebSocket connection, the web
 * console alone, an MCP client with their token. Against a real authorization server
 * (oidc-provider) and a protected MCP server (test/fixtures/oauth-upstream.ts). Hostile first.
 */
import { createHash } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { startBridge } from "../participants/bridge/bridge.js";
import { ConsentDesk } from "../participants/bridge/oauth-consent.js";
import { CredentialVault, keyFileFor } from "../participants/bridge/oauth-vault.js";
import { type IncomingRequest, ParticipantClient } from "../participants/index.js";
import { mountHttp } from "../participants/mcp-server.js";
import { Browser, startUpstream } from "./fixtures/oauth-upstream.js";
import { startGateway, waitFor } from "./helpers.js";

const T = {
  alice: "alice-token-0123456789",
  bob: "bob-token-0123456789",
  carol: "carol-token-0123456789",
  mallory: "mallory-token-0123456789",
  spy: "spy-token-0123456789",
  agent: "agent-token-0123456789",
};

let cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  cleanups = [];
});

async function rig() {
  const up = await startUpstream();
  cleanups.push(() => up.close());
  const gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${T.alice}, tools: {allow: ["remote/*"]}}
  bob: {kind: human, token: ${T.bob}, tools: {allow: ["remote/*"]}}
  carol: {kind: human, token: ${T.carol}, tools: {allow: ["remote/*"]}}
  mallory: {kind: human, token: ${T.mallory}, visibility: all, tools: {allow: ["remote/*"]}}
  spy: {kind: agent, token: ${T.spy}, visibility: all, capabilities: [{kind: chat}]}
  agent: {kind: agent, token: ${T.agent}, capabilities: [{kind: mcp/proposal}]}
  remote: {kind: mcp, token: remote-token-0123456789, mcp: {url: "${up.url}", oauth: {as: caller}}}
`);
  cleanups.push(() => gw.stop());
  const desk = new ConsentDesk();
  gw.gateway.addHttpPrefix("/oauth/callback/", desk.handler());
  const stateDir = join(gw.dir, "state");
  const vault = new CredentialVault(stateDir, {});
  cleanups.push(() => rmSync(keyFileFor(stateDir), { force: true }));
  const base = `http://127.0.0.1:${gw.port}`;
  const redirectUri = `${base}${ConsentDesk.path("lab")}`;
  const logFile = join(gw.dir, "bridge.log");
  const join_ = async (token: string, answer?: (req: IncomingRequest) => unknown) => {
    const c = new ParticipantClient({ url: gw.url, space: "lab", token, reconnect: false });
    const cards: IncomingRequest[] = [];
    const seen: string[] = [];
    c.on("envelope", (e) => seen.push(JSON.stringify(e)));
    c.onRequest(async (req) => {
      cards.push(req);
      return answer ? answer(req) : { action: "accept" };
    });
    await c.connect();
    cleanups.push(() => c.close());
    return { c, cards, seen };
  };
  const bridge = async () => {
    const space = gw.gateway.spaces.get("lab")!;
    const b = await startBridge({
      id: "remote",
      server: space.config.participants["remote"]!.mcp!,
      client: { transport: () => connectInProcess(space, "remote"), reconnect: false },
      oauth: { vault, desk, space: "lab", redirectUri },
      logger: pino({ level: "debug" }, pino.destination({ dest: logFile, sync: true, append: true })),
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    });
    cleanups.push(() => b.stop());
    return b;
  };
  const api = (token: string, path: string, init: RequestInit = {}) =>
    fetch(`${base}/api/spaces/lab/${path}`, {
      ...init,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...(init.headers ?? {}) },
    });
  return { up, gw, desk, vault, base, redirectUri, logFile, join: join_, bridge, api };
}

type Rig = Awaited<ReturnType<typeof rig>>;

async function callTool(c: ParticipantClient, name: string): Promise<string> {
  const res = (await c.request("system:gateway", "tools/call", { name, arguments: {} }, { timeoutMs: 10_000 })) as {
    content: Array<{ text: string }>;
  };
  return res.content[0]!.text;
}

/** The space's own sign-in, answered by `who` (a person present). */
async function signInTheSpace(r: Rig, who: { cards: IncomingRequest[] }): Promise<void> {
  const started = r.bridge();
  await waitFor(() => who.cards.length === 1, 10_000, "the space's card");
  r.up.signInAs = "space-person";
  expect((await new Browser().signIn((who.cards[0]!.params as { url: string }).url, r.redirectUri)).status).toBe(200);
  await started;
}

const cardUrl = (req: IncomingRequest) => (req.params as { url: string }).url;

describe("a person's sign-in is theirs alone: hostile first", () => {
  it("shows bob's card to bob only; refuses the callback to an agent or a person who is not bob's browser, exchanging nothing; bob's own completes", async () => {
    const r = await rig();
    const alice = await r.join(T.alice);
    const bob = await r.join(T.bob);
    const mallory = await r.join(T.mallory, () => ({ action: "decline" }));
    const spy = await r.join(T.spy);
    await signInTheSpace(r, alice);
    await waitFor(async () => (await bob.c.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    // The space's card went to the people, and never to the agent watching everything.
    expect(spy.cards).toHaveLength(0);
    const asks = (seen: string[]) =>
      seen.filter((e) => {
        const env = JSON.parse(e) as { kind: string; payload?: { method?: string } };
        return env.kind === "mcp/request" && env.payload?.method === "elicitation/create";
      });
    expect(asks(spy.seen)).toEqual([]);

    // Bob calls before signing in: refused, and a card asks bob alone.
    const mallorysCards = mallory.cards.length;
    await expect(callTool(bob.c, "remote/whoami")).rejects.toThrow(/bob has not signed in at .*; a card asks bob to sign in/);
    await waitFor(() => bob.cards.length === 2, 10_000, "bob's card");
    const link = cardUrl(bob.cards[1]!);
    expect(new URL(link).pathname).toBe("/oauth/callback/lab/start");
    await new Promise((res) => setTimeout(res, 200));
    // Nobody else saw it: not the agent with visibility all, not the person with visibility all, not alice.
    for (const other of [spy, mallory, alice]) {
      expect(other.seen.join("\n")).not.toContain(new URL(link).searchParams.get("k")!);
      expect(asks(other.seen).filter((e) => e.includes('"to":["bob"]'))).toEqual([]);
    }
    expect(mallory.cards).toHaveLength(mallorysCards);
    // Nor does the history a later welcome replays hold it.
    const late = await r.join(T.carol);
    expect(late.seen.join("\n")).not.toContain(new URL(link).searchParams.get("k")!);

    // Bob's browser opens his link: bound to it, and sent on to the authorization server.
    const bobs = new Browser();
    const opened = await bobs.open(link);
    expect(opened.status).toBe(302);
    expect(opened.headers.get("set-cookie")).toMatch(
      /^mewgate_signin_[\w-]{16}=[\w-]{43}; Path=\/oauth\/callback\/lab; Max-Age=900; HttpOnly; SameSite=Lax$/,
    );
    const authorizationUrl = new URL(opened.headers.get("location")!);
    expect(authorizationUrl.origin).toBe(r.up.issuer);
    const state = authorizationUrl.searchParams.get("state")!;

    // Mallory has the authorization URL (leaked, or an agent followed it) and signs in there as herself:
    // she lands on the gateway with bob's state and her own code. Refused, nothing exchanged.
    const tokensBefore = r.up.counts.token;
    r.up.signInAs = "mallory";
    const mallorys = new Browser();
    const forged = await mallorys.signIn(authorizationUrl, r.redirectUri);
    expect(forged.status).toBe(403);
    const text = await forged.text();
    expect(text).toMatch(/completes only for the person whose card it is/);
    expect(text).not.toContain(state);
    expect(r.up.counts.token).toBe(tokensBefore);
    expect(r.vault.tokens("remote", r.up.issuer, "caller:bob")).toBeUndefined();
    // Bob's link in mallory's browser: already opened in another.
    const second = await mallorys.open(link);
    expect(second.status).toBe(403);
    expect(await second.text()).toMatch(/already opened in another browser/);
    // A forged cookie of the right name does not pass either.
    const name = `mewgate_signin_${createHash("sha256").update(state).digest("base64url").slice(0, 16)}`;
    const withForgedCookie = await fetch(`${r.redirectUri}?state=${encodeURIComponent(state)}&code=x`, {
      headers: { cookie: `${name}=${"A".repeat(43)}` },
    });
    expect(withForgedCookie.status).toBe(403);
    // A start link that never was, or none at all.
    expect((await fetch(`${r.redirectUri}/start?k=${"B".repeat(43)}`, { redirect: "manual" })).status).toBe(400);
    expect((await fetch(`${r.redirectUri}/start`, { redirect: "manual" })).status).toBe(400);
    expect(r.up.counts.token).toBe(tokensBefore);
    // Bob still waited for nothing: his call is still refused, and acts as nobody else.
    await expect(callTool(bob.c, "remote/whoami")).rejects.toThrow(/bob has not signed in/);

    // Bob completes in his own browser (it may open his link again): his calls run as bob.
    r.up.signInAs = "bob";
    expect((await bobs.signIn(link, r.redirectUri)).status).toBe(200);
    expect(await callTool(bob.c, "remote/whoami")).toBe("bob");
    // The callback once used is stale.
    expect((await bobs.open(link)).status).toBe(400);
    // No link of anyone's reached the agent.
    expect(spy.seen.join("\n")).not.toMatch(/\/oauth\/callback\/lab\/start/);
    expect(readFileSync(r.logFile, "utf8")).not.toContain(new URL(link).searchParams.get("k")!);
  });

  it("asks a person at most once a while however many calls they make before signing in", async () => {
    const r = await rig();
    const alice = await r.join(T.alice);
    const bob = await r.join(T.bob, () => ({ action: "decline" }));
    await signInTheSpace(r, alice);
    await waitFor(async () => (await bob.c.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    const before = bob.cards.length;
    const calls = Array.from({ length: 30 }, () => callTool(bob.c, "remote/whoami").catch((e: Error) => e.message));
    const answers = await Promise.all(calls);
    expect(answers.filter((a) => !/bob has not signed in/.test(a))).toEqual([]);
    await new Promise((res) => setTimeout(res, 500));
    // Declined at once each time, and still about one card for the flood (a next one only after 2 s; a slow machine may reach it).
    expect(bob.cards.length - before).toBeGreaterThanOrEqual(1);
    expect(bob.cards.length - before).toBeLessThanOrEqual(2);
  });
});

describe("a person gets their own sign-in card wherever they are", () => {
  it("at the web console alone: the card is in their inbox (GET requests), and signing in from it works", async () => {
    const r = await rig();
    const alice = await r.join(T.alice);
    await signInTheSpace(r, alice);
    const agent = await r.join(T.agent);
    await waitFor(async () => (await agent.c.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    // Carol has only the console open (its event stream), and approves an agent's call: it acts as carol, who has not signed in.
    const events = new AbortController();
    cleanups.push(() => events.abort());
    const stream = await fetch(`${r.base}/api/spaces/lab/events`, {
      headers: { authorization: `Bearer ${T.carol}` },
      signal: events.signal,
    });
    expect(stream.status).toBe(200);
    await stream.body!.getReader().read();
    const proposals: string[] = [];
    alice.c.on("proposal", (p) => proposals.push(p.id));
    const first = agent.c.propose("remote", "tools/call", { name: "whoami", arguments: {} }, { timeoutMs: 10_000 });
    first.catch(() => {});
    await waitFor(() => proposals.length === 1, 10_000, "the proposal");
    expect((await r.api(T.carol, `proposals/${encodeURIComponent(proposals[0]!)}/approve`, { method: "POST", body: "{}" })).status).toBe(
      200,
    );
    await expect(first).rejects.toThrow(/carol has not signed in at .*; a card asks carol to sign in/);
    let listed: Array<{ id: string; from: string; method: string; params: { mode: string; url: string; message: string } }> = [];
    await waitFor(
      async () => {
        listed = ((await (await r.api(T.carol, "requests")).json()) as { requests: typeof listed }).requests;
        return listed.length === 1;
      },
      10_000,
      "carol's card in her inbox",
    );
    expect(listed[0]).toMatchObject({
      from: "remote",
      method: "elicitation/create",
      params: { mode: "url", message: `remote needs you to sign in at ${r.up.issuer}` },
    });
    // Nobody else's inbox has it.
    expect(((await (await r.api(T.alice, "requests")).json()) as { requests: unknown[] }).requests).toEqual([]);
    r.up.signInAs = "carol";
    expect((await new Browser().signIn(listed[0]!.params.url, r.redirectUri)).status).toBe(200);
    // Signed in: the card leaves her inbox by itself; her next approval runs as carol.
    await waitFor(
      async () => ((await (await r.api(T.carol, "requests")).json()) as { requests: unknown[] }).requests.length === 0,
      10_000,
      "the card to leave the inbox",
    );
    const second = agent.c.propose("remote", "tools/call", { name: "whoami", arguments: {} }, { timeoutMs: 10_000 });
    await waitFor(() => proposals.length === 2, 10_000, "the second proposal");
    await r.api(T.carol, `proposals/${encodeURIComponent(proposals[1]!)}/approve`, { method: "POST", body: "{}" });
    expect(((await second) as { content: Array<{ text: string }> }).content[0]!.text).toBe("carol");
  });

  it("with an MCP client: the card waits in their inbox, a client that takes URL elicitation is shown it once, and joining over the WebSocket later brings it", async () => {
    const r = await rig();
    const alice = await r.join(T.alice);
    await signInTheSpace(r, alice);
    const mount = mountHttp(r.gw.gateway);
    cleanups.push(() => mount.close());
    const mcp = async (token: string, elicits: boolean) => {
      const client = new Client({ name: "t", version: "1" }, { capabilities: elicits ? { elicitation: { url: {} } } : {} });
      const shown: Array<{ url?: string; message: string }> = [];
      if (elicits)
        client.setRequestHandler(ElicitRequestSchema, async (req) => {
          shown.push(req.params as { url?: string; message: string });
          return { action: "accept" };
        });
      const transport = new StreamableHTTPClientTransport(new URL(`${r.base}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      });
      await client.connect(transport);
      cleanups.push(() => client.close());
      return { client, shown };
    };
    // Carol's client takes no elicitation: the refusal says a card asks her, and it waits in her inbox.
    const carol = await mcp(T.carol, false);
    await waitFor(async () => (await carol.client.listTools()).tools.some((t) => t.name === "remote__whoami"), 10_000, "the tools");
    const refused = (await carol.client.callTool({ name: "remote__whoami", arguments: {} })) as {
      isError?: boolean;
      content: Array<{ text: string }>;
    };
    expect(refused.isError).toBe(true);
    expect(refused.content[0]!.text).toMatch(/a card asks carol to sign in/);
    await waitFor(
      async () => ((await (await r.api(T.carol, "requests")).json()) as { requests: unknown[] }).requests.length === 1,
      10_000,
      "carol's card in her inbox",
    );
    // Bob's client takes URL elicitation: shown his card once, however often he calls.
    const bob = await mcp(T.bob, true);
    await waitFor(async () => (await bob.client.listTools()).tools.some((t) => t.name === "remote__whoami"), 10_000, "bob's tools");
    for (let i = 0; i < 3; i++) await bob.client.callTool({ name: "remote__whoami", arguments: {} });
    await waitFor(() => bob.shown.length === 1, 10_000, "bob's card at his MCP client");
    await new Promise((res) => setTimeout(res, 300));
    expect(bob.shown).toHaveLength(1);
    expect(new URL(bob.shown[0]!.url!).pathname).toBe("/oauth/callback/lab/start");
    r.up.signInAs = "bob";
    expect((await new Browser().signIn(bob.shown[0]!.url!, r.redirectUri)).status).toBe(200);
    const ran = (await bob.client.callTool({ name: "remote__whoami", arguments: {} })) as { content: Array<{ text: string }> };
    expect(ran.content[0]!.text).toBe("bob");
    // Carol joins over the WebSocket afterwards: her card comes there too.
    await carol.client.close();
    const ws = await r.join(T.carol);
    await waitFor(() => ws.cards.length === 1, 10_000, "carol's card on her WebSocket").catch((e) => {
      throw new Error(
        `${e.message}\n${readFileSync(r.logFile, "utf8")
          .split("\n")
          .filter((l) => /card|sign/.test(l))
          .slice(-8)
          .join("\n")}`,
      );
    });
    expect(new URL(cardUrl(ws.cards[0]!)).pathname).toBe("/oauth/callback/lab/start");
  });
});
