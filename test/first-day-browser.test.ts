/**
 * An operator's first day in the console and on the link page (issue 39), in a real
 * headless Chromium against a real gateway: the card says who may decide and offers buttons
 * only to them; no "Always…" on a two-person proposal; `a` on a destructive call asks first;
 * the batch bar stays in sight while ticking; Decided shows the arguments and every
 * approver; the signed-in participant is present; the Always dialog preselects the
 * narrowest scope; the link page says a spent link is spent before asking for a token,
 * draws the card like the console, and after one use opens the person's next link with one
 * tap (a signed, HttpOnly, SameSite=Strict cookie bound to the person and their token);
 * nothing overflows sideways at 390 px (measured on pages truly 390 px wide), a malformed or
 * forged link included, which says so and shows nothing it claims. Screenshots go to the
 * test's temp dir.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { launchChromium, signInToLink } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "./fixtures/cli/harness.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const T = {
  alice: "alice-token-0001",
  bob: "bob-token-000002",
  helper: "helper-token-003",
  pair: "pair-token-00004",
  svc: "svc-token-000005",
};
const TOOLS = [
  {
    name: "write",
    title: "Write a file",
    annotations: { destructiveHint: true },
    inputSchema: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } } },
  },
];

let browser: Browser;
let gw: TestGateway | undefined;
let context: BrowserContext | undefined;
let receiver: Server | undefined;
const clients: TestClient[] = [];
const shots = tempDir("mewgate-day-shots-");

beforeAll(async () => {
  browser = await launchChromium();
}, 30_000);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  await context?.close();
  context = undefined;
  for (const c of clients.splice(0)) c.ws.terminate();
  await gw?.stop();
  gw = undefined;
  await new Promise<void>((r) => (receiver ? receiver.close(() => r()) : r()));
  receiver = undefined;
});

/** A loopback webhook receiver keeping the JSON notices' links, by proposal and approver. */
async function hooks(): Promise<{ port: number; links: Map<string, Record<string, string>> }> {
  const links = new Map<string, Record<string, string>>();
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      if (body.proposal?.id)
        links.set(
          body.proposal.id,
          Object.fromEntries((body.links ?? []).map((l: { approver: string; url: string }) => [l.approver, l.url])),
        );
      res.writeHead(200).end("ok");
    });
  });
  await new Promise<void>((r) => receiver!.listen(0, "127.0.0.1", () => r()));
  return { port: (receiver.address() as AddressInfo).port, links };
}

function space(hookPort: number): string {
  return `
space: {id: day}
policy: {proposal_ttl_ms: 600000}
gateway:
  notify:
    - {url: "http://127.0.0.1:${hookPort}/json", events: [proposed]}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}}
  helper: {kind: agent, token: ${T.helper}, approvers: [alice], tools: {ask: ["svc/*"]}}
  pair: {kind: agent, token: ${T.pair}, approvals: 2, tools: {ask: ["svc/*"]}}
  svc: {kind: mcp, token: ${T.svc}}
`;
}

async function api(token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/day/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

async function setup(): Promise<{ helper: TestClient; pair: TestClient; links: Map<string, Record<string, string>> }> {
  const h = await hooks();
  gw = await startGateway(space(h.port));
  clients.push(await toolOwner(gw, "day", T.svc, TOOLS));
  const helper = await TestClient.join(gw, "day", T.helper);
  const pair = await TestClient.join(gw, "day", T.pair);
  clients.push(helper, pair);
  await waitFor(async () => (await api(T.alice, "GET", "tools")).body.tools.length > 0, 5000, "tools");
  return { helper, pair, links: h.links };
}

const write = (id: string, path: string, content = "hello\n", intent = "Saving the notes you dictated.") => ({
  id,
  kind: "mcp/proposal",
  to: ["svc"],
  payload: { method: "tools/call", params: { name: "write", arguments: { path, content } }, intent },
});

async function open(path: string, viewport = { width: 1280, height: 900 }): Promise<Page> {
  context ??= await browser.newContext({ viewport });
  const page = await context.newPage();
  page.setDefaultTimeout(8000);
  // The context is kept (its cookies are the device session); each page gets the size asked for.
  await page.setViewportSize(viewport);
  await page.goto(`http://127.0.0.1:${gw!.port}${path}`);
  return page;
}

/** The page's own width and how wide its document is: a phone page must not scroll sideways. */
const widths = (page: Page) =>
  page.evaluate("({ inner: window.innerWidth, scroll: document.documentElement.scrollWidth })") as Promise<{
    inner: number;
    scroll: number;
  }>;

const overflow = (page: Page) => page.evaluate("document.documentElement.scrollWidth - window.innerWidth") as Promise<number>;

describe("the card says who may decide", () => {
  it("buttons only for those who may; no Always on a two-person rule; the batch bar stays in sight; Decided names every approver and the arguments", {
    timeout: 60_000,
  }, async () => {
    const { helper, pair } = await setup();
    helper.send(write("h1", "notes/a.md"));
    for (let i = 1; i <= 6; i++) pair.send(write(`p${i}`, `notes/p${i}.md`, `line ${i}\n`.repeat(12)));
    await waitFor(async () => (await api(T.bob, "GET", "proposals")).body.proposals.length === 7, 5000, "seven proposals");

    // The API says it first: bob may not decide helper's proposal (its approvers are alice).
    const h1 = (await api(T.bob, "GET", "proposals/h1")).body;
    expect(h1).toMatchObject({ deciders: ["alice"], mayDecide: false, mayNotDecide: 'proposals of "helper" are decided by alice' });
    expect((await api(T.alice, "GET", "proposals/h1")).body).toMatchObject({ mayDecide: true });
    expect((await api(T.helper, "GET", "proposals/h1")).body).toMatchObject({
      mayDecide: false,
      mayNotDecide: "it is your own proposal (you may withdraw it)",
    });

    const page = await open(`/ui/#space=day&token=${T.bob}`);
    await page.locator("#conn.live").waitFor();
    const card = page.locator('#inbox li.card[data-id="h1"]');
    await card.waitFor();
    expect(await card.locator(".deciders").textContent()).toBe("Who may decide: alice.");
    expect(await card.locator(".may-not").textContent()).toBe('You cannot decide this one: proposals of "helper" are decided by alice.');
    expect(await card.getByRole("button", { name: "Approve", exact: true }).count()).toBe(0);
    expect(await card.getByRole("button", { name: "Reject" }).count()).toBe(0);
    expect(await card.locator("input.pick").count()).toBe(0);

    // A two-person proposal: Approve, but no Always (a grant by one would skip the second person).
    const p1 = page.locator('#inbox li.card[data-id="p1"]');
    expect(await p1.getByRole("button", { name: "Approve", exact: true }).count()).toBe(1);
    expect(await p1.getByRole("button", { name: "Always…" }).count()).toBe(0);
    expect(await p1.locator(".deciders").textContent()).toBe("Who may decide: alice, bob.");

    // The signed-in participant is present, through this page.
    await page.locator("#people li", { hasText: "bob (human) — you, in this console" }).locator(".online").waitFor({ state: "attached" });

    // Tick a card far down: the bar of ticked cards is in the window, not at the top of the page.
    const last = page.locator('#inbox li.card[data-id="p6"]');
    await last.scrollIntoViewIfNeeded();
    await last.locator("input.pick").check();
    const bar = page.locator("#batch");
    await bar.waitFor();
    expect(await page.evaluate("window.scrollY")).toBeGreaterThan(200);
    const box = await bar.boundingBox();
    expect(box!.y).toBeGreaterThanOrEqual(0);
    expect(box!.y + box!.height).toBeLessThanOrEqual(900);
    await page.screenshot({ path: join(shots, "batch-in-sight.png") });
    await bar.getByRole("button", { name: "Approve 1" }).click();
    await waitFor(async () => (await api(T.bob, "GET", "proposals/p6")).body.approvals?.count === 1, 5000, "bob's approval");
    // Approved once, bob may not approve it again: the card says so and offers no buttons.
    const p6 = (await api(T.bob, "GET", "proposals/p6")).body;
    expect(p6).toMatchObject({
      mayDecide: false,
      mayNotDecide: "you approved it already; it waits for another approver",
      deciders: ["alice"],
    });
    await page.locator('#inbox li.card[data-id="p6"] .may-not').waitFor();

    // Alice approves too: Decided names both approvers and shows the arguments.
    expect((await api(T.alice, "POST", "proposals/p6/approve", { scope: "once" })).status).toBe(200);
    expect((await api(T.alice, "POST", "proposals/p5/reject", { reason: "unsafe" })).status).toBe(200);
    const decided = (await api(T.bob, "GET", "proposals?state=decided")).body.decided;
    expect(decided.find((d: { id: string }) => d.id === "p6")).toMatchObject({ approvedBy: ["bob", "alice"], decidedBy: "alice" });
    const entry = page.locator('#decided li[data-decided="p6"]');
    await entry.waitFor();
    expect(await entry.locator(".why").textContent()).toMatch(/^approved by bob and alice at /);
    expect(await entry.locator(".decided-args summary").textContent()).toBe("Arguments: path: notes/p6.md · content: 13 line(s), 84 chars");
    expect(await page.locator('#decided li[data-decided="p5"] .decided-args summary').textContent()).toContain("path: notes/p5.md");
    await page.screenshot({ path: join(shots, "console-desktop.png"), fullPage: true });
  });

  it("the Always dialog preselects the narrowest scope", { timeout: 30_000 }, async () => {
    const { helper } = await setup();
    helper.send(write("h2", "notes/b.md"));
    const page = await open(`/ui/#space=day&token=${T.alice}`);
    const card = page.locator('#inbox li.card[data-id="h2"]');
    await card.waitFor();
    await card.getByRole("button", { name: "Always…" }).click();
    const dialog = page.locator("dialog.ask[open]");
    await dialog.waitFor();
    const checked = dialog.locator("input[name=always-limit]:checked + span");
    expect((await checked.textContent())!.trim()).toMatch(/^only with exactly these arguments/);
    const labels = await dialog.locator(".always-limits label span").allTextContents();
    expect(labels.at(-1)!.trim()).toBe("any arguments (the whole tool)");
    await page.screenshot({ path: join(shots, "always-narrowest.png") });
    await dialog.getByRole("button", { name: "Cancel" }).click();
  });

  it("fits a phone: the console's sign-in, the inbox and the link page's sign-in have no sideways scrolling", {
    timeout: 30_000,
  }, async () => {
    const { helper, links } = await setup();
    helper.send(write("h3", "notes/c.md"));
    await waitFor(() => links.has("h3"), 5000, "the notice");
    const phone = { width: 390, height: 844 };
    const signin = await open("/ui/", phone);
    await signin.locator("p.hint").first().waitFor();
    expect(await overflow(signin)).toBeLessThanOrEqual(0);
    await signin.screenshot({ path: join(shots, "console-signin-390.png"), fullPage: true });
    const link = await open(new URL(links.get("h3")!["alice"]!).pathname + new URL(links.get("h3")!["alice"]!).hash, phone);
    await link.locator("#login:not([hidden])").waitFor();
    expect(await overflow(link)).toBeLessThanOrEqual(0);
    await link.screenshot({ path: join(shots, "link-signin-390.png"), fullPage: true });
    const inbox = await open(`/ui/#space=day&token=${T.alice}`, phone);
    await inbox.locator('#inbox li.card[data-id="h3"]').waitFor();
    // Measured once the card's preview has answered, as on the link page below.
    await inbox.locator('#inbox li.card[data-id="h3"] section.preview[aria-busy=false]').waitFor({ state: "attached" });
    expect(await overflow(inbox)).toBeLessThanOrEqual(0);
    await inbox.screenshot({ path: join(shots, "console-390.png"), fullPage: true });
  });
});

describe("the link page", () => {
  it("a malformed link on a phone says so in words that fit: cut short, altered, huge, with controls, or none at all", {
    timeout: 30_000,
  }, async () => {
    const { helper, links } = await setup();
    helper.send(write("m1", "notes/m1.md"));
    await waitFor(() => links.has("m1"), 5000, "the notice");
    const real = new URL(links.get("m1")!["alice"]!);
    const hash = real.hash.slice(3);
    const [v, body, sig] = hash.split(".");
    const forged = (claims: Record<string, unknown>) => Buffer.from(JSON.stringify(claims)).toString("base64url");
    const forgedBody = forged({ s: "day", a: `${"x".repeat(500)}\u202Egnp.exe\u001b[2J`, p: "m1" });
    const forgedSpace = forged({ s: `${"s".repeat(300)}\u202E`, a: "alice", p: "m1" });
    const bad = [
      hash.slice(0, hash.length / 2), // cut short
      `${v}.${body}.${sig!.slice(0, -2)}AA`, // altered signature
      `${v}.${forgedBody}.${sig}`, // a claim of its own, with a long unbroken name and controls
      `${v}.${forgedSpace}.${sig}`, // a space of its own, as long
      `v1.${"A".repeat(20_000)}.${"B".repeat(20_000)}`, // huge
      "%1b%5b2J%e2%80%ae%00", // controls and bidi, percent-encoded
      "", // none
    ];
    for (const [i, t] of bad.entries()) {
      const page = await open(`${real.pathname}#t=${t}&do=approve`, { width: 390, height: 844 });
      await page.locator("#problem:not(:empty)").waitFor();
      const said = (await page.locator("#problem").textContent()) ?? "";
      expect(said, `link ${i}`).toMatch(/^This is not a decision link( of this space)? \(it was cut short or altered\)\.$/);
      // Nothing it claims is shown as if it were so.
      expect(await page.locator("#who").textContent(), `link ${i}`).toBe("");
      expect(await page.locator("#login").isHidden(), `link ${i}`).toBe(true);
      expect(await page.locator("#card li").count()).toBe(0);
      const w = await widths(page);
      expect(w.inner).toBe(390);
      expect(w.scroll, `link ${i}`).toBeLessThanOrEqual(390);
      // What the link claims is shown as text, its controls as marks, never applied.
      expect(await page.locator("header").textContent()).not.toMatch(/[\u202E\u001b]/);
      if (i === 2 || i === 3) await page.screenshot({ path: join(shots, `link-malformed-${i}-390.png`), fullPage: true });
      await page.close();
    }
    // None of them decided anything: m1 still waits.
    expect((await api(T.alice, "GET", "proposals/m1")).status).toBe(200);
  });

  it("says a spent link is spent before asking for a token; draws the card; after one use the next link is one tap", {
    timeout: 60_000,
  }, async () => {
    const { helper, links } = await setup();
    helper.send(write("l1", "notes/l1.md", "first\nsecond\n", "Keeping your two lines."));
    // l2 is read on a phone: a long unbroken name, line and reason must wrap, not widen the page.
    const longName = `notes/${"a-very-long-file-name-without-breaks-".repeat(6)}.md`;
    helper.send(
      write(
        "l2",
        longName,
        `${"x".repeat(400)}\nshort line\n`,
        `Because ${"reasons".repeat(60)} and https://example.invalid/${"p".repeat(200)}`,
      ),
    );
    helper.send(write("l3", "notes/l3.md"));
    await waitFor(() => ["l1", "l2", "l3"].every((id) => links.has(id)), 5000, "the notices");
    const path = (id: string) => {
      const u = new URL(links.get(id)!["alice"]!);
      return u.pathname + u.hash;
    };
    const linkOf = (id: string) => new URL(links.get(id)!["alice"]!).hash.slice(3);

    // Hostile: the state route answers nothing of the proposal, and nothing for a forged link.
    const state = async (link: unknown): Promise<any> =>
      (
        await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/day/links/state`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ link }),
        })
      ).json();
    expect(await state(linkOf("l1"))).toEqual({
      state: "usable",
      for: "alice",
      message: "this link can decide once, by the person it was made for",
    });
    expect((await state(`${linkOf("l1").slice(0, -3)}abc`)).state).toBe("invalid");
    expect((await state({ nested: ["x"] })).state).toBe("invalid");
    expect((await state("x".repeat(100_000))).state).toBe("invalid");
    // A cookie that is not the gateway's is no session: forged, or copied onto another space's path.
    const forged = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/day/links/open`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        cookie: "mewgate_device_day=eyJhIjoiYWxpY2UiLCJlIjo5OTk5OTk5OTk5OTk5LCJ0IjoieCIsIm4iOiJ5In0.AAAA",
      },
      body: JSON.stringify({ link: linkOf("l1") }),
    });
    expect(forged.status).toBe(401);

    // l3 decided in the console first: its link says so at once, and asks for no token.
    expect((await api(T.alice, "POST", "proposals/l3/reject", { reason: "unsafe" })).status).toBe(200);
    const spent = await open(path("l3"));
    await spent.locator("#problem", { hasText: "no longer waiting" }).waitFor();
    expect(await spent.locator("#login").isHidden()).toBe(true);
    await spent.close();

    // l1: sign in once with the token; the card carries intent, hints and numbered arguments.
    const page = await open(path("l1"));
    await page.locator("#login:not([hidden])").waitFor();
    await signInToLink(page, T.alice);
    const card = page.locator('#card li.card[data-id="l1"]');
    await card.waitFor();
    expect(await card.locator(".intent").textContent()).toContain("Keeping your two lines.");
    expect(await card.locator(".hint.destructiveHint").textContent()).toBe("destructive");
    expect(await card.locator(".tool-title").textContent()).toContain("Write a file");
    expect(await card.locator(".args .line .tx").allTextContents()).toEqual(["first", "second", " "]);
    expect(await page.locator("#device").textContent()).toMatch(/^This device opens links for alice without a token until /);
    const cookie = (await context!.cookies()).find((c) => c.name === "mewgate_device_day")!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict", path: "/api/spaces/day/links/" });
    expect(cookie.value).not.toContain(T.alice);
    await page.screenshot({ path: join(shots, "link-card-desktop.png"), fullPage: true });
    await card.getByRole("button", { name: "Approve" }).click();
    await page.locator("#message", { hasText: "Approved." }).waitFor();

    // l2 in a new tab of the same browser (no token in that tab): one tap.
    const next = await open(path("l2"), { width: 390, height: 844 });
    const card2 = next.locator('#card li.card[data-id="l2"]');
    await card2.waitFor();
    expect(await next.locator("#login").isHidden()).toBe(true);
    // Measured once the preview has answered (this tool has none: its box is hidden).
    await next.locator("#card section.preview[aria-busy=false]").waitFor({ state: "attached" });
    const phone = await widths(next);
    expect(phone.inner).toBe(390);
    expect(phone.scroll).toBeLessThanOrEqual(390);
    // Every part of the card is inside the page's width, buttons included.
    const right = await card2.evaluate((c: any) =>
      Math.max(...[...c.querySelectorAll("*")].map((e: any) => e.getBoundingClientRect().right as number)),
    );
    expect(right).toBeLessThanOrEqual(390);
    expect(await card2.getByRole("button", { name: "Approve" }).isVisible()).toBe(true);
    await next.screenshot({ path: join(shots, "link-card-390.png"), fullPage: true });
    await card2.getByRole("button", { name: "Approve" }).click();
    await next.locator("#message", { hasText: "Approved." }).waitFor();

    // The device session opens alice's links only, and only the link routes.
    const jar = `mewgate_device_day=${cookie.value}`;
    const other = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/day/proposals`, { headers: { cookie: jar } });
    expect(other.status).toBe(401);
    // A rotated token ends it: the session was bound to the token it was made from.
    gw!.gateway.spaces.get("day")!.tokens.remove("alice");
    const after = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/day/links/open`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie: jar },
      body: JSON.stringify({ link: linkOf("l2") }),
    });
    expect(after.status).toBe(401);
  });
});
