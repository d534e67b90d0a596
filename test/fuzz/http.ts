/**
 * Hostile HTTP requests to the gateway's port: the operator API (operator/api.ts), MEW's
 * injection (operator/inject.ts), metrics, health, the console, /mcp and the WebSocket
 * door — wrong methods, odd paths and encodings, query strings, malformed, deep and huge
 * bodies, with no token, a wrong one, or the low-privilege member's. Written as raw bytes on
 * a TCP socket, so that nothing a client library would refuse to send is left out.
 */
import { connect } from "node:net";
import type { Rng } from "./frames.js";
import { TARGET, TOKENS } from "./harness.js";

const API = "/api/spaces/fz/";
const API_ROUTES = [
  "me",
  "participants",
  "tools",
  "grants",
  "notify",
  "audit?participant=fuzz&since=garbage&limit=-1",
  "audit?limit=1e308&until=2099-01-01",
  "proposals",
  "proposals?state=all",
  `proposals/${TARGET.otherProposal}`,
  `proposals/${TARGET.otherProposal}/approve`,
  `proposals/${TARGET.ownProposal}/approve`,
  `proposals/${TARGET.otherProposal}/reject`,
  `proposals/${TARGET.otherProposal}/withdraw`,
  `proposals/${TARGET.ownProposal}/withdraw`,
  "grants/grant-1",
  "chat",
  "participants/tools/disable",
  "participants/tools/enable",
  "participants/__proto__/disable",
  "conversations",
  "requests",
  "requests/x/respond",
  "events",
  "constructor",
  "__proto__",
];
const OTHER_PATHS = [
  "/participants?space=fz",
  "/participants",
  "/participants/fuzz/messages?space=fz",
  "/participants/fuzz/messages",
  "/participants/human/messages?space=fz",
  "/participants/fuzz/messages?space=__proto__",
  "/metrics",
  "/health",
  "/healthz",
  "/ui/",
  "/ui/../../../etc/passwd",
  "/ui/%2e%2e/%2e%2e/etc/passwd",
  "/mcp",
  "/mcp/tools",
  "/ws?space=fz",
  "/",
  "*",
  "//",
  "//[",
  "//a:b@",
  "//:99999",
  "//%",
  "http://evil.example/api/spaces/fz/me",
  "/api/spaces/",
  "/api/spaces/%ZZ/me",
  "/api/spaces/fz/proposals/%E0%A4%A/approve",
  "/participants/%ZZ/messages?space=fz",
  "/api/spaces/fz/%00",
];

const BODIES = [
  "",
  "{",
  "null",
  "[]",
  "1",
  '"text"',
  "{}",
  '{"scope":"always","arguments":{"path":"/etc/shadow"}}',
  '{"reason":"unsafe","text":"\\u202eevil"}',
  '{"text":"hello from http"}',
  '{"text":"\\u0000\\u001b[31m","to":["__proto__"]}',
  '{"kind":"chat","payload":{"text":"injected"}}',
  '{"kind":"mcp/request","to":["tools"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"danger","arguments":{}}}}',
  '{"kind":"mcp/request","to":["system:gateway"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tools/guarded","arguments":{}}}}',
  `{"kind":"mcp/approve","correlation_id":["${TARGET.otherProposal}"],"payload":{"scope":"once"}}`,
  '{"kind":"system/welcome","payload":{}}',
  '{"kind":"stream/request","payload":{"direction":"upload"}}',
  '{"__proto__":{"polluted":true},"kind":"chat","payload":{}}',
  '{"result":{"action":"accept"}}',
  '{"error":{"code":1,"message":"no"}}',
];

export interface HttpAnswer {
  status: number | undefined;
  what: string;
}

/** One request as raw bytes, and a short description of it for a report. */
export function httpRequest(r: Rng, port: number): { bytes: Buffer; what: string } {
  const method = r.pick(["GET", "GET", "POST", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "FOO"]);
  let path = r.chance(0.6) ? API + r.pick(API_ROUTES) : r.pick(OTHER_PATHS);
  if (r.chance(0.25)) {
    path += r.pick([
      "%",
      "%ZZ",
      "/%E0%A4%A",
      "/..",
      "//",
      "?",
      "?space=fz&space=other",
      `?token=${TOKENS.fuzz}`,
      "#frag",
      "/x".repeat(2000),
      ";a=b",
      "?__proto__[x]=1",
    ]);
  }
  const headers: string[] = [`Host: ${r.chance(0.9) ? `127.0.0.1:${port}` : r.pick(["evil.example", "", "127.0.0.1:1"])}`];
  const auth = r.pick([
    undefined,
    `Bearer ${TOKENS.fuzz}`,
    `Bearer ${TOKENS.fuzz}`,
    "Bearer wrong-token",
    "Bearer",
    `Basic ${TOKENS.fuzz}`,
    `Bearer ${TOKENS.fuzz} extra`,
    `Bearer ${"x".repeat(5000)}`,
  ]);
  if (auth !== undefined) headers.push(`Authorization: ${auth}`);
  if (r.chance(0.1)) headers.push(`Origin: ${r.pick(["http://evil.example", "null", `http://127.0.0.1:${port}`])}`);
  const upgrade = r.chance(0.2);
  if (upgrade)
    headers.push("Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==");
  let body = "";
  if (method !== "GET" && method !== "HEAD" && r.chance(0.8)) {
    switch (r.int(6)) {
      case 0:
        body = `{"kind":"chat","payload":${"[".repeat(10_000)}${"]".repeat(10_000)}}`;
        break;
      case 1:
        body = `{"text":${"[".repeat(100_000)}${"]".repeat(100_000)}}`;
        break;
      case 2:
        body = `{"text":"${"x".repeat(r.pick([2000, 1_100_000]))}"}`;
        break;
      default:
        body = r.pick(BODIES);
    }
    headers.push(`Content-Type: ${r.pick(["application/json", "text/plain", "application/json; charset=utf-16"])}`);
  }
  const payload = Buffer.from(body, "utf8");
  if (body !== "" || method === "POST") headers.push(`Content-Length: ${payload.length}`);
  if (!upgrade) headers.push("Connection: close");
  const head = `${method} ${path} HTTP/1.1\r\n${headers.join("\r\n")}\r\n\r\n`;
  const what = `${method} ${path.length > 120 ? `${path.slice(0, 120)}…(${path.length} chars)` : path} auth=${auth === undefined ? "none" : auth.length > 40 ? `${auth.slice(0, 40)}…` : auth} body=${body.length > 80 ? `${body.slice(0, 60)}…(${body.length} chars)` : JSON.stringify(body)}`;
  return { bytes: Buffer.concat([Buffer.from(head, "latin1"), payload]), what };
}

/** Sends raw bytes and reads the status line; undefined when the connection ends without one. */
export function send(port: number, bytes: Buffer, timeoutMs = 10_000): Promise<number | undefined> {
  return new Promise((resolve) => {
    const sock = connect(port, "127.0.0.1");
    let got = "";
    let done = false;
    const finish = (status: number | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(status);
    };
    const timer = setTimeout(() => finish(undefined), timeoutMs);
    sock.on("error", () => finish(statusOf(got)));
    sock.on("close", () => finish(statusOf(got)));
    sock.on("data", (d) => {
      got += d.toString("latin1");
      if (got.includes("\r\n")) finish(statusOf(got));
    });
    sock.write(bytes, () => {});
  });
}

function statusOf(text: string): number | undefined {
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
  return m ? Number(m[1]) : undefined;
}
