/**
 * The web console's files, served at `/ui/` on the gateway's port: the static files of ui/
 * (index.html, app.css, app.js and the modules it imports) and the `diff` package's browser
 * build at vendor/diff.min.js, no build step. The page talks to the operator API
 * (api.ts) with the token from its URL fragment or its sign-in form.
 *
 * Served with a strict Content-Security-Policy — scripts and styles only from here, no
 * inline script, no frames, connections only back to this origin — so even a bug that
 * put participant text into the page as HTML could not run it.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { IncomingMessage, ServerResponse } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FILES: Record<string, string> = {
  "index.html": "text/html; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
  "api.js": "text/javascript; charset=utf-8",
  "elicit.js": "text/javascript; charset=utf-8",
  "signin.js": "text/javascript; charset=utf-8",
  "args.js": "text/javascript; charset=utf-8",
  "cards.js": "text/javascript; charset=utf-8",
  "dom.js": "text/javascript; charset=utf-8",
  "text.js": "text/javascript; charset=utf-8",
  "decided.js": "text/javascript; charset=utf-8",
  "edit.js": "text/javascript; charset=utf-8",
  "keys.js": "text/javascript; charset=utf-8",
  "policy.js": "text/javascript; charset=utf-8",
  "suggestions.js": "text/javascript; charset=utf-8",
  "risk.js": "text/javascript; charset=utf-8",
  "turns.js": "text/javascript; charset=utf-8",
  "batch.js": "text/javascript; charset=utf-8",
  "fatigue.js": "text/javascript; charset=utf-8",
  "preview.js": "text/javascript; charset=utf-8",
  "preview.css": "text/css; charset=utf-8",
  "link.html": "text/html; charset=utf-8",
  "link.js": "text/javascript; charset=utf-8",
  "passkey.html": "text/html; charset=utf-8",
  "passkey.js": "text/javascript; charset=utf-8",
  "sessions.js": "text/javascript; charset=utf-8",
  "tables.js": "text/javascript; charset=utf-8",
  "stream.js": "text/javascript; charset=utf-8",
  "favicon.js": "text/javascript; charset=utf-8",
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

const VENDOR_DIFF = "vendor/diff.min.js";

/** The `diff` package's browser build (dist/diff.min.js, a UMD that sets `globalThis.Diff`). */
function vendorDiff(): Buffer | undefined {
  try {
    const main = createRequire(import.meta.url).resolve("diff");
    let dir = dirname(main);
    for (let i = 0; i < 3 && !existsSync(join(dir, "dist", "diff.min.js")); i++) dir = dirname(dir);
    return readFileSync(join(dir, "dist", "diff.min.js"));
  } catch {
    return undefined;
  }
}

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
  // Read once, when the console is first asked for (not at start: most starts never serve it), and served from memory.
  let loaded: Map<string, Buffer> | undefined;
  const load = (): Map<string, Buffer> => {
    if (loaded) return loaded;
    const files = new Map<string, Buffer>();
    const root = findUi();
    if (root) for (const name of Object.keys(FILES)) files.set(name, readFileSync(join(root, name)));
    // The line diff the edit dialog shows is the `diff` package's own browser build, not a copy.
    const diffJs = vendorDiff();
    if (diffJs) files.set(VENDOR_DIFF, diffJs);
    loaded = files;
    return files;
  };
  gateway.addHttpRoute("/ui", (_req, res) => {
    res.writeHead(301, { location: "/ui/" });
    res.end();
  });
  gateway.addHttpPrefix("/ui/", (req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0]!;
    const name = path === "/ui/" ? "index.html" : path.slice("/ui/".length);
    const body = load().get(name);
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" });
      return res.end();
    }
    if (!body) {
      res.writeHead(404, { "content-type": "text/plain" });
      return res.end(findUi() ? "not found\n" : "the web console's files are not installed (ui/ is missing)\n");
    }
    res.writeHead(200, {
      "content-type": FILES[name] ?? "text/javascript; charset=utf-8",
      "content-security-policy": CONSOLE_CSP,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "cache-control": "no-store",
      "cross-origin-opener-policy": "same-origin",
    });
    res.end(req.method === "HEAD" ? undefined : body);
  });
}
