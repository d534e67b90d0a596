/**
 * The console's Suggestions view and a card's history hint, in a real headless Chromium
 * against a real gateway: approvals made through the API show on the next card as "you
 * approved 3 like this"; the view lists the suggested rule with its dry run, a proposer's
 * hostile argument text staying text (hidden characters shown, no markup); Accept writes the
 * rule, after which the view is empty and the agent's next call of the pattern runs directly.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = { human: "human-token-1", agent: "agent-token-2", fs: "fs-token-3" };
const SPACE = `# keep me
space: {id: sg}
participants:
  human: {kind: human, token: ${T.human}}
  agent: {kind: agent, token: ${T.agent}}
  fs: {kind: mcp, token: ${T.fs}}
`;

/** Neither destructive nor open-world: a familiar call of it can be low, and three approvals teach. */
const PLAIN = { destructiveHint: false, openWorldHint: false };
/** Where the screenshots go (printed by the test, for a person to look at). */
const shots = process.env["MEWGATE_SHOTS"] ?? mkdtempSync(join(tmpdir(), "mewgate-suggestions-"));
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

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/sg/${path}`, {
    method,
    headers: { authorization: `Bearer ${T.human}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

let n = 0;
function propose(agent: TestClient, args: Record<string, unknown>): string {
  const id = `c-${++n}`;
  agent.send({ id, kind: "mcp/proposal", to: ["fs"], payload: { method: "tools/call", params: { name: "write_file", arguments: args } } });
  return id;
}

describe("the console's Suggestions view", () => {
  it("a card says how often you approved calls like it; the view shows the rule and its dry run as text; Accept writes it", async () => {
    gw = await startGateway(SPACE);
    clients.push(await toolOwner(gw, "sg", T.fs, [{ name: "write_file", inputSchema: { type: "object" }, annotations: PLAIN }]));
    const agent = await TestClient.join(gw, "sg", T.agent);
    clients.push(agent);
    // The content carries markup and a right-to-left override: it must stay text.
    // The title, the same each time, is held exactly: the view names it, the override made visible.
    for (const x of ["a", "b", "c"]) {
      const id = propose(agent, { path: `notes/${x}.md`, content: `<img src=x onerror=alert(1)> ${x}`, title: "\u202Ereport" });
      await waitFor(async () => (await api("GET", `proposals/${id}`)).status === 200);
      expect((await api("POST", `proposals/${id}/approve`, { scope: "once" })).status).toBe(200);
    }
    // Its title carries the override too: the card says so, and shows no "you approved 3 like this" (its risk speaks instead).
    const pending = propose(agent, { path: "notes/d.md", content: "d", title: "\u202Ereport" });
    // One without it has its history; a card's history follows the trail within a second (learn-api.ts).
    const familiar = propose(agent, { path: "notes/g.md", content: "g", title: "report" });
    await waitFor(async () => (await api("GET", `proposals/${familiar}`)).body.like_this?.approved === 3, 5000, "the card's history");
    const odd = (await api("GET", `proposals/${pending}`)).body;
    expect(odd.like_this).toBeUndefined();
    expect(odd.risk.reasons.map((r: any) => r.code)).toContain("control");
    page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    page.setDefaultTimeout(6000);
    await openConsoleAs(page, gw.port, "sg", T.human);
    const hint = page.locator(`#inbox li.card[data-id="${familiar}"] .like-this`);
    await hint.waitFor();
    expect(await hint.textContent()).toBe("History: you approved 3 like this.");
    await page.locator('button[data-tab="suggestions"]').click();
    const card = page.locator("#suggestions li.suggestion");
    await card.waitFor();
    expect(await card.getAttribute("data-kind")).toBe("allow");
    // How people decide, drawn small under the suggestions: three approvals, none after opening a preview.
    const person = page.locator('#fatigue li[data-person="human"]');
    await person.waitFor();
    expect(await person.textContent()).toMatch(
      /^human: 3 decision\(s\), [\d.]+\/h, median [\d.]+ s; approved within 2 s unopened: \d of 3 $/,
    );
    expect(await person.locator("meter").count()).toBe(1);
    const whole = (await card.textContent()) ?? "";
    expect(whole).toContain("human approved 3 call(s) of fs/write_file by agent like this");
    // Words first: what it lets through, field by field; the rule as written only when opened.
    expect(await card.locator("h3").textContent()).toMatch(/^agent may call fs\/write_file without asking, only as follows$/);
    expect(whole).toContain("path: path is a .md file directly in notes/ (seen 3 times); nothing hidden or secret-like");
    expect(whole).toMatch(/content: any text without secrets, shell syntax, URLs or sensitive paths/);
    expect(await card.locator("details.rule code").isVisible()).toBe(false);
    expect(whole).toContain("proposal → direct: 4 recorded call(s) — 3 approved, 0 rejected by a person");
    expect(whole).toContain('title is "⟨U+202E⟩report"');
    await card.locator("details:not(.rule) summary").click();
    expect(await card.locator("details:not(.rule) li").first().textContent()).toContain("<img src=x onerror=alert(1)> a");
    expect(await page.locator("#suggestions img").count()).toBe(0);
    // Looked at, desktop and phone: the words wrap, nothing is wider than the page.
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.screenshot({ path: join(shots, `suggestions-${width}.png`), fullPage: true });
      const over = (await page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")) as number;
      expect(over, `horizontal overflow at ${width} px`).toBeLessThanOrEqual(0);
    }
    await page.setViewportSize({ width: 1100, height: 900 });
    await card.locator("button.approve").click();
    await page.locator("#suggestions-note", { hasText: /^No suggestions from \d+ recorded call/ }).waitFor();
    expect(await page.locator("#suggestions li.suggestion").count()).toBe(0);
    const yaml = readFileSync(join(gw.dir, "space.yaml"), "utf8");
    expect(yaml.startsWith("# keep me\n")).toBe(true);
    expect(yaml).toContain("allow:");
    // The pending one is still a proposal (someone still decides it); the next runs directly.
    expect((await api("GET", `proposals/${pending}`)).status).toBe(200);
    const id = `d-${++n}`;
    agent.send({
      id,
      kind: "mcp/request",
      to: ["fs"],
      payload: {
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: { name: "write_file", arguments: { path: "notes/e.md", content: "e", title: "\u202Ereport" } },
      },
    });
    const answer = await agent.next(
      (e) => e.correlation_id?.includes(id) === true && (e.kind === "mcp/response" || e.kind === "system/error"),
    );
    expect(answer.kind).toBe("mcp/response");
  });

  it("the inbox puts the risky first, each reason shown; the low-risk ones are approved together, each recorded on its own", async () => {
    gw = await startGateway(SPACE);
    clients.push(
      await toolOwner(gw, "sg", T.fs, [
        { name: "write_file", inputSchema: { type: "object" }, annotations: PLAIN },
        { name: "delete_file", inputSchema: { type: "object" }, annotations: { destructiveHint: true } },
      ]),
    );
    const agent = await TestClient.join(gw, "sg", T.agent);
    clients.push(agent);
    for (const x of ["a", "b", "c"]) {
      const id = propose(agent, { path: `notes/${x}.md`, content: x });
      await waitFor(async () => (await api("GET", `proposals/${id}`)).status === 200);
      expect((await api("POST", `proposals/${id}/approve`, { scope: "once" })).status).toBe(200);
    }
    const low1 = propose(agent, { path: "notes/d.md", content: "d" });
    const low2 = propose(agent, { path: "notes/e.md", content: "e" });
    const id = `x-${++n}`;
    agent.send({
      id,
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "delete_file", arguments: { path: "notes/a.md" } } },
    });
    await waitFor(async () => (await api("GET", "proposals")).body.proposals.length === 3);
    await waitFor(
      async () => (await api("GET", `proposals/${low1}`)).body.risk?.level === "low",
      5000,
      "the card's risk to follow the trail",
    );
    page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    page.setDefaultTimeout(6000);
    await openConsoleAs(page, gw.port, "sg", T.human);
    await page.locator("#inbox li.card .risk").nth(2).waitFor();
    expect(await page.locator("#inbox li.card .risk").evaluateAll((xs) => xs.map((x) => x.getAttribute("data-risk")))).toEqual([
      "high",
      "low",
      "low",
    ]);
    expect(await page.locator("#inbox li.card").first().getAttribute("data-id")).toBe(id);
    expect(await page.locator("#inbox li.card .risk").first().textContent()).toMatch(
      /^Risk: high — fs\/delete_file says it is destructive; fs\/delete_file may reach outside the space \(open-world\); the first call of fs\/delete_file by agent\.$/,
    );
    await page.locator("button.select-low").click();
    await page.locator("#batch button.approve", { hasText: "Approve 2" }).click();
    await waitFor(async () => (await api("GET", "proposals")).body.proposals.length === 1);
    const audit = (await api("GET", "audit")).body.entries.filter(
      (e: any) => e.event === "approved" && (e.proposal === low1 || e.proposal === low2),
    );
    expect(audit.map((e: any) => e.proposal).sort()).toEqual([low1, low2].sort());
    expect((await api("GET", "proposals")).body.proposals[0].id).toBe(id);
  });
});
