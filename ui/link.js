// The page a decision link opens (gateway/proposals/links.ts): one proposal's card with its
// preview, and Approve / Reject, decided by a POST from here with the person's own session
// (their token, signed in in this tab — never in the link) and the value the gateway gave
// this page when it opened the link. Everything from participants is set as text.

import { previewBox } from "./preview.js";
import { el } from "./dom.js";
import { revealText } from "./text.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
const link = params.get("t") || "";
const preferred = params.get("do");
const state = { space: "", token: "", confirm: "" };

/** What the link says, for the page's words only: the gateway checks the signature. */
function claims() {
  try {
    const body = link.split(".")[1] || "";
    return JSON.parse(atob(body.replace(/-/g, "+").replace(/_/g, "/")));
  } catch {
    return undefined;
  }
}


async function api(method, path, body) {
  const res = await fetch(`/api/spaces/${encodeURIComponent(state.space)}/${path}`, {
    method,
    headers: { authorization: `Bearer ${state.token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  let data;
  try {
    data = await res.json();
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

function problem(text) {
  $("problem").textContent = text;
}

async function open() {
  let opened;
  try {
    opened = await api("POST", "links/open", { link });
  } catch (err) {
    if (err.status === 401) return signIn("That token is not valid for this space.");
    return problem(err.message);
  }
  state.confirm = opened.confirm;
  const p = opened.proposal;
  // Hidden and reordering characters shown as ⟨U+…⟩ (text.js): what the person reads is what runs.
  const args = revealText(JSON.stringify(p.interrupted?.arguments ?? p.arguments ?? {}, null, 2));
  const decide = async (decision, button) => {
    for (const b of document.querySelectorAll(".actions button")) b.disabled = true;
    try {
      await api("POST", "links/decide", { link, confirm: state.confirm, decision });
      $("message").textContent = decision === "approve" ? "Approved. The call goes ahead; this link is used up." : "Rejected. This link is used up.";
      button.closest(".actions")?.remove();
    } catch (err) {
      problem(err.message);
    }
  };
  const approve = el("button", { class: "approve", type: "button", text: "Approve", onclick: (e) => decide("approve", e.currentTarget) });
  const reject = el("button", { class: "reject", type: "button", text: "Reject", onclick: (e) => decide("reject", e.currentTarget) });
  $("card").replaceChildren(
    el(
      "li",
      { class: "card", "data-id": p.id },
      el("h3", { text: revealText(`${p.proposer} → ${p.tool ?? `${p.owner}: ${p.method}`}`) }),
      el("p", { class: "why", text: `${p.why ? `Needs approval: ${revealText(p.why)}. ` : ""}Expires ${new Date(p.expiresAt).toLocaleString()}.` }),
      el("pre", { class: "args", text: args }),
      previewBox(p, () => api("GET", `proposals/${encodeURIComponent(p.id)}/preview`)),
      el("div", { class: "actions" }, approve, reject),
    ),
  );
  if (preferred === "approve" || preferred === "reject") {
    const chosen = preferred === "approve" ? approve : reject;
    $("message").textContent = `You chose ${preferred} in the notice: look at the call, then press ${preferred === "approve" ? "Approve" : "Reject"} to confirm.`;
    chosen.focus();
  }
}

function signIn(message) {
  $("login").hidden = false;
  $("login-who").textContent = claims()?.a ?? "the person this link was sent to";
  problem(message || "");
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.token = $("login-token").value.trim();
  // The console's own sign-in: one token per tab, shared with the console in this tab.
  sessionStorage.setItem("mewgate", JSON.stringify({ space: state.space, token: state.token }));
  $("login").hidden = true;
  problem("");
  void open();
});

const c = claims();
if (!link || !c || typeof c.s !== "string") problem("This is not a decision link (it was cut short or altered).");
else {
  state.space = c.s;
  $("space-name").textContent = `· ${c.s}`;
  $("who").textContent = `for ${c.a}`;
  let creds;
  try {
    creds = JSON.parse(sessionStorage.getItem("mewgate") || "null");
  } catch {
    creds = null;
  }
  if (creds && creds.space === c.s && creds.token) {
    state.token = creds.token;
    void open();
  } else signIn();
}
