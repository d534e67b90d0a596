// The client the MCP conformance suite runs (`conformance client --command "node
// test/conformance/client.mjs"`, the scenario's server URL last): a mewgate space whose
// one MCP server is that URL, signed in to by the bridge (headless consent, loopback only),
// and a person in the space who lists the tools and calls the first one through the
// gateway. Exits 0 once the call is answered, 1 saying why otherwise.
// Uses the built tree (npm run build): dist/.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dist = new URL("../../dist/", import.meta.url);
const load = (p) => import(new URL(p, dist).href);
const { parseSpaceConfig } = await load("gateway/config/config.js");
const { Gateway } = await load("gateway/edge/server.js");
const { connectInProcess } = await load("gateway/space/inprocess.js");
const { startBridge } = await load("participants/bridge/bridge.js");
const { ParticipantClient } = await load("participants/index.js");
const { prepareOAuth } = await load("cli/oauth.js");

const serverUrl = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? "";
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? "{}");
const dir = mkdtempSync(join(tmpdir(), "mewgate-conformance-"));
const env = {};
const oauth = ["consent: auto"];
if (typeof context.client_id === "string") oauth.push(`client_id: ${JSON.stringify(context.client_id)}`);
if (typeof context.client_secret === "string") {
  env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
  oauth.push('client_secret: "${CONFORMANCE_CLIENT_SECRET}"');
}
if (typeof context.private_key_pem === "string") {
  // private_key_jwt: the key kept out of space.yaml, in a file beside it.
  writeFileSync(join(dir, "client-key.pem"), context.private_key_pem, { mode: 0o600 });
  oauth.push(`private_key: {secret_file: ${JSON.stringify(join(dir, "client-key.pem"))}}`, "token_endpoint_auth_method: private_key_jwt");
  if (typeof context.signing_algorithm === "string") oauth.push(`signing_alg: ${JSON.stringify(context.signing_algorithm)}`);
}
if (scenario.startsWith("auth/client-credentials")) oauth.push("grant: client_credentials");
// The suite's client ID metadata document: a URL it expects as client_id (its authorization server does not fetch it).
if (scenario === "auth/basic-cimd") oauth.push('client_metadata_url: "https://conformance-test.local/client-metadata.json"');
const yaml = `space: {id: conformance}
gateway: {state_dir: ${JSON.stringify(join(dir, "state"))}}
participants:
  person: {kind: human, tools: {allow: ["remote/*"]}}
mcpServers:
  remote: {url: ${JSON.stringify(serverUrl)}, oauth: {${oauth.join(", ")}}}
`;

const stops = [];
let code = 1;
try {
  const config = parseSpaceConfig(yaml, { file: join(dir, "space.yaml"), env });
  const gateway = new Gateway({ spaces: [config], host: "127.0.0.1", port: 0, env });
  stops.push(() => gateway.close());
  const { url } = await gateway.listen();
  const space = gateway.spaces.get("conformance");
  const bridge = await startBridge({
    id: "remote",
    server: config.participants.remote.mcp,
    client: { transport: () => connectInProcess(space, "remote"), reconnect: false },
    oauth: prepareOAuth(config, config.gateway.state_dir, gateway, url, env),
    startTimeoutMs: 20_000,
  });
  stops.unshift(() => bridge.stop());
  const person = new ParticipantClient({ transport: () => connectInProcess(space, "person"), reconnect: false });
  await person.connect();
  stops.unshift(() => person.close());
  let tools = [];
  for (let i = 0; i < 100 && !tools.some((t) => t.participant === "remote" || t.name.startsWith("remote/")); i++) {
    tools = await person.listTools();
    if (!tools.length) await new Promise((r) => setTimeout(r, 100));
  }
  const tool = tools.find((t) => t.name.startsWith("remote/"));
  if (!tool) throw new Error("the server's tools did not appear in the space");
  const result = await person.request("system:gateway", "tools/call", { name: tool.name, arguments: {} }, { timeoutMs: 20_000 });
  console.log(JSON.stringify({ tool: tool.name, result }));
  code = 0;
} catch (err) {
  console.error(`mewgate conformance client: ${err?.message ?? err}`);
} finally {
  for (const stop of stops) await Promise.resolve(stop()).catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
process.exit(code);
