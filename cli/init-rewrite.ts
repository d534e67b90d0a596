/**
 * What `mewgate init` changes in an example's YAML files so that they read as the new
 * space's own: the space id (and name) from the directory's name, and the commands in its
 * comments pointing at the new directory instead of `spaces/<example>/` and `npm start`.
 * Text edits line by line, so that every other comment and the layout stay as written.
 */

/** What init writes when the directory has no .gitignore. */
export const GITIGNORE = "# mewgate's state: tokens, logs, the audit log, the sandbox\n.mewgate/\n";

const SPACE_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/**
 * A space id from a directory's name: lower case, runs of anything but letters, digits,
 * `_` and `-` become one `-`, at most 64 characters; "space" when nothing is left.
 */
export function spaceIdFor(name: string): string {
  const id = name
    .normalize("NFKD")
    .replace(/\p{M}/gu, "")
    .toLowerCase()
    .replace(/[^a-z0-9_-]+/g, "-")
    .replace(/^[-_]+/, "")
    .slice(0, 64)
    .replace(/[-_]+$/, "");
  return SPACE_ID.test(id) ? id : "space";
}

/** Quoted for YAML when it would not read back as the same plain string. */
function scalar(text: string): string {
  return /^[A-Za-z0-9][A-Za-z0-9 _.-]*$/.test(text) && !/^(true|false|null|yes|no|on|off|~)$/i.test(text) ? text : JSON.stringify(text);
}

export function rewriteExample(text: string, opts: { example: string; id: string; where: string; file: string }): string {
  const path = (f: string) => (opts.where === "." ? f : `${opts.where}/${f}`);
  let section = "";
  return text
    .split("\n")
    .map((line) => {
      if (/^\S/.test(line) && !line.startsWith("#")) section = line.replace(/:.*$/, "");
      if (line.startsWith("#")) {
        return line
          .replaceAll(`spaces/${opts.example}/`, path(""))
          .replace(/\s*\(what `npm start` runs\)/, "")
          .replace(new RegExp(`\\bThe ${opts.example} space\\b`), `The ${opts.id} space (from the ${opts.example} example)`);
      }
      if (opts.file !== "space.yaml" || section !== "space") return line;
      const id = line.match(/^(\s+)id:\s*\S+(\s+#.*)?$/);
      if (id) return `${id[1]}id: ${opts.id}${id[2] ?? ""}`;
      const name = line.match(/^(\s+)name:\s*.+$/);
      if (name) return `${name[1]}name: ${scalar(opts.id)}`;
      return line;
    })
    .join("\n");
}
