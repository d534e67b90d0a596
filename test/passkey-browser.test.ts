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
    // What the passkey approves is drawn first (the page reads the proposal): approve once it is there, as a person would.
    await page!.getByText(/agent asks to call notes\/transfer with:/).waitFor();
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

  it("a program holding the session of a person who has a passkey cannot enrol a key of its own; the person adds one with theirs", {
    timeout: 60_000,
  }, async () => {
    await setup();
    await register();
    // The program's own authenticator, in a browser of its own, with alice's token: a genuine key, made for her options.
    const rogue = await browser!.newContext();
    try {
      const rp = await rogue.newPage();
      const cdp = await rogue.newCDPSession(rp);
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
      await rp.goto(`${base()}/ui/passkey.html#space=pk&token=${T.alice}`);
      const tries = await rp.evaluate(async (token) => {
        const w = globalThis as unknown as {
          fetch: typeof fetch;
          navigator: {
            credentials: { create(o: unknown): Promise<{ toJSON(): unknown }>; get(o: unknown): Promise<{ toJSON(): unknown }> };
          };
          PublicKeyCredential: { parseCreationOptionsFromJSON(o: unknown): unknown };
        };
        const call = async (path: string, body: unknown) => {
          const r = await w.fetch(`/api/spaces/pk/${path}`, {
            method: "POST",
            headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
            body: JSON.stringify(body),
          });
          return { status: r.status, body: (await r.json()) as { confirm?: unknown; error?: { code: string; message: string } } };
        };
        const out: Array<{ status: number; code?: string; message?: string; asked: boolean }> = [];
        // Without a confirmation, then with its own new key's word for it (not one of hers).
        for (const withConfirm of [false, true]) {
          const asked = await call("passkeys/options", {});
          const { confirm, ...options } = asked.body;
          const made = await w.navigator.credentials.create({ publicKey: w.PublicKeyCredential.parseCreationOptionsFromJSON(options) });
          const response = made.toJSON() as { id: string };
          const r = await call("passkeys/register", { response, ...(withConfirm ? { confirm: response } : {}) });
          out.push({ status: r.status, code: r.body.error?.code, message: r.body.error?.message, asked: confirm !== undefined });
        }
        return out;
      }, T.alice);
      for (const t of tries) expect(t).toMatchObject({ status: 400, code: "passkey_invalid", asked: true });
      expect(tries[0]!.message).toMatch(/adding another needs one you have/);
      expect(tries[1]!.message).toMatch(/not one of yours/);
    } finally {
      await rogue.close();
    }
    expect((await api(T.alice, "GET", "passkeys")).body.passkeys).toHaveLength(1);

    // The person adds a second on another authenticator of hers, confirming with the first.
    const cdp: CDPSession = await page!.context().newCDPSession(page!);
    await cdp.send("WebAuthn.enable");
    const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
      options: { protocol: "ctap2", transport: "usb", hasResidentKey: true, hasUserVerification: true, isUserVerified: true },
    });
    expect(authenticatorId).toBeTruthy();
    await page!.getByRole("button", { name: "Register a passkey" }).click();
    // The list redrawn with the second (the message already said "registered" of the first).
    await page!.locator("#keys li").nth(1).waitFor();
    expect(await page!.locator("#message").textContent()).toBe("Passkey registered.");
    expect((await api(T.alice, "GET", "passkeys")).body.passkeys).toHaveLength(2);
  });

  it("a passkey approves one call: no grant is made with one; the card leads to the page, which shows what runs", {
    timeout: 60_000,
  }, async () => {
    const { calls, agent } = await setup();
    await register();
    const id = await propose(agent, "transfer", { amount: 70, to: "carol" });
    // A valid assertion for this very call, offered for an "always": refused, no grant, nothing runs.
    const always = await api(T.alice, "POST", `proposals/${id}/approve`, { scope: "always", passkey: await sign(id) });
    expect(always.status).toBeGreaterThanOrEqual(400);
    expect(always.body.error.message).toMatch(/for this call alone: approve it once/);
    expect((await api(T.alice, "GET", "grants")).body.grants ?? []).toHaveLength(0);
    expect(calls).toHaveLength(0);

    // The console's card, at the address `up` prints (an IP, where passkeys do not work): no
    // "Always…", a link to the passkey page at this proposal, at localhost.
    await page!.goto(`http://127.0.0.1:${gw!.port}/ui/#space=pk&token=${T.alice}`);
    await page!.locator("#conn.live").waitFor();
    const card = page!.locator(`li.card[data-id="${id}"]`);
    await card.waitFor();
    expect(await card.getByRole("button", { name: "Always…" }).count()).toBe(0);
    const link = card.getByRole("link", { name: "approve it with your passkey" });
    expect(await link.getAttribute("href")).toBe(`${base()}/ui/passkey.html#space=pk&proposal=${id}`);
    // Followed: the page speaks with the console tab's token (carried over, then out of the address bar), and shows the arguments that will run.
    await link.click();
    await page!.getByText(/agent asks to call notes\/transfer with:/).waitFor();
    expect(page!.url()).toBe(`${base()}/ui/passkey.html#space=pk&proposal=${id}`);
    expect(await page!.locator("#arguments").textContent()).toMatch(/amount[\s\S]*70[\s\S]*to[\s\S]*carol/);
    await page!.getByRole("button", { name: "Approve with passkey" }).click();
    await page!.getByText("Approved with your passkey.").waitFor();
    await waitFor(() => calls.length === 1);
    expect(calls[0]!.payload.params.arguments).toEqual({ amount: 70, to: "carol" });
  });

  it("by risk: a call the gateway rates high needs the passkey, whatever its tool; a low one does not", { timeout: 30_000 }, async () => {
    gw = await startGateway(SPACE.replace('policy: {passkey: {tools: ["notes/transfer"]}}', "policy: {passkey: {tools: [], risk: high}}"));
    const calls: Env[] = [];
    const notes = await toolOwner(
      gw,
      "pk",
      T.notes,
      [
        // No hints: destructive by MCP's defaults (high).
        { name: "wipe", inputSchema: { type: "object" } },
        { name: "look", inputSchema: { type: "object" }, annotations: { readOnlyHint: true, openWorldHint: false } },
      ],
      {
        onCall: (env, reply) => {
          calls.push(env);
          reply({ content: [{ type: "text", text: "done" }] });
        },
      },
    );
    const agent = await TestClient.join(gw, "pk", T.agent);
    clients.push(notes, agent);
    const wipe = await propose(agent, "wipe", { all: true });
    expect((await api(T.alice, "GET", `proposals/${wipe}`)).body.risk?.level).toBe("high");
    const refused = await api(T.alice, "POST", `proposals/${wipe}/approve`, {});
    expect(refused.body.error?.code).toBe("passkey_required");
    // The terminal says so before and when one tries, and where: the card, then the refusal.
    const { runProposals } = await import("../cli/commands.js");
    let out = "";
    const sink = {
      write: (t: string) => {
        out += t;
        return true;
      },
    };
    const io = { stdout: sink, stderr: sink, env: {} } as never;
    const common = { gateway: `ws://127.0.0.1:${gw.port}`, space: "pk", token: T.alice };
    const page = `/ui/passkey.html#space=pk&proposal=${wipe}`;
    expect(await runProposals("show", wipe, common, io)).toBe(0);
    expect(out).toMatch(
      new RegExp(
        `approving needs your passkey, for this call alone: in a browser at http://localhost:\\d+${page.replace(/[.?#&]/g, "\\$&")}`,
      ),
    );
    out = "";
    expect(await runProposals("approve", wipe, { ...common, waitMs: 500 }, io)).not.toBe(0);
    expect(out).toContain(page);
    expect(calls).toHaveLength(0);
    const look = await propose(agent, "look", { n: 1 });
    expect((await api(T.alice, "GET", `proposals/${look}/passkey`)).body).toEqual({ required: false });
    expect((await api(T.alice, "POST", `proposals/${look}/approve`, {})).status).toBe(200);
    await waitFor(() => calls.length === 1);
    expect(calls.map((c) => c.payload.params.name)).toEqual(["look"]);
  });

  it("by risk: what a guard holds a call for counts, as on its card: a read-only call holding an email address needs the passkey", {
    timeout: 30_000,
  }, async () => {
    const held = "policy: {passkey: {tools: [], risk: high}}\nguards:\n  - {name: personal, detect: personal, action: hold, on: arguments}";
    gw = await startGateway(SPACE.replace('policy: {passkey: {tools: ["notes/transfer"]}}', held));
    const calls: Env[] = [];
    const notes = await toolOwner(
      gw,
      "pk",
      T.notes,
      [{ name: "look", inputSchema: { type: "object" }, annotations: { readOnlyHint: true, openWorldHint: false } }],
      {
        onCall: (env, reply) => {
          calls.push(env);
          reply({ content: [{ type: "text", text: "done" }] });
        },
      },
    );
    const agent = await TestClient.join(gw, "pk", T.agent);
    clients.push(notes, agent);
    // Unheld, an email address in a read-only call is medium (personal data, a first use).
    const look = await propose(agent, "look", { to: "carol@example.com" });
    const card = (await api(T.alice, "GET", `proposals/${look}`)).body;
    expect(card.risk?.level).toBe("high");
    expect(card.risk?.reasons.map((r: { code: string }) => r.code)).toContain("guard");
    expect((await api(T.alice, "GET", `proposals/${look}/passkey`)).body).toMatchObject({ required: true });
    expect((await api(T.alice, "POST", `proposals/${look}/approve`, {})).body.error?.code).toBe("passkey_required");
    expect(calls).toHaveLength(0);
  });

  it("a passkey is a person's: an agent cannot register one", { timeout: 30_000 }, async () => {
    await setup();
    const r = await api(T.agent, "POST", "passkeys/options", {});
    expect([r.status, r.body.error.code]).toEqual([403, "not_a_person"]);
  });
});
