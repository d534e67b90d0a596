/**
 * `mewgate up` with a pasted `url:` server behind OAuth: up prints the sign-in link and
 * waits; the person follows it, the authorization server sends them back to up's gateway
 * (/oauth/callback/<space>), and the server's tools are in the space. The credentials are
 * encrypted in the state directory with the key beside it: the state directory copied
 * alone yields nothing.
 */
import { cpSync, existsSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ParticipantClient } from "../participants/index.js";
import { keyFileFor } from "../participants/bridge/oauth-vault.js";
import { Cli, cleanEnv, poll, run, tempDir } from "./fixtures/cli/harness.js";
import { Browser, startUpstream, type Upstream } from "./fixtures/oauth-upstream.js";
import { startGateway } from "./helpers.js";

const started: Cli[] = [];
const upstreams: Upstream[] = [];
const stops: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of started.splice(0)) c.kill("SIGKILL");
  for (const s of stops.splice(0).reverse()) await Promise.resolve(s()).catch(() => {});
  for (const u of upstreams.splice(0)) await u.close();
});

describe("mewgate up with a server behind OAuth", () => {
  it("shows the link, takes the callback on its gateway, and keeps the tokens where a copied state directory cannot read them", async () => {
    const upstream = await startUpstream();
    upstreams.push(upstream);
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    const state = join(dir, "state");
    writeFileSync(
      file,
      `space: {id: hosted}\nparticipants:\n  you: {kind: human, tools: {allow: ["remote/*"]}}\nmcpServers:\n  remote: {url: "${upstream.url}"}\n`,
    );
    const cli = new Cli(["up", file, "--state-dir", state, "--port", "0", "--json"], { stdin: "pipe", env: cleanEnv() });
    started.push(cli);
    const link = await poll(
      "the sign-in link on stderr",
      () => {
        const m = /remote needs you to sign in at (\S+): (http:\/\/\S+)/.exec(cli.stderr);
        return m ? { issuer: m[1]!, url: new URL(m[2]!) } : undefined;
      },
      30_000,
    ).catch((e) => {
      throw new Error(`${(e as Error).message}\n--- stdout:\n${cli.stdout.slice(-2000)}\n--- stderr:\n${cli.stderr.slice(-2000)}`);
    });
    expect(link.issuer).toBe(upstream.issuer);
    // The gateway's single-use start link, which sends the browser on to the authorization server.
    expect(link.url.href).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/oauth\/callback\/hosted\/start\?k=[\w-]{43}$/);
    const redirect = `${link.url.origin}/oauth/callback/hosted`;
    const page = await new Browser().signIn(link.url, redirect);
    expect(page.status).toBe(200);
    await cli.waitLine((l) => l["event"] === "ready", "up to be ready", 30_000);
    const tools = await poll(
      "the server's tools",
      async () => {
        const r = await run(["tools", "-c", file, "--state-dir", state, "--json"], { env: cleanEnv() });
        return r.code === 0 && r.stdout.includes("remote/whoami") ? r.stdout : undefined;
      },
      20_000,
      300,
    );
    expect(tools).toContain("remote/echo");
    // At rest: encrypted, the key beside the state directory with mode 600; the tokens in no log.
    const enc = readFileSync(join(state, "credentials.enc"), "utf8");
    expect(enc).not.toContain("access_token");
    expect(statSync(keyFileFor(state)).mode & 0o777).toBe(0o600);
    const listed = await run(["credentials", "list", "-c", file, "--state-dir", state, "--json"], { env: cleanEnv() });
    expect(listed.code).toBe(0);
    const rows = JSON.parse(listed.stdout).credentials as Array<{ server: string; subject: string; holds: string[] }>;
    expect(rows).toContainEqual(expect.objectContaining({ server: "remote", subject: "space", holds: ["access_token", "refresh_token"] }));
    // The state directory copied alone: nothing to read, and it says why.
    const copy = join(tempDir(), "state");
    cpSync(state, copy, { recursive: true });
    expect(existsSync(keyFileFor(copy))).toBe(false);
    const denied = await run(["credentials", "list", "-c", file, "--state-dir", copy], { env: cleanEnv() });
    expect(denied.code).toBe(1);
    expect(denied.stderr).toMatch(/exist but their key does not/);
    // up itself, started again without its key: a clear error, and nothing started.
    cli.kill("SIGTERM");
    await cli.exited;
    const key = readFileSync(keyFileFor(state));
    rmSync(keyFileFor(state));
    const again = await run(["up", file, "--state-dir", state, "--port", "0", "--json"], { env: cleanEnv() });
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(
      /stored credentials .*credentials\.enc exist but their key does not: set MEWGATE_CREDENTIALS_KEY or put back/,
    );
    expect(existsSync(keyFileFor(state))).toBe(false);
    writeFileSync(keyFileFor(state), key, { mode: 0o600 });
  }, 90_000);
});

describe("mewgate bridge --url with a server behind OAuth", () => {
  it("signs in headlessly with --oauth-consent auto and serves the space; without it (and no service account) the 401 fails the start", async () => {
    const upstream = await startUpstream();
    upstreams.push(upstream);
    const gw = await startGateway(
      `space: {id: lab}\nparticipants:\n  alice: {kind: human, token: alice-token-0123456789, tools: {allow: ["remote/*"]}}\n  remote: {kind: mcp, token: remote-token-0123456789}\n`,
    );
    stops.push(() => gw.stop());
    const state = join(tempDir(), "state");
    const args = [
      "bridge",
      "--url",
      upstream.url,
      "--as",
      "remote",
      "--gateway",
      gw.url,
      "--space",
      "lab",
      "--token",
      "remote-token-0123456789",
      "--state-dir",
      state,
    ];
    const refused = await run(args, { env: cleanEnv() });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/could not start the MCP server: .*it answered 401 Unauthorized: it wants a sign-in/);
    const cli = new Cli([...args, "--oauth-consent", "auto"], { env: cleanEnv() });
    started.push(cli);
    await poll("the bridge to join", () => /joined space lab as remote/.test(cli.stderr) || undefined, 30_000);
    const alice = new ParticipantClient({ url: gw.url, space: "lab", token: "alice-token-0123456789", reconnect: false });
    await alice.connect();
    stops.push(() => alice.close());
    await poll("the tools", async () => (await alice.listTools()).some((t) => t.name === "remote/whoami") || undefined, 20_000, 200);
    const res = (await alice.request("system:gateway", "tools/call", { name: "remote/whoami", arguments: {} }, { timeoutMs: 10_000 })) as {
      content: Array<{ text: string }>;
    };
    expect(res.content[0]!.text).toBe("alice");
    expect(readFileSync(join(state, "credentials.enc"), "utf8")).not.toContain("access_token");
  }, 90_000);
});
describe("mewgate up --detach with a server behind OAuth", () => {
  it("prints the link and returns; down stops the run that waits for the sign-in; signing in finishes the start; nothing crashes", {
    timeout: 90_000,
  }, async () => {
    const upstream = await startUpstream();
    upstreams.push(upstream);
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    const state = join(dir, "state");
    writeFileSync(
      file,
      `space: {id: hosted}\nparticipants:\n  you: {kind: human, tools: {allow: ["remote/*"]}}\nmcpServers:\n  remote: {url: "${upstream.url}"}\n`,
    );
    // Hostile first: nobody signs in; the command still returns, and down stops the waiting run.
    const waiting = await run(["up", file, "--state-dir", state, "--port", "0", "--detach"], { env: cleanEnv() });
    expect(waiting.code, waiting.stderr).toBe(0);
    expect(waiting.stdout).toMatch(
      /sign in: +remote waits for you to sign in: http:\/\/127\.0\.0\.1:\d+\/oauth\/callback\/hosted\/start\?k=/,
    );
    expect(waiting.stdout).toMatch(/stop it: /);
    const pid = Number(/pid (\d+)/.exec(waiting.stdout)![1]);
    const down = await run(["down", file, "--state-dir", state], { env: cleanEnv() });
    expect(down.code, down.stderr + down.stdout).toBe(0);
    await poll("the waiting run to stop", () => !alive(pid) || undefined, 15_000);
    const log = readFileSync(join(state, "logs", "up.log"), "utf8");
    expect(log).not.toMatch(/ERR_IPC_CHANNEL_CLOSED|Unhandled|TypeError/);
    // Then: started again, the person signs in at the link it printed, and the run finishes starting.
    const again = await run(["up", file, "--state-dir", state, "--port", "0", "--detach"], { env: cleanEnv() });
    expect(again.code, again.stderr).toBe(0);
    const link = new URL(/waits for you to sign in: (\S+)/.exec(again.stdout)![1]!);
    stops.push(() => run(["down", file, "--state-dir", state], { env: cleanEnv() }));
    const page = await new Browser().signIn(link, `${link.origin}/oauth/callback/hosted`);
    expect(page.status).toBe(200);
    await poll(
      "the server's tools once signed in",
      async () => {
        const r = await run(["tools", "-c", file, "--state-dir", state, "--json"], { env: cleanEnv() });
        return r.code === 0 && r.stdout.includes("remote/whoami") ? true : undefined;
      },
      30_000,
      300,
    );
    expect(readFileSync(join(state, "logs", "up.log"), "utf8")).not.toMatch(/ERR_IPC_CHANNEL_CLOSED|Unhandled/);
  });
});

describe("a start that waits for a sign-in gives way to a signal", () => {
  it("SIGTERM while up waits for nobody's sign-in stops it, and its record goes", { timeout: 60_000 }, async () => {
    const upstream = await startUpstream();
    upstreams.push(upstream);
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    const state = join(dir, "state");
    writeFileSync(file, `space: {id: hosted}\nparticipants:\n  you: {kind: human}\nmcpServers:\n  remote: {url: "${upstream.url}"}\n`);
    const cli = new Cli(["up", file, "--state-dir", state, "--port", "0", "--json"], { stdin: "pipe", env: cleanEnv() });
    started.push(cli);
    await poll("the sign-in link", () => /remote needs you to sign in at/.test(cli.stderr) || undefined, 30_000);
    // The record is there while it waits: status finds the run.
    expect(existsSync(join(state, "up.json"))).toBe(true);
    cli.kill("SIGTERM");
    const { code } = await cli.exited;
    expect(code).toBe(0);
    expect(existsSync(join(state, "up.json"))).toBe(false);
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
