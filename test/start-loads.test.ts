/**
 * What a gateway loads to start (issue 46): a space with no passkey policy and no identity
 * provider loads neither the WebAuthn library nor jose — a start that parses them pays for code
 * it does not run (@simplewebauthn/server is 1.8 MB bundled). The first passkey asked for loads
 * the one, the first receipt checked the other. Each in a process of its own, from the build
 * (npm test builds first), with a loader hook that reports every module resolved.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const dist = (p: string) => JSON.stringify(fileURLToPath(new URL(`../dist/gateway/${p}`, import.meta.url)));
const hook = encodeURIComponent(
  "let port; export function initialize(d) { port = d.port; } " +
    "export async function resolve(s, c, next) { const r = await next(s, c); port.postMessage(r.url); return r; }",
);

/** Runs `body` after a gateway with a plain space has started and served a call; prints what was resolved before and after. */
function run(body: string): { before: string[]; after: string[] } {
  const script = `
    import { register } from "node:module";
    import { MessageChannel } from "node:worker_threads";
    import { mkdtempSync } from "node:fs";
    import { tmpdir } from "node:os";
    import { join } from "node:path";
    const seen = [];
    const { port1, port2 } = new MessageChannel();
    port1.on("message", (m) => seen.push(m));
    port1.unref();
    register("data:text/javascript,${hook}", { data: { port: port2 }, transferList: [port2] });
    const g = await import(${dist("index.js")});
    const dir = mkdtempSync(join(tmpdir(), "mewgate-start-loads-"));
    const yaml = "space: {id: s}\\ngateway: {state_dir: " + JSON.stringify(dir) + "}\\nparticipants:\\n  alice: {kind: human, token: alice-token-0123456789}\\n";
    const config = g.parseSpaceConfig(yaml, { file: join(dir, "space.yaml"), env: {} });
    const gateway = new g.Gateway({ spaces: [config], host: "127.0.0.1", port: 0, env: {} });
    await gateway.listen();
    await new Promise((r) => setTimeout(r, 200));
    const before = [...seen];
    ${body}
    await new Promise((r) => setTimeout(r, 100));
    await gateway.close();
    console.log(JSON.stringify({ before, after: seen.slice(before.length) }));`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  expect(r.stderr).toBe("");
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!);
}

const webauthn = (urls: string[]) => urls.filter((u) => u.includes("@simplewebauthn/"));
const jose = (urls: string[]) => urls.filter((u) => u.includes("/node_modules/jose/"));

describe("a gateway's start", () => {
  it("loads no WebAuthn library; the first passkey asked for does", { timeout: 40_000 }, () => {
    const { before, after } = run(`
      const { Passkeys } = await import(${dist("identity/passkeys.js")});
      const keys = new Passkeys("s", dir);
      await keys.registrationOptions("alice", { rpIds: ["localhost"], origins: ["http://localhost"] });`);
    expect(before.length).toBeGreaterThan(10);
    expect(webauthn(before)).toEqual([]);
    expect(webauthn(after).length).toBeGreaterThan(0);
  });

  it("loads no jose; the first receipt checked does", { timeout: 40_000 }, () => {
    const { before, after } = run(`
      await g.verifyReceipt("not.a.receipt", { keys: [] });`);
    expect(jose(before)).toEqual([]);
    expect(jose(after).length).toBeGreaterThan(0);
  });
});
