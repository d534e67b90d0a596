import { isRecord } from "../../gateway/index.js";
/**
 * A form someone in the space asks this person to fill in (MCP `elicitation/create`),
 * as the terminal walks through it: the request checked once, then one field at a time,
 * each answer checked against its field's schema.
 *
 * Only what MCP allows is accepted — a flat object of strings, numbers, integers, booleans
 * and enums (single, or a list of them) — and within bounds, so a hostile asker cannot
 * flood the screen or hang the terminal on a schema it cannot show; anything else is
 * refused at once with invalid params, before anything is drawn.
 */

const MAX_MESSAGE = 64 * 1024;
const MAX_FIELDS = 100;
const MAX_NAME = 200;
const MAX_CHOICES = 500;

export interface Field {
  name: string;
  title: string | undefined;
  description: string | undefined;
  type: "string" | "number" | "integer" | "boolean" | "choice" | "choices";
  required: boolean;
  default: unknown;
  /** For choice(s): the values and the labels shown. */
  choices: Array<{ value: string; label: string }>;
  minimum: number | undefined;
  maximum: number | undefined;
  minLength: number | undefined;
  maxLength: number | undefined;
  format: string | undefined;
}

export type Form =
  | { mode: "form"; message: string; fields: Field[] }
  | { mode: "url"; message: string; url: string; elicitationId: string | undefined };

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

/** The request's params as a form, or why it cannot be one. */
export function parseForm(params: unknown): Parsed<Form> {
  if (!isRecord(params)) return fail("params must be an object");
  const message = params["message"];
  if (typeof message !== "string") return fail("params.message must be a string");
  if (message.length > MAX_MESSAGE) return fail(`params.message is ${message.length} characters; at most ${MAX_MESSAGE}`);
  if (params["mode"] === "url") {
    const url = params["url"];
    if (typeof url !== "string" || url.length > 8192 || !/^https?:\/\//i.test(url)) return fail("params.url must be an http(s) URL");
    const id = params["elicitationId"];
    return { ok: true, value: { mode: "url", message, url, elicitationId: typeof id === "string" ? id : undefined } };
  }
  if (params["mode"] !== undefined && params["mode"] !== "form")
    return fail(`unknown mode ${JSON.stringify(String(params["mode"]).slice(0, 40))}`);
  const schema = params["requestedSchema"];
  if (!isRecord(schema) || schema["type"] !== "object" || !isRecord(schema["properties"]))
    return fail('params.requestedSchema must be {type: "object", properties: {...}}');
  const entries = Object.entries(schema["properties"]);
  if (entries.length > MAX_FIELDS) return fail(`the form has ${entries.length} fields; at most ${MAX_FIELDS}`);
  const required = new Set(Array.isArray(schema["required"]) ? schema["required"].filter((r): r is string => typeof r === "string") : []);
  const fields: Field[] = [];
  for (const [name, prop] of entries) {
    if (name.length > MAX_NAME) return fail(`a field name is ${name.length} characters; at most ${MAX_NAME}`);
    const field = parseField(name, prop, required.has(name));
    if (!field.ok) return field;
    fields.push(field.value);
  }
  return { ok: true, value: { mode: "form", message, fields } };
}

function parseField(name: string, prop: unknown, required: boolean): Parsed<Field> {
  const where = `field ${JSON.stringify(name.slice(0, 40))}`;
  if (!isRecord(prop)) return fail(`${where} must be a schema object`);
  const str = (k: string) => (typeof prop[k] === "string" ? (prop[k] as string).slice(0, 2000) : undefined);
  const num = (k: string) => (typeof prop[k] === "number" && Number.isFinite(prop[k]) ? (prop[k] as number) : undefined);
  const base = {
    name,
    title: str("title"),
    description: str("description"),
    required,
    default: prop["default"],
    choices: [] as Field["choices"],
    minimum: num("minimum"),
    maximum: num("maximum"),
    minLength: num("minLength"),
    maxLength: num("maxLength"),
    format: str("format"),
  };
  const choicesOf = (p: Record<string, unknown>): Field["choices"] | undefined => {
    if (Array.isArray(p["enum"])) {
      const names = Array.isArray(p["enumNames"]) ? p["enumNames"] : [];
      return p["enum"].map((v, i) => ({ value: String(v), label: typeof names[i] === "string" ? names[i] : String(v) }));
    }
    const options = Array.isArray(p["oneOf"]) ? p["oneOf"] : Array.isArray(p["anyOf"]) ? p["anyOf"] : undefined;
    if (options)
      return options
        .filter(isRecord)
        .map((o) => ({ value: String(o["const"]), label: typeof o["title"] === "string" ? o["title"] : String(o["const"]) }));
    return undefined;
  };
  switch (prop["type"]) {
    case "string": {
      const choices = choicesOf(prop);
      if (choices)
        return choices.length > MAX_CHOICES
          ? fail(`${where} has over ${MAX_CHOICES} choices`)
          : { ok: true, value: { ...base, type: "choice", choices } };
      return { ok: true, value: { ...base, type: "string" } };
    }
    case "number":
    case "integer":
    case "boolean":
      return { ok: true, value: { ...base, type: prop["type"] } };
    case "array": {
      const items = isRecord(prop["items"]) ? choicesOf(prop["items"]) : undefined;
      if (!items) return fail(`${where}: a list must be of enum strings`);
      if (items.length > MAX_CHOICES) return fail(`${where} has over ${MAX_CHOICES} choices`);
      return { ok: true, value: { ...base, type: "choices", choices: items, minimum: num("minItems"), maximum: num("maxItems") } };
    }
    default:
      return fail(
        `${where} has type ${JSON.stringify(String(prop["type"]).slice(0, 40))}; a form takes string, number, integer, boolean or a list of choices`,
      );
  }
}

/**
 * One answer typed for `field`: empty takes the default (or skips an optional field);
 * choices by number or value, several separated by commas.
 */
export function parseAnswer(field: Field, text: string): { ok: true; value: unknown; skip?: boolean } | { ok: false; error: string } {
  const t = text.trim();
  if (t === "") {
    if (field.default !== undefined) return { ok: true, value: field.default };
    if (!field.required) return { ok: true, value: undefined, skip: true };
    return fail("this field is required");
  }
  switch (field.type) {
    case "boolean":
      if (/^(y|yes|true|1)$/i.test(t)) return { ok: true, value: true };
      if (/^(n|no|false|0)$/i.test(t)) return { ok: true, value: false };
      return fail("answer y or n");
    case "number":
    case "integer": {
      const n = Number(t);
      if (!Number.isFinite(n)) return fail("expected a number");
      if (field.type === "integer" && !Number.isInteger(n)) return fail("expected a whole number");
      if (field.minimum !== undefined && n < field.minimum) return fail(`at least ${field.minimum}`);
      if (field.maximum !== undefined && n > field.maximum) return fail(`at most ${field.maximum}`);
      return { ok: true, value: n };
    }
    case "choice": {
      const c = pick(field, t);
      return c ? { ok: true, value: c } : fail(`choose 1-${field.choices.length} or one of the values`);
    }
    case "choices": {
      const picked: string[] = [];
      for (const part of t
        .split(",")
        .map((p) => p.trim())
        .filter(Boolean)) {
        const c = pick(field, part);
        if (!c) return fail(`"${part.slice(0, 40)}" is not one of the choices`);
        if (!picked.includes(c)) picked.push(c);
      }
      if (field.minimum !== undefined && picked.length < field.minimum) return fail(`choose at least ${field.minimum}`);
      if (field.maximum !== undefined && picked.length > field.maximum) return fail(`choose at most ${field.maximum}`);
      return { ok: true, value: picked };
    }
    case "string": {
      if (field.minLength !== undefined && t.length < field.minLength) return fail(`at least ${field.minLength} characters`);
      if (field.maxLength !== undefined && t.length > field.maxLength) return fail(`at most ${field.maxLength} characters`);
      const format = FORMATS[field.format ?? ""];
      if (format && !format.test.test(t)) return fail(`expected ${format.what}`);
      return { ok: true, value: t };
    }
  }
}

const FORMATS: Record<string, { test: RegExp; what: string }> = {
  email: { test: /^[^\s@]+@[^\s@]+\.[^\s@]+$/, what: "an e-mail address" },
  uri: { test: /^[a-z][a-z0-9+.-]*:\S+$/i, what: "a URI like https://example.com" },
  date: { test: /^\d{4}-\d{2}-\d{2}$/, what: "a date like 2026-01-31" },
  "date-time": {
    test: /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/,
    what: "a date and time like 2026-01-31T09:30:00Z",
  },
};

function pick(field: Field, t: string): string | undefined {
  const n = Number(t);
  if (Number.isInteger(n) && n >= 1 && n <= field.choices.length) return field.choices[n - 1]!.value;
  return field.choices.find((c) => c.value === t || c.label.toLowerCase() === t.toLowerCase())?.value;
}

function fail(error: string): { ok: false; error: string } {
  return { ok: false, error };
}
