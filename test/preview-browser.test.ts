/**
 * Previews and decision links in a real headless Chromium against a real gateway and a real
 * server-filesystem over files that exist: the console card shows the diff (participant
 * text as text), a refused preview says so and leaves the buttons alone, and a link from a
 * webhook opens its page, asks for the person's sign-in, and approves from there — once.
 * The card with its diff is screenshotted to the temp dir (and docs/ with UPDATE_SCREENSHOTS=1).
 */
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { launchChromium, signInToLink } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ROOT, tempDir } from "./fixtures/cli/harness.js";
import { startGateway, TestClient, type TestGateway, waitFor } from "./helpers.js";

const require = createRequire(import.meta.url);
const FILESYSTEM = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const T = { alice: "alice-token-1111", bob: "bob-token-22222", agent: "agent-token-333", fs: "fs-token-444444" };

let browser: Browser;
let gw: TestGateway | undefined;
let page: Page | undefined;
let receiver: Server | undefined;
const clients: TestClient[] = [];
const bridges: Bridge[] = [];
const cleanups: Array<() => void> = [];
const shots = tempDir("mewgate-preview-");

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
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await gw?.stop();
  gw = undefined;
  await new Promise<void>((r) => (receiver ? receiver.close(() => r()) : r()));
  receiver = undefined;
  for (const c of cleanups.splice(0)) c();
});

async function shot(name: string): Promise<void> {
  await page!.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  if (process.env["UPDATE_SCREENSHOTS"] === "1") {
    mkdirSync(join(ROOT, "docs"), { recursive: true });
    await page!.screenshot({ path: join(ROOT, "docs", `${name}.png`), fullPage: true });
  }
}

/** A gateway with server-filesystem over a temp dir, an agent, and (with `hooks`) a webhook receiver. */
async function setup(withHooks = false): Promise<{ dir: string; agent: TestClient; hooks: any[] }> {
  const hooks: any[] = [];
  let notify = "";
  if (withHooks) {
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        hooks.push(JSON.parse(Buffer.concat(chunks).toString()));
        return res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => receiver!.listen(0, "127.0.0.1", () => r()));
    notify = `gateway: {notify: [{url: "http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook", events: [proposed]}]}`;
  }
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "mewgate-preview-fs-")));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  gw = await startGateway(`
space: {id: lab}
policy: {proposal_ttl_ms: 600000}
${notify}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}, tools: {deny: ["fs/read_text_file"]}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["fs/write_file", "fs/edit_file"]}}
  fs: {kind: mcp, token: ${T.fs}}
`);
  bridges.push(
    await startBridge({
      id: "fs",
      server: { command: process.execPath, args: [FILESYSTEM, dir] },
      client: { url: gw.url, space: "lab", token: T.fs },
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    }),
  );
  const agent = await TestClient.join(gw, "lab", T.agent);
  clients.push(agent);
  await waitFor(
    async () => {
      const r = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/lab/tools`, { headers: { authorization: `Bearer ${T.alice}` } });
      return ((await r.json()) as any).tools.some((t: any) => t.name === "fs/write_file");
    },
    10_000,
    "fs tools",
  );
  page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
  page.setDefaultTimeout(8000);
  return { dir, agent, hooks };
}

function propose(agent: TestClient, args: Record<string, unknown>, name = "write_file"): string {
  const id = `p-${Math.random().toString(36).slice(2)}`;
  agent.send({ id, kind: "mcp/proposal", to: ["fs"], payload: { method: "tools/call", params: { name, arguments: args } } });
  return id;
}

const NOTES = [
  "# Notes",
  "",
  "- buy milk",
  "- call the plumber",
  "- <img src=x onerror=\"window.__xss='file'\">",
  "- renew the passport",
  "",
].join("\n");
const PROPOSED = [
  "# Notes",
  "",
  "- buy oat milk",
  "- call the plumber",
  "- <img src=x onerror=\"window.__xss='file'\">",
  "- renew the passport",
  "- <script>window.__xss='new'</script> book the dentist",
  "",
].join("\n");

describe("previews in the console", () => {
  it("shows the diff of a write against the file on disk on the card, as text", async () => {
    const { dir, agent } = await setup();
    const file = join(dir, "notes.md");
    writeFileSync(file, NOTES);
    const id = propose(agent, { path: file, content: PROPOSED });
    await page!.goto(`http://127.0.0.1:${gw!.port}/ui/#space=lab&token=${T.alice}`);
    const card = page!.locator(`li.card[data-id="${id}"]`);
    const preview = card.locator("section.preview[data-status=ok]");
    await preview.waitFor();
    await expect(preview.locator("h4").textContent()).resolves.toContain("changes against what is there now (fs/read_text_file)");
    const removed = await preview.locator(".preview-diff .del").allTextContents();
    const added = await preview.locator(".preview-diff .add").allTextContents();
    expect(removed.map((l) => l.trim())).toEqual(["-- buy milk"]);
    expect(added.map((l) => l.trim())).toEqual(["+- buy oat milk", "+- <script>window.__xss='new'</script> book the dentist"]);
    // Participant text is text: nothing ran, no element came from it.
    expect(await page!.evaluate(() => (globalThis as any).__xss)).toBeUndefined();
    expect(await card.locator("img, script").count()).toBe(0);
    // The buttons are there, whatever the preview.
    await expect(card.getByRole("button", { name: "Approve", exact: true }).isEnabled()).resolves.toBe(true);
    await card.scrollIntoViewIfNeeded();
    await page!.locator("#app").screenshot({ path: join(shots, "console-preview.png") });
    await shot("console-preview");
    expect(readFileSync(file, "utf8")).toBe(NOTES);
  });

  it("says what will happen: a write into a missing directory will fail, an identical one changes nothing, an edit names the file as the call did", async () => {
    const { dir, agent } = await setup();
    writeFileSync(join(dir, "same.txt"), "as it is\n");
    writeFileSync(join(dir, "code.ts"), "const a = 1;\n");
    const missing = propose(agent, { path: "drafts/\u202Eevil\x1b[2J/hello.txt", content: "hello\n" });
    const same = propose(agent, { path: "same.txt", content: "as it is\n" });
    const edit = propose(agent, { path: "code.ts", edits: [{ oldText: "const a = 1;", newText: "const a = 2;" }] }, "edit_file");
    await page!.goto(`http://127.0.0.1:${gw!.port}/ui/#space=lab&token=${T.alice}`);
    const fails = page!.locator(`li.card[data-id="${missing}"] section.preview[data-status=will_fail]`);
    await fails.waitFor();
    const failText = (await fails.textContent()) ?? "";
    expect(failText).toContain("This call will fail (fs/get_file_info)");
    expect(failText).toContain("does not exist, so the write will fail");
    expect(failText).not.toContain("a new file");
    // The name's bidi override and escape are shown as marks, never applied.
    expect(failText).not.toMatch(/[\u202E\x1b]/);
    expect(await fails.locator("pre").count()).toBe(0);

    const unchanged = page!.locator(`li.card[data-id="${same}"] section.preview[data-status=ok][data-unchanged=true]`);
    await unchanged.waitFor();
    await expect(unchanged.locator("h4").textContent()).resolves.toBe(
      "Preview: no change — the file already holds exactly this (fs/read_text_file)",
    );
    expect(await unchanged.locator("pre").count()).toBe(0);

    const patch = page!.locator(`li.card[data-id="${edit}"] section.preview[data-status=ok] .preview-diff`);
    await patch.waitFor();
    const patchText = (await patch.textContent()) ?? "";
    expect(patchText).toContain("--- code.ts\toriginal");
    expect(patchText).toContain("+++ code.ts\tmodified");
    expect(patchText).not.toContain(dir);
    await expect(patch.locator(".add").allTextContents()).resolves.toEqual(["+const a = 2;\n"]);
    await page!.locator(`li.card[data-id="${missing}"]`).scrollIntoViewIfNeeded();
    await shot("console-preview-outcomes");
    expect(readFileSync(join(dir, "code.ts"), "utf8")).toBe("const a = 1;\n");
  });

  it("a refused preview says so and the card can still be decided", async () => {
    const { dir, agent } = await setup();
    const file = join(dir, "secret.txt");
    writeFileSync(file, "bob may not read this\n");
    const id = propose(agent, { path: file, content: "changed\n" });
    await page!.goto(`http://127.0.0.1:${gw!.port}/ui/#space=lab&token=${T.bob}`);
    const card = page!.locator(`li.card[data-id="${id}"]`);
    const preview = card.locator("section.preview[data-status=refused]");
    await preview.waitFor();
    await expect(preview.textContent()).resolves.toContain("Preview refused");
    await expect(preview.textContent()).resolves.not.toContain("bob may not read this");
    await card.getByRole("button", { name: "Reject", exact: true }).click();
    await page!.locator("#reject-send").click();
    await card.waitFor({ state: "detached" });
  });
});

describe("a decision link in the browser", () => {
  it("opens from the webhook's link, asks the person to sign in, shows the card with its diff, and approves once", async () => {
    const { dir, agent, hooks } = await setup(true);
    const file = join(dir, "todo.txt");
    writeFileSync(file, "one\ntwo\n");
    const id = propose(agent, { path: file, content: "one\ntwo\nthree\n" });
    await waitFor(() => hooks.some((h) => h.proposal?.id === id), 5000, "the webhook");
    const links = hooks.find((h) => h.proposal?.id === id).links as Array<{ approver: string; url: string }>;
    const url = links.find((l) => l.approver === "alice")!.url;
    expect(url).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${gw!.port}/ui/link\\.html#t=v1\\.`));

    // Bob signs in on alice's link: nothing to decide.
    await page!.goto(`${url}&do=approve`);
    await signInToLink(page!, T.bob);
    await page!.locator("#problem:not(:empty)").waitFor();
    await expect(page!.locator("#problem").textContent()).resolves.toContain("made for alice");
    expect(await page!.locator(".actions button").count()).toBe(0);
    await page!.close();

    page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    page.setDefaultTimeout(8000);
    await page.goto(`${url}&do=approve`);
    // The name is filled in by the page's script: wait for it rather than read the empty span.
    await page.locator("#login-who", { hasText: /^alice$/ }).waitFor();
    await signInToLink(page, T.alice);
    const card = page.locator(`li.card[data-id="${id}"]`);
    await card.locator("section.preview[data-status=ok] .preview-diff .add").waitFor();
    await expect(card.locator(".preview-diff .add").allTextContents()).resolves.toEqual(["+three\n"]);
    // The gateway's risk, as on the console's card: a destructive write the agent never made before.
    await expect(card.locator("p.risk").textContent()).resolves.toMatch(/^Risk: high — .*destructive/);
    await expect(page.locator("#message").textContent()).resolves.toContain("You chose approve");
    // A phone's width, the diff's long lines included: nothing scrolls sideways.
    expect(await page.evaluate("[window.innerWidth, document.documentElement.scrollWidth]")).toEqual([390, 390]);
    await shot("link-page");
    await card.getByRole("button", { name: "Approve" }).click();
    await page.locator("#message", { hasText: "Approved" }).waitFor();
    await waitFor(() => readFileSync(file, "utf8") === "one\ntwo\nthree\n", 5000, "the approved write");
    // Opened again: used up.
    await page.reload();
    await page.locator("#problem", { hasText: "already used" }).waitFor();
  });
});
