// Forms someone in the space asks you to fill in (MCP elicitation), as cards in the inbox.
// Everything the asker wrote goes on the page with textContent; a URL is shown as text and
// opens only when you click it, in a new tab that cannot reach back to this page.

const MAX_FIELDS = 100;
const MAX_NAME = 200;
const MAX_MESSAGE = 64 * 1024;
const INPUT_TYPES = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

/** Why a form cannot be shown here, or undefined. The gateway's terminal refuses the same. */
function problem(params) {
  if (!params || typeof params.message !== "string") return "it has no message";
  if (params.message.length > MAX_MESSAGE) return "its message is too long";
  if (params.mode === "url") return /^https?:\/\//i.test(String(params.url ?? "")) ? undefined : "its address is not an http(s) URL";
  const s = params.requestedSchema;
  if (s?.type !== "object" || typeof s.properties !== "object" || s.properties === null) return "its schema is not a flat object";
  const entries = Object.entries(s.properties);
  if (entries.length > MAX_FIELDS) return `it has ${entries.length} fields`;
  for (const [name, p] of entries) {
    if (name.length > MAX_NAME) return "a field name is too long";
    const ok =
      p &&
      (["string", "number", "integer", "boolean"].includes(p.type) ||
        (p.type === "array" && p.items && Array.isArray(p.items.enum ?? p.items.anyOf ?? p.items.oneOf)));
    if (!ok) return `field "${name.slice(0, 40)}" is not a plain value`;
  }
  return undefined;
}

function choicesOf(p) {
  if (Array.isArray(p.enum)) return p.enum.map((v, i) => ({ value: String(v), label: String(p.enumNames?.[i] ?? v) }));
  const options = p.oneOf ?? p.anyOf;
  return Array.isArray(options) ? options.map((o) => ({ value: String(o.const), label: String(o.title ?? o.const) })) : undefined;
}

export function formCards({ api, el, list, onCount }) {
  let me = "";

  async function refresh() {
    const { requests } = await api("GET", "requests");
    list.replaceChildren(...requests.map(card));
    onCount(requests.length);
  }

  function onEnvelope(env, who) {
    me = who;
    const method = env.payload?.method;
    // Asked of me, withdrawn, or answered (here or at my terminal): the list is the gateway's.
    if (env.kind === "mcp/request" && method === "elicitation/create" && env.to?.includes(me)) return refresh();
    if (env.kind === "mcp/request" && method === "notifications/cancelled" && env.to?.includes(me)) return refresh();
    if (env.kind === "mcp/response" && env.from === me) return refresh();
    if (env.kind === "system/error" && env.payload?.code === "timeout") return refresh();
  }

  function card(r) {
    const params = r.params ?? {};
    const about = params._meta?.["mewgate/for"]?.tool;
    const error = el("p", { class: "error", role: "alert" });
    const send = async (result) => {
      try {
        await api("POST", `requests/${encodeURIComponent(r.id)}/respond`, { result });
        await refresh();
      } catch (err) {
        error.textContent = err.message;
      }
    };
    const head = [
      el("h3", { text: `${r.from} asks you${typeof about === "string" ? ` (about ${about.slice(0, 120)})` : ""}` }),
      el("p", { class: "message", text: String(params.message ?? "") }),
    ];
    const why = problem(params);
    if (why) {
      return el(
        "li",
        { class: "card form", "data-request": r.id },
        ...head,
        el("p", { class: "why", text: `This form cannot be shown here: ${why}.` }),
        error,
        el("div", { class: "actions" }, el("button", { text: "Decline", onclick: () => send({ action: "decline" }) })),
      );
    }
    if (params.mode === "url") {
      return el(
        "li",
        { class: "card form", "data-request": r.id },
        ...head,
        el("pre", { class: "url", text: params.url }),
        el("a", { href: params.url, target: "_blank", rel: "noopener noreferrer", text: "Open" }),
        error,
        el(
          "div",
          { class: "actions" },
          el("button", { class: "approve", text: "Done", onclick: () => send({ action: "accept" }) }),
          el("button", { text: "Decline", onclick: () => send({ action: "decline" }) }),
        ),
      );
    }
    const schema = params.requestedSchema;
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const fields = Object.entries(schema.properties).map(([name, p]) => field(name, p, required.has(name)));
    const form = el("form", { class: "fields" }, ...fields.map((f) => f.node));
    form.addEventListener("submit", (e) => e.preventDefault());
    const accept = () => {
      error.textContent = "";
      if (!form.reportValidity()) return;
      const content = {};
      for (const f of fields) {
        const v = f.value();
        if (v.error) {
          error.textContent = `${f.name}: ${v.error}`;
          return;
        }
        if (v.value !== undefined) content[f.name] = v.value;
      }
      send({ action: "accept", content });
    };
    return el(
      "li",
      { class: "card form", "data-request": r.id },
      ...head,
      form,
      error,
      el(
        "div",
        { class: "actions" },
        el("button", { class: "approve", text: "Accept", onclick: accept }),
        el("button", { text: "Decline", onclick: () => send({ action: "decline" }) }),
        el("button", { class: "reject", text: "Cancel", onclick: () => send({ action: "cancel" }) }),
      ),
    );
  }

  function field(name, p, required) {
    const label = `${String(p.title ?? name).slice(0, 200)}${required ? " *" : ""}`;
    const hint = typeof p.description === "string" ? el("small", { text: p.description.slice(0, 2000) }) : undefined;
    let input;
    let value;
    const choices = p.type === "array" ? choicesOf(p.items) : choicesOf(p);
    if (p.type === "boolean") {
      input = el("input", { type: "checkbox", name });
      input.checked = p.default === true;
      value = () => ({ value: input.checked });
    } else if (choices && p.type === "array") {
      input = el("select", { name, multiple: "" }, ...choices.map((c) => el("option", { value: c.value, text: c.label })));
      value = () => {
        const picked = [...input.selectedOptions].map((o) => o.value);
        if (typeof p.minItems === "number" && picked.length < p.minItems) return { error: `choose at least ${p.minItems}` };
        if (typeof p.maxItems === "number" && picked.length > p.maxItems) return { error: `choose at most ${p.maxItems}` };
        return { value: picked.length || required ? picked : undefined };
      };
    } else if (choices) {
      input = el(
        "select",
        { name },
        el("option", { value: "", text: "—" }),
        ...choices.map((c) => el("option", { value: c.value, text: c.label })),
      );
      if (p.default !== undefined) input.value = String(p.default);
      if (required) input.required = true;
      value = () => ({ value: input.value === "" ? undefined : input.value });
    } else if (p.type === "number" || p.type === "integer") {
      input = el("input", { type: "number", name, step: p.type === "integer" ? "1" : "any" });
      if (typeof p.minimum === "number") input.min = String(p.minimum);
      if (typeof p.maximum === "number") input.max = String(p.maximum);
      if (p.default !== undefined) input.value = String(p.default);
      if (required) input.required = true;
      value = () => {
        if (input.value === "") return { value: undefined };
        const n = Number(input.value);
        if (!Number.isFinite(n) || (p.type === "integer" && !Number.isInteger(n)))
          return { error: p.type === "integer" ? "a whole number" : "a number" };
        return { value: n };
      };
    } else {
      input = el("input", { type: INPUT_TYPES[p.format] ?? "text", name });
      if (typeof p.minLength === "number") input.minLength = p.minLength;
      if (typeof p.maxLength === "number") input.maxLength = p.maxLength;
      if (typeof p.default === "string") input.value = p.default;
      if (required) input.required = true;
      value = () => ({ value: input.value === "" ? undefined : input.value });
    }
    input.setAttribute("data-field", name);
    return { name, value, node: el("label", {}, el("span", { text: label }), input, hint) };
  }

  return { refresh, onEnvelope };
}
