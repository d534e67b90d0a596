/**
 * The console's Tools view shows what the tool rules match (policy/check.ts), in a real
 * headless Chromium against a real gateway: a typo'd rule is a warning with its line and
 * suggestion; text from space.yaml stays text, hidden characters shown; an agent sees none.
 */
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startGateway, type TestGateway } from "./helpers.js";

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
    await p.waitForFunction("document.querySelectorAll('#people li').length > 0");
    await expect.poll(() => statuses.length, { timeout: 6000 }).toBeGreaterThan(0);
    expect(statuses.every((s) => s === 403)).toBe(true);
    expect(await p.locator("#policy-heading").isHidden()).toBe(true);
    expect(await p.locator("#policy-findings li").count()).toBe(0);
  });
});
