// fs.globSync for the only pattern shape the conformance suite asks for: "**/<file name>"
// (its tier report's checks.json files), relative to `cwd`.
import { readdirSync } from "node:fs";
import { basename } from "node:path";

export function globSync(pattern, { cwd = process.cwd() } = {}) {
  const m = /^\*\*\/([^*?[\]/]+)$/.exec(pattern);
  if (!m) throw new Error(`glob-shim: only "**/<name>" patterns are supported, not ${pattern}`);
  return readdirSync(cwd, { recursive: true })
    .map(String)
    .filter((p) => basename(p) === m[1]);
}
