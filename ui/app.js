// The mewgate web console: the operator API in a page. Plain JavaScript, no build step.
// Everything a participant wrote is put on the page with textContent, never as HTML.

import { formCards } from "./elicit.js";
import { sessionsPanel } from "./sessions.js";

const $ = (id) => document.getElementById(id);
const state = { space: "", token: "", me: "", proposals: [], tools: [], seen: new Set(), stream: undefined };

// --- sign-in: #space=S&token=T once (then dropped from the address bar), or the form ---

function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const space = params.get("space");
  const token = params.get("token");
  if (space && token) {
    sessionStorage.setItem("mewgate", JSON.stringify({ space, token }));
    // The token must not stay in the address bar, the history or a bookmark.
    history.replaceState(null, "", location.pathname);
    return { space, token };
  }
  try {
    return JSON.parse(sessionStorage.getItem("mewgate") || "null");
  } catch {
    return null;
  }
}

async function signIn(creds) {
  state.space = creds.space;
  state.token = creds.token;
  const me = await api("GET", "me").catch((err) => err);
  if (me instanceof Error) {
    sessionStorage.removeItem("mewgate");
    showLogin(me.status === 401 ? "That token is not valid for this space." : me.status === 404 ? `No space named "${creds.space}".` : `Could not sign in: ${me.message}`);
    return;
  }
  state.me = me.id;
  $("login").hidden = true;
  $("app").hidden = false;
  $("space-name").textContent = `· ${state.space}`;
  $("who").textContent = `signed in as ${me.id}`;
  // The stream first, then the lists: nothing that happens in between is missed.
  openStream();
  if ("Notification" in window && Notification.permission === "default") Notification.requestPermission().catch(() => {});
}

function showLogin(message) {
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const creds = { space: $("login-space").value.trim(), token: $("login-token").value.trim() };
  sessionStorage.setItem("mewgate", JSON.stringify(creds));
  signIn(creds);
});

// --- the API ---

async function api(method, path, body) {
  const res = await fetch(`/api/spaces/${encodeURIComponent(state.space)}/${path}`, {
    method,
    headers: { authorization: `Bearer ${state.token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let data;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    const err = new Error(data?.error?.message || `HTTP ${res.status}`);
    err.status = res.status;
    err.code = data?.error?.code;
    throw err;
  }
  return data;
}

// --- live: the caller's event stream (fetch, since EventSource cannot send the token) ---

async function openStream() {
  const conn = $("conn");
  for (let attempt = 0; attempt < 1000; attempt++) {
    try {
      const res = await fetch(`/api/spaces/${encodeURIComponent(state.space)}/events`, { headers: { authorization: `Bearer ${state.token}` } });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      await refreshAll().catch(alertIn);
      conn.textContent = "live";
      conn.className = "conn live";
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = /^data: (.*)$/m.exec(event);
          if (event.startsWith("event: envelope") && data) onEnvelope(JSON.parse(data[1]));
        }
      }
    } catch {
      // fall through to reconnect
    }
    conn.textContent = "reconnecting…";
    conn.className = "conn";
    await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * 2 ** Math.min(attempt, 5))));
  }
}

function onEnvelope(env) {
  forms.onEnvelope(env, state.me)?.catch?.(alertIn);
  switch (env.kind) {
    case "chat":
      return addLog("chat", env.from, env.payload && typeof env.payload.text === "string" ? env.payload.text : JSON.stringify(env.payload));
    case "mcp/proposal":
      addLog("activity", env.from, `proposes ${callLabel(env)}`);
      return refreshProposals();
    case "mcp/approve":
      addLog("activity", env.from, `approved ${short(env.correlation_id?.[0])}${env.payload?.scope === "always" ? " (always)" : ""}${env.payload?.arguments ? " with edited arguments" : ""}`);
      // An "always" made a grant.
      if (env.payload?.scope === "always") refreshGrants().catch(alertIn);
      return refreshProposals();
    case "mcp/reject":
      addLog("activity", env.from, `rejected ${short(env.correlation_id?.[0])}: ${env.payload?.reason ?? ""}${env.payload?.text ? ` — ${env.payload.text}` : ""}`);
      return refreshProposals();
    case "mcp/withdraw":
      addLog("activity", env.from, `withdrew ${short(env.correlation_id?.[0])}`);
      return refreshProposals();
    case "mcp/request":
      if (env.payload?.method === "tools/call") addLog("activity", env.from, `calls ${callLabel(env)}`);
      return;
    case "mcp/response":
      if (env.payload?.error) addLog("activity", env.from, `call failed: ${env.payload.error.message ?? ""}`);
      else if (env.correlation_id?.length > 1) addLog("activity", env.from, "answered an approved call");
      return;
    case "space/conversation":
      // Who holds my conversation (interactive delegation).
      if (env.payload?.human === state.me) showHolder(typeof env.payload.holder === "string" ? env.payload.holder : "");
      addLog("activity", env.payload?.human ?? "?", env.payload?.holder ? `is talking with ${env.payload.holder}` : "has the conversation back");
      return;
    case "system/presence":
      addLog("activity", env.payload?.participant?.id ?? "?", env.payload?.event === "join" ? "joined" : env.payload?.event === "invited" ? "was invited" : "left");
      return refreshPeople();
    case "capability/grant":
    case "capability/revoke":
      addLog("activity", env.from, env.kind === "capability/grant" ? `granted ${env.payload?.recipient ?? ""}` : `revoked a grant of ${env.payload?.recipient ?? ""}`);
      return refreshGrants();
  }
}

function callLabel(env) {
  const p = env.payload || {};
  const name = p.params && typeof p.params.name === "string" ? p.params.name : p.method;
  const owner = env.to?.[0];
  return owner && owner !== "system:gateway" ? `${owner}/${name}` : String(name);
}

const short = (id) => (typeof id === "string" ? id.slice(0, 8) : "?");

// --- rendering (textContent only) ---

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

/** Hidden and reordering characters made visible as ⟨U+200B⟩, so what a person reads is what a model reads. */
function reveal(text) {
  return text.replace(/[\p{Cf}\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\u115F\u1160\u3164\uFFA0]/gu, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
}

/** What the gateway found in a tool's texts (gateway/policy/inspect.ts): a heading and the reasons, as text. */
function flagged(findings, heading, description) {
  if (!Array.isArray(findings) || findings.length === 0) return undefined;
  const shown = typeof description === "string" ? reveal(description) : "";
  return el(
    "div",
    { class: "findings", role: "note" },
    el("strong", { text: `⚠ ${heading}:` }),
    el("ul", {}, ...findings.slice(0, 24).map((f) => el("li", { text: String(f?.reason ?? f?.code ?? "flagged") }))),
    // On a card: the description itself, as a model would read it, hidden characters shown.
    shown ? el("p", { class: "flagged-text", text: `Its description: ${shown.length > 600 ? `${shown.slice(0, 599)}…` : shown}` }) : undefined,
  );
}

function addLog(kind, from, text) {
  const log = $("activity");
  log.append(el("li", { class: kind }, el("span", { class: "from", text: `${from}: ` }), el("span", { text })));
  while (log.children.length > 500) log.firstChild.remove();
  log.scrollTop = log.scrollHeight;
}

async function refreshAll() {
  await Promise.all([refreshProposals(), forms.refresh(), refreshPeople(), refreshGrants(), refreshAudit(), refreshHolder()]);
}

/** Who holds my conversation now (interactive delegation), as the header says. */
async function refreshHolder() {
  const { conversations } = await api("GET", "conversations");
  showHolder(conversations.find((c) => c.human === state.me)?.holder ?? "");
}

function showHolder(holder) {
  $("holder").hidden = !holder;
  $("holder").textContent = holder ? `talking with ${holder} — say "stop" to end` : "";
}

// Forms asked of me (elicitation), above the proposals in the inbox.
const forms = formCards({ api, el, list: $("forms"), onCount: () => {} });

async function refreshProposals() {
  const { proposals } = await api("GET", "proposals");
  state.proposals = proposals;
  const list = $("inbox");
  list.replaceChildren(...proposals.map(card));
  $("inbox-empty").hidden = proposals.length > 0;
  $("inbox-count").textContent = String(proposals.length);
  document.title = proposals.length ? `(${proposals.length}) mewgate · ${state.space}` : `mewgate · ${state.space}`;
  drawFavicon(proposals.length);
  for (const p of proposals) {
    if (state.seen.has(p.id)) continue;
    state.seen.add(p.id);
    if (!p.mine && document.hidden && "Notification" in window && Notification.permission === "granted") {
      new Notification(`${p.proposer} wants ${p.tool ?? p.method}`, { body: "A proposal waits for your decision.", tag: p.id });
    }
  }
}

function card(p) {
  // Interrupted: approved before the gateway stopped; approving it again (same action) may run it a second time.
  const cut = p.state === "interrupted" ? p.interrupted ?? {} : undefined;
  const args = JSON.stringify((cut && cut.arguments) ?? p.arguments ?? {}, null, 2);
  const actions = p.mine
    ? el("div", { class: "actions" }, el("button", { text: "Withdraw", onclick: () => act(p, "withdraw", {}) }))
    : el(
        "div",
        { class: "actions" },
        el("button", { class: "approve", text: cut ? "Approve again" : "Approve", onclick: () => act(p, "approve", { scope: "once" }) }),
        el("button", { text: "Always", title: "approve, and let the proposer call this tool without asking from now on", onclick: () => act(p, "approve", { scope: "always" }) }),
        el("button", { text: "Edit", onclick: () => edit(p) }),
        el("button", { class: "reject", text: "Reject", onclick: () => reject(p) }),
      );
  return el(
    "li",
    { class: cut ? "card interrupted" : "card", "data-id": p.id },
    el("h3", { text: `${p.proposer} → ${p.tool ?? `${p.owner}: ${p.method}`}` }),
    ...(cut
      ? [
          el("p", { class: "interruption", role: "status", text: `Interrupted: ${cut.message ?? "the gateway stopped after it was approved; it may or may not have run"}.` }),
          el("p", { class: "why", text: `Approved by ${cut.approvedBy ?? "someone"} before the stop. Approve it again to run it (again), or reject it.` }),
        ]
      : []),
    ...(p.definitionChanged ? [definitionChange(p.definitionChanged)] : []),
    el("p", { class: "why", text: `${p.why ? `Needs approval: ${p.why}. ` : ""}Expires ${new Date(p.expiresAt).toLocaleTimeString()}.` }),
    flagged(p.findings, `The gateway flagged ${p.tool ?? "this tool"}`, p.description),
    el("pre", { class: "args", text: args }),
    el("p", { class: "error", role: "alert" }),
    actions,
  );
}

/** The tool changed since it was allowed: what changed, in words the gateway wrote (approving confirms the new definition). */
function definitionChange(mark) {
  const changes = Array.isArray(mark.changes) ? mark.changes.filter((c) => typeof c === "string").slice(0, 25) : [];
  return el(
    "div",
    { class: "definition-changed", role: "status" },
    el("p", { class: "interruption", text: `The tool ${String(mark.tool ?? "")} changed since it was allowed. Approving confirms its new definition.` }),
    el("ul", {}, ...changes.map((c) => el("li", { text: c }))),
  );
}

async function act(p, verb, body) {
  const card = document.querySelector(`li.card[data-id="${CSS.escape(p.id)}"]`);
  const error = card?.querySelector(".error");
  try {
    await api("POST", `proposals/${encodeURIComponent(p.id)}/${verb}`, body);
    await refreshProposals();
  } catch (err) {
    if (error) error.textContent = err.message;
  }
}

function reject(p) {
  const dialog = $("reject-dialog");
  $("reject-text").value = "";
  dialog.returnValue = "";
  dialog.onclose = () => {
    if (dialog.returnValue === "send") act(p, "reject", { reason: $("reject-reason").value, text: $("reject-text").value || undefined });
  };
  dialog.showModal();
}

// --- edit: JSON, checked against the tool's input schema, with a diff before sending ---

function edit(p) {
  const dialog = $("edit-dialog");
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
    const problem = typeof value !== "object" || value === null || Array.isArray(value) ? "the arguments must be a JSON object" : schemaProblem(p.inputSchema, value);
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
    showDiff(before, after);
    checked = value;
    $("edit-send").disabled = false;
  };
  dialog.returnValue = "";
  dialog.onclose = () => {
    if (dialog.returnValue === "send" && checked) act(p, "approve", { scope: "once", arguments: checked });
  };
  dialog.showModal();
}

function showDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const diff = $("edit-diff");
  const lines = [];
  for (const l of a) if (!b.includes(l)) lines.push(el("div", { class: "del", text: `- ${l}` }));
  for (const l of b) if (!a.includes(l)) lines.push(el("div", { class: "add", text: `+ ${l}` }));
  diff.replaceChildren(...lines);
  diff.hidden = false;
}

function schemaProblem(schema, value, at = "arguments") {
  if (!schema || typeof schema !== "object") return undefined;
  const ofType = { object: (v) => v && typeof v === "object" && !Array.isArray(v), array: Array.isArray, string: (v) => typeof v === "string", integer: Number.isInteger, number: (v) => typeof v === "number", boolean: (v) => typeof v === "boolean", null: (v) => v === null };
  if (typeof schema.type === "string" && ofType[schema.type] && !ofType[schema.type](value)) return `${at} must be of type ${schema.type}`;
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) return `${at} must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}`;
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

// --- participants, tools, grants, audit ---

async function refreshPeople() {
  const [{ participants }, { tools }] = await Promise.all([api("GET", "participants"), api("GET", "tools")]);
  $("people").replaceChildren(
    ...participants.map((p) => el("li", {}, el("span", { class: p.online ? "online" : "offline", text: p.online ? "● " : "○ " }), el("span", { text: `${p.id} (${p.kind})${p.description ? ` — ${p.description}` : ""}` }))),
  );
  $("tools").tBodies[0].replaceChildren(
    ...tools.map((t) =>
      el("tr", {}, el("td", { text: t.name }, t.findings?.length ? el("span", { class: "badge flag", text: "flagged" }) : undefined), el("td", { text: t.policy }), el("td", { text: reveal(t.description ?? "") }, flagged(t.findings, "Flagged by the gateway"))),
    ),
  );
}

async function refreshGrants() {
  const { grants } = await api("GET", "grants");
  $("grants-empty").hidden = grants.length > 0;
  $("grants").replaceChildren(
    ...grants.map((g) =>
      el(
        "li",
        {},
        el("span", { text: `${g.from} → ${g.recipient}: ${JSON.stringify(g.capabilities)}${g.reason ? ` (${g.reason})` : ""}${g.standing ? "" : " [not standing]"} ` }),
        el("button", { text: "Revoke", onclick: () => api("DELETE", `grants/${encodeURIComponent(g.id)}`).then(refreshGrants, (err) => alertIn(err)) }),
      ),
    ),
  );
}

function alertIn(err) {
  addLog("activity", "console", `error: ${err.message}`);
}

async function refreshAudit() {
  const q = new URLSearchParams();
  if ($("audit-participant").value) q.set("participant", $("audit-participant").value);
  if ($("audit-tool").value) q.set("tool", $("audit-tool").value);
  if ($("audit-since").value) q.set("since", $("audit-since").value);
  q.set("limit", "500");
  const { entries } = await api("GET", `audit?${q}`);
  $("audit").tBodies[0].replaceChildren(
    ...entries
      .slice()
      .reverse()
      .map((e) =>
        el(
          "tr",
          {},
          el("td", { text: new Date(e.ts).toLocaleString() }),
          el("td", { text: e.event }),
          el("td", { text: short(e.proposal) }),
          el("td", { text: e.by ? `${e.proposer} / ${e.by}` : e.proposer }),
          el("td", { text: e.tool ? `${e.owner}/${e.tool}` : `${e.owner}: ${e.method}` }),
          el("td", { text: [e.scope, e.reason, e.text, e.edited ? "edited" : "", e.outcome, ...(Array.isArray(e.changes) ? e.changes : [])].filter(Boolean).join(" · ") }),
        ),
      ),
  );
}

$("audit-form").addEventListener("submit", (e) => {
  e.preventDefault();
  refreshAudit().catch(alertIn);
});

$("chat-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = $("chat-text").value.trim();
  if (!text) return;
  try {
    await api("POST", "chat", { text });
    $("chat-text").value = "";
    addLog("chat", state.me, text);
  } catch (err) {
    alertIn(err);
  }
});

for (const b of document.querySelectorAll("nav button")) {
  b.addEventListener("click", () => {
    for (const other of document.querySelectorAll("nav button")) other.classList.toggle("active", other === b);
    for (const tab of document.querySelectorAll(".tab")) tab.hidden = tab.id !== `tab-${b.dataset.tab}`;
    if (b.dataset.tab === "audit") refreshAudit().catch(alertIn);
    if (b.dataset.tab === "grants") refreshGrants().catch(alertIn);
    if (b.dataset.tab === "sessions") sessionsPanel({ api, list: $("sessions"), note: $("sessions-note"), reveal, onError: alertIn }).refresh();
  });
}

/** The favicon shows how many proposals wait. */
function drawFavicon(n) {
  const c = document.createElement("canvas");
  c.width = c.height = 32;
  const g = c.getContext("2d");
  if (!g) return;
  g.fillStyle = n ? "#9a6700" : "#2a5bd7";
  g.beginPath();
  g.arc(16, 16, 15, 0, Math.PI * 2);
  g.fill();
  g.fillStyle = "#fff";
  g.font = "bold 18px sans-serif";
  g.textAlign = "center";
  g.textBaseline = "middle";
  g.fillText(n ? String(Math.min(n, 99)) : "m", 16, 17);
  $("favicon").href = c.toDataURL("image/png");
}

const creds = readFragment();
if (creds) signIn(creds);
else showLogin("");
