/**
 * `Mcp-Param-*` headers of a 2026-07-28 `tools/call` (SEP-2243), checked on the HTTP faces
 * against the tool's own `inputSchema`: a property marked `x-mcp-header: Name` whose value
 * the body carries must arrive as the header `Mcp-Param-Name` with the same value (as it is,
 * or `=?base64?…?=` around canonical Base64 of its UTF-8), else the request is refused with
 * -32020 (HTTP 400) before anything reaches the space. A proxy that routes on the header
 * then sees what the body says. The SDK v2 checks this only for tools it defines itself;
 * the faces' tools are the space's, so the check is here (modern.ts calls it).
 */
import { isRecord } from "../../../gateway/index.js";

/** One marked property: where it sits in the arguments, its header's name, its JSON type. */
export interface ParamDeclaration {
  path: string[];
  header: string;
  type: string | undefined;
}

/** An RFC 9110 token: what a header name may be. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const PREFIX = "=?base64?";
const SUFFIX = "?=";
const CANONICAL_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const DECIMAL = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
/** Nesting followed at most: a schema deeper than this marks nothing further down. */
const MAX_DEPTH = 16;
const MAX_DECLARATIONS = 64;

/** The marked properties reachable through `properties` alone (not under items, allOf…), as the SDK reads them. */
export function declarations(schema: unknown): ParamDeclaration[] {
  const out: ParamDeclaration[] = [];
  const visit = (node: unknown, path: string[]) => {
    if (typeof node !== "object" || node === null || path.length > MAX_DEPTH || out.length >= MAX_DECLARATIONS) return;
    const n = node as Record<string, unknown>;
    const header = n["x-mcp-header"];
    if (path.length > 0 && typeof header === "string" && TOKEN.test(header))
      out.push({ path, header, type: typeof n["type"] === "string" ? n["type"] : undefined });
    const props = n["properties"];
    if (isRecord(props)) for (const [k, child] of Object.entries(props as Record<string, unknown>)) visit(child, [...path, k]);
  };
  visit(schema, []);
  return out;
}

/** Why the headers disagree with the arguments, or undefined when they agree. `header(name)` reads a request header (lower case). */
export function paramMismatch(decls: ParamDeclaration[], args: unknown, header: (name: string) => string | undefined): string | undefined {
  for (const d of decls) {
    let v: unknown = args;
    for (const k of d.path) v = typeof v === "object" && v !== null ? (v as Record<string, unknown>)[k] : undefined;
    const body = primitive(v);
    if (body === undefined) continue;
    const name = `Mcp-Param-${d.header}`;
    const given = header(name.toLowerCase());
    if (given === undefined) return `the body carries ${d.path.join(".")} but the ${name} header is absent`;
    const decoded = decode(given);
    if (decoded === undefined) return `the ${name} header carries an invalid Base64 value`;
    const same =
      (d.type === "integer" || d.type === "number") && typeof v === "number" && DECIMAL.test(decoded)
        ? Number(decoded) === v
        : decoded === body;
    if (!same) return `the ${name} header does not match ${d.path.join(".")} in the body`;
  }
  return undefined;
}

function primitive(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (typeof v === "number" && Number.isFinite(v)) return String(v);
  if (typeof v === "boolean") return String(v);
  return undefined;
}

function decode(value: string): string | undefined {
  if (!(value.startsWith(PREFIX) && value.endsWith(SUFFIX) && value.length >= PREFIX.length + SUFFIX.length)) return value;
  const b64 = value.slice(PREFIX.length, value.length - SUFFIX.length);
  if (!CANONICAL_BASE64.test(b64)) return undefined;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(Buffer.from(b64, "base64"));
  } catch {
    return undefined;
  }
}
