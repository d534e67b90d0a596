/**
 * The console opened at one proposal's card (`/ui/#space=S&proposal=ID`, the URL an MCP
 * client's held call points at when no one person can be given a signed link:
 * participants/mcp-server/held/held.ts), in a real headless Chromium against a real gateway.
 * Hostile first: an id that is markup or no proposal at all focuses nothing and runs nothing.
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { launchChromium } from "./fixtures/chromium.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { human: "human-token-0001", bot: "bot-token-000002", notes: "notes-token-0003" };
const SPACE = `
space: {id: dl}
policy: {proposal_ttl_ms: 600000}
participants:
  human: {kind: human, token: ${T.human}}
  bot: {kind: agent, token: ${T.bot}, tools: {ask: ["notes/*"]}}
  notes: {kind: mcp, token: ${T.notes}}
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

/** A space with `count` proposals of bot's waiting; their ids, oldest first. */
async function setup(count: number): Promise<string[]> {
  gw = await startGateway(SPACE);
  const owner = await toolOwner(gw, "dl", T.notes, [{ name: "write", inputSchema: { type: "object" } }]);
  clients.push(owner);
  const bot = await TestClient.join(gw, "dl", T.bot);
  clients.push(bot);
  const ids = Array.from({ length: count }, (_, i) => `deep-${i}`);
  for (const [i, id] of ids.entries())
    bot.send({
      id,
      kind: "mcp/proposal",
      to: ["notes"],
      payload: { method: "tools/call", params: { name: "write", arguments: { n: i } } },
    });
  await waitFor(
    async () => {
      const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/dl/proposals`, { headers: { authorization: `Bearer ${T.human}` } });
      return ((await res.json()) as { proposals: unknown[] }).proposals.length === count;
    },
    10_000,
    "the proposals",
  );
  page = await browser.newPage({ viewport: { width: 1280, height: 600 } });
  page.setDefaultTimeout(8000);
  return ids;
}

const focusedIds = () => page!.locator("#inbox li.card.focused").evaluateAll((cards) => cards.map((c) => c.getAttribute("data-id")));

describe("the console at one proposal's card", () => {
  it("an id that is markup or no proposal focuses nothing and runs nothing", { timeout: 60_000 }, async () => {
    await setup(3);
    const hostile = `"]<img src=x onerror="window.__xss=1">\u202e${"x".repeat(5000)}`;
    await page!.goto(`http://127.0.0.1:${gw!.port}/ui/#space=dl&token=${T.human}&proposal=${encodeURIComponent(hostile)}`);
    await page!.locator("#conn.live").waitFor();
    await page!.locator("#inbox li.card").nth(2).waitFor();
    expect(await focusedIds()).toEqual([]);
    expect(await page!.evaluate("window.__xss")).toBeUndefined();
    // The token left the address bar (and the deep link with it).
    expect(page!.url()).not.toContain(T.human);
  });

  it("opens at the card the URL names, focused and in view", { timeout: 60_000 }, async () => {
    const ids = await setup(12);
    const target = ids[7]!;
    await page!.goto(`http://127.0.0.1:${gw!.port}/ui/#space=dl&token=${T.human}&proposal=${encodeURIComponent(target)}`);
    await page!.locator("#conn.live").waitFor();
    await page!.locator(`#inbox li.card.focused`).waitFor();
    expect(await focusedIds()).toEqual([target]);
    const card = page!.locator(`#inbox li.card[data-id="${target}"]`);
    expect(await card.evaluate((c) => c === c.ownerDocument.activeElement)).toBe(true);
    await expect.poll(() => card.isVisible()).toBe(true);
    const box = await card.boundingBox();
    expect(box!.y + box!.height).toBeLessThanOrEqual(600 + 1);
    expect(box!.y).toBeGreaterThanOrEqual(-1);
    // The keys go on from there: j moves to the next card.
    await page!.keyboard.press("j");
    expect((await focusedIds()).length).toBe(1);
    expect(await focusedIds()).not.toEqual([target]);
  });
});
