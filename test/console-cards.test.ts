/**
 * Deciding knowing what a call does, in a real headless Chromium against a real gateway, the
 * real `@modelcontextprotocol/server-filesystem` over a folder with a file in it, and a real
 * mewgate agent talking to a loopback scripted model: the card (intent, hints, arguments as
 * numbered lines), hostile texts drawn as text, approve and the result in Decided, a tool
 * error recorded as `tool_error` in the audit trail, the API and /metrics, Respond reaching
 * the agent (which proposes again), batch decisions, the keys, a phone-sized screen.
 * Screenshots go to the test's temp dir (and to docs/ with UPDATE_SCREENSHOTS=1).
 */
import { existsSync, mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync, mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startAgent, type AgentHandle } from "../participants/agent/participant.js";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { ROOT, tempDir } from "./fixtures/cli/harness.js";
import { ModelServer, openaiAgentBlock, openaiReply, openaiToolCall } from "./fixtures/agent/model-server.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";

const FILESYSTEM = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const T = {
  human: "human-token-0001",
  agent: "agent-token-0002",
  fs: "fs-token-00000003",
  bot: "bot-token-000004",
  evil: "evil-token-00005",
};
const HOSTILE = `<img src=x onerror="window.__xss='intent'"> \u001b[31mred\u001b[0m \u202Egnp.exe\u202C "q" \\u0041 &amp;`;

let browser: Browser;
let gw: TestGateway | undefined;
let page: Page | undefined;
let dir = "";
const clients: TestClient[] = [];
const bridges: Bridge[] = [];
const agents: AgentHandle[] = [];
const servers: ModelServer[] = [];
const shots = tempDir("mewgate-cards-");

beforeAll(async () => {
  browser = await launchChromium();
}, 30_000);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  await page?.close();
  page = undefined;
  await Promise.all(agents.splice(0).map((a) => a.stop()));
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
  await gw?.stop();
  gw = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = "";
});

function space(model?: ModelServer): string {
  return `
space: {id: cards}
policy: {proposal_ttl_ms: 600000}
participants:
  human: {kind: human, token: ${T.human}}
  bot: {kind: agent, token: ${T.bot}, tools: {ask: ["fs/*", "evil/*"]}}
  fs: {kind: mcp, token: ${T.fs}}
  evil: {kind: mcp, token: ${T.evil}}
${model ? `  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["fs/write_file"]}, agent: ${openaiAgentBlock(model)}}` : ""}
`;
}

/** A gateway, server-filesystem over a folder holding notes.txt, a raw proposer, and the console open. */
async function setup(opts: { model?: ModelServer; viewport?: { width: number; height: number } } = {}): Promise<TestClient> {
  dir = realpathSync(mkdtempSync(join(tmpdir(), "mewgate-cards-fs-")));
  writeFileSync(join(dir, "notes.txt"), "milk\neggs\n");
  gw = await startGateway(space(opts.model));
  bridges.push(
    await startBridge({
      id: "fs",
      server: { command: process.execPath, args: [FILESYSTEM, dir] },
      client: { url: gw.url, space: "cards", token: T.fs },
      restart: { initialDelayMs: 50, maxDelayMs: 200 },
    }),
  );
  const bot = await TestClient.join(gw, "cards", T.bot);
  clients.push(bot);
  await waitFor(
    async () => (await api("GET", "tools")).body.tools.some((t: { name: string }) => t.name === "fs/write_file"),
    10_000,
    "server-filesystem's tools",
  );
  page = await browser.newPage({ viewport: opts.viewport ?? { width: 1280, height: 900 } });
  page.setDefaultTimeout(8000);
  await openConsoleAs(page, gw.port, "cards", T.human);
  return bot;
}

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/cards/${path}`, {
    method,
    headers: { authorization: `Bearer ${T.human}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}

const write = (id: string, args: Record<string, unknown>, intent?: string, to = "fs", name = "write_file") => ({
  id,
  kind: "mcp/proposal",
  to: [to],
  payload: { method: "tools/call", params: { name, arguments: args }, ...(intent !== undefined ? { intent } : {}) },
});

async function shot(name: string): Promise<void> {
  await page!.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  if (process.env["UPDATE_SCREENSHOTS"] === "1") {
    mkdirSync(join(ROOT, "docs"), { recursive: true });
    await page!.screenshot({ path: join(ROOT, "docs", `${name}.png`) });
  }
}

describe("the proposal card in the console", () => {
  it("draws hostile intent, arguments and tool texts as text, with hidden characters shown, and folds a huge intent", async () => {
    const bot = await setup();
    const evil = await toolOwner(gw!, "cards", T.evil, [
      {
        name: "run",
        title: `<script>window.__xss='title'</script>`,
        description: `<img src=x onerror="window.__xss='desc'">\u202Ehidden`,
        annotations: { destructiveHint: true, readOnlyHint: "<b>", openWorldHint: true },
        inputSchema: { type: "object" },
      },
    ]);
    clients.push(evil);
    await waitFor(
      async () => (await api("GET", "tools")).body.tools.some((t: { name: string }) => t.name === "evil/run"),
      5000,
      "evil/run",
    );
    bot.send(write("h1", { command: HOSTILE, [`<b>key</b>\u202E`]: { nested: HOSTILE } }, HOSTILE, "evil", "run"));
    const card = page!.locator('#inbox li.card[data-id="h1"]');
    await card.waitFor();
    expect(await page!.evaluate("window.__xss")).toBeUndefined();
    expect(await page!.locator("#inbox img, #inbox script, #inbox b").count()).toBe(0);
    const intent = await card.locator("blockquote.intent").textContent();
    expect(intent).toContain(`<img src=x onerror="window.__xss='intent'">`);
    expect(intent).toContain("⟨U+001B⟩[31mred⟨U+001B⟩[0m ⟨U+202E⟩gnp.exe⟨U+202C⟩");
    expect(intent).toContain(`"q" \\u0041 &amp;`);
    expect(await card.locator(".tool-title").textContent()).toContain("<script>");
    // Only boolean hints become badges.
    expect(await card.locator(".hint").allTextContents()).toEqual(["destructive", "open world"]);
    expect(await card.locator("dl.args dt").allTextContents()).toEqual(["command", "<b>key</b>⟨U+202E⟩"]);
    expect(await card.locator("dl.args").textContent()).not.toContain("\u202E");

    // A huge intent (the most the gateway takes) is folded, not cut: "show all" has every line.
    const huge = Array.from({ length: 400 }, (_, i) => `reason ${i}`)
      .join("\n")
      .slice(0, 4000);
    bot.send(write("h2", { command: "x" }, huge, "evil", "run"));
    const big = page!.locator('#inbox li.card[data-id="h2"] blockquote.intent');
    await big.waitFor();
    expect(await big.locator(".line").count()).toBe(8);
    const lines = huge.split("\n").length;
    await big.getByRole("button", { name: `Show all ${lines} lines (${lines - 8} more)` }).click();
    expect(await big.locator(".line").count()).toBe(lines);
    expect(await big.locator(".line .tx").last().textContent()).toBe(huge.split("\n").at(-1));
  });

  it("shows a write to a real file as numbered lines with the intent, approves it, and shows the result in Decided; a tool error is tool_error everywhere", async () => {
    const bot = await setup();
    const content = '# Shopping\n\n- milk\n- eggs\n- "bread" <b>not bold</b>\n\tindented with a tab\nlast line';
    bot.send({ kind: "chat", payload: { text: "I keep your shopping list" } });
    bot.send(
      write(
        "w1",
        { path: join(dir, "notes.txt"), content },
        "You asked me to add bread to your shopping list, so I am rewriting notes.txt with it.",
      ),
    );
    const card = page!.locator('#inbox li.card[data-id="w1"]');
    await card.waitFor();
    expect(await card.locator("h3").textContent()).toBe("bot → fs/write_file");
    expect(await card.locator(".short-id").textContent()).toBe("#w1");
    expect(await card.locator("blockquote.intent .intent-label").textContent()).toBe("Why bot wants it:");
    expect(await card.locator("blockquote.intent .tx").allTextContents()).toEqual([
      "You asked me to add bread to your shopping list, so I am rewriting notes.txt with it.",
    ]);
    expect(await card.locator(".hint").allTextContents()).toEqual(["destructive", "not read-only", "idempotent", "closed world"]);
    expect(await card.locator(".why").textContent()).toMatch(/Needs approval: .*ask.*expires in \d+:\d\d/);
    // The content as the lines it is: numbered, unescaped, whole.
    const rows = card.locator("dl.args dd").nth(1).locator(".line");
    expect(await rows.count()).toBe(7);
    expect(await rows.nth(4).textContent()).toBe(`5- "bread" <b>not bold</b>`);
    expect(await rows.nth(5).locator(".tx").textContent()).toBe("\tindented with a tab");
    expect(await card.locator("dl.args").textContent()).not.toContain("\\n");
    // The countdown runs.
    const before = await card.locator(".expires").textContent();
    await waitFor(async () => (await card.locator(".expires").textContent()) !== before, 5000, "the countdown to tick");
    await shot("console-inbox");

    await card.getByRole("button", { name: "Approve", exact: true }).click();
    const done = page!.locator('#decided li[data-decided="w1"]');
    await done.locator(".outcome.ok").waitFor();
    expect(await done.locator(".why").textContent()).toMatch(/^approved by human at /);
    expect(await done.locator(".result").textContent()).toContain(`Successfully wrote to ${join(dir, "notes.txt")}`);
    expect(readFileSync(join(dir, "notes.txt"), "utf8")).toBe(content);

    // No intent: the card shows the proposer's last message.
    bot.send(write("w2", { path: join(dir, "n2.txt") }));
    const second = page!.locator('#inbox li.card[data-id="w2"]');
    await second.waitFor();
    expect(await second.locator("blockquote.intent").textContent()).toBe("bot's last message:1I keep your shopping list");
    // Approved without content, the tool refuses: a tool error, recorded as such everywhere.
    await second.getByRole("button", { name: "Approve", exact: true }).click();
    const failed = page!.locator('#decided li[data-decided="w2"]');
    await failed.locator(".outcome.tool_error").waitFor();
    expect(await failed.locator(".outcome").textContent()).toBe("tool error");
    expect(await failed.locator(".result").textContent()).toMatch(/content/i);
    const audit = (await api("GET", "audit")).body.entries as Array<Record<string, unknown>>;
    expect(audit.find((e) => e["proposal"] === "w2" && e["event"] === "answered")?.["outcome"]).toBe("tool_error");
    expect((await api("GET", "proposals?state=decided")).body.decided.find((d: { id: string }) => d.id === "w2").outcome).toBe(
      "tool_error",
    );
    const metrics = await (await fetch(`http://127.0.0.1:${gw!.port}/metrics`)).text();
    expect(metrics).toMatch(/^mewgate_calls_total\{space="cards",outcome="tool_error"\} 1$/m);
    await page!.locator("#decided").scrollIntoViewIfNeeded();
    await shot("console-decided");

    // The chat tab has the history from before the page opened.
    await page!.reload();
    await page!.locator("#conn.live").waitFor();
    await page!.getByRole("button", { name: /Chat/ }).click();
    await page!.locator("#activity").getByText("I keep your shopping list").waitFor();
  });

  it("approves and rejects several ticked cards at once, and the keys move, approve and show help", async () => {
    const bot = await setup();
    for (const n of [1, 2, 3]) bot.send(write(`b${n}`, { path: join(dir, `b${n}.txt`), content: `${n}` }));
    await page!.locator('#inbox li.card[data-id="b3"]').waitFor();
    for (const n of [1, 3]) await page!.locator(`#inbox li.card[data-id="b${n}"] input.pick`).check();
    await page!.getByRole("toolbar").getByRole("button", { name: "Approve 2" }).click();
    await page!.locator('#decided li[data-decided="b3"] .outcome.ok').waitFor();
    await page!.locator('#decided li[data-decided="b1"] .outcome.ok').waitFor();
    expect(existsSync(join(dir, "b1.txt")) && existsSync(join(dir, "b3.txt"))).toBe(true);
    expect((await api("GET", "proposals")).body.proposals.map((p: { id: string }) => p.id)).toEqual(["b2"]);
    // `j` moves over the cards drawn on the page: wait until the inbox is drawn without the two approved.
    for (const n of [1, 3]) await page!.locator(`#inbox li.card[data-id="b${n}"]`).waitFor({ state: "detached" });

    await page!.keyboard.press("j");
    expect(await page!.locator("#inbox li.card.focused").getAttribute("data-id")).toBe("b2");
    await page!.keyboard.press("?");
    expect(await page!.locator("dialog.ask dl.keys").textContent()).toContain("approve the selected proposal");
    await page!.keyboard.press("Escape");
    // The tool is destructive: `a` asks first, and Cancel approves nothing.
    await page!.keyboard.press("a");
    const confirm = page!.locator("dialog.ask", { hasText: "Approve a destructive call?" });
    await confirm.getByRole("button", { name: "Cancel" }).click();
    expect((await api("GET", "proposals")).body.proposals.map((p: { id: string }) => p.id)).toEqual(["b2"]);
    await page!.keyboard.press("a");
    await confirm.getByRole("button", { name: "Approve once" }).click();
    await page!.locator('#decided li[data-decided="b2"] .outcome.ok').waitFor();
    expect(readFileSync(join(dir, "b2.txt"), "utf8")).toBe("2");

    // Reject several at once: one reason, for each of them.
    for (const n of [4, 5]) bot.send(write(`b${n}`, { path: join(dir, `b${n}.txt`), content: `${n}` }));
    await page!.locator('#inbox li.card[data-id="b5"]').waitFor();
    for (const n of [4, 5]) await page!.locator(`#inbox li.card[data-id="b${n}"] input.pick`).check();
    await page!.getByRole("toolbar").getByRole("button", { name: "Reject 2" }).click();
    await page!.locator("#reject-reason").selectOption("unsafe");
    await page!.locator("#reject-send").click();
    await page!.locator('#decided li[data-decided="b5"]').waitFor();
    await page!.locator('#decided li[data-decided="b4"]').waitFor();
    const decided = (await api("GET", "proposals?state=decided")).body.decided as Array<Record<string, unknown>>;
    expect(
      decided
        .filter((d) => d["decision"] === "rejected")
        .map((d) => [d["id"], d["reason"]])
        .sort(),
    ).toEqual([
      ["b4", "unsafe"],
      ["b5", "unsafe"],
    ]);
    expect(existsSync(join(dir, "b4.txt")) || existsSync(join(dir, "b5.txt"))).toBe(false);
  });

  it("Respond reaches a real agent, which withdraws its proposal and proposes again as asked, with its own words as the intent", async () => {
    const model = await new ModelServer().start();
    servers.push(model);
    await setup({ model });
    model.reply(
      openaiReply({
        content: "I will save the list to list.txt.",
        tool_calls: [openaiToolCall("c1", "fs__write_file", { path: "/tmp/list.txt", content: "milk" })],
      }),
      // The second try: inside the folder server-filesystem serves.
      openaiReply({
        content: "Saving it under the folder you allowed instead.",
        tool_calls: [openaiToolCall("c2", "fs__write_file", { path: join(dir, "list.txt"), content: "milk" })],
      }),
      openaiReply({ content: "Saved." }),
    );
    const config = gw!.gateway.spaces.get("cards")!.config.participants["agent"]!.agent!;
    agents.push(
      await startAgent({ id: "agent", config, client: { url: gw!.url, space: "cards", token: T.agent, reconnect: false }, env: {} }),
    );
    await api("POST", "chat", { text: "@agent save my shopping list" });
    const first = page!.locator("#inbox li.card", { hasText: "/tmp/list.txt" });
    await first.waitFor();
    expect(await first.locator("blockquote.intent").textContent()).toContain("I will save the list to list.txt.");
    await first.getByRole("button", { name: "Respond" }).click();
    await page!.locator("#respond-text").fill("not in /tmp: use the notes folder");
    await page!.locator("dialog.ask").getByRole("button", { name: "Send" }).click();
    // The agent withdrew it and proposed again; its model read the answer.
    const again = page!.locator("#inbox li.card", { hasText: join(dir, "list.txt") });
    await again.waitFor({ timeout: 15_000 });
    expect(await page!.locator("#inbox li.card", { hasText: "/tmp/list.txt" }).count()).toBe(0);
    expect(await again.locator("blockquote.intent").textContent()).toContain("Saving it under the folder you allowed instead.");
    const told = JSON.stringify(model.requests[1]!.body.messages);
    expect(told).toContain('human answered your proposal instead of approving it: \\"not in /tmp: use the notes folder\\"');
    await again.getByRole("button", { name: "Approve", exact: true }).click();
    await waitFor(() => existsSync(join(dir, "list.txt")), 10_000, "the file written");
    const decided = (await api("GET", "proposals?state=decided")).body.decided as Array<Record<string, any>>;
    expect(decided.map((d) => d.decision).sort()).toEqual(["approved", "withdrawn"]);
  });

  it("checks an edit inline as it is typed, and keeps the Tools table's Policy column on one line at 1280 px", async () => {
    const bot = await setup();
    const evil = await toolOwner(
      gw!,
      "cards",
      T.evil,
      [
        {
          name: "count",
          description: "Counts",
          inputSchema: { type: "object", properties: { n: { type: "integer" }, mode: { enum: ["fast", "slow"] } }, required: ["n"] },
        },
      ],
      { onCall: (env, reply) => reply({ content: [{ type: "text", text: `counted ${JSON.stringify(env.payload.params.arguments)}` }] }) },
    );
    clients.push(evil);
    await waitFor(
      async () => (await api("GET", "tools")).body.tools.some((t: { name: string }) => t.name === "evil/count"),
      5000,
      "evil/count",
    );
    bot.send(write("n1", { n: 1, mode: "fast" }, "counting", "evil", "count"));
    await page!.locator('#inbox li.card[data-id="n1"]').getByRole("button", { name: "Edit" }).click();
    const form = page!.locator("dialog.ask");
    const send = form.getByRole("button", { name: "Approve with these arguments" });
    await form.locator('input[name="n"]').fill("1.5");
    expect(await form.locator('.field-error[data-for="n"]').textContent()).toBe("arguments.n must be of type integer");
    expect(await send.isDisabled()).toBe(true);
    await form.locator('input[name="n"]').fill("7");
    await form.locator('select[name="mode"]').selectOption({ label: "slow" });
    expect(await form.locator('.field-error[data-for="n"]').textContent()).toBe("");
    expect(await form.locator("#edit-form-diff .add").allTextContents()).toEqual(["+ n: 7", "+ mode: slow"]);
    await send.click();
    await page!.locator('#decided li[data-decided="n1"] .outcome.ok').waitFor();
    expect(await page!.locator('#decided li[data-decided="n1"]').textContent()).toContain('counted {"n":7,"mode":"slow"}');
    expect(await page!.locator('#decided li[data-decided="n1"] .why').textContent()).toContain("with edited arguments");

    await page!.getByRole("button", { name: /Participants/ }).click();
    const head = page!.locator("#tools th", { hasText: "Policy" });
    const cell = page!.locator("#tools tr", { hasText: "fs/write_file" }).locator("td").nth(1);
    await cell.waitFor();
    const lineHeight = (await page!.locator("#tools th").first().boundingBox())!.height;
    expect((await head.boundingBox())!.height).toBeLessThanOrEqual(lineHeight);
    // The policy word on one line, whole: not squeezed to "Po/lic/y" by the long descriptions.
    expect(
      await cell.evaluate((td) => {
        const text = td.ownerDocument.createRange();
        text.selectNodeContents(td);
        return [td.textContent, td.scrollWidth <= td.clientWidth, text.getClientRects().length];
      }),
    ).toEqual(["direct", true, 1]);
    await shot("console-tools");
  });

  it("fits a phone: the card, its lines and its buttons, with no sideways scrolling", async () => {
    const bot = await setup({ viewport: { width: 390, height: 844 } });
    bot.send(
      write(
        "m1",
        { path: join(dir, "notes.txt"), content: `a very long line ${"word ".repeat(80)}\nsecond line` },
        "Adding your list to notes.txt, as you asked.",
      ),
    );
    const card = page!.locator('#inbox li.card[data-id="m1"]');
    await card.waitFor();
    // Measured once the preview (its diff has the long line) has answered, not before it is drawn.
    await card.locator("section.preview[aria-busy=false]").waitFor({ state: "attached" });
    expect((await page!.evaluate("document.documentElement.scrollWidth - window.innerWidth")) as number).toBeLessThanOrEqual(0);
    await shot("console-phone");
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    await page!.locator('#decided li[data-decided="m1"] .outcome.ok').waitFor();
  });
});
