/**
 * Passkey confirmation of approvals (gateway/proposals/passkey-bar.ts, identity/passkeys.ts,
 * ui/passkey.html), in headless Chromium with a virtual authenticator (the CDP WebAuthn
 * domain). Hostile first: an agent holding the person's session clicks Approve in the console
 * and calls the API and the wire — nothing runs; an assertion for another call, and one whose
 * challenge was superseded, are refused; then the person registers a passkey and approves with
 * it, the tool runs once, and the receipt records the passkey.
 */
import type { Browser, CDPSession, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { launchChromium } from "./fixtures/chromium.js";
import { type Env, startGateway, TestClient, type TestGateway, toolOwner, waitFor } from "./helpers.js";

const T = {
  alice: "alice-token-passkey-01",
  bob: "bob-token-passkey-0002",
  agent: "agent-token-passkey-03",
  notes: "notes-token-passkey-04",
};
const SPACE = `
space: {id: pk}
policy: {passkey: {tools: ["notes/transfer"]}}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["notes/*"]}}
  notes: {kind: mcp, token: ${T.notes}}
`;

let browser: Browser | undefined;
let page: Page | undefined;
let gw: TestGateway | undefined;
const clients: TestClient[] = [];
beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);
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

async function setup() {
  gw = await startGateway(SPACE);
  const calls: Env[] = [];
  const notes = await toolOwner(
    gw,
    "pk",
    T.notes,
    [
      { name: "transfer", inputSchema: { type: "object" } },
      { name: "write", inputSchema: { type: "object" } },
    ],
    {
      onCall: (env, reply) => {
        calls.push(env);
        reply({ content: [{ type: "text", text: "done" }] });
      },
    },
  );
  const agent = await TestClient.join(gw, "pk", T.agent);
  const bob = await TestClient.join(gw, "pk", T.bob);
  clients.push(notes, agent, bob);
  page = await browser!.newPage();
  // A passkey's relying party is a host name: the page is opened at localhost, as a person's browser would.
  const cdp: CDPSession = await page.context().newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return { calls, agent, bob };
}

let n = 0;
async function propose(agent: TestClient, tool: string, args: Record<string, unknown>): Promise<string> {
  const id = `pk-${++n}`;
  agent.send({ id, kind: "mcp/proposal", to: ["notes"], payload: { method: "tools/call", params: { name: tool, arguments: args } } });
  await waitFor(async () => (await api(T.alice, "GET", `proposals/${id}`)).status === 200);
  return id;
}

async function api(token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${gw!.port}/api/spaces/pk/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: await res.json() };
}

const base = () => `http://localhost:${gw!.port}`;

async function register(): Promise<void> {
  await page!.goto(`${base()}/ui/passkey.html#space=pk&token=${T.alice}`);
  await page!.getByText("none yet").waitFor();
  await page!.getByRole("button", { name: "Register a passkey" }).click();
  await page!.getByText("Passkey registered.").waitFor();
}

/** In the page (alice's passkey): an assertion over the options the API gives for `proposal`. */
function sign(proposal: string): Promise<unknown> {
  // Runs in the page: the DOM's names are the browser's, not this file's.
  return page!.evaluate(
    async ([id, token]) => {
      const w = globalThis as unknown as {
        fetch: typeof fetch;
        navigator: { credentials: { get(o: unknown): Promise<{ toJSON(): unknown }> } };
        PublicKeyCredential: { parseRequestOptionsFromJSON(o: unknown): unknown };
      };
      const r = await w.fetch(`/api/spaces/pk/proposals/${id}/passkey`, { headers: { authorization: `Bearer ${token}` } });
      const asked = (await r.json()) as { options: unknown };
      const c = await w.navigator.credentials.get({ publicKey: w.PublicKeyCredential.parseRequestOptionsFromJSON(asked.options) });
      return c.toJSON();
    },
    [proposal, T.alice] as const,
  );
}

describe("passkey confirmation: hostile first", () => {
  it("an agent holding the person's session clicks Approve, calls the API and the wire: refused, pointed at the passkey page, nothing runs", {
    timeout: 60_000,
  }, async () => {
    const { calls, agent, bob } = await setup();
    await register();
    const id = await propose(agent, "transfer", { amount: 5000 });
    // The console, signed in as alice (the session an agent in her browser holds): Approve.
    await page!.goto(`${base()}/ui/#space=pk&token=${T.alice}`);
    await page!.locator("#conn.live").waitFor();
    const card = page!.locator(`li.card[data-id="${id}"]`);
    await card.waitFor();
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    await page!
      .getByText(/needs your passkey/)
      .first()
      .waitFor();
    // The API with her token, with an empty or made-up assertion.
    for (const passkey of [undefined, {}, { id: "x", response: {} }, { id: "A".repeat(5000) }]) {
      const r = await api(T.alice, "POST", `proposals/${id}/approve`, passkey === undefined ? {} : { passkey });
      expect(r.status, String(JSON.stringify(passkey)).slice(0, 40)).toBeGreaterThanOrEqual(400);
      expect(r.body.error.code).toBe("passkey_required");
      expect(r.body.error.message).toContain(`/ui/passkey.html#space=pk&proposal=${id}`);
    }
    // The wire: another person approving without one.
    bob.send({ kind: "mcp/approve", correlation_id: [id], payload: { scope: "once" } });
    const err = await bob.next((e) => e.kind === "system/error" && e.payload?.code === "passkey_required");
    expect(err.payload.message).toMatch(/needs your passkey/);
    // A call that needs none is approved as ever.
    const plain = await propose(agent, "write", { text: "hi" });
    expect((await api(T.alice, "POST", `proposals/${plain}/approve`, {})).status).toBe(200);
    await waitFor(() => calls.length === 1);
    expect(calls[0]!.payload.params.name).toBe("write");
    expect((await api(T.alice, "GET", `proposals/${id}`)).body.state).toBe("pending");
  });

  it("an assertion for another call, or over a superseded challenge, approves nothing; the right one runs the call once and the receipt says so", {
    timeout: 60_000,
  }, async () => {
    const { calls, agent } = await setup();
    await register();
    const small = await propose(agent, "transfer", { amount: 5 });
    const large = await propose(agent, "transfer", { amount: 5000 });
    await page!.goto(`${base()}/ui/passkey.html#space=pk&token=${T.alice}`);
    await page!.locator("#keys li").first().waitFor();
    // Signed for the small one, shown with the large one while a challenge of the large one is open.
    const forSmall = await sign(small);
    expect((await api(T.alice, "GET", `proposals/${large}/passkey`)).body).toMatchObject({ required: true, has_passkey: true });
    const other = await api(T.alice, "POST", `proposals/${large}/approve`, { passkey: forSmall });
    expect(other.body.error?.code).toBe("passkey_required");
    // Signed, then a new challenge asked for the same call: the first assertion is stale.
    const stale = await sign(large);
    await sign(large);
    const r = await api(T.alice, "POST", `proposals/${large}/approve`, { passkey: stale });
    expect(r.body.error?.code).toBe("passkey_required");
    expect(calls).toHaveLength(0);

    // The person, on the passkey page, approves the small one.
    await page!.goto("about:blank");
    await page!.goto(`${base()}/ui/passkey.html#space=pk&token=${T.alice}&proposal=${small}`);
    await page!.getByRole("button", { name: "Approve with passkey" }).click();
    await page!.getByText("Approved with your passkey.").waitFor();
    await waitFor(() => calls.length === 1);
    expect(calls[0]!.payload.params.arguments).toEqual({ amount: 5 });
    const receipt = calls[0]!.payload.params._meta["mewgate/receipt"] as string;
    const claims = JSON.parse(Buffer.from(receipt.split(".")[1]!, "base64url").toString());
    expect(claims.passkey).toMatchObject({ credential: expect.any(String), challenge: expect.any(String) });
    expect(claims.approvers).toEqual(["alice"]);
    // The large one still waits; a replay of the small one's proof cannot move it.
    expect((await api(T.alice, "POST", `proposals/${large}/approve`, { passkey: forSmall })).body.error?.code).toBe("passkey_required");
    expect(calls).toHaveLength(1);
  });

  it("a passkey is a person's: an agent cannot register one", { timeout: 30_000 }, async () => {
    await setup();
    const r = await api(T.agent, "POST", "passkeys/options", {});
    expect([r.status, r.body.error.code]).toEqual([403, "not_a_person"]);
  });
});
