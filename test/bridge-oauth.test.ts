/**
 * A remote MCP server behind OAuth, bridged into a space: mewgate signs in to it as an MCP
 * OAuth client (participants/bridge/oauth*.ts), a person consents from a card in their
 * inbox, the callback lands on the gateway, and the tokens stay encrypted in the state
 * directory. Against a real authorization server (oidc-provider) and a protected MCP server
 * of our own (test/fixtures/oauth-upstream.ts). Hostile first.
 */
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { connectInProcess } from "../gateway/space/inprocess.js";
import { runCredentials } from "../cli/credentials.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ConsentDesk, followConsent } from "../participants/bridge/oauth-consent.js";
import { CredentialVault, KEY_ENV, keyFileFor } from "../participants/bridge/oauth-vault.js";
import { ParticipantClient, type IncomingRequest } from "../participants/index.js";
import { mountHttp } from "../participants/mcp-server.js";
import { Browser, startUpstream, type Upstream } from "./fixtures/oauth-upstream.js";
import { startGateway, waitFor, type TestGateway } from "./helpers.js";

const ALICE = "alice-token-0123456789";
const BOB = "bob-token-0123456789";

let cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  cleanups = [];
});

interface Rig {
  up: Upstream;
  gw: TestGateway;
  desk: ConsentDesk;
  vault: CredentialVault;
  stateDir: string;
  base: string;
  redirectUri: string;
  logFile: string;
  alice: ParticipantClient;
  cards: IncomingRequest[];
  bridge(extra?: { consent?: "link" | "auto" }): Promise<Bridge>;
}

async function rig(oauthYaml = "", opts: { up?: Upstream; extra?: string } = {}): Promise<Rig> {
  const up = opts.up ?? (await startUpstream());
  if (!opts.up) cleanups.push(() => up.close());
  const gw = await startGateway(`
space: {id: lab}
participants:
  alice: {kind: human, token: ${ALICE}, tools: {allow: ["remote/*"]}}
  bob: {kind: human, token: ${BOB}, tools: {allow: ["remote/*"]}}
  remote: {kind: mcp, token: remote-token-0123456789, mcp: {url: "${up.url}"${oauthYaml ? `, oauth: ${oauthYaml}` : ""}}}
${opts.extra ?? ""}`);
  cleanups.push(() => gw.stop());
  const desk = new ConsentDesk();
  gw.gateway.addHttpPrefix("/oauth/callback/", desk.handler());
  const stateDir = join(gw.dir, "state");
  const vault = new CredentialVault(stateDir, {});
  cleanups.push(() => rmSync(keyFileFor(stateDir), { force: true }));
  const base = gw.url.replace(/^ws/, "http");
  const redirectUri = `${base}${ConsentDesk.path("lab")}`;
  const alice = new ParticipantClient({ url: gw.url, space: "lab", token: ALICE, reconnect: false });
  const cards: IncomingRequest[] = [];
  alice.onRequest(async (req) => {
    cards.push(req);
    return { action: "accept" };
  });
  await alice.connect();
  cleanups.push(() => alice.close());
  const logFile = join(gw.dir, "bridge.log");
  const r: Rig = {
    up,
    gw,
    desk,
    vault,
    stateDir,
    base,
    redirectUri,
    logFile,
    alice,
    cards,
    async bridge(extra = {}) {
      const space = gw.gateway.spaces.get("lab")!;
      const logger = pino({ level: "debug" }, pino.destination({ dest: logFile, sync: true, append: true }));
      const b = await startBridge({
        id: "remote",
        server: space.config.participants["remote"]!.mcp!,
        client: { transport: () => connectInProcess(space, "remote"), reconnect: false },
        oauth: { vault, desk, space: "lab", redirectUri, consent: extra.consent },
        logger,
        restart: { initialDelayMs: 50, maxDelayMs: 200 },
      });
      cleanups.push(() => b.stop());
      return b;
    },
  };
  return r;
}

/** What a person's browser does with the card's link: signs in at the authorization server and lands on the gateway. */
async function consentFromCard(r: Rig, card: IncomingRequest): Promise<Response> {
  const params = card.params as { mode: string; url: string; message: string };
  expect(params.mode).toBe("url");
  return new Browser().signIn(params.url, r.redirectUri);
}

async function callTool(c: ParticipantClient, name: string, args: Record<string, unknown> = {}): Promise<string> {
  const res = (await c.request("system:gateway", "tools/call", { name, arguments: args }, { timeoutMs: 10_000 })) as {
    content: Array<{ text: string }>;
    isError?: boolean;
  };
  return res.content[0]!.text;
}

function secretsIn(r: Rig): string[] {
  return r.vault
    .list()
    .map((l) =>
      l.subject === "client" ? r.vault.client(l.server, l.issuer)?.client_secret : r.vault.tokens(l.server, l.issuer, l.subject as "space"),
    )
    .flatMap((x) => (typeof x === "string" ? [x] : x ? [x.access_token, x.refresh_token ?? ""] : []))
    .filter((s) => s.length > 8);
}

describe("bridge OAuth: hostile first", () => {
  it("refuses protected-resource metadata that names another server, before any registration or token request", async () => {
    const up = await startUpstream();
    cleanups.push(() => up.close());
    up.hostile.resource = "http://127.0.0.1:1/elsewhere";
    const r = await rig("", { up });
    await expect(r.bridge()).rejects.toThrow(/names resource "http:\/\/127\.0\.0\.1:1\/elsewhere", not this server/);
    expect(up.counts).toEqual({ token: 0, register: 0, authorize: 0 });
    expect(r.cards).toHaveLength(0);
  });

  it("quotes a hostile resource in its refusal clipped and without control characters", async () => {
    const up = await startUpstream();
    cleanups.push(() => up.close());
    up.hostile.resource = `http://127.0.0.1:1/\u001b[2J${"x".repeat(50_000)}`;
    const r = await rig("", { up });
    const err = (await r.bridge().then(
      () => undefined,
      (e: Error) => e,
    ))!;
    expect(err.message).toMatch(/names resource .*, not this server/);
    expect(err.message).not.toContain("\u001b");
    expect(err.message.length).toBeLessThan(1000);
    expect(up.counts.register).toBe(0);
  });

  it("refuses an authorization server whose metadata names another issuer", async () => {
    const up = await startUpstream();
    cleanups.push(() => up.close());
    up.hostile.issuer = "http://127.0.0.1:2";
    const r = await rig("", { up });
    await expect(r.bridge()).rejects.toThrow(/says its issuer is "http:\/\/127\.0\.0\.1:2"; they must be the same/);
    expect(up.counts.register).toBe(0);
    expect(up.counts.token).toBe(0);
  });

  it("does not exchange a code whose authorization response names another issuer (RFC 9207), and stops after a bounded number of sign-ins", async () => {
    const up = await startUpstream();
    cleanups.push(() => up.close());
    up.hostile.iss = "http://127.0.0.1:3";
    const r = await rig("{consent: auto}", { up });
    await expect(r.bridge()).rejects.toThrow(/comes from "http:\/\/127\.0\.0\.1:3"/);
    // Three sign-ins and a last try; never a code at the token endpoint.
    expect(up.counts.token).toBe(0);
    expect(up.counts.authorize).toBeLessThanOrEqual(4);
    expect(r.vault.list().filter((l) => l.subject !== "client")).toEqual([]);
  });

  it("answers a callback with an unknown or already used state with a page that says so, and exchanges nothing", async () => {
    const r = await rig();
    const started = r.bridge();
    await waitFor(() => r.cards.length === 1, 10_000, "the sign-in card");
    const card = r.cards[0]!;
    const browser = new Browser();
    const back = await followConsent(new URL((card.params as { url: string }).url), r.redirectUri, fetch, browser.jar);
    // A forged state.
    const forged = new URL(back);
    forged.searchParams.set("state", "not-the-state");
    const f = await browser.land(forged);
    expect(f.status).toBe(400);
    const text = await f.text();
    expect(text).toMatch(/unknown or was already used/);
    expect(text).not.toContain(back.searchParams.get("code")!);
    expect(r.up.counts.token).toBe(0);
    // The real one signs in; the same one again is stale.
    expect((await browser.land(back)).status).toBe(200);
    await started;
    const replay = await browser.land(back);
    expect(replay.status).toBe(400);
    expect(await replay.text()).toMatch(/unknown or was already used/);
    // Another space's path does not finish this space's sign-ins either.
    expect((await fetch(`${r.base}/oauth/callback/other?state=x&code=y`)).status).toBe(400);
  });

  it("asks again once with a card when the refresh token is revoked at the server, without a retry loop", async () => {
    const r = await rig("{consent: link}");
    const started = r.bridge();
    await waitFor(() => r.cards.length === 1, 10_000, "the sign-in card");
    expect((await consentFromCard(r, r.cards[0]!)).status).toBe(200);
    await started;
    await waitFor(async () => (await r.alice.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    expect(await callTool(r.alice, "remote/whoami")).toBe("alice");
    // Revoked at the server: the access token is refused and the refresh token is gone.
    const held = r.vault.tokens("remote", r.up.issuer, "space")!;
    expect(held.refresh_token).toBeTruthy();
    r.up.refused.add(held.access_token);
    const rt = await r.up.provider.RefreshToken.find(held.refresh_token);
    await rt.destroy();
    const tokenBefore = r.up.counts.token;
    // Said as a sign-in needed (a caller can act on it: a structured denial at the MCP face), not a bare HTTP error.
    await expect(callTool(r.alice, "remote/whoami")).rejects.toMatchObject({
      code: "sign_in_needed",
      message: expect.stringContaining(`remote needs a sign-in at ${r.up.issuer}; a card asks the people in the space`),
    });
    await waitFor(() => r.cards.length === 2, 10_000, "the card asking again");
    expect((r.cards[1]!.params as { message: string }).message).toBe(`remote needs you to sign in at ${r.up.issuer}`);
    // One refresh attempt, then nothing more while nobody signs in.
    await new Promise((res) => setTimeout(res, 500));
    expect(r.up.counts.token - tokenBefore).toBe(1);
    expect(r.cards).toHaveLength(2);
    // Signing in again mends it.
    r.up.signInAs = "alice2";
    expect((await consentFromCard(r, r.cards[1]!)).status).toBe(200);
    await waitFor(
      async () => (await callTool(r.alice, "remote/whoami").catch(() => "")) === "alice2",
      10_000,
      "the new sign-in to be used",
    );
  });

  it("refuses headless consent for an authorization server that is not loopback", async () => {
    await expect(followConsent(new URL("https://auth.example.com/authorize?x=1"), "http://127.0.0.1:1/cb")).rejects.toThrow(
      /loopback authorization servers only/,
    );
  });

  it("says so clearly when the key file is missing at start, and decrypts nothing with a made-up key", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-vault-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const state = join(dir, "state");
    const vault = new CredentialVault(state, {});
    expect(statSync(vault.keyFile).mode & 0o777).toBe(0o600);
    expect(vault.keyFile.startsWith(`${state}/`)).toBe(false);
    vault.saveTokens("remote", "http://127.0.0.1:9", "space", {
      access_token: "at-secret-value-123",
      refresh_token: "rt-secret-value-456",
    });
    const onDisk = readFileSync(join(state, "credentials.enc"), "utf8");
    expect(onDisk).not.toContain("at-secret-value-123");
    expect(onDisk).not.toContain("rt-secret-value-456");
    // The state directory copied without its key.
    const copy = join(dir, "copy");
    rmSync(copy, { recursive: true, force: true });
    renameSync(state, copy);
    expect(() => new CredentialVault(copy, {})).toThrow(/stored credentials .* exist but their key does not/);
    expect(existsSync(keyFileFor(copy))).toBe(false);
    // Another key (in the environment): refused, not overwritten.
    const wrong = Buffer.alloc(32, 7).toString("base64");
    expect(() => new CredentialVault(copy, { [KEY_ENV]: wrong })).toThrow(/cannot decrypt/);
    expect(readFileSync(join(copy, "credentials.enc"), "utf8")).toBe(onDisk);
    // A key that is not 32 bytes.
    expect(() => new CredentialVault(copy, { [KEY_ENV]: "short" })).toThrow(/not 32 bytes/);
    // A damaged file.
    renameSync(copy, state);
    writeFileSync(join(state, "credentials.enc"), "{garbage");
    expect(() => new CredentialVault(state, {})).toThrow(/cannot decrypt/);
  });

  it("rotates the key: the old key no longer opens the data, the new one does", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-vault-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const state = join(dir, "state");
    const vault = new CredentialVault(state, {});
    vault.saveTokens("remote", "http://127.0.0.1:9", "space", { access_token: "at-1" });
    const oldKey = readFileSync(vault.keyFile, "utf8").trim();
    vault.rotateKey();
    expect(readFileSync(vault.keyFile, "utf8").trim()).not.toBe(oldKey);
    expect(new CredentialVault(state, {}).tokens("remote", "http://127.0.0.1:9", "space")?.access_token).toBe("at-1");
    expect(() => new CredentialVault(state, { [KEY_ENV]: oldKey })).toThrow(/cannot decrypt/);
    expect(vault.revoke("remote")).toBe(1);
    expect(vault.list()).toEqual([]);
  });
});

describe("bridge OAuth: signing in", () => {
  it("registers, puts a card in the person's inbox, signs in from its link, and the server's tools appear under policy; no secret reaches a participant or the log", async () => {
    const r = await rig();
    const seen: string[] = [];
    r.alice.on("envelope", (e) => seen.push(JSON.stringify(e)));
    const bob = new ParticipantClient({ url: r.gw.url, space: "lab", token: BOB, reconnect: false });
    const bobSeen: string[] = [];
    bob.onRequest(async (req) => {
      bobSeen.push(JSON.stringify(req.params));
      return { action: "decline" };
    });
    await bob.connect();
    cleanups.push(() => bob.close());
    const started = r.bridge();
    await waitFor(() => r.cards.length === 1 && bobSeen.length === 1, 10_000, "the cards");
    const card = r.cards[0]!.params as { mode: string; message: string; url: string };
    expect(card.message).toBe(`remote needs you to sign in at ${r.up.issuer}`);
    // The card carries the gateway's single-use start link, which sends the browser on to the authorization server.
    const start = new URL(card.url);
    expect(start.origin).toBe(r.base);
    expect(start.pathname).toBe("/oauth/callback/lab/start");
    const browser = new Browser();
    const opened = await browser.open(start);
    expect(opened.status).toBe(302);
    const link = new URL(opened.headers.get("location")!);
    expect(link.origin).toBe(r.up.issuer);
    expect(link.searchParams.get("code_challenge_method")).toBe("S256");
    expect(link.searchParams.get("resource")).toBe(r.up.url);
    expect(link.searchParams.get("redirect_uri")).toBe(r.redirectUri);
    expect(link.searchParams.get("scope")).toBe("mcp:tools");
    expect(link.searchParams.get("state")!.length).toBeGreaterThan(20);
    expect(r.up.counts.register).toBe(1);
    const page = await browser.signIn(start, r.redirectUri);
    expect(page.status).toBe(200);
    expect(await page.text()).toMatch(/Signed in/);
    const bridge = await started;
    expect(bridge.status).toBe("running");
    await waitFor(async () => (await r.alice.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    expect(await callTool(r.alice, "remote/whoami")).toBe("alice");
    // Step-up on 403 insufficient_scope: the call fails saying why, and a card asks for the wider scope.
    // Said as a step-up (a caller can act on it: a structured denial at the MCP face), not a bare HTTP error.
    await expect(callTool(r.alice, "remote/echo", { text: "hi" })).rejects.toMatchObject({
      code: "step_up_needed",
      message: expect.stringMatching(/remote needs a sign-in with more scope \(mcp:tools mcp:admin\)/),
    });
    await waitFor(() => r.cards.length === 2, 10_000, "the step-up card");
    const stepBrowser = new Browser();
    const stepLink = (r.cards[1]!.params as { url: string }).url;
    const stepUp = await stepBrowser.open(stepLink);
    expect(new URL(stepUp.headers.get("location")!).searchParams.get("scope")).toBe("mcp:tools mcp:admin");
    // The browser that opened it may open it again.
    expect((await stepBrowser.signIn(stepLink, r.redirectUri)).status).toBe(200);
    await waitFor(
      async () => (await callTool(r.alice, "remote/echo", { text: "hi" }).catch(() => "")) === "hi",
      10_000,
      "the wider scope to be used",
    );
    // Nothing held reaches a participant or the log.
    const secrets = secretsIn(r);
    expect(secrets.length).toBeGreaterThanOrEqual(2);
    const log = readFileSync(r.logFile, "utf8");
    for (const s of secrets) {
      expect(seen.join("\n")).not.toContain(s);
      expect(bobSeen.join("\n")).not.toContain(s);
      expect(log).not.toContain(s);
    }
    // A restart of the bridge uses the stored tokens: no card, no new registration.
    await bridge.stop();
    const again = await r.bridge();
    expect(again.status).toBe("running");
    expect(r.cards).toHaveLength(2);
    expect(r.up.counts.register).toBe(1);
  });

  it("uses a configured client and client_credentials for a service account, with no person involved", async () => {
    const up = await startUpstream();
    cleanups.push(() => up.close());
    // The secret stays out of space.yaml: a secret_file beside it.
    const r = await rig(`{grant: client_credentials, client_id: ${up.machine.id}, client_secret: {secret_file: svc.secret}}`, { up });
    writeFileSync(join(r.gw.dir, "svc.secret"), `${up.machine.secret}\n`, { mode: 0o600 });
    expect(r.gw.yaml).not.toContain(up.machine.secret);
    await r.bridge();
    await waitFor(async () => (await r.alice.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    // oidc-provider names a client-credentials token's subject by the client.
    expect(await callTool(r.alice, "remote/whoami")).toBe(up.machine.id);
    expect(r.cards).toHaveLength(0);
    expect(up.counts.register).toBe(0);
  });
});

const AGENT = "agent-token-0123456789";

describe("bridge OAuth: each person's own sign-in (as: caller)", () => {
  it("runs a call bob approved on bob's token, never alice's; refuses a call for someone not signed in, with a card to them only; shows no token to anyone", async () => {
    const r = await rig("{as: caller}", {
      extra: `  agent: {kind: agent, token: ${AGENT}, capabilities: [{kind: mcp/proposal}, {kind: mcp/request, to: [remote], payload: {method: tools/call}}]}`,
    });
    const seen: string[] = [];
    r.alice.on("envelope", (e) => seen.push(JSON.stringify(e)));
    const bob = new ParticipantClient({ url: r.gw.url, space: "lab", token: BOB, reconnect: false });
    const bobCards: IncomingRequest[] = [];
    bob.onRequest(async (req) => {
      bobCards.push(req);
      return { action: "accept" };
    });
    bob.on("envelope", (e) => seen.push(JSON.stringify(e)));
    await bob.connect();
    cleanups.push(() => bob.close());
    const agent = new ParticipantClient({ url: r.gw.url, space: "lab", token: AGENT, reconnect: false });
    agent.on("envelope", (e) => seen.push(JSON.stringify(e)));
    await agent.connect();
    cleanups.push(() => agent.close());

    // The connection (the tools list) is signed in once for the space: alice answers the card.
    const started = r.bridge();
    await waitFor(() => r.cards.length === 1 && bobCards.length === 1, 10_000, "the space's cards");
    expect((await consentFromCard(r, r.cards[0]!)).status).toBe(200);
    await started;
    await waitFor(async () => (await bob.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");

    // Bob has not signed in as himself: his call is refused at once, saying so, and a card goes to bob alone.
    await expect(callTool(bob, "remote/whoami")).rejects.toThrow(
      `remote signs in as each person (oauth as: caller), and bob has not signed in at ${r.up.issuer}; a card asks bob to sign in, then call again`,
    );
    await waitFor(() => bobCards.length === 2, 10_000, "bob's card");
    expect((bobCards[1]!.params as { message: string }).message).toBe(`remote needs you to sign in at ${r.up.issuer}`);
    expect(r.cards).toHaveLength(1);
    r.up.signInAs = "bob";
    expect((await consentFromCard(r, bobCards[1]!)).status).toBe(200);
    expect(await callTool(bob, "remote/whoami")).toBe("bob");

    // Alice's sign-in for the connection is not hers to call with: her call is refused too, her card hers only.
    await expect(callTool(r.alice, "remote/whoami")).rejects.toThrow(/and alice has not signed in at .*; a card asks alice to sign in/);
    await waitFor(() => r.cards.length === 2, 10_000, "alice's card");
    expect(bobCards).toHaveLength(2);
    r.up.signInAs = "alice";
    expect((await consentFromCard(r, r.cards[1]!)).status).toBe(200);
    expect(await callTool(r.alice, "remote/whoami")).toBe("alice");

    // The agent proposes; bob approves: the server sees bob, though alice is signed in too and the space's sign-in is hers.
    const proposed = agent.propose("remote", "tools/call", { name: "whoami", arguments: {} }, { timeoutMs: 10_000 });
    await waitFor(() => seen.some((e) => e.includes('"mcp/proposal"') && e.includes(proposed.id)), 10_000, "the proposal");
    bob.approve(proposed.id);
    expect(((await proposed) as { content: Array<{ text: string }> }).content[0]!.text).toBe("bob");

    // The agent's own unheld call acts for nobody: refused, and nobody is asked to sign in for it.
    await expect(agent.request("remote", "tools/call", { name: "whoami", arguments: {} }, { timeoutMs: 10_000 })).rejects.toThrow(
      /remote signs in as each person \(oauth as: caller\), and this tools\/call acts for nobody/,
    );
    expect(r.cards).toHaveLength(2);
    expect(bobCards).toHaveLength(2);

    // Bob's sign-in revoked at the server: his call fails saying so, a card asks bob alone, and nobody else's token stands in.
    const bobs = r.vault.tokens("remote", r.up.issuer, "caller:bob")!;
    r.up.refused.add(bobs.access_token);
    await (await r.up.provider.RefreshToken.find(bobs.refresh_token)).destroy();
    await expect(callTool(bob, "remote/whoami")).rejects.toThrow(`remote needs a sign-in at ${r.up.issuer}; a card asks bob`);
    await waitFor(() => bobCards.length === 3, 10_000, "bob's card asking again").catch((e) => {
      throw new Error(
        `${e.message}: ${bobCards.length} ${readFileSync(r.logFile, "utf8")
          .split("\n")
          .filter((l) => /card|sign/.test(l))
          .slice(-8)
          .join("\n")}`,
      );
    });
    expect(r.cards).toHaveLength(2);
    expect(r.vault.tokens("remote", r.up.issuer, "caller:bob")).toBeUndefined();
    r.up.signInAs = "bob";
    expect((await consentFromCard(r, bobCards[2]!)).status).toBe(200);
    await waitFor(async () => (await callTool(bob, "remote/whoami").catch(() => "")) === "bob", 10_000, "bob's new sign-in");

    // Each person's tokens are kept apart, and none reaches a participant or the log.
    expect(
      r.vault
        .list()
        .map((l) => l.subject)
        .filter((s) => s !== "client")
        .sort(),
    ).toEqual(["caller:alice", "caller:bob", "space"]);
    const secrets = secretsIn(r);
    expect(secrets.length).toBeGreaterThanOrEqual(3);
    const log = readFileSync(r.logFile, "utf8");
    for (const s of [...secrets, bobs.access_token, bobs.refresh_token!]) {
      expect(seen.join("\n")).not.toContain(s);
      expect(log).not.toContain(s);
    }
  });
});

describe("bridge OAuth: a sign-in needed, as a structured denial at MCP 2026-07-28", () => {
  it("a person's call over /mcp before they signed in is refused with the denial envelope; once signed in, the retry under its context id runs, another operation under it does not", async () => {
    const r = await rig("{as: caller}");
    const started = r.bridge();
    await waitFor(() => r.cards.length === 1, 10_000, "the space's card");
    expect((await consentFromCard(r, r.cards[0]!)).status).toBe(200);
    await started;
    await waitFor(async () => (await r.alice.listTools()).some((t) => t.name === "remote/whoami"), 10_000, "the tools");
    const mount = mountHttp(r.gw.gateway);
    cleanups.push(() => mount.close());
    let n = 0;
    const call = async (name: string, meta: Record<string, unknown> = {}) => {
      const res = await fetch(`${r.base}/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${BOB}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "mcp-protocol-version": "2026-07-28",
          "mcp-method": "tools/call",
          "mcp-name": name,
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: ++n,
          method: "tools/call",
          params: {
            name,
            arguments: {},
            _meta: {
              "io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" },
              "io.modelcontextprotocol/clientCapabilities": {},
              ...meta,
            },
          },
        }),
      });
      const text = await res.text();
      return JSON.parse(text.startsWith("{") ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? "{}")) as {
        result?: { content?: Array<{ text: string }>; isError?: boolean; _meta?: Record<string, any> };
        error?: { code: number; message: string; data?: Record<string, any> };
      };
    };
    // Bob, from an MCP client, has not signed in as himself: refused, with where to act and a context id.
    const refused = await call("remote__whoami");
    expect(refused.result?.isError).toBe(true);
    expect(refused.result?.content?.[0]?.text).toMatch(/bob has not signed in at/);
    const env = refused.result?._meta?.["io.modelcontextprotocol/authorization"];
    expect(env).toMatchObject({ reason: "insufficient_authorization", remediation: "available", "mewgate/why": "sign_in_needed" });
    expect(new URL(env.remediationHints[0].url).pathname).toBe("/ui/");
    const ctx = env.authorizationContextId as string;
    expect(ctx).toMatch(/^authzctx_/);
    // He comes to the space (the console the hint names): the card is his; he signs in from it.
    const bob = new ParticipantClient({ url: r.gw.url, space: "lab", token: BOB, reconnect: false });
    const bobCards: IncomingRequest[] = [];
    bob.onRequest(async (req) => {
      bobCards.push(req);
      return { action: "accept" };
    });
    await bob.connect();
    cleanups.push(() => bob.close());
    await waitFor(() => bobCards.some((c) => /sign in/.test((c.params as { message: string }).message)), 10_000, "bob's card");
    r.up.signInAs = "bob";
    expect((await consentFromCard(r, bobCards.at(-1)!)).status).toBe(200);
    // The retry echoing the id: another operation under it is refused; the same one runs, as bob.
    const CTX = "io.modelcontextprotocol/authorization-context-id";
    const other = await call("remote__echo", { [CTX]: ctx });
    expect(other.error?.data?.["reason"]).toBe("authorization_context_mismatch");
    expect((await call("remote__whoami", { [CTX]: ctx })).result?.content?.[0]?.text).toBe("bob");
  });
});

describe("bridge OAuth: space.yaml", () => {
  const parse = (mcp: string) =>
    parseSpaceConfig(`space: {id: lab}\nparticipants:\n  alice: {kind: human, token: ${ALICE}}\nmcpServers:\n  remote: ${mcp}\n`, {
      file: "/tmp/space.yaml",
      env: {},
    });

  it("refuses oauth on a command server, client_credentials without a secret, and per-caller identities it cannot keep apart", () => {
    expect(() => parse(`{command: node, oauth: {consent: auto}}`)).toThrow(/oauth: is for url: servers/);
    expect(() => parse(`{url: "http://127.0.0.1:1/mcp", oauth: {grant: client_credentials, client_id: x}}`)).toThrow(
      /needs client_id and client_secret/,
    );
    expect(() =>
      parse(`{url: "http://127.0.0.1:1/mcp", oauth: {as: caller, grant: client_credentials, client_id: x, client_secret: y}}`),
    ).toThrow(/as: caller \(each person's own sign-in\) goes with grant: authorization_code, not a service account/);
    expect((parse(`{url: "http://127.0.0.1:1/mcp", oauth: {as: caller}}`).participants["remote"]!.mcp!.oauth as { as: string }).as).toBe(
      "caller",
    );
    expect((parse(`{url: "http://127.0.0.1:1/mcp", oauth: {}}`).participants["remote"]!.mcp!.oauth as { as: string }).as).toBe("space");
    expect(() => parse(`{url: "http://127.0.0.1:1/mcp", oauth: {consent: sometimes}}`)).toThrow(/consent/);
    expect(() => parse(`{url: "http://127.0.0.1:1/mcp", oauth: {client_secret: {secret_file: ""}}}`)).toThrow(/secret/);
  });

  it("lets a url: server's bridge ask the space's people to sign in, and nothing more; not with oauth: false", () => {
    const c = parse(`{url: "http://127.0.0.1:1/mcp", oauth: {client_id: x, client_secret: {secret_file: s.txt}}}`);
    const caps = c.participants["remote"]!.capabilities;
    expect(caps).toContainEqual({ kind: "mcp/request", to: ["alice"], payload: { method: "elicitation/create" } });
    expect(
      caps.filter((x) => x.kind === "mcp/request" && (x.payload as { method?: string })?.method === "elicitation/create"),
    ).toHaveLength(1);
    expect((c.participants["remote"]!.mcp!.oauth as { client_secret: { secret_file: string } }).client_secret.secret_file).toBe(
      "/tmp/s.txt",
    );
    const off = parse(`{url: "http://127.0.0.1:1/mcp", oauth: false}`);
    expect(off.participants["remote"]!.capabilities.some((x) => (x.payload as { method?: string })?.method === "elicitation/create")).toBe(
      false,
    );
  });
});

describe("mewgate credentials", () => {
  it("lists what is held by name only, revokes a server's sign-in, and rotates the key", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mewgate-creds-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "space.yaml");
    writeFileSync(
      file,
      `space: {id: lab}\nparticipants:\n  alice: {kind: human, token: ${ALICE}}\nmcpServers:\n  remote: {url: "http://127.0.0.1:1/mcp"}\n`,
    );
    const stateDir = join(dir, "state");
    const vault = new CredentialVault(stateDir, {});
    vault.saveClient("remote", "http://127.0.0.1:9", { client_id: "cid", client_secret: "client-secret-value-1", origin: "registered" });
    vault.saveTokens("remote", "http://127.0.0.1:9", "space", {
      access_token: "access-token-value-2",
      refresh_token: "refresh-token-value-3",
      expires_at: Date.UTC(2030, 0, 1),
    });
    const run = async (action: string, server?: string, opts: Record<string, unknown> = {}) => {
      let out = "";
      let err = "";
      const io = {
        stdout: {
          write: (s: string) => {
            out += s;
            return true;
          },
        },
        stderr: {
          write: (s: string) => {
            err += s;
            return true;
          },
        },
        env: {},
      } as never;
      const code = await runCredentials(action, server, { config: file, stateDir, ...opts }, io);
      return { code, out, err };
    };
    const listed = await run("list");
    expect(listed.code).toBe(0);
    expect(listed.out).toContain("remote  http://127.0.0.1:9  space  holds access_token, refresh_token · expires 2030-01-01T00:00:00.000Z");
    expect(listed.out).toContain("client registration  holds client_id, client_secret");
    for (const s of ["client-secret-value-1", "access-token-value-2", "refresh-token-value-3"])
      expect(listed.out + (await run("list", undefined, { json: true })).out).not.toContain(s);
    expect((await run("frobnicate")).code).not.toBe(0);
    expect((await run("revoke", "remote")).out).toMatch(/forgot 1 stored credential of remote/);
    expect(vault.tokens("remote", "http://127.0.0.1:9", "space")).toBeUndefined();
    expect(vault.client("remote", "http://127.0.0.1:9")?.client_id).toBe("cid");
    const key = readFileSync(keyFileFor(stateDir), "utf8");
    expect((await run("rotate-key")).out).toMatch(/new key in/);
    expect(readFileSync(keyFileFor(stateDir), "utf8")).not.toBe(key);
    expect(new CredentialVault(stateDir, {}).client("remote", "http://127.0.0.1:9")?.client_secret).toBe("client-secret-value-1");
    // The key file gone: a clear error, exit 1, nothing decrypted.
    rmSync(keyFileFor(stateDir));
    const missing = await run("list");
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/exist but their key does not/);
  });
});
