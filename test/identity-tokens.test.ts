/**
 * The gateway as an OAuth 2.1 resource server, against a real OpenID provider on loopback
 * (oidc-provider, in this process): JWT access tokens on the operator API, `/mcp` and
 * WebSocket joins, beside static tokens. Hostile first — tokens signed by another key, with
 * `alg: none`, HS256 made with the public key, expired, for another audience or issuer, a
 * claim forged into the signed part, a provider whose keys hang or are garbage — then an MCP
 * client that finds the provider from the 401, gets a token and calls a tool.
 */
import { createHmac } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { exportSPKI, generateKeyPair, SignJWT } from "jose";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { Gateway } from "../gateway/edge/server.js";
import { mountHttp, type McpHttpMount } from "../participants/mcp-server.js";
import { type Idp, machineToken, type SigningKey, startIdp } from "./fixtures/idp.js";
import { type Env, sleep, TestClient, toolOwner, waitFor } from "./helpers.js";

const T = { alice: "alice-static-token-1", agent: "agent-token-3", fs: "fs-token-4444", assistant: "assistant-static-1" };
const TOOLS = [
  { name: "read_file", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
];

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

function spaceYaml(issuer: string): string {
  return `
space: {id: team}
identity:
  issuer: ${issuer}
  jwks_timeout_ms: 800
  people:
    alice@example.com: alice
    claude-connector: assistant
  groups:
    /mewgate-ops: "@ops"
  guests:
    "@ops": {tools: {allow: ["fs/*"]}}
participants:
  alice: {kind: human, token: ${T.alice}, tools: {allow: ["fs/*"]}}
  assistant: {kind: agent, token: ${T.assistant}, tools: {allow: ["fs/read_file"]}}
  agent: {kind: agent, token: ${T.agent}, tools: {ask: ["fs/*"]}, approvers: ["@ops"]}
  fs: {kind: mcp, token: ${T.fs}}
`;
}

interface Started {
  gateway: Gateway;
  port: number;
  logs: string[];
  stop(): Promise<void>;
}

async function startWith(yaml: string, port = 0): Promise<Started> {
  const logs: string[] = [];
  const log = pino(
    { level: "info" },
    new Writable({
      write: (c, _e, cb) => {
        logs.push(String(c));
        return cb();
      },
    }),
  );
  const config = parseSpaceConfig(yaml, { file: "/tmp/mewgate-identity-space.yaml", env: {} });
  config.gateway.state_dir = `/tmp/mewgate-identity-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const gateway = new Gateway({ spaces: [config], host: "127.0.0.1", port, env: {}, log });
  const listening = await gateway.listen();
  return { gateway, port: listening.port, logs, stop: () => gateway.close() };
}

let idp: Idp;
let gw: Started;
let fs: TestClient;
const calls: Env[] = [];
let mount: McpHttpMount;
let base: string;

beforeAll(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  idp = await startIdp({
    resource: base,
    redirectUris: [`${base}/auth/callback/team`],
    accounts: {},
    machines: {
      "claude-connector": { scope: "mewgate:mcp mewgate:api mewgate:join" },
      "no-scope-bot": { scope: "openid", claims: { email: "alice@example.com", email_verified: true } },
      "ops-bot": {
        scope: "mewgate:api mewgate:join",
        claims: { email: "carol@example.com", email_verified: true, groups: ["/mewgate-ops"] },
      },
      "alice-bot": { scope: "mewgate:api mewgate:join", claims: { email: "alice@example.com", email_verified: true } },
      "unverified-bot": { scope: "mewgate:api", claims: { email: "alice@example.com", email_verified: false } },
    },
  });
  gw = await startWith(spaceYaml(idp.issuer), port);
  mount = mountHttp(gw.gateway);
  fs = await toolOwner({ port: gw.port }, "team", T.fs, TOOLS, {
    onCall: (env, reply) => {
      calls.push(env);
      return reply({ content: [{ type: "text", text: "contents" }] });
    },
  });
}, 30_000);

afterAll(async () => {
  fs?.ws.terminate();
  await mount?.close();
  await gw?.stop();
  await idp?.close();
});

const api = (path: string, token: string | undefined, init: RequestInit = {}) =>
  fetch(`${base}/api/spaces/team/${path}`, {
    ...init,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(init.headers as Record<string, string>) },
  });

/** A token signed as the provider would, with `claims` over sensible defaults. */
async function providerSigned(claims: Record<string, unknown>, opts: { key?: SigningKey; kid?: string } = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ scope: "mewgate:api mewgate:mcp mewgate:join", email: "alice@example.com", email_verified: true, ...claims })
    .setProtectedHeader({ alg: "RS256", kid: opts.kid ?? idp.kid, typ: "at+jwt" })
    .setIssuer((claims["iss"] as string) ?? idp.issuer)
    .setAudience((claims["aud"] as string) ?? base)
    .setSubject("alice-sub")
    .setIssuedAt((claims["iat"] as number) ?? now)
    .setExpirationTime((claims["exp"] as number) ?? now + 300)
    .sign(opts.key ?? idp.privateKey);
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");

describe("hostile tokens are refused, and say why", () => {
  it("answers 401 with resource_metadata and invalid_token for a token signed by another key, even under the provider's key id", async () => {
    const { privateKey } = await generateKeyPair("RS256");
    const forged = await providerSigned({}, { key: privateKey });
    const res = await api("me", forged);
    expect(res.status).toBe(401);
    const challenge = res.headers.get("www-authenticate") ?? "";
    expect(challenge).toContain(`resource_metadata="${base}/.well-known/oauth-protected-resource/api"`);
    expect(challenge).toContain('error="invalid_token"');
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/signature/);
  });

  it("refuses alg none and an HS256 token whose HMAC key is the provider's public key", async () => {
    const now = Math.floor(Date.now() / 1000);
    const payload = {
      iss: idp.issuer,
      aud: base,
      sub: "alice-sub",
      email: "alice@example.com",
      scope: "mewgate:api",
      iat: now,
      exp: now + 300,
    };
    const none = `${b64({ alg: "none", typ: "JWT" })}.${b64(payload)}.`;
    expect((await api("me", none)).status).toBe(401);
    const pem = await exportSPKI(
      (await import("node:crypto")).createPublicKey({ key: idp.publicJwk as never, format: "jwk" }) as never,
    ).catch(() => "");
    const pub =
      pem ||
      (await import("node:crypto"))
        .createPublicKey({ key: idp.publicJwk as never, format: "jwk" })
        .export({ type: "spki", format: "pem" })
        .toString();
    const head = `${b64({ alg: "HS256", kid: idp.kid, typ: "JWT" })}.${b64(payload)}`;
    const hs = `${head}.${createHmac("sha256", pub).update(head).digest("base64url")}`;
    const res = await api("me", hs);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/algorithm/);
  });

  it("refuses an expired token, one for another audience, and one from another issuer", async () => {
    const past = Math.floor(Date.now() / 1000) - 3600;
    const expired = await api("me", await providerSigned({ iat: past - 60, exp: past }));
    expect(expired.status).toBe(401);
    expect(((await expired.json()) as { error: { message: string } }).error.message).toMatch(/expired/);
    const other = await api("me", await providerSigned({ aud: "https://another-resource.example" }));
    expect(other.status).toBe(401);
    expect(((await other.json()) as { error: { message: string } }).error.message).toMatch(/"aud"/);
    const elsewhere = await api("me", await providerSigned({ iss: "https://evil.example" }));
    expect(elsewhere.status).toBe(401);
    expect(((await elsewhere.json()) as { error: { message: string } }).error.message).toMatch(/"iss"/);
  });

  it("takes no audience from a Host header naming another port (a token another local service was given)", async () => {
    const { request } = await import("node:http");
    const token = await providerSigned({ aud: "http://127.0.0.1:8080" });
    const status = await new Promise<number>((resolve, reject) => {
      const r = request(
        {
          host: "127.0.0.1",
          port: gw.port,
          path: "/api/spaces/team/me",
          headers: { host: "127.0.0.1:8080", authorization: `Bearer ${token}` },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      r.on("error", reject);
      r.end();
    });
    expect(status).toBe(401);
  });

  it("refuses a real token whose signed part was edited to add a group or a person", async () => {
    const real = await machineToken(idp, "alice-bot", "mewgate:api", base);
    expect((await api("me", real)).status).toBe(200);
    const [h, p, s] = real.split(".");
    const claims = JSON.parse(Buffer.from(p!, "base64url").toString());
    const forged = `${h}.${b64({ ...claims, groups: ["/mewgate-ops"], email: "carol@example.com" })}.${s}`;
    const res = await api("me", forged);
    expect(res.status).toBe(401);
  });

  it("answers 403 insufficient_scope, naming the scope, for a valid token without it", async () => {
    const token = await machineToken(idp, "no-scope-bot", "openid", base);
    const res = await api("me", token);
    expect(res.status).toBe(403);
    expect(res.headers.get("www-authenticate")).toMatch(/error="insufficient_scope".*scope="mewgate:api"/);
    const mcp = await fetch(`${base}/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: "{}",
    });
    expect(mcp.status).toBe(403);
    expect(mcp.headers.get("www-authenticate")).toMatch(/scope="mewgate:mcp"/);
  });

  it("answers a token whose identity is nobody in the space with a plain 403 saying so, not insufficient_scope (no scope would help)", async () => {
    const nobody = await providerSigned({ email: "mallory@example.com" });
    for (const path of ["/mcp", "/mcp/fs"]) {
      const res = await fetch(`${base}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${nobody}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: "{}",
      });
      expect(res.status, path).toBe(403);
      expect(res.headers.get("www-authenticate") ?? "", path).not.toMatch(/insufficient_scope/);
      const body = (await res.json()) as { error: { message: string; data?: { reason?: string } } };
      expect(body.error.data?.reason, path).toBe("forbidden");
      expect(body.error.message, path).toMatch(/mallory@example\.com|no participant|not a participant|maps to no/i);
    }
  });

  it("says on a 401 without a token which scope a token needs", async () => {
    for (const path of ["/mcp", "/mcp/fs"]) {
      const res = await fetch(`${base}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: "{}",
      });
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toMatch(
        new RegExp(`resource_metadata="${base}/.well-known/oauth-protected-resource${path}".*scope="mewgate:mcp"`),
      );
    }
  });

  it("takes at /mcp/<participant> a token for the resource that path's own metadata names, and not at another path", async () => {
    const meta = (await (await fetch(`${base}/.well-known/oauth-protected-resource/mcp/fs`)).json()) as { resource: string };
    expect(meta.resource).toBe(`${base}/mcp/fs`);
    const token = await providerSigned({ aud: meta.resource });
    const post = (path: string) =>
      fetch(`${base}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: "{}",
      });
    const there = await post("/mcp/fs");
    expect([401, 403]).not.toContain(there.status);
    const elsewhere = await post("/mcp");
    expect(elsewhere.status).toBe(401);
    expect(((await elsewhere.json()) as { error: { message: string } }).error.message).toMatch(/"aud"/);
  });

  it("does not take an email the provider has not verified as a person's", async () => {
    const token = await machineToken(idp, "unverified-bot", "mewgate:api", base);
    const res = await api("me", token);
    expect(res.status).toBe(403);
  });

  it("refuses a WebSocket join with a forged token (4401) or without the join scope (4403)", async () => {
    const { privateKey } = await generateKeyPair("RS256");
    const forged = TestClient.connect({ port: gw.port }, "space=team", {
      authorization: `Bearer ${await providerSigned({}, { key: privateKey })}`,
    });
    expect((await forged.closed).code).toBe(4401);
    const token = await machineToken(idp, "no-scope-bot", "openid", base);
    const scopeless = TestClient.connect({ port: gw.port }, "space=team", { authorization: `Bearer ${token}` });
    expect((await scopeless.closed).code).toBe(4403);
  });
});

describe("identity: in space.yaml", () => {
  const parse =
    (identity: string, participants = "  alice: {kind: human}\n") =>
    () =>
      parseSpaceConfig(`space: {id: s}\nidentity:\n${identity}\nparticipants:\n${participants}`, { file: "space.yaml", env: {} });
  it("refuses what would weaken it or name nothing, at its line", () => {
    expect(parse("  issuer: not-a-url")).toThrow(/space.yaml:3:\d+: identity.issuer: expected the issuer's URL/);
    expect(parse("  issuer: https://sso.example\n  algorithms: [HS256]")).toThrow(
      /space.yaml:4:16: identity.algorithms\[0\]: expected one of "RS256".*found "HS256"/,
    );
    expect(parse("  issuer: https://sso.example\n  algorithms: [none]")).toThrow(/identity.algorithms\[0\]/);
    expect(parse("  issuer: https://sso.example\n  client_secret: s3cret")).toThrow(
      /identity.client_secret: unknown key; did you mean "client_secret_env"/,
    );
    expect(parse("  issuer: https://sso.example\n  people: {a@x: alcie}")).toThrow(
      /identity.people\["a@x"\]: unknown participant "alcie"; did you mean "alice"/,
    );
    expect(parse("  issuer: https://sso.example\n  guests: {'@ops': {}}")).toThrow(
      /identity.guests\["@ops"\]: no claim value maps to "@ops"/,
    );
    expect(parse("  issuer: https://sso.example", "  alice: {kind: human}\n  bot: {kind: agent, approvers: ['@ops']}\n")).toThrow(
      /unknown group "@ops"; declare it under groups: or map a claim to it under identity.groups/,
    );
    expect(
      parse("  issuer: https://sso.example\n  groups: {g: '@ops'}", "  alice: {kind: human}\n  bot: {kind: agent, approvers: ['@ops']}\n"),
    ).not.toThrow();
  });
});

describe("a provider whose keys cannot be had", () => {
  let fake: Server;
  let fakeIssuer: string;
  let mode: "hang" | "garbage" = "hang";
  const hanging: Array<() => void> = [];

  beforeAll(async () => {
    fake = createServer((req, res) => {
      if (req.url === "/.well-known/openid-configuration") {
        res.writeHead(200, { "content-type": "application/json" });
        return void res.end(JSON.stringify({ issuer: fakeIssuer, jwks_uri: `${fakeIssuer}/jwks` }));
      }
      if (mode === "garbage") {
        res.writeHead(200, { "content-type": "application/json" });
        return void res.end('{"keys": "not a list", \u0000garbage');
      }
      hanging.push(() => res.destroy());
    });
    await new Promise<void>((r) => fake.listen(0, "127.0.0.1", r));
    fakeIssuer = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const h of hanging) h();
    fake.closeAllConnections();
    await new Promise<void>((r) => fake.close(() => r()));
  });

  it("refuses JWTs with 503 while the provider itself is unreachable, and says so in the log", async () => {
    const dead = await freePort();
    const other = await startWith(spaceYaml(`http://127.0.0.1:${dead}`));
    try {
      const token = await providerSigned({ iss: `http://127.0.0.1:${dead}`, aud: `http://127.0.0.1:${other.port}` });
      const res = await fetch(`http://127.0.0.1:${other.port}/api/spaces/team/me`, { headers: { authorization: `Bearer ${token}` } });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      await waitFor(
        () => other.logs.some((l) => l.includes("could not read the identity provider's discovery document")),
        2000,
        "a log line",
      );
      expect(other.logs.join("")).not.toContain(token.split(".")[2]!);
      const ws = TestClient.connect({ port: other.port }, "space=team", { authorization: `Bearer ${token}` });
      expect((await ws.closed).code).toBe(1013);
      // What no key could make valid is refused as such, without asking the provider.
      const none = `${b64({ alg: "none" })}.${b64({ iss: `http://127.0.0.1:${dead}`, sub: "x", exp: 2e9 })}.`;
      const refused = await fetch(`http://127.0.0.1:${other.port}/api/spaces/team/me`, { headers: { authorization: `Bearer ${none}` } });
      expect(refused.status).toBe(401);
    } finally {
      await other.stop();
    }
  });

  it("refuses JWTs quickly with 503 and a clear log, keeps serving static tokens, and does not crash", async () => {
    const other = await startWith(spaceYaml(fakeIssuer));
    try {
      const token = await providerSigned({ iss: fakeIssuer, aud: `http://127.0.0.1:${other.port}` });
      const call = () => fetch(`http://127.0.0.1:${other.port}/api/spaces/team/me`, { headers: { authorization: `Bearer ${token}` } });
      const started = Date.now();
      const hung = await call();
      expect(hung.status).toBe(503);
      // Bounded by identity.jwks_timeout_ms (800 ms), not by the provider.
      expect(Date.now() - started).toBeLessThan(5000);
      await waitFor(() => other.logs.some((l) => l.includes("could not get the identity provider's keys")), 2000, "a log line");
      mode = "garbage";
      // The key set is fetched again after its cooldown at most; a fresh gateway sees the garbage at once.
      const fresh = await startWith(spaceYaml(fakeIssuer));
      try {
        const t2 = await providerSigned({ iss: fakeIssuer, aud: `http://127.0.0.1:${fresh.port}` });
        const res = await fetch(`http://127.0.0.1:${fresh.port}/api/spaces/team/me`, { headers: { authorization: `Bearer ${t2}` } });
        expect(res.status).toBe(503);
        await waitFor(() => fresh.logs.some((l) => l.includes("JWKSInvalid") || l.includes("keys")), 2000, "a log line");
        // Static tokens are untouched by the provider's state.
        const staticMe = await fetch(`http://127.0.0.1:${fresh.port}/api/spaces/team/me`, {
          headers: { authorization: `Bearer ${T.alice}` },
        });
        expect(staticMe.status).toBe(200);
      } finally {
        await fresh.stop();
      }
      expect((await fetch(`http://127.0.0.1:${other.port}/healthz`)).status).toBe(200);
    } finally {
      await other.stop();
    }
  }, 20_000);
});

describe("tokens that are good", () => {
  it("lets static tokens and JWTs work side by side on the API", async () => {
    const me = await api("me", T.alice);
    expect(me.status).toBe(200);
    const jwt = await machineToken(idp, "alice-bot", "mewgate:api", base);
    const viaJwt = await api("me", jwt);
    expect(viaJwt.status).toBe(200);
    expect(((await viaJwt.json()) as { id: string }).id).toBe("alice");
  });

  it("lets an @ops member who is not in space.yaml join as a runtime human and approve a proposal whose approvers are @ops; others in the space may not", async () => {
    const agent = await TestClient.join({ port: gw.port }, "team", T.agent);
    try {
      agent.send({
        id: "p-ops-1",
        kind: "mcp/proposal",
        to: ["fs"],
        payload: { method: "tools/call", params: { name: "read_file", arguments: { path: "a" } } },
      });
      await waitFor(
        async () => ((await (await api("proposals", T.alice)).json()) as { proposals: unknown[] }).proposals.length > 0,
        5000,
        "the proposal",
      );
      // alice may call fs/* but is not in @ops.
      const byAlice = await api("proposals/p-ops-1/approve", T.alice, { method: "POST", body: "{}" });
      expect(byAlice.status).toBe(403);
      expect(((await byAlice.json()) as { error: { code: string } }).error.code).toBe("not_an_approver");
      const carol = await machineToken(idp, "ops-bot", "mewgate:api mewgate:join", base);
      const who = (await (await api("me", carol)).json()) as { id: string; kind: string };
      expect(who).toMatchObject({ id: "carol.example.com", kind: "human" });
      const approved = await api("proposals/p-ops-1/approve", carol, { method: "POST", body: "{}" });
      expect(approved.status).toBe(200);
      const answer = await agent.next((e) => e.kind === "mcp/response" && e.correlation_id?.includes("p-ops-1") === true);
      expect(answer.payload.result.content[0].text).toBe("contents");
      // The bridged server saw the call, never a token.
      expect(JSON.stringify(calls)).not.toContain(carol.split(".")[1]);
      // A WebSocket join with the same kind of token is that runtime human too.
      const ws = await TestClient.join({ port: gw.port }, "team", carol);
      const welcome = ws.received.find((e) => e.kind === "system/welcome")!;
      expect(welcome.payload.you.id).toBe("carol.example.com");
      ws.close();
    } finally {
      agent.close();
    }
  });

  it("an MCP client finds the provider from the 401, gets a token by client credentials, and calls a tool", async () => {
    const unauth = await fetch(`${base}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: "{}",
    });
    expect(unauth.status).toBe(401);
    const metaUrl = /resource_metadata="([^"]+)"/.exec(unauth.headers.get("www-authenticate") ?? "")?.[1];
    expect(metaUrl).toBe(`${base}/.well-known/oauth-protected-resource/mcp`);
    const meta = (await (await fetch(metaUrl!)).json()) as {
      resource: string;
      authorization_servers: string[];
      scopes_supported: string[];
    };
    expect(meta).toMatchObject({ resource: `${base}/mcp`, authorization_servers: [idp.issuer] });
    expect(meta.scopes_supported).toContain("mewgate:mcp");

    const provider = new ClientCredentialsProvider({
      clientId: "claude-connector",
      clientSecret: idp.machineSecret,
      scope: "mewgate:mcp",
      expectedIssuer: idp.issuer,
    });
    const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { authProvider: provider });
    const client = new Client({ name: "hosted-connector", version: "1.0.0" });
    try {
      await client.connect(transport);
      await waitFor(async () => (await client.listTools()).tools.some((t) => t.name === "fs__read_file"), 5000, "the tool");
      const before = calls.length;
      const result = await client.callTool({ name: "fs__read_file", arguments: { path: "notes.md" } });
      expect((result.content as Array<{ text: string }>)[0]!.text).toBe("contents");
      const seen = calls.slice(before);
      expect(seen).toHaveLength(1);
      expect(seen[0]!.payload.params.arguments).toEqual({ path: "notes.md" });
      // The access token went no further than the gateway.
      const token = provider.tokens()?.access_token ?? "";
      expect(token.split(".")).toHaveLength(3);
      expect(JSON.stringify(seen)).not.toContain(token.split(".")[2]!);
    } finally {
      await transport.terminateSession().catch(() => {});
      await client.close().catch(() => {});
    }
  });

  it("serves protected-resource metadata at the root and per path", async () => {
    const root = (await (await fetch(`${base}/.well-known/oauth-protected-resource`)).json()) as Record<string, unknown>;
    expect(root).toMatchObject({ resource: base, authorization_servers: [idp.issuer], bearer_methods_supported: ["header"] });
    await sleep(0);
  });
});
