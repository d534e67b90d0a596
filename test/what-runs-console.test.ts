/**
 * What runs, in the web console (real headless Chromium against a real gateway): the second
 * approver's card shows the arguments the first approver edited, and who edited them, and its
 * Approve confirms exactly those, so the call runs with what the card showed.
 */
import type { Browser, Page } from "playwright-core";
import { launchChromium, openConsoleAs } from "./fixtures/chromium.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startGateway, TestClient, toolOwner, waitFor, type Env, type TestGateway } from "./helpers.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SPACE = `
space: {id: wrc}
participants:
  alice: {kind: human, token: ${TOKEN("alice")}}
  bob: {kind: human, token: ${TOKEN("bob")}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent:
    kind: agent
    token: ${TOKEN("agent")}
    tools: {ask: ["fs/write_file"]}
    approvers: [alice, bob]
    approvals: 2
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }];

let browser: Browser;
let page: Page | undefined;
let gw: TestGateway | undefined;
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

describe("what runs in the console", () => {
  it("the second approver's card shows the edited arguments and who edited them, and its Approve runs exactly those", async () => {
    gw = await startGateway(SPACE);
    const runs: Env[] = [];
    clients.push(
      await toolOwner(gw, "wrc", TOKEN("fs"), TOOLS, {
        onCall: (env, reply) => {
          runs.push(env);
          return reply({ content: [{ type: "text", text: "ok" }] });
        },
      }),
    );
    const agent = await TestClient.join(gw, "wrc", TOKEN("agent"));
    clients.push(agent);
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(8000);
    await openConsoleAs(page, gw.port, "wrc", TOKEN("bob"));
    agent.send({
      id: "k1",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a.txt" } } },
    });
    const card = page.locator('#inbox li.card[data-id="k1"]');
    await card.waitFor();
    expect(await card.locator("dl.args").textContent()).toContain("a.txt");
    // Alice approves first, through the API, with other arguments.
    const res = await fetch(`http://127.0.0.1:${gw.port}/api/spaces/wrc/proposals/k1/approve`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN("alice")}`, "content-type": "application/json" },
      body: JSON.stringify({ arguments: { path: "b.txt" } }),
    });
    expect(res.status).toBe(200);
    await waitFor(async () => ((await card.locator("dl.args").textContent()) ?? "").includes("b.txt"), 8000, "bob's card follows the edit");
    expect(await card.textContent()).toMatch(/Arguments edited by alice/);
    await card.locator("button.approve").first().click();
    await waitFor(() => runs.length === 1, 8000, "bob's approval runs the call");
    expect(runs[0]!.payload.params.arguments).toEqual({ path: "b.txt" });
  });
});
