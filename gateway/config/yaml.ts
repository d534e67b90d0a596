/**
 * Reading space.yaml as YAML: ${ENV} substitution in values, and where in the file a
 * schema issue points (line and column), so config.ts can say FILE:LINE:COL.
 */
import { isAlias, isMap, isScalar, isSeq, type Document, type Node } from "yaml";

// ${ENV} substitution

const ENV_REF = /\$\$|\$\{([^}]*)(\}?)/g;
const ENV_NAME = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;

function substitute(text: string, env: NodeJS.ProcessEnv, problems: string[]): string {
  return text.replace(ENV_REF, (match, body: string | undefined, close: string) => {
    if (match === "$$") return "$";
    const ref = ENV_NAME.exec(body ?? "");
    if (!close || !ref) {
      problems.push(`invalid reference ${JSON.stringify(match)}; use \${NAME}, \${NAME:-default}, or $$ for a literal $`);
      return match;
    }
    const name = ref[1]!;
    const fallback = ref[2];
    const value = env[name];
    if (value !== undefined && (fallback === undefined || value !== "")) return value;
    if (fallback !== undefined) return fallback;
    problems.push(`environment variable ${name} is not set`);
    return match;
  });
}

type Path = (string | number)[];

/** Substitutes in place in every string scalar that is a value; keys are left alone. */
export function substituteEnv(
  node: unknown,
  path: Path,
  env: NodeJS.ProcessEnv,
  onError: (node: Node, path: Path, message: string) => void,
) {
  if (isMap(node)) {
    for (const pair of node.items) {
      const key = isScalar(pair.key) ? String(pair.key.value) : "?";
      substituteEnv(pair.value, [...path, key], env, onError);
    }
  } else if (isSeq(node)) {
    node.items.forEach((item, i) => {
      substituteEnv(item, [...path, i], env, onError);
    });
  } else if (isScalar(node) && typeof node.value === "string" && node.value.includes("$")) {
    const problems: string[] = [];
    node.value = substitute(node.value, env, problems);
    for (const message of problems) onError(node, path, message);
  }
  // Aliases are skipped: their anchor is substituted where it is defined.
}

// ---------------------------------------------------------------------------------------------
// Positions

export function formatPath(path: readonly PropertyKey[]): string {
  return path
    .map((seg, i) => {
      if (typeof seg === "number") return `[${seg}]`;
      const s = String(seg);
      return /^[A-Za-z0-9_-]+$/.test(s) ? (i ? "." : "") + s : `[${JSON.stringify(s)}]`;
    })
    .join("");
}

/**
 * The node an issue path points at. Unlike doc.getIn this also yields the key node (unknown
 * keys and bad ids are reported at the key), follows aliases, and matches non-string keys by
 * their string form as toJS does. When the path leaves the document (a missing key) it stops
 * at the nearest ancestor and points at that ancestor's key.
 */
export function locate(doc: Document, path: readonly PropertyKey[], atKey: boolean): Node | undefined {
  let node: unknown = doc.contents;
  let key: Node | undefined;
  for (const seg of path) {
    if (isAlias(node)) node = node.resolve(doc);
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(seg));
      if (!pair) return key ?? (node as Node);
      key = pair.key as Node;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === "number" && seg < node.items.length) {
      key = undefined;
      node = node.items[seg];
    } else {
      return key ?? (node as Node | undefined);
    }
  }
  // An empty value (`key:` and nothing else) has a zero-width range after the colon.
  const empty = isScalar(node) && node.value === null && node.range?.[0] === node.range?.[1];
  return atKey || empty ? (key ?? (node as Node | undefined)) : ((node as Node | undefined) ?? key);
}
