#!/usr/bin/env node
// The shape of the house, checked: no import circle among the project's TypeScript files (type
// imports included), gateway/'s folders import only their own floor or the floors below it
// (ARCHITECTURE.md), gateway/ imports nothing from participants/ or cli/, cli/, participants/ and
// bench/ reach gateway/ only through its public surface (gateway/index.ts; a lazy `import()` of
// one module is left alone, since loading the whole surface would defeat it), and every file past
// 500 lines says at its top why it is one concern all the same. The console's ui/*.js is read too.
// Exits 1 on a circle or a wrong-way import; files past 500 lines without a reason are printed.
// Usage: node .ci/shape.mjs [ROOT]
import fs from "node:fs";
import path from "node:path";

const root = path.resolve(process.argv[2] ?? path.join(path.dirname(new URL(import.meta.url).pathname), ".."));
const MAX_LINES = 500;
/** A file past MAX_LINES names the limit in its opening comment, with the reason (e.g. "past 500 lines because ..."). */
const REASON = /\b(past|over|longer than|beyond) 500 lines\b/i;
/** gateway/'s floors, top to bottom, one folder each: a folder may import its own floor and those below. */
const FLOORS = [
  ["edge"],
  ["cluster"],
  ["operator"],
  ["space"],
  ["agents"],
  ["requests"],
  ["proposals"],
  ["calls"],
  ["ports"],
  ["policy"],
  ["audit"],
  ["tools"],
  ["store"],
  ["identity"],
  ["wire"],
  ["config"],
];
const floorOf = new Map(FLOORS.flatMap((names, i) => names.map((n) => [n, FLOORS.length - i])));

const skip = new Set(["node_modules", "dist", "coverage"]);
const files = [];
(function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (skip.has(e.name) || e.name.startsWith(".")) continue;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (/\.(ts|mts)$/.test(e.name) && !e.name.endsWith(".d.ts")) files.push(p);
    // The console's plain JavaScript (no build step) is held to the same shape.
    else if (e.name.endsWith(".js") && path.relative(root, dir).split(path.sep)[0] === "ui") files.push(p);
  }
})(root);

const known = new Set(files);
const rel = (f) => path.relative(root, f);
const edges = new Map();
const long = [];
const wrongWay = [];
// `import ... from "./x.js"`, `export ... from`, `import type`, and `import("./x.js")`.
const SPEC = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"](\.[^'"]+)['"]|\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g;
for (const f of files) {
  const src = fs.readFileSync(f, "utf8");
  const lines = src.split("\n").length;
  if (lines > MAX_LINES && !/\.test\.ts$/.test(f) && !REASON.test(src.split("\n").slice(0, 40).join("\n")))
    long.push(`${rel(f)} (${lines} lines)`);
  const out = new Set();
  for (const m of src.matchAll(SPEC)) {
    const spec = path.resolve(path.dirname(f), m[1] ?? m[2]);
    const base = spec.replace(/\.m?js$/, "");
    const target = [`${base}.ts`, `${base}.mts`, path.join(base, "index.ts"), spec].find((c) => known.has(c));
    if (!target) continue;
    out.add(target);
    const [fromTop, fromDir] = rel(f).split(path.sep);
    const [toTop, toDir] = rel(target).split(path.sep);
    if (fromTop === "gateway" && (toTop === "participants" || toTop === "cli"))
      wrongWay.push(`${rel(f)} imports ${rel(target)}: gateway/ never imports ${toTop}/`);
    const outside = fromTop === "cli" || fromTop === "participants" || fromTop === "bench";
    if (outside && toTop === "gateway" && m[1] !== undefined && rel(target) !== path.join("gateway", "index.ts"))
      wrongWay.push(
        `${rel(f)} imports ${rel(target)}: outside gateway/, import its public surface (gateway/index.ts), adding the name there if it is new`,
      );
    // gateway/index.ts is the public surface, above every floor.
    if (fromTop === "gateway" && toTop === "gateway" && fromDir !== toDir && fromDir !== "index.ts") {
      const a = floorOf.get(fromDir);
      const b = floorOf.get(toDir);
      if (a === undefined || b === undefined)
        wrongWay.push(
          `${rel(f)} imports ${rel(target)}: a gateway/ folder with no floor (add it to FLOORS in .ci/shape.mjs and to ARCHITECTURE.md)`,
        );
      else if (b > a) wrongWay.push(`${rel(f)} imports ${rel(target)}: ${fromDir}/ is below ${toDir}/, so the arrow runs up a floor`);
    }
  }
  if (!/\.test\.ts$/.test(f)) edges.set(f, out);
}

// Tarjan's strongly connected components, iteratively (a deep chain must not overflow the stack).
let counter = 0;
const index = new Map();
const low = new Map();
const stack = [];
const onStack = new Set();
const circles = [];
for (const start of edges.keys()) {
  if (index.has(start)) continue;
  const work = [[start, [...edges.get(start)].filter((t) => edges.has(t)), 0]];
  index.set(start, counter);
  low.set(start, counter++);
  stack.push(start);
  onStack.add(start);
  while (work.length) {
    const top = work[work.length - 1];
    const [v, next] = top;
    if (top[2] < next.length) {
      const w = next[top[2]++];
      if (!index.has(w)) {
        index.set(w, counter);
        low.set(w, counter++);
        stack.push(w);
        onStack.add(w);
        work.push([w, [...edges.get(w)].filter((t) => edges.has(t)), 0]);
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
      continue;
    }
    work.pop();
    if (work.length) {
      const parent = work[work.length - 1][0];
      low.set(parent, Math.min(low.get(parent), low.get(v)));
    }
    if (low.get(v) === index.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        scc.push(rel(w));
      } while (w !== v);
      if (scc.length > 1 || edges.get(v).has(v)) circles.push(scc.sort());
    }
  }
}

for (const c of circles) console.log(`import circle: ${c.join(" -> ")}`);
for (const w of wrongWay) console.log(`wrong-way import: ${w}`);
for (const l of long) console.log(`past ${MAX_LINES} lines with no reason at its top: ${l}`);
const failed = circles.length + wrongWay.length;
console.log(
  `shape: ${files.length} files, ${circles.length} import circles, ${wrongWay.length} wrong-way imports, ${long.length} long files without a reason`,
);
process.exit(failed ? 1 : 0);
