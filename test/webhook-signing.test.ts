/**
 * Webhooks a receiver can trust and act on: notices signed as Standard Webhooks has it
 * (verified here exactly as a receiver would: raw body, HMAC-SHA256 over id.timestamp.body,
 * constant-time compare, a timestamp window), a tampered body or an old timestamp refused;
 * a missing or malformed secret refuses the file; group approvers (`@ops`) get a decision
 * link each, at escalation too, and the escalation is in the audit; a decided notice says
 * what became of the call. A real gateway, a real receiver, on loopback.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, parseSpaceConfig } from "../gateway/config/config.js";
import { readAudit } from "../gateway/space/ledger.js";
import { startGateway, TestClient, toolOwner, waitFor, type TestGateway } from "./helpers.js";
import { join as pathJoin } from "node:path";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { runPolicyCheck } from "../cli/policy.js";
import { runStatus } from "../cli/lifecycle.js";
import { loadSpace } from "../cli/space.js";

const TOKEN = (id: string) => `${id}-token-0123456789`;
const SECRET = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;
const SPACE = (hook: string, o: { secret?: boolean; escalate?: boolean } = {}) => `
space: {id: wh}
gateway:
  state_dir: .mewgate
  notify: [{url: "${hook}"${o.secret === false ? "" : ", secret_env: HOOK_SECRET"}}]
${o.escalate ? `policy:\n  escalate:\n    - {after_ms: 300, approvers: ["@oncall"]}\n` : ""}groups:
  ops: [alice, bob]
  oncall: [carol]
participants:
  alice: {kind: human, token: ${TOKEN("alice")}, tools: {allow: ["fs/*"]}}
  bob: {kind: human, token: ${TOKEN("bob")}, tools: {allow: ["fs/*"]}}
  carol: {kind: human, token: ${TOKEN("carol")}, tools: {allow: ["fs/*"]}}
  dave: {kind: human, token: ${TOKEN("dave")}, tools: {allow: ["fs/*"]}}
  fs: {kind: mcp, token: ${TOKEN("fs")}}
  agent: {kind: agent, token: ${TOKEN("agent")}, approvers: ["@ops"], tools: {ask: ["fs/write_file"]}}
`;
const TOOLS = [{ name: "write_file", inputSchema: { type: "object" } }];
const propose = (id: string) => ({
  id,
  kind: "mcp/proposal",
  to: ["fs"],
  payload: { method: "tools/call", params: { name: "write_file", arguments: { path: "a" } } },
});

const gateways: TestGateway[] = [];
const clients: TestClient[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.ws.terminate();
  for (const g of gateways.splice(0)) await g.stop();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** What a receiver does with a notice: the raw body checked against the headers, with the secret it shares. */
function verify(
  secret: string,
  headers: IncomingHttpHeaders,
  raw: string,
  nowS = Math.floor(Date.now() / 1000),
  toleranceS = 300,
): { ok: true } | { ok: false; why: string } {
  const id = headers["webhook-id"];
  const ts = headers["webhook-timestamp"];
  const sig = headers["webhook-signature"];
  if (typeof id !== "string" || typeof ts !== "string" || typeof sig !== "string") return { ok: false, why: "missing headers" };
  if (!/^\d+$/.test(ts) || Math.abs(nowS - Number(ts)) > toleranceS) return { ok: false, why: "timestamp outside the window" };
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const expected = Buffer.from(createHmac("sha256", key).update(`${id}.${ts}.${raw}`).digest("base64"));
  for (const part of sig.split(" ")) {
    const [version, value] = part.split(",");
    if (version !== "v1" || value === undefined) continue;
    const given = Buffer.from(value);
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true };
  }
  return { ok: false, why: "no signature matches" };
}

interface Got {
  headers: IncomingHttpHeaders;
  raw: string;
  body: Record<string, any>;
}

async function receiver(): Promise<{ url: string; got: Got[] }> {
  const got: Got[] = [];
  const server = createServer((req, res) => {
    let raw = "";
    req.setEncoding("utf8");
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      got.push({ headers: req.headers, raw, body: JSON.parse(raw) });
      res.writeHead(204).end();
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`, got };
}

async function start(yaml: string): Promise<TestGateway> {
  const g = await startGateway(yaml, { env: { HOOK_SECRET: SECRET } });
  gateways.push(g);
  return g;
}

async function join(g: TestGateway, id: string): Promise<TestClient> {
  const c = await TestClient.join(g, "wh", TOKEN(id));
  clients.push(c);
  return c;
}

describe("signed webhooks: hostile first", () => {
  it("a missing, unprefixed, non-base64 or short secret refuses the file at secret_env's line and column", () => {
    const yaml = SPACE("http://127.0.0.1:9/hook");
    const bad: Array<[NodeJS.ProcessEnv, RegExp]> = [
      [{}, /HOOK_SECRET is not set/],
      [{ HOOK_SECRET: Buffer.alloc(32).toString("base64") }, /does not start with "whsec_"/],
      [{ HOOK_SECRET: "whsec_not base64!" }, /not whsec_ then base64/],
      [{ HOOK_SECRET: `whsec_${Buffer.alloc(8).toString("base64")}` }, /8 bytes; a webhook secret is 24 to 64 bytes/],
    ];
    for (const [env, re] of bad) {
      let err: unknown;
      try {
        parseSpaceConfig(yaml, { file: "space.yaml", env });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toMatch(/space\.yaml:5:\d+: gateway\.notify\[0\]\.secret_env/);
      expect((err as Error).message).toMatch(re);
      // The value is never echoed.
      if (env["HOOK_SECRET"]) expect((err as Error).message).not.toContain(env["HOOK_SECRET"]);
    }
  });

  it("a command that only reads the file (policy check, status) needs no secret it does not sign with; up still refuses without it", async () => {
    const dir = mkdtempSync(pathJoin(tmpdir(), "mewgate-wh-cli-"));
    try {
      const file = pathJoin(dir, "space.yaml");
      writeFileSync(file, SPACE("http://127.0.0.1:9/hook"));
      let out = "";
      let err = "";
      const io = {
        stdout: {
          write: (x: string) => {
            out += x;
            return true;
          },
        } as any,
        stderr: {
          write: (x: string) => {
            err += x;
            return true;
          },
        } as any,
        env: {},
      };
      expect(await runPolicyCheck(file, {}, io), err).toBe(0);
      expect(await runStatus({ file }, io), err).not.toBe(2);
      expect(err).not.toMatch(/HOOK_SECRET/);
      expect(out).not.toMatch(/HOOK_SECRET/);
      await expect(loadSpace(file, { env: {}, signs: true })).rejects.toThrow(/HOOK_SECRET is not set/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a receiver verifies each notice; a tampered body, an old timestamp, a wrong secret or a replayed signature on another id are refused", {
    timeout: 20_000,
  }, async () => {
    const hook = await receiver();
    const g = await start(SPACE(hook.url));
    clients.push(
      await toolOwner(g, "wh", TOKEN("fs"), TOOLS, { onCall: (_e, reply) => reply({ content: [{ type: "text", text: "written" }] }) }),
    );
    const agent = await join(g, "agent");
    await waitFor(() => g.gateway.spaces.get("wh")!.registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("p1"));
    await waitFor(() => hook.got.some((n) => n.body.event === "proposal.proposed"), 5000, "the proposed notice");
    const n = hook.got.find((x) => x.body.event === "proposal.proposed")!;
    expect(n.headers["webhook-id"]).toMatch(/^msg_[0-9a-f-]{36}$/);
    expect(n.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(verify(SECRET, n.headers, n.raw)).toEqual({ ok: true });
    // Hostile: each of these a receiver refuses.
    expect(verify(SECRET, n.headers, n.raw.replace('"path\\":\\"a\\"', '"path\\":\\"b\\"').replace("p1", "p2"))).toMatchObject({
      ok: false,
      why: "no signature matches",
    });
    expect(verify(SECRET, n.headers, `${n.raw} `)).toMatchObject({ ok: false });
    expect(verify(SECRET, n.headers, n.raw, Number(n.headers["webhook-timestamp"]) + 3600)).toMatchObject({
      ok: false,
      why: "timestamp outside the window",
    });
    expect(verify(`whsec_${Buffer.alloc(32, 8).toString("base64")}`, n.headers, n.raw)).toMatchObject({ ok: false });
    expect(verify(SECRET, { ...n.headers, "webhook-id": "msg_other" }, n.raw)).toMatchObject({ ok: false });
    // Approved and run: the decided notices are signed too, and the last one carries the call's outcome.
    const alice = await join(g, "alice");
    alice.send({ kind: "mcp/approve", correlation_id: ["p1"], payload: { scope: "once" } });
    await waitFor(() => hook.got.some((x) => x.body.event === "proposal.answered"), 5000, "the answered notice");
    const answered = hook.got.find((x) => x.body.event === "proposal.answered")!;
    expect(answered.body.proposal).toMatchObject({ id: "p1", state: "answered", outcome: "ok", decided_by: "alice" });
    expect(verify(SECRET, answered.headers, answered.raw)).toEqual({ ok: true });
    const ids = hook.got.map((x) => x.headers["webhook-id"]);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("without secret_env, notices go unsigned as before", async () => {
    const hook = await receiver();
    const g = await start(SPACE(hook.url, { secret: false }));
    clients.push(await toolOwner(g, "wh", TOKEN("fs"), TOOLS));
    const agent = await join(g, "agent");
    await waitFor(() => g.gateway.spaces.get("wh")!.registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("p1"));
    await waitFor(() => hook.got.length > 0, 5000, "a notice");
    expect(hook.got[0]!.headers["webhook-signature"]).toBeUndefined();
  });
});

describe("group approvers are notified like named ones", () => {
  it('approvers: ["@ops"]: a link per member who may decide; at escalation the stage\'s group members too, and the escalation is audited', {
    timeout: 20_000,
  }, async () => {
    const hook = await receiver();
    const g = await start(SPACE(hook.url, { escalate: true }));
    clients.push(await toolOwner(g, "wh", TOKEN("fs"), TOOLS));
    const agent = await join(g, "agent");
    await waitFor(() => g.gateway.spaces.get("wh")!.registry.get("fs", "write_file") !== undefined, 5000, "the tool");
    agent.send(propose("p1"));
    await waitFor(() => hook.got.some((n) => n.body.event === "proposal.proposed"), 5000, "the proposed notice");
    const proposed = hook.got.find((n) => n.body.event === "proposal.proposed")!.body;
    expect(proposed.approvers).toEqual(["alice", "bob"]);
    expect(proposed.links.map((l: { approver: string }) => l.approver)).toEqual(["alice", "bob"]);
    for (const l of proposed.links) expect(l.url).toMatch(/\/ui\/link\.html#t=v1\./);
    await waitFor(() => hook.got.some((n) => n.body.event === "proposal.escalated"), 5000, "the escalated notice");
    const escalated = hook.got.find((n) => n.body.event === "proposal.escalated")!.body;
    expect(escalated.approvers).toEqual(["alice", "bob", "carol"]);
    expect(escalated.links.map((l: { approver: string }) => l.approver)).toEqual(["alice", "bob", "carol"]);
    // Dave is in no group: never a link.
    expect(JSON.stringify(hook.got.map((n) => n.body.approvers))).not.toContain("dave");
    const audit = readAudit(pathJoin(g.dir, ".mewgate")).filter((e) => e.proposal === "p1");
    expect(audit.map((e) => e.event)).toEqual(["proposed", "escalated"]);
    expect(audit[1]).toMatchObject({ stage: 0, approvers: ["carol"], proposer: "agent", tool: "write_file" });
  });
});
