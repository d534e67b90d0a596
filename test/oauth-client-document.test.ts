/**
 * The gateway's client ID metadata documents (participants/bridge/oauth-client-document.ts,
 * mounted by `up` through cli/oauth.ts) and the space.yaml keys of a client's identity
 * (client_metadata_url, private_key / private_key_jwt). The flows themselves run against
 * the MCP conformance suite (test/conformance-client.test.ts: auth/basic-cimd,
 * auth/client-credentials-jwt). Hostile first.
 */
import { request } from "node:http";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { prepareOAuth } from "../cli/oauth.js";
import { parseSpaceConfig } from "../gateway/config/config.js";
import { clientDocumentUrl } from "../participants/bridge/oauth-client-document.js";
import { startGateway, type TestGateway } from "./helpers.js";

let cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  cleanups = [];
});

const YAML = `space: {id: lab}
participants:
  alice: {kind: human, token: alice-token-0123456789}
mcpServers:
  remote: {url: "http://127.0.0.1:1/mcp"}
  plain: {url: "http://127.0.0.1:2/mcp", oauth: false}
  local: {command: node, args: ["-e", "0"]}
`;

async function rig(): Promise<{ gw: TestGateway; base: string; opts: ReturnType<typeof prepareOAuth> }> {
  const gw = await startGateway(YAML);
  cleanups.push(() => gw.stop());
  const config = parseSpaceConfig(YAML, { file: join(gw.dir, "space.yaml"), env: {} });
  const opts = prepareOAuth(config, join(gw.dir, "state"), gw.gateway, gw.url, {});
  return { gw, base: `http://127.0.0.1:${gw.port}`, opts };
}

/** A raw GET (or other method) with the path exactly as given: fetch would normalise `..`. */
function raw(port: number, path: string, method = "GET"): Promise<{ status: number; body: string; type: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, method }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        body += d;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body, type: res.headers["content-type"] }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("client ID metadata documents served by the gateway", () => {
  it("answers only its own servers' documents: other spaces, servers, methods and odd paths get a 404 that repeats nothing", async () => {
    const { gw } = await rig();
    const odd = [
      "/oauth/client/lab/plain.json", // oauth: false: signs in to nothing
      "/oauth/client/lab/local.json", // a command server
      "/oauth/client/lab/alice.json",
      "/oauth/client/other/remote.json",
      "/oauth/client/lab/remote",
      "/oauth/client/lab/remote.json/x",
      "/oauth/client/lab/../other/remote.json",
      "/oauth/client/lab/%2e%2e%2fremote.json",
      `/oauth/client/lab/${"<script>".repeat(2000)}.json`,
      "/oauth/client/lab/remote.json%00",
    ];
    for (const path of odd) {
      const r = await raw(gw.port, path);
      expect(r.status, path).toBe(404);
      expect(r.body).not.toContain("script");
      expect(r.body).not.toContain("remote");
    }
    const post = await raw(gw.port, "/oauth/client/lab/remote.json", "POST");
    expect(post.status).toBe(404);
    // The gateway keeps serving.
    expect((await raw(gw.port, "/oauth/client/lab/remote.json")).status).toBe(200);
  });

  it("serves a public client's document whose client_id is its own URL and whose callback is the space's", async () => {
    const { gw, base, opts } = await rig();
    const url = `${base}/oauth/client/lab/remote.json`;
    const res = await fetch(url);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    const doc = (await res.json()) as Record<string, unknown>;
    expect(doc).toEqual({
      client_id: url,
      client_name: "mewgate (lab)",
      redirect_uris: [`${base}/oauth/callback/lab`],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    });
    expect(JSON.stringify(doc)).not.toMatch(/secret|token-0123/);
    // The bridge is given the same URL for that server, and none for a server that does not sign in.
    expect(opts?.redirectUri).toBe(`${base}/oauth/callback/lab`);
    expect(opts?.clientMetadataUrl?.("remote")).toBe(url);
    expect(opts?.clientMetadataUrl?.("plain")).toBeUndefined();
    expect(opts?.clientMetadataUrl?.("nobody")).toBeUndefined();
    expect((await raw(gw.port, "/oauth/client/lab/remote.json", "HEAD")).status).toBe(200);
  });

  it("uses the gateway's URL as a client_id only when it is https or loopback", () => {
    expect(clientDocumentUrl("https://mew.example.org/", "lab", "remote")).toBe("https://mew.example.org/oauth/client/lab/remote.json");
    expect(clientDocumentUrl("https://mew.example.org/base", "a b", "r/x")).toBe(
      "https://mew.example.org/base/oauth/client/a%20b/r%2Fx.json",
    );
    expect(clientDocumentUrl("http://127.0.0.1:4000", "lab", "remote")).toBe("http://127.0.0.1:4000/oauth/client/lab/remote.json");
    expect(clientDocumentUrl("http://[::1]:4000", "lab", "remote")).toBe("http://[::1]:4000/oauth/client/lab/remote.json");
    expect(clientDocumentUrl("http://mew.example.org", "lab", "remote")).toBeUndefined();
    expect(clientDocumentUrl("http://127.0.0.1.example.org", "lab", "remote")).toBeUndefined();
    expect(clientDocumentUrl("not a url", "lab", "remote")).toBeUndefined();
  });
});

describe("space.yaml: a client's identity", () => {
  const parse = (oauth: string) =>
    parseSpaceConfig(
      `space: {id: lab}\nparticipants:\n  alice: {kind: human}\nmcpServers:\n  remote: {url: "http://127.0.0.1:1/mcp", oauth: ${oauth}}\n`,
      { file: "/tmp/space.yaml", env: {} },
    );

  it("refuses a client_metadata_url that is not an https document, and a private key without its client or method", () => {
    expect(() => parse(`{client_metadata_url: "http://mew.example.org/c.json"}`)).toThrow(/client_metadata_url must be an https URL/);
    expect(() => parse(`{client_metadata_url: "https://mew.example.org/"}`)).toThrow(/client_metadata_url must be an https URL/);
    expect(() => parse(`{client_metadata_url: "not a url"}`)).toThrow(/client_metadata_url/);
    expect(() => parse(`{private_key: {secret_file: k.pem}}`)).toThrow(/private_key needs the client_id/);
    expect(() => parse(`{client_id: x, token_endpoint_auth_method: private_key_jwt}`)).toThrow(/private_key_jwt goes with private_key/);
    expect(() => parse(`{client_id: x, private_key: {secret_file: k.pem}, token_endpoint_auth_method: client_secret_post}`)).toThrow(
      /private_key_jwt goes with private_key/,
    );
    expect(() => parse(`{grant: client_credentials, client_id: x}`)).toThrow(/needs client_id and client_secret \(or private_key\)/);
  });

  it("takes a service account with a private key kept in a file beside space.yaml", () => {
    const c = parse(`{grant: client_credentials, client_id: x, private_key: {secret_file: k.pem}, signing_alg: ES256}`);
    const oauth = c.participants["remote"]!.mcp!.oauth as { private_key: { secret_file: string }; signing_alg: string };
    expect(oauth.private_key.secret_file).toBe("/tmp/k.pem");
    expect(oauth.signing_alg).toBe("ES256");
    const doc = parse(`{client_metadata_url: "https://mew.example.org/clients/mewgate.json"}`);
    expect((doc.participants["remote"]!.mcp!.oauth as { client_metadata_url: string }).client_metadata_url).toBe(
      "https://mew.example.org/clients/mewgate.json",
    );
  });
});
