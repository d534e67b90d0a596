// The mewgate web console: the operator API in a page. Plain JavaScript, no build step.
// Everything a participant wrote is put on the page with textContent, never as HTML.

import { formCards } from "./elicit.js";
import { authHeaders, offerProvider, readCredentials, sessionFor, wireSignOut } from "./signin.js";
import { reveal } from "./args.js";
import { NARROW, askResponse, confirmAlways, intentQuote, proposalCard, startCountdowns } from "./cards.js";
import { decidedList } from "./decided.js";
import { editArguments, editJson } from "./edit.js";
import { installKeys } from "./keys.js";
import { capsView, policyFindings } from "./policy.js";
import { sessionsPanel } from "./sessions.js";
import { suggestionsPanel } from "./suggestions.js";
import { byRisk, mayPick } from "./risk.js";
import { callEnded, drawBatchBar } from "./batch.js";
import { turnItems } from "./turns.js";
import { fatiguePanel } from "./fatigue.js";
import { el } from "./dom.js";
import { apiCall } from "./api.js";
import { drawFavicon } from "./favicon.js";
import { followEvents } from "./stream.js";
import { spaceTables } from "./tables.js";

const $ = (id) => document.getElementById(id);
const state = {
  space: "",
  token: "",
  me: "",
  proposals: [],
  tools: [],
  seen: new Set(),
  stream: undefined,
  selected: new Set(),
  logged: new Set(),
};

// --- sign-in: #space=S&token=T once (then dropped from the address bar), or the form ---

async function signIn(creds) {
  state.space = creds.space;
  state.token = creds.token || "";
  state.csrf = "";
  if (creds.sso) {
    const session = await sessionFor(creds.space).catch(() => null);
    if (!session?.signed_in) {
      showLogin("");
      $("login-space").value = creds.space;
      if (session?.sign_in) offerProvider(creds.space, session);
      return;
    }
    state.csrf = session.csrf;
  }
  const me = await api("GET", "me").catch((err) => err);
  if (me instanceof Error) {
    sessionStorage.removeItem("mewgate");
    showLogin(
      me.status === 401
        ? "That token is not valid for this space."
        : me.status === 404
          ? `No space named "${creds.space}".`
          : `Could not sign in: ${me.message}`,
    );
    return;
  }
  state.me = me.id;
  $("login").hidden = true;
  $("app").hidden = false;
  $("space-name").textContent = `· ${state.space}`;
  $("who").textContent = `signed in as ${me.id}`;
  state.stopped = false;
  wireSignOut(state, () => {
    state.stopped = true;
    state.csrf = "";
    showLogin("Signed out.");
  });
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

function api(method, path, body) {
  return apiCall(state.space, authHeaders(state), method, path, body);
}

// --- live: the caller's event stream (stream.js) ---

function openStream() {
  const conn = $("conn");
  return followEvents({
    url: `/api/spaces/${encodeURIComponent(state.space)}/events`,
    headers: () => authHeaders(state),
    stopped: () => state.stopped,
    opened: async () => {
      await refreshAll().catch(alertIn);
      conn.textContent = "live";
      conn.className = "conn live";
    },
    lost: () => {
      conn.textContent = "reconnecting…";
      conn.className = "conn";
    },
    onEnvelope: (env) => onEnvelope(env),
  });
}

function onEnvelope(env, replay = false) {
  // Each envelope once in the log, whether it came from the history or the live stream.
  if (env.id && state.logged.has(env.id)) return;
  if (env.id) state.logged.add(env.id);
  if (state.logged.size > 5000) state.logged.delete(state.logged.values().next().value);
  if (replay) return logOnly(env);
  forms.onEnvelope(env, state.me)?.catch?.(alertIn);
  if (["mcp/approve", "mcp/reject", "mcp/withdraw", "mcp/response"].includes(env.kind)) decided.refresh().catch(alertIn);
  switch (env.kind) {
    case "chat":
      return addLog("chat", env.from, chatText(env));
    case "mcp/proposal":
      addLog("activity", env.from, `proposes ${callLabel(env)}`);
      return refreshProposals();
    case "mcp/approve":
      addLog(
        "activity",
        env.from,
        `approved ${short(env.correlation_id?.[0])}${env.payload?.scope === "always" ? " (always)" : ""}${env.payload?.arguments ? " with edited arguments" : ""}`,
      );
      // An "always" made a grant.
      if (env.payload?.scope === "always") refreshGrants().catch(alertIn);
      return refreshProposals();
    case "mcp/reject":
      addLog(
        "activity",
        env.from,
        `rejected ${short(env.correlation_id?.[0])}: ${env.payload?.reason ?? ""}${env.payload?.text ? ` — ${env.payload.text}` : ""}`,
      );
      return refreshProposals();
    case "mcp/withdraw":
      addLog("activity", env.from, `withdrew ${short(env.correlation_id?.[0])}`);
      return refreshProposals();
    case "system/approval": // one of several approvals a proposal needs ("1 of 2")
      addLog(
        "activity",
        (env.payload?.by ?? []).at(-1) ?? env.from,
        `approved ${short(env.correlation_id?.[0])} (${env.payload?.text ?? ""})`,
      );
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
      addLog(
        "activity",
        env.payload?.human ?? "?",
        env.payload?.holder ? `is talking with ${env.payload.holder}` : "has the conversation back",
      );
      return;
    case "system/presence":
      if (env.payload?.event === "summary") {
        // A large space tells joins and leaves as a summary (presence.each_up_to).
        const n = (list, more) => (Array.isArray(list) ? list.length : 0) + (typeof more === "number" ? more : 0);
        addLog(
          "activity",
          "space",
          `${n(env.payload.joined, env.payload.joined_more)} joined, ${n(env.payload.left, env.payload.left_more)} left`,
        );
        return refreshPeople();
      }
      addLog(
        "activity",
        env.payload?.participant?.id ?? "?",
        env.payload?.event === "join" ? "joined" : env.payload?.event === "invited" ? "was invited" : "left",
      );
      return refreshPeople();
    case "capability/grant":
    case "capability/revoke":
      addLog(
        "activity",
        env.from,
        env.kind === "capability/grant" ? `granted ${env.payload?.recipient ?? ""}` : `revoked a grant of ${env.payload?.recipient ?? ""}`,
      );
      return refreshGrants();
  }
}

/** A chat as the log shows it; an answer to a proposal (Respond) says which. */
function chatText(env) {
  const text = env.payload && typeof env.payload.text === "string" ? env.payload.text : JSON.stringify(env.payload);
  const about = env.correlation_id?.[0];
  return state.proposals.some((p) => p.id === about) ? `(about proposal #${short(about)}) ${text}` : text;
}

/** An envelope from the history, into the log only: nothing is refreshed or asked for again. */
function logOnly(env) {
  if (env.kind === "chat") return addLog("chat", env.from, chatText(env));
  if (env.kind === "mcp/proposal") return addLog("activity", env.from, `proposes ${callLabel(env)}`);
  if (env.kind === "mcp/approve") return addLog("activity", env.from, `approved ${short(env.correlation_id?.[0])}`);
  if (env.kind === "mcp/reject") return addLog("activity", env.from, `rejected ${short(env.correlation_id?.[0])}`);
  if (env.kind === "system/presence" && env.payload?.event !== "summary")
    return addLog("activity", env.payload?.participant?.id ?? "?", env.payload?.event === "join" ? "joined" : "left");
}

function callLabel(env) {
  const p = env.payload || {};
  const name = p.params && typeof p.params.name === "string" ? p.params.name : p.method;
  const owner = env.to?.[0];
  return owner && owner !== "system:gateway" ? `${owner}/${name}` : String(name);
}

const short = (id) => (typeof id === "string" ? id.slice(0, 8) : "?");

// --- rendering (textContent only) ---

function addLog(kind, from, text) {
  const log = $("activity");
  log.append(el("li", { class: kind }, el("span", { class: "from", text: `${from}: ` }), el("span", { text })));
  while (log.children.length > 500) log.firstChild.remove();
  log.scrollTop = log.scrollHeight;
}

async function refreshAll() {
  await Promise.all([
    refreshProposals(),
    forms.refresh(),
    refreshPeople(),
    refreshGrants(),
    refreshAudit(),
    refreshHolder(),
    decided.refresh(),
    loadHistory(),
  ]);
}

/** The chat and activity tabs start with what happened recently, not empty. */
async function loadHistory() {
  const { envelopes } = await api("GET", "history?limit=200");
  for (const env of envelopes) onEnvelope(env, true);
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
// The Inbox badge, the title and the icon count both: what waits for my decision and what is asked of me.
const waiting = { proposals: 0, forms: 0 };
function drawCount() {
  const n = waiting.proposals + waiting.forms;
  $("inbox-count").textContent = String(n);
  document.title = n ? `(${n}) mewgate · ${state.space}` : `mewgate · ${state.space}`;
  drawFavicon($("favicon"), n);
}
const forms = formCards({
  api,
  el,
  list: $("forms"),
  onCount: (n) => {
    waiting.forms = n;
    drawCount();
  },
});

async function refreshProposals() {
  const { proposals } = await api("GET", "proposals");
  // Highest risk first (risk.js); the sort is stable, so arrival order holds within a level.
  proposals.sort(byRisk);
  state.proposals = proposals;
  const list = $("inbox");
  // A tick stays only on a card the viewer may still decide.
  for (const id of state.selected) if (!proposals.some((p) => p.id === id && mayPick(p))) state.selected.delete(id);
  // Calls of one agent turn together, under one heading (turns.js).
  const selectAll = (ps) => {
    for (const p of ps) state.selected.add(p.id);
    return refreshProposals().catch(alertIn);
  };
  list.replaceChildren(
    ...turnItems(proposals, (p, turn) => proposalCard(p, decide, state.selected.has(p.id), turn), {
      el,
      reveal,
      select: selectAll,
      intent: intentQuote,
      decidable: mayPick,
    }),
  );
  drawBatch();
  keys.refocus();
  if (state.deepLink && keys.show(state.deepLink)) state.deepLink = undefined;
  $("inbox-empty").hidden = proposals.length > 0;
  waiting.proposals = proposals.length;
  drawCount();
  for (const p of proposals) {
    if (state.seen.has(p.id)) continue;
    state.seen.add(p.id);
    if (!p.mine && document.hidden && "Notification" in window && Notification.permission === "granted") {
      new Notification(`${p.proposer} wants ${p.tool ?? p.method}`, { body: "A proposal waits for your decision.", tag: p.id });
    }
  }
}

async function act(p, verb, body, refresh = true) {
  const card = document.querySelector(`#inbox li.card[data-id="${CSS.escape(p.id)}"]`);
  const error = card?.querySelector(".error");
  try {
    await api("POST", `proposals/${encodeURIComponent(p.id)}/${verb}`, body);
    if (refresh) await refreshProposals();
    return true;
  } catch (err) {
    if (error) error.textContent = err.message;
    return false;
  }
}

// Approve what the card shows: its arguments, when an approver edited them, so the gateway
// counts this approval only for what runs (a card drawn before an edit approves nothing).
function approveBody(p) {
  return { scope: "once", ...(p.edited ? { arguments: p.arguments } : {}) };
}

// What each card's buttons (and the keys) do (cards.js, keys.js).
const decide = {
  approve: (p) => act(p, "approve", approveBody(p)),
  always: async (p) => {
    // "Always" makes a standing grant: it says exactly what it will allow, and asks first.
    const confirmed = await confirmAlways(p);
    if (confirmed) act(p, "approve", { scope: "always", ...(confirmed.limit === "tool" ? {} : { limit: confirmed.limit }) });
  },
  edit: async (p) => {
    const args = await editArguments(p, editJson);
    if (args) act(p, "approve", { scope: "once", arguments: args });
  },
  respond: async (p) => {
    const text = await askResponse(p);
    if (text) act(p, "respond", { text }, false);
  },
  reject: (p) => reject([p]),
  withdraw: (p) => act(p, "withdraw", {}),
  // What the call would change, read as you (preview.js; cached there per arguments).
  preview: (p) => api("GET", `proposals/${encodeURIComponent(p.id)}/preview`),
  select: (p, on) => {
    if (on) state.selected.add(p.id);
    else state.selected.delete(p.id);
    drawBatch();
  },
};

// --- several at once: the ticked cards, approved or rejected together ---

function drawBatch() {
  let bar = $("batch");
  if (!bar) {
    bar = el("div", { id: "batch", class: "batch", role: "toolbar", "aria-label": "selected proposals" });
    $("inbox").before(bar);
  }
  const reselect = (change) => {
    change(state.selected);
    return refreshProposals().catch(alertIn);
  };
  drawBatchBar(bar, state.proposals, state.selected, {
    selectAll: (list) =>
      reselect((s) => {
        for (const p of list) s.add(p.id);
      }),
    approve: (list) => batch(list, "approve"),
    reject: (list) => reject(list),
    clear: () => reselect((s) => s.clear()),
  });
}

async function batch(list, verb, body) {
  for (const [i, p] of list.entries()) {
    if (!(await act(p, verb, body ?? approveBody(p), false))) continue;
    state.selected.delete(p.id);
    // A turn's calls run in its order, as its previews showed them: the next waits for this one's call to end.
    const next = list[i + 1];
    if (verb === "approve" && p.turn && next?.turn?.id === p.turn.id && next.proposer === p.proposer) await callEnded(api, p.id);
  }
  await refreshProposals();
}

function reject(list) {
  const dialog = $("reject-dialog");
  $("reject-text").value = "";
  dialog.returnValue = "";
  dialog.onclose = () => {
    if (dialog.returnValue === "send")
      batch(list, "reject", { reason: $("reject-reason").value, text: $("reject-text").value || undefined });
  };
  dialog.showModal();
}

// --- participants, tools, grants, audit (tables.js) ---

const policyView = policyFindings({ api: (...a) => api(...a), el, list: $("policy-findings"), heading: $("policy-heading"), reveal });
const capsList = capsView({ api: (...a) => api(...a), el, list: $("caps"), heading: $("caps-heading"), reveal });
const tables = spaceTables({
  api,
  me: () => state.me,
  afterPeople: () => policyView.refresh().then(() => capsList.refresh()),
  onError: (err) => alertIn(err),
});
const refreshPeople = () => tables.people();
const refreshGrants = () => tables.grants();
const refreshAudit = () => tables.audit();

function alertIn(err) {
  addLog("activity", "console", `error: ${err.message}`);
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
    // The caps count by the minute: opening the tab reads them afresh.
    if (b.dataset.tab === "people") capsList.refresh();
    if (b.dataset.tab === "sessions")
      sessionsPanel({ api, list: $("sessions"), note: $("sessions-note"), reveal, onError: alertIn }).refresh();
    if (b.dataset.tab === "suggestions")
      suggestionsPanel({ api, el, list: $("suggestions"), note: $("suggestions-note"), reveal, onError: alertIn })
        .refresh()
        .then(() => fatiguePanel({ api, el, box: $("fatigue"), reveal }).refresh());
  });
}

// The Decided list, under the pending ones in the inbox (decided.js).
const decidedHead = el("h2", { class: "decided-head", text: "Decided" });
const decidedOl = el("ol", { id: "decided", class: "cards" });
$("inbox").after(decidedHead, decidedOl);
const decided = decidedList({ api, list: decidedOl });
const keys = installKeys({
  cards: () => [...$("inbox").querySelectorAll("li.card")],
  byId: (id) => state.proposals.find((p) => p.id === id),
  on: decide,
});
startCountdowns();
// Cards fold long arguments and previews sooner on a phone (cards.js): drawn again when the width crosses over.
matchMedia(NARROW).addEventListener("change", () => {
  if (state.space) refreshProposals().catch(alertIn);
});

const { creds, deepLink } = readCredentials();
state.deepLink = deepLink;
if (creds) signIn(creds);
else showLogin("");
