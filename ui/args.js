// A proposal's arguments drawn by their schema, as text (textContent only, never HTML):
// multi-line strings as numbered lines in monospace, nothing escaped and nothing cut (a long
// block is folded behind "show all"); short scalars inline; base64 the schema declares
// summarised with its size and start (and shown on request); nested values pretty-printed;
// every own key shown, `constructor` and `__proto__` too. Control and bidi characters are shown
// as ⟨U+…⟩, so what a person reads is what the tool will get.

/** Lines of a block shown before "show all". */
import { el } from "./dom.js";
import { revealText } from "./text.js";

export const FOLD_LINES = 30;
/** A string this long, or with a newline, is a block rather than inline. */
const INLINE_MAX = 120;

/** Hidden and reordering characters made visible as ⟨U+200B⟩ (the one table: text.js), so what a person reads is what is sent. */
export function reveal(text) {
  return revealText(text);
}

/**
 * Whether a string is summarised as base64: only when the tool's schema says so and the
 * string is base64 (length a multiple of 4). A guess from its characters alone would hide
 * `"/".repeat(250) + "etc/sudoers"` behind "binary"; even a summarised one shows its start.
 */
function isBase64(value, schema) {
  if (
    !schema ||
    typeof schema !== "object" ||
    !(schema.contentEncoding === "base64" || schema.format === "byte" || schema.format === "binary")
  )
    return false;
  return value.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(value);
}

/** `obj[key]` only when `obj` holds `key` itself: `constructor` or `__proto__` is not a schema property because every object inherits one. */
function own(obj, key) {
  return obj !== null && typeof obj === "object" && Object.hasOwn(obj, key) ? obj[key] : undefined;
}

/**
 * Numbered lines of `text`, folded past `fold` lines — or past `chars` characters, the last
 * line shown cut with an ellipsis, so one enormous line folds too — behind a "show all" button.
 */
export function textBlock(text, { fold = FOLD_LINES, label = "", chars = Number.POSITIVE_INFINITY } = {}) {
  // CRLF is a line end; a lone CR is shown (it could hide what comes before it on a terminal).
  const lines = String(text).replace(/\r\n/g, "\n").split("\n");
  const body = el("div", { class: "block", role: "group", ...(label ? { "aria-label": label } : {}) });
  // How many lines fit, and where the last of them is cut (undefined: whole).
  let upto = Math.min(fold, lines.length);
  let cutAt;
  let budget = chars;
  for (let i = 0; i < upto; i++) {
    if (lines[i].length > budget) {
      upto = i + 1;
      cutAt = Math.max(0, budget);
      break;
    }
    budget -= lines[i].length;
  }
  const draw = (n, cut) => {
    body.replaceChildren(
      ...lines
        .slice(0, n)
        .map((l, i) =>
          el(
            "div",
            { class: "line" },
            el("span", { class: "ln", text: String(i + 1), "aria-hidden": "true" }),
            el("span", { class: "tx", text: reveal(i === n - 1 && cut !== undefined ? l.slice(0, cut) : l) || " " }),
            i === n - 1 && cut !== undefined ? el("span", { class: "cut muted", text: "…" }) : undefined,
          ),
        ),
    );
  };
  const folded = upto < lines.length || cutAt !== undefined;
  draw(upto, cutAt);
  if (!folded) return body;
  const more = el("button", {
    type: "button",
    class: "show-all",
    text:
      cutAt === undefined
        ? `Show all ${lines.length} lines (${lines.length - upto} more)`
        : `Show all ${lines.length} line${lines.length === 1 ? "" : "s"} (${String(text).length.toLocaleString()} characters)`,
    onclick: () => {
      draw(lines.length);
      more.remove();
    },
  });
  return el("div", { class: "block-wrap" }, body, more);
}

/** One value by its schema. */
export function valueView(value, schema, key = "") {
  if (typeof value === "string") {
    if (isBase64(value, schema)) {
      const bytes = Math.floor((value.replace(/=+$/, "").length * 3) / 4);
      const wrap = el(
        "span",
        { class: "binary" },
        el("span", {
          class: "muted",
          text: `binary (base64), ${bytes.toLocaleString()} bytes, starting ${reveal(value.slice(0, 48))}${value.length > 48 ? "…" : ""} `,
        }),
      );
      wrap.append(
        el("button", {
          type: "button",
          class: "show-all",
          text: "show",
          onclick: () => wrap.replaceChildren(textBlock(value, { label: key })),
        }),
      );
      return wrap;
    }
    if (value.includes("\n") || value.length > INLINE_MAX) return textBlock(value, { label: key });
    return el("code", { class: "scalar str", text: reveal(value) });
  }
  if (value === null || typeof value !== "object") return el("code", { class: "scalar", text: JSON.stringify(value) ?? String(value) });
  let text;
  try {
    text = JSON.stringify(value, null, 2);
  } catch {
    text = String(value);
  }
  return textBlock(text, { label: key });
}

/** The arguments of a call, key by key in the schema's order (then any others), each by its schema. */
export function argumentsView(args, schema) {
  const props = schema && typeof schema.properties === "object" && schema.properties ? schema.properties : {};
  if (!args || typeof args !== "object" || Array.isArray(args)) return el("div", { class: "args" }, valueView(args, schema));
  // Own keys only, on both sides: every key that is sent is shown, whatever it is named.
  const has = (o, k) => Object.hasOwn(o, k);
  const keys = [...Object.keys(props).filter((k) => has(args, k)), ...Object.keys(args).filter((k) => !has(props, k))];
  if (keys.length === 0) return el("p", { class: "args muted", text: "(no arguments)" });
  return el(
    "dl",
    { class: "args" },
    ...keys.flatMap((k) => {
      // A schema that names its parameters: a key it does not name is marked.
      const known = Object.keys(props).length === 0 || has(props, k);
      return [
        el(
          "dt",
          { text: reveal(k), ...(known ? {} : { title: "not a parameter in the tool's schema" }) },
          known ? undefined : el("span", { class: "badge flag", text: "not in schema" }),
        ),
        el("dd", {}, valueView(own(args, k), own(props, k), k)),
      ];
    }),
  );
}

/**
 * The arguments in one short line: each key with a value of one line up to `inline`
 * characters as it is, a longer one by its lines and size (the Decided list, a folded card).
 */
export function argsInBrief(args, inline = 40) {
  if (!args || typeof args !== "object" || Array.isArray(args))
    return args === undefined ? "(not kept)" : reveal(JSON.stringify(args) ?? "").slice(0, 80);
  const parts = Object.entries(args).map(([k, v]) => {
    if (typeof v === "string")
      return v.includes("\n") || v.length > inline ? `${k}: ${v.split("\n").length} line(s), ${v.length} chars` : `${k}: ${v}`;
    const json = JSON.stringify(v) ?? String(v);
    return `${k}: ${json.length > 40 ? `${json.slice(0, 39)}…` : json}`;
  });
  return parts.length ? reveal(parts.join(" · ")) : "(none)";
}

/**
 * About how many lines of `width` characters the arguments take drawn (argumentsView): each
 * text line, wrapped, and a long value's fold; so that a card can fold them when they would
 * push its buttons pages down. Bounded work, whatever the arguments.
 */
export function argsHeight(args, width) {
  const rows = (text) => {
    let n = 0;
    for (const line of String(text)
      .slice(0, 200_000)
      .split("\n", FOLD_LINES + 1)
      .slice(0, FOLD_LINES))
      n += Math.max(1, Math.ceil(line.length / width));
    return n + (String(text).split("\n", FOLD_LINES + 2).length > FOLD_LINES ? 1 : 0);
  };
  if (!args || typeof args !== "object" || Array.isArray(args)) return rows(JSON.stringify(args) ?? "");
  let n = 0;
  for (const [k, v] of Object.entries(args).slice(0, 500)) {
    let text;
    try {
      text = typeof v === "string" ? v : JSON.stringify(v, null, 2);
    } catch {
      text = String(v);
    }
    n += rows(k) + rows(text ?? "");
  }
  return n;
}
