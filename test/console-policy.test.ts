/**
 * The console's Tools view shows what the tool rules match (policy/check.ts), in a real
 * headless Chromium against a real gateway: a typo'd rule is a warning with its line and
 * suggestion; text from space.yaml stays text, hidden characters shown; an agent sees none.
 * Beside them, the caps' use this minute (policy/caps.ts): a full one marked, an agent's own row only.
 */
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startGateway, TestClient, type TestGateway, toolCall, toolOwner } from "./helpers.js";

const T = { human: "human-token-1", helper: "helper-token-2", files: "files-token-3" };
// The second deny names a participant with a right-to-left override and markup in it.
const SPACE = `space: {id: web}
participants:
  human: {kind: human, token: ${T.human}}
  helper:
    kind: agent
    token: ${T.helper}
    tools:
      deny: ["file/write_file", "<b>x\u202Eevil</b>/run"]
      allow: ["files/*"]
  files: {kind: mcp, token: ${T.files}}
`;

let browser: Browser;
let gw: TestGateway | undefined;
let page: Page | undefined;

beforeAll(async () => {
  browser = await launchChromium();
}, 30_000);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  await page?.close();
  page = undefined;
  await gw?.stop();
  gw = undefined;
});

async function openConsole(token: string, checked?: (status: number) => void): Promise<Page> {
  page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  page.setDefaultTimeout(6000);
  page.on("response", (r) => {
    if (r.url().includes("/policy/check")) checked?.(r.status());
  });
  await openConsoleAs(page, gw!.port, "web", token);
  await page.locator('button[data-tab="people"]').click();
  return page;
}

describe("tool rule findings in the console's Tools view", () => {
  it("shows a typo'd rule as a warning with its line and suggestion, hostile text as text", async () => {
    gw = await startGateway(SPACE);
    const p = await openConsole(T.human);
    const items = p.locator("#policy-findings li");
    await items.first().waitFor();
    expect(await p.locator("#policy-heading").textContent()).toBe("Tool rules: 0 error(s), 2 warning(s)");
    const texts = await items.allTextContents();
    expect(texts[0]).toBe(
      'warning space.yaml:8:14 participants.helper.tools.deny[0]: no participant "file" in this space, so this deny rule matches nothing; did you mean "files"?',
    );
    expect(texts[1]).toContain("⟨U+202E⟩");
    expect(texts[1]).toContain("<b>x");
    expect(await p.locator("#policy-findings b").count()).toBe(0);
  });

  it("an agent's console shows no findings (they are for humans)", async () => {
    gw = await startGateway(SPACE);
    const statuses: number[] = [];
    const p = await openConsole(T.helper, (s) => statuses.push(s));
    // The console asked, was refused, and shows nothing.
    // A locator's wait, not waitForFunction's string predicate, which the console's CSP refuses to eval.
    await p.locator("#people li").first().waitFor();
    await expect.poll(() => statuses.length, { timeout: 6000 }).toBeGreaterThan(0);
    expect(statuses.every((s) => s === 403)).toBe(true);
    expect(await p.locator("#policy-heading").isHidden()).toBe(true);
    expect(await p.locator("#policy-findings li").count()).toBe(0);
  });
});

describe("the caps' use this minute in the console's Tools view", () => {
  // A cap named with markup and a right-to-left override: shown as text, the override visible.
  const CAPPED = SPACE.replace(
    "participants:",
    `caps:
  - {name: "<b>quota\u202E</b>", per: agent, calls_per_minute: 2, tools: ["files/*"]}
  - {name: spare, per: tool, calls_per_minute: 50, tools: ["files/*"], callers: [nobody]}
participants:`,
  );

  async function calls(): Promise<void> {
    const owner = await toolOwner(gw!, "web", T.files, [{ name: "read", inputSchema: { type: "object" } }]);
    const helper = await TestClient.join(gw!, "web", T.helper);
    for (const id of ["c1", "c2", "c3"]) helper.send(toolCall(id, "files", "read", {}));
    await helper.next((e) => e.kind === "system/error" && e.correlation_id?.includes("c3") === true);
    helper.close();
    owner.close();
  }

  it("a person sees each cap's use, a full one marked, hostile names as text", { timeout: 45_000 }, async () => {
    // A minute's edge between the calls and the look would empty the counts: start clear of it.
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 15_000) await new Promise((r) => setTimeout(r, left + 50));
    gw = await startGateway(CAPPED);
    await calls();
    const p = await openConsole(T.human);
    const row = p.locator("#caps li");
    await row.first().waitFor();
    expect(await row.allTextContents()).toEqual(["<b>quota⟨U+202E⟩</b> (per agent): helper 2 of 2 calls"]);
    expect(await row.first().getAttribute("class")).toContain("warning");
    expect(await p.locator("#caps-heading").textContent()).toBe("Caps this minute: <b>quota⟨U+202E⟩</b>, spare");
    expect(await p.locator("#caps b").count()).toBe(0);
  });

  it("an agent sees its own row and the caps that count it, not the others", { timeout: 45_000 }, async () => {
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 15_000) await new Promise((r) => setTimeout(r, left + 50));
    gw = await startGateway(CAPPED);
    await calls();
    const p = await openConsole(T.helper);
    await p.locator("#caps li").first().waitFor();
    expect(await p.locator("#caps-heading").textContent()).toBe("Caps this minute: <b>quota⟨U+202E⟩</b>");
    expect(await p.locator("#caps li").count()).toBe(1);
  });
});
