/**
 * Checks edited arguments against a tool's input schema before they are approved: the
 * JSON Schema a tool publishes, in the subset tools use for arguments — type, required,
 * properties, enum, items, and no extra properties when the schema says so. Enough to
 * catch the edit that would make the call fail (a missing path, a number typed as text);
 * a schema this does not understand lets the value through.
 */
type Schema = Record<string, unknown>;

/** The first problem with `value` under `schema`, in words, or undefined. */
export function schemaProblem(schema: unknown, value: unknown, at = "arguments"): string | undefined {
  if (typeof schema !== "object" || schema === null) return undefined;
  const s = schema as Schema;
  const type = s["type"];
  if (typeof type === "string" && !ofType(type, value)) return `${at} must be ${article(type)} ${type}, not ${describe(value)}`;
  if (Array.isArray(s["enum"]) && !s["enum"].some((e) => JSON.stringify(e) === JSON.stringify(value))) return `${at} must be one of ${s["enum"].map((e) => JSON.stringify(e)).join(", ")}`;
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    const props = (typeof s["properties"] === "object" && s["properties"] !== null ? s["properties"] : {}) as Record<string, unknown>;
    for (const key of Array.isArray(s["required"]) ? s["required"] : []) {
      if (typeof key === "string" && !(key in obj)) return `${at}.${key} is required`;
    }
    for (const [key, v] of Object.entries(obj)) {
      if (key in props) {
        const p = schemaProblem(props[key], v, `${at}.${key}`);
        if (p) return p;
      } else if (s["additionalProperties"] === false) return `${at}.${key} is not a parameter of this tool`;
    }
  }
  if (Array.isArray(value) && s["items"]) {
    for (const [i, v] of value.entries()) {
      const p = schemaProblem(s["items"], v, `${at}[${i}]`);
      if (p) return p;
    }
  }
  return undefined;
}

function ofType(type: string, v: unknown): boolean {
  switch (type) {
    case "object":
      return typeof v === "object" && v !== null && !Array.isArray(v);
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
