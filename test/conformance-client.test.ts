/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, its `client`
 * command) against mewgate as an MCP OAuth client: for each `auth/*` scenario the suite
 * starts its server (and authorization server), and test/conformance/client.mjs bridges
 * that server into a space, signs in (headless consent, loopback only) and has a person
 * call its tool through the gateway. The suite's checks decide; this test requires every
 * scenario below to pass with no failure and no warning.
 *
 * The suite's CLI imports fs.globSync (Node 22): on Node 20 test/conformance/node20.mjs
 * gives that one import a stand-in. Needs the built tree (npm run build).
 *
 * Not listed, and why: auth/enterprise-managed-authorization and
 * auth/cross-app-access-complete-flow (the identity assertion grant, a token exchange with the
 * person's identity provider, is not supported: docs/security.md, "Upstream credentials").
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
const cli = join(root, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
const shim = join(root, "test/conformance/node20.mjs");
const client = join(root, "test/conformance/client.mjs");
const results = mkdtempSync(join(tmpdir(), "mewgate-conformance-results-"));
afterAll(() => rmSync(results, { recursive: true, force: true }));

const SCENARIOS = [
  "auth/metadata-default",
  "auth/metadata-var1",
  "auth/metadata-var2",
  "auth/metadata-var3",
  "auth/2025-03-26-oauth-metadata-backcompat",
  "auth/2025-03-26-oauth-endpoint-fallback",
  "auth/scope-from-www-authenticate",
  "auth/scope-from-scopes-supported",
  "auth/scope-omitted-when-undefined",
  "auth/scope-step-up",
  "auth/scope-retry-limit",
  "auth/resource-mismatch",
  "auth/pre-registration",
  "auth/client-credentials-basic",
  "auth/client-credentials-jwt",
  "auth/basic-cimd",
  "auth/token-endpoint-auth-basic",
  "auth/token-endpoint-auth-post",
  "auth/token-endpoint-auth-none",
  // Their server speaks only MCP 2026-07-28 (it refuses a request without MCP-Protocol-Version): the bridge probes and speaks it.
  "auth/offline-access-scope",
  "auth/offline-access-not-supported",
  // The authorization response's issuer (RFC 9207) and an authorization server that moves.
  "auth/iss-supported",
  "auth/iss-not-advertised",
  "auth/iss-supported-missing",
  "auth/iss-wrong-issuer",
  "auth/iss-unexpected",
  "auth/iss-normalized",
  "auth/metadata-issuer-mismatch",
  "auth/authorization-server-migration",
];

function run(scenario: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [
        "--import",
        shim,
        cli,
        "client",
        "--command",
        `${JSON.stringify(process.execPath)} ${JSON.stringify(client)}`,
        "--scenario",
        scenario,
        "--timeout",
        "45000",
      ],
      { cwd: results, timeout: 90_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: `${stdout}\n${stderr}` }),
    );
  });
}

describe("the MCP conformance suite's auth scenarios, through a space", () => {
  for (const scenario of SCENARIOS) {
    it(scenario, async () => {
      const { code, output } = await run(scenario);
      const summary = /Passed: (\d+)\/(\d+), (\d+) failed, (\d+) warnings/.exec(output);
      expect(summary, output.slice(-4000)).not.toBeNull();
      expect({ failed: Number(summary![3]), warnings: Number(summary![4]) }, output.slice(-4000)).toEqual({ failed: 0, warnings: 0 });
      expect(Number(summary![1])).toBeGreaterThan(0);
      expect(output).toContain("OVERALL: PASSED");
      expect(code).toBe(0);
    }, 120_000);
  }
});
