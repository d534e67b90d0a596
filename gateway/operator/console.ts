/**
 * The web console's files, served at `/ui/` on the gateway's port: three static files
 * (ui/index.html, app.js, app.css), no build step. The page talks to the operator API
 * (api.ts) with the token from its URL fragment or its sign-in form.
 *
 * Served with a strict Content-Security-Policy — scripts and styles only from here, no
 * inline script, no frames, connections only back to this origin — so even a bug that
 * put participant text into the page as HTML could not run it.
 */
import { existsSync, readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FILES: Record<string, string> = {
  "index.html": "text/html; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
  "elicit.js": "text/javascript; charset=utf-8",
  "sessions.js": "text/javascript; charset=utf-8",
  "app.css": "text/css; charset=utf-8",
};

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** The `ui/` folder: beside `gateway/` in the repository, beside `dist/` when installed. */
function findUi(): string | undefined {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, "ui", "index.html"))) return join(dir, "ui");
    dir = dirname(dir);
  }
  return undefined;
}

export interface ConsoleHost {
  addHttpRoute(path: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
  addHttpPrefix(prefix: string, handler: (req: IncomingMessage, res: ServerResponse) => void): void;
}

export function mountConsole(gateway: ConsoleHost): void {
  const root = findUi();
  // Read once: three small files, served from memory.
  const files = new Map<string, Buffer>();
  if (root) for (const name of Object.keys(FILES)) files.set(name, readFileSync(join(root, name)));
  gateway.addHttpRoute("/ui", (_req, res) => {
    res.writeHead(301, { location: "/ui/" });
    res.end();
  });
  gateway.addHttpPrefix("/ui/", (req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0]!;
    const name = path === "/ui/" ? "index.html" : path.slice("/ui/".length);
    const body = files.get(name);
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" });
      return res.end();
    }
    if (!body) {
      res.writeHead(404, { "content-type": "text/plain" });
      return res.end(root ? "not found\n" : "the web console's files are not installed (ui/ is missing)\n");
    }
    res.writeHead(200, {
      "content-type": FILES[name]!,
      "content-security-policy": CONSOLE_CSP,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "cache-control": "no-store",
      "cross-origin-opener-policy": "same-origin",
    });
    res.end(req.method === "HEAD" ? undefined : body);
  });
}
