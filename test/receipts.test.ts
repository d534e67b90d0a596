/**
 * Signed approval receipts (gateway/proposals/receipts.ts): an approved call reaches a real MCP
 * server (a stdio fixture behind the bridge) carrying a compact JWS it checks itself against
 * the gateway's JWKS URL. Hostile first: a receipt replayed with a second call, one shown with
 * other arguments, every bound field altered, a key the space never had, `alg: none`, a
 * participant's own `_meta["mewgate/receipt"]` on a direct call; then the API, the audit
 * trail, the offline verifier and a key rotation.
 */
import { generateKeyPairSync } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Writable } from "node:stream";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { calculateJwkThumbprint, SignJWT } from "jose";
import { afterEach, describe, expect, it } from "vitest";
import { startBridge, type Bridge } from "../participants/bridge/bridge.js";
import { verifyReceipt } from "../gateway/proposals/receipt-check.js";
import { argumentsDigest, readJwks, type ReceiptClaims } from "../gateway/proposals/receipts.js";
import { runReceiptsRotate, runReceiptsVerify } from "../cli/audit-receipts.js";
import { type Env, startGateway, TestClient, type TestGateway, waitFor } from "./helpers.js";

const SERVER = fileURLToPath(new URL("./fixtures/bridge/receipt-server.mjs", import.meta.url));
const T = { alice: "alice-token-rcpt-1", bob: "bob-token-rcpt-002", agent: "agent-token-rcpt-3", vault: "vault-token-rcpt-4" };
const SPACE = `
space: {id: rcp}
participants:
  alice: {kind: human, token: ${T.alice}}
  bob: {kind: human, token: ${T.bob}}
  agent:
    kind: agent
    token: ${T.agent}
    capabilities:
      - {kind: mcp/proposal}
      - {kind: mcp/request, to: [vault], payload: {method: tools/call, params: {name: peek}}}
  vault: {kind: mcp, token: ${T.vault}}
`;

let gw: TestGateway | undefined;
const bridges: Bridge[] = [];
const clients: TestClient[] = [];
const mcp: Client[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  await Promise.all(mcp.splice(0).map((c) => c.close()));
  await Promise.all(bridges.splice(0).map((b) => b.stop()));
  await gw?.stop();
  gw = undefined;
});

function io() {
  let out = "";
  let err = "";
  const sink = (add: (s: string) => void) =>
    new Writable({
      write(chunk, _e, cb) {
        add(String(chunk));
        cb();
      },
    });
  return {
    io: { stdout: sink((s) => (out += s)), stderr: sink((s) => (err += s)), env: {} },
    out: () => out,
    err: () => err,
  };
}

async function start() {
  gw = await startGateway(SPACE);
  const jwksUrl = `${gw.url.replace(/^ws/, "http")}/api/spaces/rcp/receipts/jwks.json`;
  const env = { RECEIPT_JWKS_URL: jwksUrl, RECEIPT_SPACE: "rcp" };
  const b = await startBridge({
    id: "vault",
    server: { command: process.execPath, args: [SERVER], env },
    client: { url: gw.url, space: "rcp", token: T.vault },
    restart: { initialDelayMs: 50, maxDelayMs: 200 },
  });
  bridges.push(b);
  const alice = await TestClient.join(gw, "rcp", T.alice);
  const agent = await TestClient.join(gw, "rcp", T.agent);
  clients.push(alice, agent);
  await waitFor(() => gw!.gateway.spaces.get("rcp")!.registry.resolve("vault/transfer") !== undefined, 10_000, "vault's tools");
  return { alice, agent, jwksUrl, env, stateDir: join(gw.dir, ".mewgate") };
}

/** The agent proposes `transfer(args)`, alice approves it; the agent's answer. */
async function approved(alice: TestClient, agent: TestClient, id: string, args: Record<string, unknown>): Promise<Env> {
  agent.send({ id, kind: "mcp/proposal", to: ["vault"], payload: { method: "tools/call", params: { name: "transfer", arguments: args } } });
  await alice.next((e) => e.kind === "mcp/proposal" && e.id === id);
  alice.send({ kind: "mcp/approve", correlation_id: [id], payload: { scope: "once" } });
  return agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === id, 10_000);
}

async function api(path: string, token?: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${gw!.url.replace(/^ws/, "http")}/api/spaces/rcp/${path}`, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
  return { status: res.status, body: await res.json() };
}

/** `jws` with its claims changed and its signature left as it was. */
function tampered(jws: string, change: (c: Record<string, unknown>) => void): string {
  const [h, p, s] = jws.split(".") as [string, string, string];
  const claims = JSON.parse(Buffer.from(p, "base64url").toString()) as Record<string, unknown>;
  change(claims);
  return `${h}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${s}`;
}

/** The fixture server alone, as an attacker holding a captured receipt would reach it. */
async function directToServer(env: Record<string, string>): Promise<Client> {
  const c = new Client({ name: "attacker", version: "1" });
  await c.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER], env: { ...process.env, ...env } as never }));
  mcp.push(c);
  return c;
}

const text = (r: any): string => r.content?.[0]?.text ?? "";

describe("approval receipts", () => {
  it("a server refuses a captured receipt replayed, shown with other arguments, or with any bound field changed", async () => {
    const { alice, agent, env, stateDir } = await start();
    const ok = await approved(alice, agent, "p-ok", { to: "carol", amount: 5 });
    expect(ok.payload.result.isError).toBeFalsy();
    const receipt = (await api("proposals/p-ok/receipt", T.bob)).body.receipt as string;
    expect(receipt.split(".")).toHaveLength(3);

    // At the server itself: the same receipt twice (the first use is the attacker's, the
    // server has not seen it: it was another process), then with other arguments.
    const direct = await directToServer(env);
    const call = (args: Record<string, unknown>, r: string) =>
      direct.callTool({ name: "transfer", arguments: args, _meta: { "mewgate/receipt": r } });
    expect(text(await call({ to: "mallory", amount: 5000 }, receipt))).toBe("refused: receipt for other arguments");
    expect(text(await call({ to: "carol", amount: 5 }, receipt))).toBe("sent 5 to carol");
    expect(text(await call({ to: "carol", amount: 5 }, receipt))).toBe("refused: receipt replayed");
    // A changed field breaks the signature, whichever it is.
    expect(
      text(
        await call(
          { to: "mallory", amount: 5000 },
          tampered(receipt, (c) => (c["args"] = argumentsDigest({ to: "mallory", amount: 5000 }))),
        ),
      ),
    ).toMatch(/^refused: bad signature/);

    const jwks = readJwks(stateDir);
    const fields: Array<keyof ReceiptClaims> = [
      "space",
      "proposal",
      "decision",
      "proposer",
      "owner",
      "tool",
      "method",
      "approvers",
      "decider",
      "args",
      "definition",
      "policy",
      "proposed_at",
      "decided_at",
      "iat",
      "iss",
      "sub",
      "jti",
    ];
    expect((await verifyReceipt(receipt, jwks)).ok).toBe(true);
    for (const f of fields) {
      const bad = tampered(receipt, (c) => (c[f] = f === "approvers" ? ["mallory"] : f === "iat" ? 1 : `x${String(c[f])}`));
      const r = await verifyReceipt(bad, jwks);
      expect(r.ok, f).toBe(false);
    }
    // Another key's signature over the same claims, and `alg: none`.
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const claims = JSON.parse(Buffer.from(receipt.split(".")[1]!, "base64url").toString()) as Record<string, unknown>;
    const kid = await calculateJwkThumbprint(publicKey.export({ format: "jwk" }) as never);
    const forged = await new SignJWT(claims).setProtectedHeader({ alg: "EdDSA", typ: "mewgate-receipt+jwt", kid }).sign(privateKey);
    expect(await verifyReceipt(forged, jwks)).toMatchObject({ ok: false, code: "receipt_unknown_key" });
    const sameKid = await new SignJWT(claims)
      .setProtectedHeader({ alg: "EdDSA", typ: "mewgate-receipt+jwt", kid: jwks.keys[0]!.kid })
      .sign(privateKey);
    expect(await verifyReceipt(sameKid, jwks)).toMatchObject({ ok: false, code: "receipt_invalid" });
    const none = `${Buffer.from(JSON.stringify({ alg: "none", typ: "mewgate-receipt+jwt" })).toString("base64url")}.${receipt.split(".")[1]}.`;
    expect((await verifyReceipt(none, jwks)).ok).toBe(false);
    for (const junk of [undefined, 42, "", "a.b", "x".repeat(20_000), `${receipt}.x`, receipt.replace(/\./g, "\u0000")])
      expect((await verifyReceipt(junk, jwks)).ok).toBe(false);
    // With what the checker knows of the call: another tool, another space, a replay.
    expect(await verifyReceipt(receipt, jwks, { tool: "vault/peek" })).toMatchObject({ code: "receipt_other_call" });
    expect(await verifyReceipt(receipt, jwks, { space: "other" })).toMatchObject({ code: "receipt_other_call" });
    expect(await verifyReceipt(receipt, jwks, { arguments: { amount: 5, to: "carol" }, tool: "transfer" })).toMatchObject({ ok: true });
    const seen = new Set<string>();
    expect((await verifyReceipt(receipt, jwks, { seen })).ok).toBe(true);
    expect(await verifyReceipt(receipt, jwks, { seen })).toMatchObject({ code: "receipt_replayed" });
  });

  it("a participant's own receipt in a call's _meta never reaches the server: only the gateway stamps one, on an approved call", async () => {
    const { alice, agent } = await start();
    await approved(alice, agent, "p-1", { to: "carol", amount: 1 });
    const receipt = (await api("proposals/p-1/receipt", T.alice)).body.receipt as string;
    for (const forged of [receipt, { r: receipt }, ""]) {
      const id = `peek-${typeof forged}-${String(forged).length}`;
      agent.send({
        id,
        kind: "mcp/request",
        to: ["vault"],
        payload: {
          jsonrpc: "2.0",
          id,
          method: "tools/call",
          params: { name: "peek", arguments: {}, _meta: { "mewgate/receipt": forged } },
        },
      });
      const r = await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === id, 10_000);
      expect(JSON.parse(r.payload.result.content[0].text)).toEqual({ receipt: null });
    }
    // A proposal carrying its own receipt: the approved call carries the gateway's, not it.
    agent.send({
      id: "p-2",
      kind: "mcp/proposal",
      to: ["vault"],
      payload: {
        method: "tools/call",
        params: { name: "transfer", arguments: { to: "carol", amount: 1 }, _meta: { "mewgate/receipt": receipt } },
      },
    });
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p-2");
    alice.send({ kind: "mcp/approve", correlation_id: ["p-2"], payload: {} });
    const r = await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.[0] === "p-2", 10_000);
    expect(r.payload.result.isError).toBeFalsy();
    expect(r.payload.result.structuredContent.proposal).toBe("p-2");
  });

  it("binds the decision the audit trail records; the API serves it and the JWKS; the offline verifier checks both; a rotated key leaves old receipts good", async () => {
    const { alice, agent, stateDir } = await start();
    const r = await approved(alice, agent, "p-a", { to: "carol", amount: 7 });
    const sc = r.payload.result.structuredContent;
    expect(sc).toMatchObject({ approvers: ["alice"], proposal: "p-a", decider: "person" });
    expect(sc.decision).toMatch(/^dec_[A-Za-z0-9_-]{22}$/);
    const audit = gw!.gateway.spaces.get("rcp")!.ledger.audit({});
    const entry = audit.find((e) => e.proposal === "p-a" && e.event === "approved")!;
    expect(entry.decision).toBe(sc.decision);
    expect(audit.find((e) => e.proposal === "p-a" && e.event === "answered")?.decision).toBe(sc.decision);
    expect(audit.find((e) => e.proposal === "p-a" && e.event === "proposed")?.decision).toBeUndefined();

    // The JWKS needs no sign-in; the receipt does.
    const keys = await api("receipts/jwks.json");
    expect(keys.status).toBe(200);
    expect(keys.body.keys).toHaveLength(1);
    expect(keys.body.keys[0]).not.toHaveProperty("d");
    expect((await api("proposals/p-a/receipt")).status).toBe(401);
    expect((await api("proposals/nope/receipt", T.alice)).status).toBe(404);
    const served = await api("proposals/p-a/receipt", T.alice);
    expect(served.body).toMatchObject({ receipt: entry.receipt, decision: sc.decision });
    // Written once, in the approval's audit entry: the proposal's own record does not copy it.
    const journal = readFileSync(join(stateDir, "journal"), "latin1");
    expect(journal.split(entry.receipt!).length - 1).toBe(1);
    expect(statSync(join(stateDir, "receipts", "key.jwk")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(stateDir, "receipts", "jwks.json"), "utf8")).not.toContain('"d"');

    // A rejection and a withdrawal get decision ids too (no receipt: nothing ran).
    agent.send({
      id: "p-r",
      kind: "mcp/proposal",
      to: ["vault"],
      payload: { method: "tools/call", params: { name: "transfer", arguments: { to: "x", amount: 1 } } },
    });
    await alice.next((e) => e.kind === "mcp/proposal" && e.id === "p-r");
    alice.send({ kind: "mcp/reject", correlation_id: ["p-r"], payload: { reason: "disagree" } });
    await waitFor(() =>
      gw!.gateway.spaces
        .get("rcp")!
        .ledger.audit({})
        .some((e) => e.proposal === "p-r" && e.event === "rejected"),
    );
    const rejected = gw!.gateway.spaces
      .get("rcp")!
      .ledger.audit({})
      .find((e) => e.proposal === "p-r" && e.event === "rejected")!;
    expect(rejected.decision).toMatch(/^dec_/);
    expect(rejected.receipt).toBeUndefined();

    // Offline: every receipt in the trail, then one given, then one for other arguments.
    let o = io();
    expect(await runReceiptsVerify(undefined, { stateDir }, o.io)).toBe(0);
    expect(o.out()).toContain("1 of 1 receipt(s) verified against the audit trail");
    o = io();
    expect(await runReceiptsVerify(entry.receipt, { stateDir, arguments: '{"amount":7,"to":"carol"}' }, o.io)).toBe(0);
    o = io();
    expect(await runReceiptsVerify(entry.receipt, { stateDir, arguments: '{"amount":700,"to":"carol"}' }, o.io)).toBe(1);
    expect(o.out()).toContain("receipt_other_call");
    o = io();
    expect(
      await runReceiptsVerify(
        tampered(entry.receipt!, (c) => (c["approvers"] = ["bob"])),
        { stateDir },
        o.io,
      ),
    ).toBe(1);
    expect(o.out()).toContain("FAILED");

    // Rotation: a new key signs after a reload; the old receipt still verifies.
    o = io();
    expect(await runReceiptsRotate({ stateDir }, o.io)).toBe(0);
    await gw!.gateway.reload({ by: "alice" });
    await approved(alice, agent, "p-b", { to: "carol", amount: 8 });
    const second = (await api("proposals/p-b/receipt", T.alice)).body.receipt as string;
    const kidOf = (jws: string) => JSON.parse(Buffer.from(jws.split(".")[0]!, "base64url").toString()).kid;
    expect(kidOf(second)).not.toBe(kidOf(entry.receipt!));
    expect((await api("receipts/jwks.json")).body.keys).toHaveLength(2);
    o = io();
    expect(await runReceiptsVerify(undefined, { stateDir }, o.io)).toBe(0);
    expect(o.out()).toContain("2 of 2 receipt(s) verified");
  });
});
