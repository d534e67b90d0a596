/**
 * Signing in to the web console through a real OpenID provider (oidc-provider on loopback,
 * its dev login form) in a real headless Chromium. Hostile first: a replayed callback, a
 * forged state, a nonce changed on the way to the provider, a cross-site POST without the
 * CSRF value, a session cookie of one space presented to another. Then: sign in, approve,
 * sign out (the cookie stops working, the event stream ends); and an `@ops` member who is
 * not in space.yaml signs in and approves a proposal only `@ops` may decide.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { launchChromium } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { Gateway } from "../gateway/edge/server.js";
import { type Idp, startIdp } from "./fixtures/idp.js";
import { type Env, TestClient, toolOwner, waitFor } from "./helpers.js";

const T = {
  alice: "alice-static-token-1",
  agent: "agent-token-3",
  helper: "helper-token-5",
  fs: "fs-token-4444",
  bob: "bob-static-token-9",
};
const TOOLS = [
  { name: "write_file", description: "Write a file", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
];
const SECRET_ENV = { OIDC_SECRET: "console-secret-0123456789" };

function yaml(id: string, issuer: string, extra = ""): string {
  return `
space: {id: ${id}}
policy: {proposal_ttl_ms: 600000}
identity:
  issuer: ${issuer}
  client_id: mewgate-console
  client_secret_env: OIDC_SECRET
  scopes: [openid, email, groups]
  people:
    alice@example.com: alice
  groups:
    /mewgate-ops: "@ops"
  guests:
    "@ops": {tools: {allow: ["fs/*"]}}
participants:
  alice: {kind: human, token: ${id}-${T.alice}, tools: {allow: ["fs/*"]}}
  helper: {kind: agent, token: ${id}-${T.helper}, tools: {ask: ["fs/*"]}}
  agent: {kind: agent, token: ${id}-${T.agent}, tools: {ask: ["fs/*"]}, approvers: ["@ops"]}
  fs: {kind: mcp, token: ${id}-${T.fs}}
${extra}`;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

let browser: Browser;
let idp: Idp;
let gateway: Gateway;
let base: string;
let port: number;
const calls: Env[] = [];
const clients: TestClient[] = [];
let context: BrowserContext | undefined;
let evil: Server;
let evilOrigin: string;

beforeAll(async () => {
  port = await freePort();
  base = `http://127.0.0.1:${port}`;
  idp = await startIdp({
    resource: base,
    redirectUris: [`${base}/auth/callback/team`, `${base}/auth/callback/other`],
    accounts: {
      alice: { email: "alice@example.com", groups: ["staff"] },
      carol: { email: "carol@example.com", groups: ["/mewgate-ops"] },
      mallory: { email: "mallory@example.com", groups: ["staff"] },
    },
  });
  const dir = `/tmp/mewgate-idc-${process.pid}-${Date.now()}`;
  const spaces = ["team", "other", "plain"].map((id) => {
    const text = id === "plain" ? `space: {id: plain}\nparticipants:\n  bob: {kind: human, token: ${T.bob}}\n` : yaml(id, idp.issuer);
    const c = parseSpaceConfig(text, { file: `${dir}/${id}.yaml`, env: {} });
    c.gateway.state_dir = `${dir}/${id}`;
    return c;
  });
  gateway = new Gateway({ spaces, host: "127.0.0.1", port, env: SECRET_ENV });
  await gateway.listen();
  const fs = await toolOwner({ port }, "team", `team-${T.fs}`, TOOLS, {
    onCall: (env, reply) => {
      calls.push(env);
      return reply({ content: [{ type: "text", text: "written" }] });
    },
  });
  clients.push(fs);
  browser = await launchChromium();
  // A page on another loopback port: the same site as the gateway, so a SameSite=Strict cookie would go with its requests.
  evil = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(`<!doctype html><title>evil</title><script>
      window.attack = (url) => fetch(url, { method: "POST", mode: "no-cors", credentials: "include", headers: { "content-type": "text/plain" }, body: "{}" }).then(() => "sent", (e) => String(e));
    </script>`);
  });
  await new Promise<void>((r) => evil.listen(0, "127.0.0.1", r));
  evilOrigin = `http://127.0.0.1:${(evil.address() as AddressInfo).port}`;
}, 60_000);

afterAll(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await browser?.close();
  await gateway?.close();
  await idp?.close();
  evil?.closeAllConnections();
  await new Promise<void>((r) => (evil ? evil.close(() => r()) : r()));
});

afterEach(async () => {
  await context?.close();
  context = undefined;
});

async function newPage(): Promise<Page> {
  context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(8000);
  return page;
}

/** From the console's sign-in screen through the provider's dev login form and consent, back to the console. */
async function signInAs(page: Page, login: string, space = "team"): Promise<void> {
  await page.goto(`${base}/ui/#space=${space}`);
  await page.getByRole("link", { name: `Sign in to ${space} with your organisation` }).click();
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any");
  await page.getByRole("button", { name: "Sign-in" }).click();
  // The provider asks once for consent to the scopes.
  const consent = page.getByRole("button", { name: "Continue" });
  await Promise.race([consent.waitFor().then(() => consent.click()), page.locator("#conn.live").waitFor()]);
}

const atCallback = (u: URL) => u.pathname === "/auth/callback/team";

const sessionCookie = async (space = "team") => (await context!.cookies(base)).find((c) => c.name === `mewgate_session_${space}`);

function propose(c: TestClient, id: string): void {
  c.send({
    id,
    kind: "mcp/proposal",
    to: ["fs"],
    payload: { method: "tools/call", params: { name: "write_file", arguments: { path: `${id}.txt` } } },
  });
}

const pending = (id: string) =>
  gateway.spaces
    .get("team")!
    .proposals.pending()
    .some((p) => p.id === id);

describe("hostile sign-ins and sessions", () => {
  it("refuses a replayed callback and a callback with a forged state, and opens no session", async () => {
    const page = await newPage();
    let callback = "";
    page.on("request", (r) => {
      if (r.url().startsWith(`${base}/auth/callback/team?`)) callback = r.url();
    });
    await signInAs(page, "alice");
    await page.locator("#conn.live").waitFor();
    expect(callback).toContain("code=");
    // The same code and state again, in the same browser: the sign-in was used up.
    const replay = await page.goto(callback);
    expect(replay!.status()).toBe(400);
    expect(await page.locator("body").textContent()).toContain("unknown_state");
    const forged = await page.goto(callback.replace(/state=[^&]+/, "state=forged-state"));
    expect(forged!.status()).toBe(400);
    // Still one session: the one the real sign-in opened.
    expect(
      gateway.spaces
        .get("team")!
        .identity!.sessions.list()
        .filter((s) => s.identity.participant === "alice").length,
    ).toBeGreaterThanOrEqual(1);
  });

  it("refuses a sign-in whose nonce was changed on the way to the provider", async () => {
    const page = await newPage();
    // The sign-in starts at the gateway; its redirect to the provider is changed on the way (as a proxy or a hostile page could).
    const start = await fetch(`${base}/auth/login/team`, { redirect: "manual" });
    expect(start.status).toBe(302);
    const binding = /mewgate_signin_team=([^;]+)/.exec(start.headers.get("set-cookie") ?? "")![1]!;
    const to = new URL(start.headers.get("location")!);
    expect(to.searchParams.get("code_challenge_method")).toBe("S256");
    expect(to.searchParams.get("nonce")).toBeTruthy();
    to.searchParams.set("nonce", "attacker-chosen-nonce");
    await context!.addCookies([{ name: "mewgate_signin_team", value: binding, url: `${base}/auth/` }]);
    const before = gateway.spaces.get("team")!.identity!.sessions.list().length;
    await page.goto(to.href);
    // alice, whom the space would let in: only the nonce can stop her here.
    await page.locator('input[name="login"]').fill("alice");
    await page.locator('input[name="password"]').fill("any");
    await page.getByRole("button", { name: "Sign-in" }).click();
    const consent = page.getByRole("button", { name: "Continue" });
    await Promise.race([consent.waitFor().then(() => consent.click()), page.waitForURL(atCallback)]);
    await page.waitForURL(atCallback);
    expect(await page.locator("body").textContent()).toMatch(/Sign-in failed \(provider_error\).*nonce/);
    expect(gateway.spaces.get("team")!.identity!.sessions.list().length).toBe(before);
  });

  it("a page of another origin cannot approve with the person's cookie; without the CSRF value the API refuses", async () => {
    const page = await newPage();
    await signInAs(page, "alice");
    await page.locator("#conn.live").waitFor();
    const helper = await TestClient.join({ port }, "team", `team-${T.helper}`);
    clients.push(helper);
    propose(helper, "csrf-1");
    await waitFor(() => pending("csrf-1"), 5000, "the proposal");
    const evilPage = await context!.newPage();
    await evilPage.goto(`${evilOrigin}/`);
    expect(
      await evilPage.evaluate(
        (u) => (globalThis as unknown as { attack(u: string): Promise<string> }).attack(u),
        `${base}/api/spaces/team/proposals/csrf-1/approve`,
      ),
    ).toBe("sent");
    const cookie = (await sessionCookie())!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict" });
    expect(cookie.expires).toBeGreaterThan(Date.now() / 1000);
    // The same without a browser: the cookie alone is not enough to change anything.
    const res = await fetch(`${base}/api/spaces/team/proposals/csrf-1/approve`, {
      method: "POST",
      headers: { cookie: `${cookie.name}=${cookie.value}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("csrf_failed");
    expect(pending("csrf-1")).toBe(true);
    // A cookie of space "team" names nobody in space "other", under either name.
    const elsewhere = await fetch(`${base}/api/spaces/other/me`, {
      headers: { cookie: `mewgate_session_other=${cookie.value}; ${cookie.name}=${cookie.value}` },
    });
    expect(elsewhere.status).toBe(401);
    const session = await fetch(`${base}/auth/session/other`, { headers: { cookie: `mewgate_session_other=${cookie.value}` } });
    expect(((await session.json()) as { signed_in: boolean }).signed_in).toBe(false);
  });
});

describe("signed in through the provider", () => {
  it("signs in, approves from the console, and signs out: the cookie stops working and the stream ends", async () => {
    const page = await newPage();
    await signInAs(page, "alice");
    await page.locator("#conn.live").waitFor();
    expect(await page.locator("#who").textContent()).toBe("signed in as alice");
    const helper = await TestClient.join({ port }, "team", `team-${T.helper}`);
    clients.push(helper);
    propose(helper, "ok-1");
    const card = page.locator('li.card[data-id="ok-1"]');
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    const answer = await helper.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("ok-1") === true);
    expect(answer.payload.result.content[0].text).toBe("written");
    const space = gateway.spaces.get("team")!;
    expect(
      space.ledger
        .audit({})
        .some((e) => e.event === "approved" && JSON.stringify(e).includes("ok-1") && JSON.stringify(e).includes('"alice"')),
    ).toBe(true);
    expect(space.delivery.watching("alice")).toBe(true);
    const cookie = (await sessionCookie())!;
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.locator("#login").waitFor();
    expect(await page.locator("#login-error").textContent()).toBe("Signed out.");
    // Ended on the server: the stream it opened is closed, and the cookie, kept by anyone, works nowhere.
    await waitFor(() => !space.delivery.watching("alice"), 5000, "the event stream to end");
    const after = await fetch(`${base}/api/spaces/team/me`, { headers: { cookie: `${cookie.name}=${cookie.value}` } });
    expect(after.status).toBe(401);
    expect(after.headers.get("www-authenticate")).toContain("resource_metadata=");
  });

  it("an @ops member who is not in space.yaml signs in and approves a proposal only @ops may decide", async () => {
    const agent = await TestClient.join({ port }, "team", `team-${T.agent}`);
    clients.push(agent);
    propose(agent, "ops-1");
    await waitFor(() => pending("ops-1"), 5000, "the proposal");
    // alice may call the tool but is not in @ops.
    const byAlice = await fetch(`${base}/api/spaces/team/proposals/ops-1/approve`, {
      method: "POST",
      headers: { authorization: `Bearer team-${T.alice}` },
      body: "{}",
    });
    expect(((await byAlice.json()) as { error: { code: string } }).error.code).toBe("not_an_approver");
    const page = await newPage();
    await signInAs(page, "carol");
    await page.locator("#conn.live").waitFor();
    expect(await page.locator("#who").textContent()).toBe("signed in as carol.example.com");
    await page.locator('li.card[data-id="ops-1"]').getByRole("button", { name: "Approve", exact: true }).click();
    const answer = await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("ops-1") === true);
    expect(answer.payload.result.content[0].text).toBe("written");
    expect(calls.some((c) => c.payload.params.arguments.path === "ops-1.txt")).toBe(true);
  });

  it("refuses a person the provider knows but the space does not", async () => {
    const page = await newPage();
    await signInAs(page, "mallory");
    await page.waitForURL(atCallback);
    expect(await page.locator("body").textContent()).toContain("not allowed in space");
    expect(await sessionCookie()).toBeUndefined();
  });

  it("keeps the token form for a space without identity:", async () => {
    const page = await newPage();
    expect((await fetch(`${base}/auth/session/plain`)).status).toBe(404);
    await page.goto(`${base}/ui/#space=plain`);
    await page.locator("#login-form").waitFor();
    expect(await page.locator("#sso").isHidden()).toBe(true);
    await page.locator("#login-space").fill("plain");
    await page.locator("#login-token").fill(T.bob);
    await page.getByRole("button", { name: "Open" }).click();
    await page.locator("#conn.live").waitFor();
    expect(await page.locator("#who").textContent()).toBe("signed in as bob");
    expect(await page.getByRole("button", { name: "Sign out" }).isHidden()).toBe(true);
  });
});
