/**
 * The /mcp endpoint loads the MCP SDK on its first request, not when it is mounted: the
 * SDK costs more to load than the whole gateway, and `mewgate gateway` mounts /mcp at start.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { loadMcpHttpModules, mountHttp, type McpHttpMount, type McpHttpModules } from "../participants/mcp-server/http/http.js";
import { sleep, startGateway, type TestGateway } from "./helpers.js";

const MAIN = join(import.meta.dirname, "..", "dist", "cli", "main.js");
const CLAUDE = "claude-token-9012";
const SPACE = `space: {id: lab}\nparticipants:\n  human: {kind: human, token: human-token-1234}\n  claude: {kind: agent, token: ${CLAUDE}}\n`;

let gw: TestGateway | undefined;
let mount: McpHttpMount | undefined;
const children: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  await mount?.close();
  mount = undefined;
  await gw?.stop();
  gw = undefined;
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function postInitialize(port: number, token = CLAUDE): Promise<Response> {
  const init = {
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
  };
  return fetch(`http://127.0.0.1:${port}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
    body: JSON.stringify(init),
  });
}

/**
 * How long a loader takes: long enough that requests sent together all arrive while it
 * runs, even on a loaded machine (30 ms was not, under the whole suite on two cores).
 */
const OVERLAP_MS = 1_000;

/** A loader that counts its calls and takes `delayMs`, so concurrent first requests overlap it. */
function counting(delayMs: number, fail?: () => Error | undefined): { load: () => Promise<McpHttpModules>; calls: () => number } {
  let calls = 0;
  return {
    load: async () => {
      calls++;
      await sleep(delayMs);
      const err = fail?.();
      if (err) throw err;
      return loadMcpHttpModules();
    },
    calls: () => calls,
  };
}

describe("mountHttp loads the MCP machinery on demand", () => {
  it("loads nothing when mounted, and once for concurrent first requests", async () => {
    gw = await startGateway(SPACE);
    const loader = counting(OVERLAP_MS);
    mount = mountHttp(gw.gateway, { loadModules: loader.load });
    await sleep(20);
    expect(loader.calls()).toBe(0);

    const first = await Promise.all([postInitialize(gw.port), postInitialize(gw.port), postInitialize(gw.port)]);
    expect(first.map((r) => r.status)).toEqual([200, 200, 200]);
    const ids = new Set(first.map((r) => r.headers.get("mcp-session-id")));
    expect(ids.size).toBe(3);
    await Promise.all(first.map((r) => r.text()));
    expect(mount.sessions).toBe(3);

    const later = await postInitialize(gw.port);
    expect(later.status).toBe(200);
    await later.text();
    expect(loader.calls()).toBe(1);
  });

  it("answers 500 with the reason and logs it when the modules cannot be loaded, and tries again on the next request", async () => {
    gw = await startGateway(SPACE);
    const lines: string[] = [];
    const logger = pino({ level: "info" }, { write: (s: string) => void lines.push(s) });
    let broken = true;
    const loader = counting(OVERLAP_MS, () => (broken ? new Error("Cannot find package '@modelcontextprotocol/sdk'") : undefined));
    mount = mountHttp(gw.gateway, { loadModules: loader.load, logger });

    const failed = await Promise.all([postInitialize(gw.port), postInitialize(gw.port)]);
    for (const res of failed) {
      expect(res.status).toBe(500);
      const body = (await res.json()) as { error: { code: number; message: string; data: { reason: string } } };
      expect(body.error.code).toBe(-32603);
      expect(body.error.message).toBe(
        "the MCP endpoint is unavailable: the gateway could not load its MCP server modules (Cannot find package '@modelcontextprotocol/sdk')",
      );
      expect(body.error.data.reason).toBe("unavailable");
    }
    expect(loader.calls()).toBe(1);
    const errors = lines
      .map((l) => JSON.parse(l) as { level: number; msg: string; component?: string; err?: { message: string } })
      .filter((l) => l.level >= 50);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ component: "mcp-http", err: { message: "Cannot find package '@modelcontextprotocol/sdk'" } });
    expect(errors[0]!.msg).toMatch(/could not load the MCP server modules/);

    broken = false;
    const retried = await postInitialize(gw.port);
    expect(retried.status).toBe(200);
    await retried.text();
    expect(loader.calls()).toBe(2);
  });

  it("does not load anything for a request that arrives after close()", async () => {
    gw = await startGateway(SPACE);
    const loader = counting(0);
    mount = mountHttp(gw.gateway, { loadModules: loader.load });
    await mount.close();
    const res = await postInitialize(gw.port);
    expect(res.status).toBe(503);
    await res.text();
    expect(loader.calls()).toBe(0);
  });
});

describe("mewgate gateway", () => {
  it("starts without loading the MCP SDK, and serves /mcp once asked", async () => {
    expect(existsSync(MAIN), "run npm run build first").toBe(true);
    const dir = mkdtempSync(join(tmpdir(), "mewgate-lazy-"));
    dirs.push(dir);
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    // A module load hook that records, synchronously, the module that defines the SDK's
    // streamable HTTP transport: the SDK's own file, or whichever file a bundler put it in.
    const seen = join(dir, "sdk-loaded.txt");
    writeFileSync(
      join(dir, "hooks.mjs"),
      `import { appendFileSync } from "node:fs";
export async function load(url, context, next) {
  const r = await next(url, context);
  const text = r.source == null ? "" : typeof r.source === "string" ? r.source : Buffer.from(r.source).toString("utf8");
  if (/\\b(?:class|var|let|const)\\s+StreamableHTTPServerTransport\\b/.test(text)) appendFileSync(${JSON.stringify(seen)}, url + "\\n");
  return r;
}\n`,
    );
    writeFileSync(
      join(dir, "register.mjs"),
      `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(join(dir, "hooks.mjs")).href)});\n`,
    );
    const child = spawn(
      process.execPath,
      ["--import", pathToFileURL(join(dir, "register.mjs")).href, MAIN, "gateway", "--config", file, "--port", "0"],
      {
        env: { PATH: process.env.PATH },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    children.push(child);
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    const port = await new Promise<number>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (d) => {
        out += d;
        const m = /ws:\/\/127\.0\.0\.1:(\d+)/.exec(out);
        if (m) resolve(Number(m[1]));
      });
      child.on("exit", (code) => reject(new Error(`exited ${code} before printing its address: ${stderr}`)));
    });
    // Whatever the start path imports was loaded (and recorded) before the line was printed.
    expect(existsSync(seen) ? readFileSync(seen, "utf8") : "").toBe("");

    const res = await postInitialize(port);
    expect(res.status).toBe(200);
    expect(res.headers.get("mcp-session-id")).toMatch(/^[0-9a-f-]{36}$/);
    const body = await res.text();
    expect(body).toContain('"serverInfo"');
    expect(readFileSync(seen, "utf8")).not.toBe("");

    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  });
});
