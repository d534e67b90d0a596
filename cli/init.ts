/**
 * `mewgate init [dir] [--example demo|coding|team]`: a starter space copied from one of
 * the example spaces, with the files it needs (scripts for the offline agents). Never
 * overwrites anything.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
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

export function runInit(dirArg: string | undefined, opts: { example?: string | undefined }, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const example = opts.example ?? "demo";
    const known = examples();
    if (!known.includes(example)) throw new CliError(`no example "${example}"; choose one of ${known.join(", ")}`);
    const source = join(EXAMPLES_DIR, example);
    const target = resolve(dirArg ?? ".");
    const files = filesOf(source);
    const clashes = files.filter((f) => existsSync(join(target, f)));
    if (clashes.length) {
      throw new CliError(`not overwriting ${clashes.map((f) => join(relative(process.cwd(), target) || ".", f)).join(", ")}; pick an empty directory (mewgate init <dir>)`);
    }
    for (const f of files) {
      mkdirSync(join(target, f, ".."), { recursive: true });
      copyFileSync(join(source, f), join(target, f));
    }
    const where = relative(process.cwd(), target) || ".";
    const yaml = join(where, "space.yaml");
    io.stdout.write(
      [
        `wrote ${files.map((f) => join(where, f)).join(", ")} (from the ${example} example)`,
        `next: mewgate up ${yaml}`,
        `      (state, tokens and logs go to ${join(where, ".mewgate")}/; keep it out of version control)`,
        "",
      ].join("\n"),
    );
    return 0;
  });
}
