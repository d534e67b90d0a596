/**
 * How the person can run this very `mewgate` again, for the commands a hint prints:
 * `mewgate` when that name on their PATH is this program (installed, or `npm link`ed),
 * else `node <path to main.js>` (a clone that was only `npm install`ed, where no
 * `mewgate` is on the PATH). A hint that names a command the shell cannot find sends a
 * new operator the wrong way.
 */
import { accessSync, constants, realpathSync } from "node:fs";
import { delimiter, isAbsolute, join, relative } from "node:path";

function real(file: string): string | undefined {
  try {
    return realpathSync(file);
  } catch {
    return undefined;
  }
}

/** Whether `mewgate` on this PATH is the program at `main`. */
export function onPath(main: string, path = process.env["PATH"] ?? ""): boolean {
  const self = real(main);
  if (self === undefined) return false;
  for (const dir of path.split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue;
    const candidate = join(dir, "mewgate");
    try {
      accessSync(candidate, constants.X_OK);
    } catch {
      continue;
    }
    // The first one found is the one the shell runs.
    return real(candidate) === self;
  }
  return false;
}

/** `mewgate`, or the `node …/main.js` that runs this program from the current directory. */
export function selfCommand(main = process.argv[1] ?? "", cwd = process.cwd(), path = process.env["PATH"] ?? ""): string {
  if (!main || onPath(main, path)) return "mewgate";
  const rel = relative(cwd, main);
  const shown = rel.startsWith("..") && rel.split("/").filter((p) => p === "..").length > 2 ? main : rel;
  return `node ${/[\s'"$`\\]/.test(shown) ? JSON.stringify(shown) : shown}`;
}

/** `p` as a hint shows it: relative to the working directory when that is shorter and inside it. */
export function shortPath(p: string): string {
  const rel = relative(process.cwd(), p);
  return rel && !rel.startsWith("..") && rel.length < p.length ? rel : p;
}
