// Editing a proposal's arguments before approving: a form made from the tool's input schema
// (a JSON text box where the schema is not a flat object of plain values), checked inline
// against the schema, with the difference from what was proposed shown (the `diff` library,
// served as vendor/diff.min.js) before anything is sent.

import "./vendor/diff.min.js";
import { reveal } from "./args.js";
import { ask, el } from "./cards.js";

const PLAIN = ["string", "number", "integer", "boolean"];

/** The first way `value` breaks `schema` (the subset the gateway's tools use), or undefined. */
export function schemaProblem(schema, value, at = "arguments") {
  if (!schema || typeof schema !== "object") return undefined;
  const ofType = {
    object: (v) => v && typeof v === "object" && !Array.isArray(v),
    array: Array.isArray,
    string: (v) => typeof v === "string",
    integer: Number.isInteger,
    number: (v) => typeof v === "number",
    boolean: (v) => typeof v === "boolean",
    null: (v) => v === null,
  };
  if (typeof schema.type === "string" && ofType[schema.type] && !ofType[schema.type](value)) return `${at} must be of type ${schema.type}`;
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)))
    return `${at} must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}`;
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const key of schema.required ?? []) if (!(key in value)) return `${at}.${key} is required`;
    for (const [key, v] of Object.entries(value)) {
      if (schema.properties && key in schema.properties) {
        const p = schemaProblem(schema.properties[key], v, `${at}.${key}`);
        if (p) return p;
      } else if (schema.additionalProperties === false) return `${at}.${key} is not a parameter of this tool`;
    }
  }
  return undefined;
}

/** Arguments as lines a person compares: each key, its string values as they are (multi-line kept), others as JSON. */
export function argumentLines(args) {
  const out = [];
  for (const [k, v] of Object.entries(args ?? {})) {
    if (typeof v === "string" && v.includes("\n")) {
      out.push(`${k}:`);
      for (const l of v.split("\n")) out.push(`  ${l}`);
    } else out.push(`${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`);
  }
  return `${out.join("\n")}\n`;
}

/** The line diff of two argument sets (the `diff` library), as text rows: + added, - removed, context kept. */
export function diffView(before, after) {
  const parts = globalThis.Diff.diffLines(argumentLines(before), argumentLines(after));
  const rows = [];
  for (const part of parts) {
    const cls = part.added ? "add" : part.removed ? "del" : "same";
    const mark = part.added ? "+ " : part.removed ? "- " : "  ";
    for (const line of part.value.replace(/\n$/, "").split("\n")) rows.push(el("div", { class: cls, text: `${mark}${reveal(line)}` }));
  }
  return rows;
}

/** Whether a schema can be a form: an object whose properties are all plain values (or enums of them). */
function formable(schema) {
  if (schema?.type !== "object" || !schema.properties || typeof schema.properties !== "object") return false;
  const props = Object.values(schema.properties);
  return props.length > 0 && props.length <= 50 && props.every((p) => p && (PLAIN.includes(p.type) || Array.isArray(p.enum)));
}

/** One field of the form: a select for an enum, a checkbox, a number, a text area for text. */
function field(name, prop, value, required) {
  const label = `${name}${required ? " *" : ""}`;
  let input;
  if (Array.isArray(prop.enum)) {
    input = el(
      "select",
      { name },
      ...(required ? [] : [el("option", { value: "", text: "(none)" })]),
      ...prop.enum.map((v) =>
        el("option", {
          value: JSON.stringify(v),
          text: String(v),
          ...(JSON.stringify(v) === JSON.stringify(value) ? { selected: "" } : {}),
        }),
      ),
    );
  } else if (prop.type === "boolean") {
    input = el("input", { type: "checkbox", name, ...(value === true ? { checked: "" } : {}) });
  } else if (prop.type === "number" || prop.type === "integer") {
    input = el("input", {
      type: "number",
      name,
      step: prop.type === "integer" ? "1" : "any",
      value: value === undefined ? "" : String(value),
    });
  } else {
    const text = value === undefined ? "" : String(value);
    input = el("textarea", { name, rows: String(Math.min(16, Math.max(1, text.split("\n").length))), spellcheck: "false" });
    input.value = text;
  }
  input.dataset.kind = Array.isArray(prop.enum) ? "enum" : prop.type;
  return el(
    "label",
    { class: "field" },
    el("span", { text: label }),
    prop.description ? el("small", { class: "muted", text: ` ${String(prop.description).slice(0, 200)}` }) : undefined,
    input,
    el("span", { class: "field-error error", "data-for": name }),
  );
}

/** The form's value: empty optional fields left out. */
function readForm(form, schema) {
  const out = {};
  for (const input of form.querySelectorAll("[name]")) {
    const name = input.getAttribute("name");
    const kind = input.dataset.kind;
    const required = (schema.required ?? []).includes(name);
    if (kind === "boolean") out[name] = input.checked;
    else if (kind === "enum") {
      if (input.value !== "") out[name] = JSON.parse(input.value);
    } else if (kind === "number" || kind === "integer") {
      if (input.value !== "") out[name] = Number(input.value);
    } else if (input.value !== "" || required) out[name] = input.value;
  }
  return out;
}

/**
 * Edits `p`'s arguments; resolves with the checked new arguments, or undefined (cancelled,
 * or unchanged). `json(p)` is the JSON text box, for schemas a form cannot show.
 */
export async function editArguments(p, json) {
  const before = (p.state === "interrupted" && p.interrupted?.arguments) || p.arguments || {};
  const schema = p.inputSchema;
  if (!formable(schema)) return json(p);
  const form = el("div", { class: "edit-form" });
  const keys = [...Object.keys(schema.properties), ...Object.keys(before).filter((k) => !(k in schema.properties))];
  for (const k of keys) {
    if (!(k in schema.properties)) continue;
    form.append(field(k, schema.properties[k], before[k], (schema.required ?? []).includes(k)));
  }
  const extra = Object.keys(before).filter((k) => !(k in schema.properties));
  const problem = el("p", { class: "error", role: "alert", id: "edit-form-error" });
  const diff = el("div", { class: "diff", id: "edit-form-diff", "aria-label": "changes" });
  let value;
  const check = () => {
    value = { ...Object.fromEntries(extra.map((k) => [k, before[k]])), ...readForm(form, schema) };
    for (const e of form.querySelectorAll(".field-error")) e.textContent = "";
    const why = schemaProblem(schema, value);
    if (why) {
      const key = /^arguments\.([^.\s]+)/.exec(why)?.[1];
      const spot = key && form.querySelector(`.field-error[data-for="${CSS.escape(key)}"]`);
      if (spot) spot.textContent = why;
    }
    const same = JSON.stringify(value) === JSON.stringify(before);
    problem.textContent = why ? `${why} (the tool's input schema)` : same ? "Nothing changed yet." : "";
    diff.replaceChildren(...(same ? [] : diffView(before, value)));
    send.disabled = Boolean(why) || same;
  };
  form.addEventListener("input", check);
  form.addEventListener("change", check);
  const pending = ask(
    `Edit the arguments of #${p.shortId ?? p.id}`,
    [form, problem, el("h3", { class: "muted", text: "Changes" }), diff],
    [
      { value: "cancel", text: "Cancel" },
      { value: "json", text: "Edit as JSON" },
      { value: "send", class: "approve", text: "Approve with these arguments" },
    ],
  );
  const send = [...document.querySelectorAll("dialog.ask menu button")].find((b) => b.value === "send");
  check();
  const choice = await pending;
  if (choice === "json") return json(p);
  return choice === "send" && value && !schemaProblem(schema, value) && JSON.stringify(value) !== JSON.stringify(before)
    ? value
    : undefined;
}

const $ = (id) => document.getElementById(id);

/** The JSON text box (ui/index.html's edit dialog), checked against the tool's input schema, with the diff before sending. */
export function editJson(p) {
  const dialog = $("edit-dialog");
  const original = (p.state === "interrupted" && p.interrupted?.arguments) || p.arguments || {};
  const before = JSON.stringify((p.state === "interrupted" && p.interrupted?.arguments) || p.arguments || {}, null, 2);
  $("edit-text").value = before;
  $("edit-error").textContent = "";
  $("edit-diff").hidden = true;
  $("edit-send").disabled = true;
  let checked;
  $("edit-text").oninput = () => {
    $("edit-send").disabled = true;
    $("edit-diff").hidden = true;
  };
  $("edit-check").onclick = (e) => {
    e.preventDefault();
    let value;
    try {
      value = JSON.parse($("edit-text").value);
    } catch (err) {
      $("edit-error").textContent = `Not valid JSON: ${err.message}`;
      return;
    }
    const problem =
      typeof value !== "object" || value === null || Array.isArray(value)
        ? "the arguments must be a JSON object"
        : schemaProblem(p.inputSchema, value);
    if (problem) {
      $("edit-error").textContent = `${problem} (the tool's input schema)`;
      return;
    }
    const after = JSON.stringify(value, null, 2);
    if (after === before) {
      $("edit-error").textContent = "Nothing changed; use Approve for the arguments as they are.";
      return;
    }
    $("edit-error").textContent = "";
    $("edit-diff").replaceChildren(...diffView(original, value));
    $("edit-diff").hidden = false;
    checked = value;
    $("edit-send").disabled = false;
  };
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.onclose = () => resolve(dialog.returnValue === "send" ? checked : undefined);
  });
}
