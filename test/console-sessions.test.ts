/**
 * The console's Sessions tab in real headless Chromium against a real gateway: an operator
 * sees who is connected and from where and ends a session (the member is closed with 4413);
 * a participant that is not an operator sees none of it.
 */
import type { Browser, Page } from "playwright-core";
import { launchChromium } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startGateway, TestClient, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", agent: "agent-token-3" };
const SPACE = `
space: {id: web}
participants:
  human: {kind: human, token: ${T.human}}
  agent: {kind: agent, token: ${T.agent}}
`;

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

async function open(token: string): Promise<Page> {
  gw ??= await startGateway(SPACE);
  page = await browser.newPage();
  page.setDefaultTimeout(8000);
  await page.goto(`http://127.0.0.1:${gw.port}/ui/#space=web&token=${token}`);
  await page.locator("#app").waitFor();
  await page.getByRole("button", { name: "Sessions" }).click();
  return page;
}

describe("the console's sessions", () => {
  it("is nothing to a participant that is not an operator", async () => {
    gw = await startGateway(SPACE);
    const p = await open(T.agent);
    await p.getByText("Only an operator sees the sessions.").waitFor();
    expect(await p.locator("#sessions li").count()).toBe(0);
  });

  it("shows an operator who is connected from where, and ends a session", async () => {
    gw = await startGateway(SPACE);
    const agent = await TestClient.join(gw, "web", T.agent);
    clients.push(agent);
    const p = await open(T.human);
    const row = p.locator('#sessions li[data-participant="agent"]');
    await row.waitFor();
    expect(await row.textContent()).toMatch(/^agent \(agent\) from 127\.0\.0\.1 since \d{4}-\d\d-\d\dT.*token sha256:[0-9a-f]{12}/);
    expect(await p.locator("body").textContent()).not.toContain(T.agent);
    await row.getByRole("button", { name: "End the session of agent" }).click();
    expect(await agent.closed).toEqual({ code: 4413, reason: "your session was ended by human" });
    await row.waitFor({ state: "detached" });
  });
});
