/**
 * Edited arguments against a tool's input schema: the one checker the gateway applies to
 * every path an approver's edits come by (wire `mcp/approve`, the operator API, the console,
 * the link page, the CLI, the terminal) before anything is approved. The JSON Schema subset
 * tools use for arguments — type (one or a list), required, properties, enum, const, items,
 * and no extra properties when the schema says so. Enough to catch the edit that would make
 * the call fail (a missing path, a number typed as text); a keyword it does not know lets the
 * value through. Keys are own keys only: `constructor` or `__proto__` never pass for a
 * declared property, nor count as present.
 */
import { isRecord } from "./values.js";
type Schema = Record<string, unknown>;

/** How deep a schema and value are followed: a tool's schema is not a reason to recurse without end. */
const MAX_DEPTH = 64;

/** A problem with a value: which field (`arguments.path`, `arguments.items[2]`) and what is wrong, in words. */
export interface SchemaProblem {
  field: string;
  message: string;
}

/** The first problem with `value` under `schema`, in words naming the field, or undefined. */
export function schemaProblem(schema: unknown, value: unknown, at = "arguments"): string | undefined {
  return firstProblem(schema, value, at, 0)?.message;
}

/** The first problem with `value` under `schema`, with the field it is in, or undefined. */
export function firstProblem(schema: unknown, value: unknown, at = "arguments", depth = 0): SchemaProblem | undefined {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema) || depth > MAX_DEPTH) return undefined;
  const s = schema as Schema;
  const bad = (message: string): SchemaProblem => ({ field: at, message: `${at} ${message}` });
  const types =
    typeof s["type"] === "string"
      ? [s["type"]]
      : Array.isArray(s["type"])
        ? s["type"].filter((t): t is string => typeof t === "string")
        : [];
  if (types.length && !types.some((t) => ofType(t, value)))
    return bad(`must be ${types.map((t) => `${article(t)} ${t}`).join(" or ")}, not ${describe(value)}`);
  if (Array.isArray(s["enum"]) && !s["enum"].some((e) => same(e, value)))
    return bad(`must be one of ${s["enum"].map((e) => JSON.stringify(e)).join(", ")}`);
  if (own(s, "const") && !same(s["const"], value)) return bad(`must be ${JSON.stringify(s["const"])}`);
  if (isRecord(value)) {
    const obj = value as Record<string, unknown>;
    const props = (typeof s["properties"] === "object" && s["properties"] !== null ? s["properties"] : {}) as Record<string, unknown>;
    for (const key of Array.isArray(s["required"]) ? s["required"] : []) {
      if (typeof key === "string" && !own(obj, key)) return { field: `${at}.${key}`, message: `${at}.${key} is required` };
    }
    for (const key of Object.keys(obj)) {
      if (own(props, key)) {
        const p = firstProblem(props[key], obj[key], `${at}.${key}`, depth + 1);
        if (p) return p;
      } else if (s["additionalProperties"] === false)
        return { field: `${at}.${key}`, message: `${at}.${key} is not a parameter of this tool` };
      else if (typeof s["additionalProperties"] === "object") {
        const p = firstProblem(s["additionalProperties"], obj[key], `${at}.${key}`, depth + 1);
        if (p) return p;
      }
    }
  }
  if (Array.isArray(value) && s["items"]) {
    for (const [i, v] of value.entries()) {
      const p = firstProblem(s["items"], v, `${at}[${i}]`, depth + 1);
      if (p) return p;
    }
  }
  return undefined;
}

function own(o: object, key: string): boolean {
  return Object.hasOwn(o, key);
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function ofType(type: string, v: unknown): boolean {
  switch (type) {
    case "object":
      return isRecord(v);
    case "array":
      return Array.isArray(v);
    case "string":
      return typeof v === "string";
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "boolean":
      return typeof v === "boolean";
    case "null":
      return v === null;
    default:
      return true;
  }
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : `${typeof v} ${JSON.stringify(v)?.slice(0, 40)}`;
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? "an" : "a";
}
