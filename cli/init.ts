/**
 * `mewgate init [dir] [--example demo|coding|team]`: a starter space copied from one of
 * the example spaces, with the files it needs (scripts for the offline agents), made the
 * directory's own (init-rewrite.ts: its space id and the commands in its comments), and a
 * `.gitignore` that keeps `.mewgate/` (tokens, state, logs) out of version control. Never
 * overwrites anything.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, join, relative, resolve } from "node:path";
import { GITIGNORE, rewriteExample, spaceIdFor } from "./init-rewrite.js";
import { selfCommand } from "./invocation.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { CliError, INSTALL_DIR } from "./space.js";

export const EXAMPLES_DIR = join(INSTALL_DIR, "spaces");

export function examples(): string[] {
  try {
    return readdirSync(EXAMPLES_DIR)
      .filter((d) => existsSync(join(EXAMPLES_DIR, d, "space.yaml")))
      .sort();
  } catch {
    return [];
  }
}

/** The example's files, relative to its directory; state directories and generated files stay behind. */
function filesOf(dir: string, prefix = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, prefix)).sort()) {
    if (name.startsWith(".")) continue;
    const rel = prefix ? join(prefix, name) : name;
    if (statSync(join(dir, rel)).isDirectory()) out.push(...filesOf(dir, rel));
    else out.push(rel);
  }
  return out;
}

/** A path as a shell reads it back: quoted when it holds spaces or quotes. */
function quoted(path: string): string {
  return /[\s'"$`\\]/.test(path) ? JSON.stringify(path) : path;
}

export function runInit(dirArg: string | undefined, opts: { example?: string | undefined }, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const example = opts.example ?? "demo";
    const known = examples();
    if (!known.includes(example)) throw new CliError(`no example "${example}"; choose one of ${known.join(", ")}`);
    const source = join(EXAMPLES_DIR, example);
    const target = resolve(dirArg ?? ".");
    const files = filesOf(source);
    const id = spaceIdFor(basename(target));
    const clashes = files.filter((f) => existsSync(join(target, f)));
    if (clashes.length) {
      throw new CliError(
        `not overwriting ${clashes.map((f) => join(relative(process.cwd(), target) || ".", f)).join(", ")}; pick an empty directory (${selfCommand()} init <dir>)`,
      );
    }
    const where = relative(process.cwd(), target) || ".";
    for (const f of files) {
      mkdirSync(join(target, f, ".."), { recursive: true });
      const bytes = readFileSync(join(source, f));
      writeFileSync(join(target, f), f.endsWith(".yaml") ? rewriteExample(bytes.toString("utf8"), { example, id, where, file: f }) : bytes);
    }
    // A .gitignore of the directory's own is left as it is; the note below says what to add.
    const ignore = join(target, ".gitignore");
    const hadIgnore = existsSync(ignore);
    if (!hadIgnore) writeFileSync(ignore, GITIGNORE);
    const ignored = hadIgnore && /^\/?\.mewgate\/?\s*$/m.test(readFileSync(ignore, "utf8"));
    const yaml = quoted(join(where, "space.yaml"));
    const wrote = [...files, ...(hadIgnore ? [] : [".gitignore"])].map((f) => join(where, f));
    io.stdout.write(
      [
        `wrote ${wrote.join(", ")} (from the ${example} example; space id "${id}")`,
        `next: ${selfCommand()} up ${yaml}`,
        hadIgnore && !ignored
          ? `      (state, tokens and logs go to ${join(where, ".mewgate")}/; add .mewgate/ to ${join(where, ".gitignore")})`
          : `      (state, tokens and logs go to ${join(where, ".mewgate")}/, which .gitignore keeps out of version control)`,
        "",
      ].join("\n"),
    );
    return 0;
  });
}
