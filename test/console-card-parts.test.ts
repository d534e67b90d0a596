/**
 * What the person deciding sees on a card, in a real headless Chromium against a real
 * gateway, at 1280 px and at 390 px (a phone), screenshotted to the test's temp dir:
 * "who may decide" names only those the gateway would heed and the buttons follow the
 * viewer's right (a reviewer approves, never rejects; one who may not gets none); a turn reads
 * as one unit, its intent once, its calls in order, each preview made after the earlier
 * calls (a write, then an edit of the same file, with the real server-filesystem); the batch
 * bar says what it selects and how many, and offers only low-risk calls the viewer may
 * approve. Nothing is wider than the page, and what participants wrote is drawn as text.
 */
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { tempDir } from "./fixtures/cli/harness.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const FILESYSTEM = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const T = (id: string) => `${id}-token-0123456789abcdef`;
const AGENT_CAPS = `capabilities: [{kind: "mcp/approve"}, {kind: "mcp/reject"}, {kind: "mcp/request"}, {kind: "chat"}]`;
const HOSTILE = `<img src=x onerror="window.__xss=1">\u202Eexe.txt\u202C`;

let browser: Browser;
let gw: TestGateway | undefined;
const pages: Page[] = [];
const clients: TestClient[] = [];
const bridges: Bridge[] = [];
const dirs: string[] = [];
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
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await gw?.stop();
  gw = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
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

/** Until every preview on the page has answered (its box no longer busy): what is measured is the page as it stays. */
async function settled(page: Page): Promise<void> {
  // Asked from here, not polled in the page: the console's CSP refuses the eval a string predicate of waitForFunction needs.
  const busy = `[...document.querySelectorAll("section.preview")].every((s) => s.getAttribute("aria-busy") === "false")`;
  await waitFor(async () => (await page.evaluate(busy)) === true, 10_000, "every preview to answer");
}

/** A full-page screenshot into the temp dir; the page must not be wider than its window. */
async function shot(page: Page, name: string): Promise<string> {
  await settled(page);
  const fits = await page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth");
  expect(fits, `${name}: the page scrolls sideways`).toBe(true);
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/** Every element of the inbox at most as wide as the window (its right edge inside it). */
async function nothingWider(page: Page): Promise<string[]> {
  await settled(page);
  return page.evaluate(`(() => {
    const w = document.documentElement.clientWidth;
    return [...document.querySelectorAll("#inbox *")]
      .filter((n) => n.getBoundingClientRect().width > 0 && n.getBoundingClientRect().right > w + 0.5)
      .map((n) => n.tagName.toLowerCase() + "." + n.className);
  })()`);
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

/** A gateway with the real server-filesystem over a fresh folder, `extra` participants, and a joined `agent`. */
async function withFilesystem(extra = ""): Promise<{ dir: string; agent: TestClient }> {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "mewgate-card-parts-fs-")));
  dirs.push(dir);
  gw = await startGateway(`space: {id: cp}
policy: {proposal_ttl_ms: 600000}
participants:
  alice: {kind: human, token: ${T("alice")}}
  bob: {kind: human, token: ${T("bob")}}
  agent: {kind: agent, token: ${T("agent")}, tools: {ask: ["fs/*"]}}
  fs: {kind: mcp, token: ${T("fs")}}
${extra}`);
  bridges.push(
    await startBridge({
      id: "fs",
      server: { command: process.execPath, args: [FILESYSTEM, dir] },
      client: { url: gw.url, space: "cp", token: T("fs") },
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    }),
  );
  await waitFor(async () => (await api("alice", "GET", "tools")).body.tools.some((t: any) => t.name === "fs/edit_file"), 10_000, "fs");
  const agent = await TestClient.join(gw, "cp", T("agent"));
  clients.push(agent);
  return { dir, agent };
}

const turnMeta = (id: string, index: number, count: number) => ({ _meta: { "mewgate/turn": { id, index, count } } });

async function turnCall(from: TestClient, tool: string, args: Record<string, unknown>, turn: [string, number, number], intent?: string) {
  const id = `c-${++n}`;
  from.send({
    id,
    kind: "mcp/proposal",
    to: ["fs"],
    payload: {
      method: "tools/call",
      params: { name: tool, arguments: args, ...turnMeta(...turn) },
      ...(intent ? { intent } : {}),
    },
  });
  await waitFor(async () => (await api("alice", "GET", `proposals/${id}`)).status === 200);
  return id;
}

describe("a turn reads as one unit", () => {
  it("the intent once, the calls in order, an edit previewed after the write before it; a call's own different intent is shown", {
    timeout: 60_000,
  }, async () => {
    const { dir, agent } = await withFilesystem();
    const path = join(dir, "notes.md");
    const intent = "Create the notes file, then fix its second line.";
    const write = await turnCall(agent, "write_file", { path, content: "one\ntwo\nthree\n" }, ["turn-a", 0, 3], intent);
    const edit = await turnCall(agent, "edit_file", { path, edits: [{ oldText: "two", newText: "TWO" }] }, ["turn-a", 1, 3], intent);
    // The last call says something else: a turn's first words never speak for it.
    const other = await turnCall(agent, "write_file", { path: join(dir, "x.md"), content: "x" }, ["turn-a", 2, 3], HOSTILE);

    const page = await open("alice");
    const turn = page.locator("#inbox li.turn");
    await turn.locator(`li.card[data-id="${other}"]`).waitFor();
    expect(await turn.locator(".turn-head strong").textContent()).toBe("One turn of agent: 3 calls, in the order it asked for them");
    // The intent once, at the top; the calls in order, each with its place.
    expect(await turn.locator(":scope > blockquote.intent").textContent()).toBe(`Why agent wants them:1${intent}`);
    expect(await turn.locator("li.card").evaluateAll((xs) => xs.map((x) => x.getAttribute("data-id")))).toEqual([write, edit, other]);
    expect(await turn.locator(`li.card[data-id="${write}"] .intent, li.card[data-id="${edit}"] .intent`).count()).toBe(0);
    const own = turn.locator(`li.card[data-id="${other}"] blockquote.intent`);
    expect(await own.locator(".intent-label").textContent()).toBe("This call's own reason:");
    expect(await own.locator(".tx").textContent()).toBe(`<img src=x onerror="window.__xss=1">⟨U+202E⟩exe.txt⟨U+202C⟩`);
    expect(await page.evaluate("window.__xss")).toBeUndefined();
    // The edit's preview: against what the write would leave, not a file that is not there yet.
    const box = turn.locator(`li.card[data-id="${edit}"] section.preview`);
    await box.locator(".preview-head").waitFor();
    expect(await box.getAttribute("data-status")).toBe("ok");
    expect(await box.locator(".preview-head").textContent()).toBe(
      "Preview: changes against what call 1 (write_file) of this turn would leave",
    );
    expect(await box.locator(".preview-diff .del").allTextContents()).toEqual(["-two\n"]);
    expect(await box.locator(".preview-diff .add").allTextContents()).toEqual(["+TWO\n"]);
    expect(await box.locator(".preview-note").textContent()).toMatch(/^Shown as if call 1 \(write_file\) runs first/);
    await shot(page, "turn-1280");
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await nothingWider(page)).toEqual([]);
    await shot(page, "turn-390");

    // Ticked together, approved in order: the file holds what the preview said.
    await turn.locator("button.select-turn").click();
    await page.locator("#batch button.approve", { hasText: "Approve 3 selected" }).click();
    await waitFor(async () => (await api("alice", "GET", "proposals")).body.proposals.length === 0, 10_000, "all three to run");
    const { readFileSync } = await import("node:fs");
    expect(readFileSync(path, "utf8")).toBe("one\nTWO\nthree\n");
  });
});

describe("the batch bar", () => {
  it("says what it selects and how many, and offers only low-risk calls the viewer may approve", { timeout: 60_000 }, async () => {
    // helper's calls are bob's to decide: alice may not approve them, however low their risk.
    gw = await startGateway(`space: {id: cp}
policy: {proposal_ttl_ms: 600000}
participants:
  alice: {kind: human, token: ${T("alice")}}
  bob: {kind: human, token: ${T("bob")}}
  agent: {kind: agent, token: ${T("agent")}}
  helper: {kind: agent, token: ${T("helper")}, approvers: [bob]}
  fs: {kind: mcp, token: ${T("fs")}}
`);
    // A tool that says it is neither destructive nor open-world: a familiar call of it can be low.
    clients.push(
      await toolOwner(gw, "cp", T("fs"), [
        { name: "write_file", inputSchema: { type: "object" }, annotations: { destructiveHint: false, openWorldHint: false } },
      ]),
    );
    const agent = await TestClient.join(gw, "cp", T("agent"));
    const helper = await TestClient.join(gw!, "cp", T("helper"));
    clients.push(agent, helper);
    const dir = "notes";
    const write = (from: TestClient, name: string) => propose(from, "write_file", { path: join(dir, name), content: `${name}\n` });
    // A first call of each, approved by its approver: the next ones alike are low.
    expect((await api("alice", "POST", `proposals/${await write(agent, "a0.md")}/approve`, { scope: "once" })).status).toBe(200);
    expect((await api("bob", "POST", `proposals/${await write(helper, "h0.md")}/approve`, { scope: "once" })).status).toBe(200);
    const lows = [await write(agent, "a1.md"), await write(agent, "a2.md")];
    const notMine = await write(helper, "h1.md");
    const risky = await propose(agent, "write_file", { path: join(dir, ".env"), content: "AWS_SECRET=AKIAIOSFODNN7EXAMPLE\n" });
    for (const id of [...lows, notMine])
      await waitFor(async () => (await api("bob", "GET", `proposals/${id}`)).body.risk?.level === "low", 5000, `${id} low`);
    expect((await api("alice", "GET", `proposals/${risky}`)).body.risk.level).not.toBe("low");

    const page = await open("alice");
    const select = page.locator("#batch button.select-low");
    await select.waitFor();
    expect(await select.textContent()).toBe("Select the 2 low-risk calls to approve together");
    expect(await page.locator(`#inbox li.card[data-id="${notMine}"] input.pick`).count()).toBe(0);
    await shot(page, "batch-1280");
    await select.click();
    await page.locator("#batch .picked", { hasText: "2 selected" }).waitFor();
    const ticked = await page
      .locator("#inbox input.pick:checked")
      .evaluateAll((xs) => xs.map((x) => x.closest("li.card")?.getAttribute("data-id")));
    expect(ticked.sort()).toEqual([...lows].sort());
    expect(await page.locator("#batch button.approve").textContent()).toBe("Approve 2 selected");
    // Readable: its text not the colour of its background (it was white on white).
    const [fg, bg] = (await page.evaluate(
      `(() => { const s = getComputedStyle(document.querySelector("#batch button.approve")); return [s.color, s.backgroundColor]; })()`,
    )) as string[];
    expect(fg).not.toBe(bg);
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await nothingWider(page)).toEqual([]);
    await shot(page, "batch-390");
    await page.locator("#batch button.approve").click();
    await waitFor(async () => (await api("alice", "GET", "proposals")).body.proposals.length === 2, 10_000, "the two low ones to run");
    expect((await api("alice", "GET", "proposals")).body.proposals.map((p: any) => p.id).sort()).toEqual([notMine, risky].sort());
    // One low call left that alice may approve: no offer to select "1 together".
    await page.locator(`#inbox li.card[data-id="${lows[0]}"]`).waitFor({ state: "detached" });
    expect(await page.locator("#batch button.select-low").count()).toBe(0);
  });
});

/** How far below a card's top its Approve button ends, in px. */
async function reach(card: ReturnType<Page["locator"]>): Promise<number> {
  const top = (await card.boundingBox())!.y;
  const approve = (await card.getByRole("button", { name: "Approve", exact: true }).boundingBox())!;
  return approve.y + approve.height - top;
}

describe("a card on a phone", () => {
  it("folds long arguments and a long preview behind a disclosure that says what it holds; nothing is wider than the screen; the buttons are near", {
    timeout: 60_000,
  }, async () => {
    const { dir, agent } = await withFilesystem();
    const { writeFileSync } = await import("node:fs");
    const name = `${"a".repeat(180)}.md`;
    writeFileSync(join(dir, name), Array.from({ length: 300 }, (_, i) => `old line ${i}`).join("\n"));
    const content = Array.from({ length: 300 }, (_, i) => (i % 50 === 0 ? `x${"y".repeat(900)}` : `new line ${i}`)).join("\n");
    const deep = JSON.parse(`${"[".repeat(40)}"${"z".repeat(300)}"${"]".repeat(40)}`);
    const id = await propose(
      agent,
      "write_file",
      { path: join(dir, name), content, [`k${"e".repeat(150)}`]: deep },
      { intent: `Because ${"w".repeat(600)} ${HOSTILE}` },
    );
    const page = await open("alice", 390);
    const card = page.locator(`#inbox li.card[data-id="${id}"]`);
    await card.locator("section.preview .preview-head").waitFor();
    expect(await page.evaluate("window.__xss")).toBeUndefined();
    expect(await nothingWider(page)).toEqual([]);
    // The arguments, folded: the summary says each, the long ones by their size.
    const args = card.locator("details.args-fold");
    expect(await args.getAttribute("open")).toBeNull();
    const said = (await args.locator("summary").textContent()) ?? "";
    expect(said).toContain(`path: ${join(dir, name)}`);
    expect(said).toContain("content: 300 line(s), ");
    expect(said).toMatch(/k(e){150}: \[\[\[/);
    // The preview, folded too, its heading and size in sight.
    const fold = card.locator("section.preview details.preview-fold");
    expect(await fold.getAttribute("open")).toBeNull();
    expect(await card.locator("section.preview .preview-head").textContent()).toBe(
      "Preview: changes against what is there now (fs/read_text_file)",
    );
    expect(await fold.locator("summary").textContent()).toMatch(/^Show the diff: \d+ lines \(\+\d+ −\d+\)$/);
    // One enormous line of intent folds too, and says how much there is.
    expect(await card.locator("blockquote.intent .show-all").textContent()).toMatch(/^Show all 1 line \(6\d\d characters\)$/);
    // Every part of this card is as hostile as it gets, and still the Approve button is within a screen and a half of its top.
    expect(await reach(card)).toBeLessThan(844 * 1.5);
    await shot(page, "phone-card-folded-390");
    await shot(page, "phone-card-folded-390");
    // Opened, everything is there, and still nothing is wider than the screen.
    await args.locator("summary").click();
    await fold.locator("summary").click();
    expect(await args.locator("dl.args dt").count()).toBe(3);
    expect(await fold.locator(".preview-diff span").count()).toBeGreaterThan(300);
    expect(await nothingWider(page)).toEqual([]);
    await shot(page, "phone-card-open-390");
    // A plausible long write (its path and reason ordinary, its content 300 lines): the buttons within one screen.
    const plain = await propose(
      agent,
      "write_file",
      { path: join(dir, "notes.md"), content },
      { intent: "Rewriting the notes as you asked." },
    );
    const plainCard = page.locator(`#inbox li.card[data-id="${plain}"]`);
    await plainCard.locator("section.preview .preview-head").waitFor();
    expect(await reach(plainCard)).toBeLessThan(844);
    await plainCard.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, "phone-card-plain-390.png") });
    // At 1280 px a short card is not folded at all.
    const short = await propose(agent, "write_file", { path: join(dir, "s.md"), content: "one line" });
    const wide = await open("alice", 1280);
    const s = wide.locator(`#inbox li.card[data-id="${short}"]`);
    await s.locator("section.preview .preview-head").waitFor();
    expect(await s.locator("details.args-fold, details.preview-fold").count()).toBe(0);
    await shot(wide, "phone-card-1280");
  });
});
