/**
 * Forms at the web console (MCP elicitation), in a real headless Chromium against a real
 * gateway: a person with only the console open can be asked; hostile text stays text; a
 * bad value is stopped in the browser; Accept sends typed values, Decline declines; a
 * withdrawn form leaves the page; the API answers only what was asked of the caller.
 */
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { errorFor, responseFor, startGateway, TestClient, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", bob: "bob-token-0002", asker: "asker-token-3" };
const SPACE = `
space: {id: web}
participants:
  human: {kind: human, token: ${T.human}}
  bob: {kind: human, token: ${T.bob}}
  asker: {kind: service, token: ${T.asker}, capabilities: [{kind: "mcp/request", payload: {method: "elicitation/create"}}, {kind: "mcp/request", payload: {method: "notifications/*"}}]}
`;
const XSS = `<img src=x onerror="window.__xss=1">`;

let browser: Browser;
let gw: TestGateway | undefined;
let page: Page | undefined;
const clients: TestClient[] = [];

beforeAll(async () => {
  browser = await launchChromium();
}, 30_000);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  await page?.close();
  page = undefined;
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

const ask = (id: string, params: Record<string, unknown>, to = "human") => ({
  id,
  kind: "mcp/request",
  to: [to],
  payload: { jsonrpc: "2.0", id, method: "elicitation/create", params: { ...params, _meta: { "mewgate/timeout_ms": 20_000 } } },
});

async function setup(): Promise<TestClient> {
  gw = await startGateway(SPACE);
  const asker = await TestClient.join(gw, "web", T.asker);
  clients.push(asker);
  return asker;
}

async function openConsole(): Promise<Page> {
  page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  page.setDefaultTimeout(6000);
  await openConsoleAs(page, gw!.port, "web", T.human);
  return page;
}

describe("forms at the web console", () => {
  it("refuses a person nobody can reach, and reaches one who has only the console open", async () => {
    const asker = await setup();
    // No connection, no console: nobody is there to answer.
    asker.send(ask("nobody", { message: "hi", requestedSchema: { type: "object", properties: {} } }));
    expect((await errorFor(asker, "nobody")).payload.error).toBe("target_offline");
    const p = await openConsole();
    asker.send(
      ask("f1", {
        message: `Who are you? ${XSS}`,
        requestedSchema: {
          type: "object",
          required: ["name", "age"],
          properties: {
            name: { type: "string", title: XSS },
            age: { type: "integer", minimum: 1, maximum: 120 },
            agree: { type: "boolean" },
            color: { type: "string", enum: ["red", "green"] },
          },
        },
      }),
    );
    const card = p.locator('li.card[data-request="f1"]');
    await card.waitFor();
    expect(await card.locator("h3").textContent()).toBe("asker asks you");
    expect(await card.locator(".message").textContent()).toBe(`Who are you? ${XSS}`);
    expect(await p.evaluate(() => (globalThis as unknown as { __xss?: number }).__xss)).toBeUndefined();
    expect(await card.locator("img").count()).toBe(0);
    // Out of range: the browser stops it, nothing is sent.
    await card.locator('[data-field="name"]').fill("Ada");
    await card.locator('[data-field="age"]').fill("500");
    await card.getByRole("button", { name: "Accept" }).click();
    await new Promise((r) => setTimeout(r, 300));
    expect(asker.received.some((e) => e.kind === "mcp/response" && e.correlation_id?.includes("f1"))).toBe(false);
    await card.locator('[data-field="age"]').fill("36");
    await card.locator('[data-field="agree"]').check();
    await card.locator('[data-field="color"]').selectOption("green");
    await card.getByRole("button", { name: "Accept" }).click();
    const answered = await responseFor(asker, "f1");
    expect(answered.payload.result).toEqual({ action: "accept", content: { name: "Ada", age: 36, agree: true, color: "green" } });
    await card.waitFor({ state: "detached" });
  });

  it("declines, shows an unshowable form as such, drops a withdrawn one, and answers only the caller's own", async () => {
    const asker = await setup();
    const p = await openConsole();
    asker.send(ask("f2", { message: "Second", requestedSchema: { type: "object", properties: { x: { type: "string" } } } }));
    await p.locator('li.card[data-request="f2"]').getByRole("button", { name: "Decline" }).click();
    expect((await responseFor(asker, "f2")).payload.result).toEqual({ action: "decline" });

    asker.send(ask("f3", { message: "Nested", requestedSchema: { type: "object", properties: { a: { type: "object" } } } }));
    const odd = p.locator('li.card[data-request="f3"]');
    await odd.waitFor();
    expect(await odd.locator(".why").textContent()).toMatch(/cannot be shown here/);
    expect(await odd.getByRole("button", { name: "Accept" }).count()).toBe(0);

    asker.send({
      kind: "mcp/request",
      to: ["human"],
      correlation_id: ["f3"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "f3", reason: "no longer" } },
    });
    await odd.waitFor({ state: "detached" });

    // bob cannot answer a form asked of human through the API.
    asker.send(ask("f4", { message: "Fourth", requestedSchema: { type: "object", properties: {} } }));
    await p.locator('li.card[data-request="f4"]').waitFor();
    const api = (token: string, path: string, body?: unknown) =>
      fetch(`http://127.0.0.1:${gw!.port}/api/spaces/web/${path}`, {
        method: body ? "POST" : "GET",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: body ? JSON.stringify(body) : undefined,
      });
    const listed = (await (await api(T.human, "requests")).json()) as { requests: Array<{ id: string; from: string }> };
    expect(listed.requests.map((r) => `${r.id}<${r.from}`)).toEqual(["f4<asker"]);
    const forged = await api(T.bob, "requests/f4/respond", { result: { action: "accept", content: {} } });
    expect(forged.status).toBe(404);
    const ok = await api(T.human, "requests/f4/respond", { result: { action: "cancel" } });
    expect(ok.status).toBe(200);
    expect((await responseFor(asker, "f4")).payload.result).toEqual({ action: "cancel" });
    await p.locator('li.card[data-request="f4"]').waitFor({ state: "detached" });
  });
});

describe("a link asked of someone at the console (a sign-in card)", () => {
  it("reaches them alone, keeps a very long address inside the card at 1280 and 390 px, and counts in the Inbox badge", async () => {
    const asker = await setup();
    const bob = await TestClient.join(gw!, "web", T.bob);
    clients.push(bob);
    const p = await openConsole();
    await p.setViewportSize({ width: 1280, height: 900 });
    await expect.poll(() => p.locator("#inbox-count").textContent()).toBe("0");
    const url = `https://auth.example.com/authorize?${"state=".padEnd(3000, "x")}&next=${"y".repeat(400)}`;
    asker.send(ask("signin", { mode: "url", message: "asker needs you to sign in", url, elicitationId: "e1" }));
    const card = p.locator('li.card[data-request="signin"]');
    await card.waitFor();
    await expect.poll(() => p.locator("#inbox-count").textContent()).toBe("1");
    expect(await p.title()).toMatch(/^\(1\) mewgate/);
    const overflow = async () => (await p.evaluate("document.documentElement.scrollWidth - window.innerWidth")) as number;
    expect(await overflow()).toBeLessThanOrEqual(0);
    expect(await card.locator("pre.url").textContent()).toBe(url);
    await p.setViewportSize({ width: 390, height: 844 });
    expect(await overflow()).toBeLessThanOrEqual(0);
    const box = await card.boundingBox();
    expect(box!.x + box!.width).toBeLessThanOrEqual(390);
    // A URL elicitation is its addressee's alone: bob, who sees only what names him, and nobody else got it.
    await new Promise((r) => setTimeout(r, 100));
    expect(bob.received.some((e) => e.kind === "mcp/request" && e.payload?.method === "elicitation/create")).toBe(false);
    // Answered: out of the inbox, and the badge goes back.
    await card.getByRole("button", { name: "Decline" }).click();
    expect((await responseFor(asker, "signin")).payload.result).toEqual({ action: "decline" });
    await expect.poll(() => p.locator("#inbox-count").textContent()).toBe("0");
  });
});

describe("a form asked of someone whose last console closes", () => {
  it("fails at once with target_left instead of waiting for its timeout", async () => {
    const asker = await setup();
    const events = new AbortController();
    const stream = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/web/events`, {
      headers: { authorization: `Bearer ${T.human}` },
      signal: events.signal,
    });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    await reader.read(); // the hello: the console is watching
    asker.send(ask("gone", { message: "Still there?", requestedSchema: { type: "object", properties: {} } }));
    await waitForListed("gone");
    events.abort();
    const failed = await responseFor(asker, "gone");
    expect(failed.payload.error.data).toMatchObject({ reason: "target_left" });
    expect(failed.payload.error.message).toMatch(/closed the console without answering/);
  });
});

async function waitForListed(id: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/web/requests`, { headers: { authorization: `Bearer ${T.human}` } });
    const { requests } = (await res.json()) as { requests: Array<{ id: string }> };
    if (requests.some((r) => r.id === id)) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`request ${id} was never listed`);
}
