/**
 * What the person deciding sees on a card, in a real headless Chromium against a real
 * gateway, at 1280 px and at 390 px (a phone), screenshotted to the test's temp dir:
 * "who may decide" names only those the gateway would heed and the buttons follow the
 * viewer's right (a reviewer approves, never rejects; one who may not gets none). Nothing
 * is wider than the page, and what participants wrote is drawn as text.
 */
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { tempDir } from "./fixtures/cli/harness.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = (id: string) => `${id}-token-0123456789abcdef`;
const AGENT_CAPS = `capabilities: [{kind: "mcp/approve"}, {kind: "mcp/reject"}, {kind: "mcp/request"}, {kind: "chat"}]`;
const HOSTILE = `<img src=x onerror="window.__xss=1">\u202Eexe.txt\u202C`;

let browser: Browser;
let gw: TestGateway | undefined;
const pages: Page[] = [];
const clients: TestClient[] = [];
const shots = tempDir("mewgate-card-parts-");

beforeAll(async () => {
  browser = await launchChromium();
}, 30_000);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  await Promise.all(pages.splice(0).map((p) => p.close()));
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
});

async function api(who: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/cp/${path}`, {
    method,
    headers: { authorization: `Bearer ${T(who)}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

/** The console signed in as `who`, `width` px wide. */
async function open(who: string, width = 1280): Promise<Page> {
  const page = await browser.newPage({ viewport: { width, height: width > 600 ? 900 : 844 } });
  pages.push(page);
  page.setDefaultTimeout(8000);
  await openConsoleAs(page, gw!.port, "cp", T(who));
  return page;
}

/** A full-page screenshot into the temp dir; the page must not be wider than its window. */
async function shot(page: Page, name: string): Promise<string> {
  const fits = await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);
  expect(fits, `${name}: the page scrolls sideways`).toBe(true);
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/** Every element of the inbox at most as wide as the window (its right edge inside it). */
async function nothingWider(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const w = document.documentElement.clientWidth;
    return [...document.querySelectorAll("#inbox *")]
      .filter((n) => n.getBoundingClientRect().width > 0 && n.getBoundingClientRect().right > w + 0.5)
      .map((n) => `${n.tagName.toLowerCase()}.${n.className}`);
  });
}

let n = 0;
async function propose(
  from: TestClient,
  tool: string,
  args: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const id = `c-${++n}`;
  from.send({ id, kind: "mcp/proposal", to: ["fs"], payload: { method: "tools/call", params: { name: tool, arguments: args }, ...extra } });
  await waitFor(async () => (await api("alice", "GET", `proposals/${id}`)).status === 200);
  return id;
}

const DECIDERS_SPACE = `space: {id: cp}
policy: {proposal_ttl_ms: 600000}
groups:
  reviewers: [rev]
  ops: [alice, bob, carol, helper, agent]
participants:
  alice: {kind: human, token: ${T("alice")}}
  bob: {kind: human, token: ${T("bob")}}
  carol: {kind: human, token: ${T("carol")}, tools: {deny: ["fs/*"]}}
  helper: {kind: agent, token: ${T("helper")}, ${AGENT_CAPS}, tools: {allow: ["fs/*"]}}
  rev: {kind: agent, token: ${T("rev")}, ${AGENT_CAPS}, tools: {allow: ["fs/*"]}}
  fs: {kind: mcp, token: ${T("fs")}}
  agent:
    kind: agent
    token: ${T("agent")}
    approvers: ["@ops"]
    review: {by: "@reviewers", may_approve: low}
`;

describe("who may decide, as the card says it", () => {
  it("names only those the gateway would heed, and each viewer gets the buttons of its own right", { timeout: 60_000 }, async () => {
    gw = await startGateway(DECIDERS_SPACE);
    clients.push(
      await toolOwner(gw, "cp", T("fs"), [
        { name: "write_file", inputSchema: { type: "object" }, annotations: { destructiveHint: false, openWorldHint: false } },
        { name: "delete_file", inputSchema: { type: "object" }, annotations: { destructiveHint: true } },
      ]),
    );
    const agent = await TestClient.join(gw, "cp", T("agent"));
    clients.push(agent);
    const warm = await propose(agent, "write_file", { path: "notes/a.md" });
    expect((await api("alice", "POST", `proposals/${warm}/approve`, { scope: "once" })).status).toBe(200);
    const del = await propose(agent, "delete_file", { path: "notes/all" }, { intent: HOSTILE });
    const low = await propose(agent, "write_file", { path: "notes/b.md" });
    await waitFor(async () => (await api("alice", "GET", `proposals/${low}`)).body.risk?.level === "low", 5000, "a low risk");
    expect((await api("alice", "POST", "participants/helper/disable", {})).status).toBe(200);

    // alice: both cards; helper is switched off, the reviewer only on the low one.
    const a = await open("alice");
    const high = a.locator(`#inbox li.card[data-id="${del}"]`);
    const lowCard = a.locator(`#inbox li.card[data-id="${low}"]`);
    await lowCard.waitFor();
    expect(await high.locator(".deciders").textContent()).toBe("Who may decide: alice, bob.");
    expect(await lowCard.locator(".deciders").textContent()).toBe(
      "Who may decide: alice, bob. Reviewer rev may approve it once (never reject it).",
    );
    expect(await high.getByRole("button", { name: "Reject" }).count()).toBe(1);
    expect(await a.evaluate("window.__xss")).toBeUndefined();
    await shot(a, "deciders-alice-1280");
    await a.setViewportSize({ width: 390, height: 844 });
    expect(await nothingWider(a)).toEqual([]);
    await shot(a, "deciders-alice-390");

    // carol may not make the call: no buttons, no box to tick, and the gateway's reason.
    const c = await open("carol", 390);
    const cHigh = c.locator(`#inbox li.card[data-id="${del}"]`);
    await cHigh.waitFor();
    expect(await cHigh.locator(".may-not").textContent()).toMatch(/^You cannot decide this one: you may not make this call yourself/);
    expect(await c.locator("#inbox button.approve, #inbox button.reject, #inbox input.pick").count()).toBe(0);
    expect(await c.locator("#batch button.select-low").count()).toBe(0);
    await shot(c, "deciders-carol-390");

    // The reviewer: Approve on the low card only, never Reject, Always or Edit.
    const r = await open("rev");
    const rLow = r.locator(`#inbox li.card[data-id="${low}"]`);
    await rLow.waitFor();
    expect(await rLow.locator(".actions button").allTextContents()).toEqual(["Approve", "Respond"]);
    expect(await rLow.locator(".may-only").textContent()).toBe(
      "You review agent's proposals: you may approve this one once, as proposed; never reject it.",
    );
    const rHigh = r.locator(`#inbox li.card[data-id="${del}"]`);
    expect(await rHigh.locator(".may-not").textContent()).toMatch(/rates it high; this reviewer may approve up to low/);
    expect(await rHigh.locator("button.approve").count()).toBe(0);
    // `r` on its card does nothing: the keys follow the buttons.
    await r.keyboard.press("j");
    await r.keyboard.press("j");
    expect(await r.locator("#inbox li.card.focused").getAttribute("data-id")).toBe(low);
    await r.keyboard.press("r");
    expect(await r.locator("#reject-dialog[open]").count()).toBe(0);
    await shot(r, "deciders-reviewer-1280");
    await rLow.getByRole("button", { name: "Approve", exact: true }).click();
    await waitFor(async () => (await api("alice", "GET", `proposals/${low}`)).status === 404, 5000, "the reviewer's approval to stand");
  });
});
