// The page a decision link opens (gateway/proposals/links.ts): one proposal's card — who,
// the tool with its hints, why the proposer wants it, every argument drawn by its schema,
// and the preview — and Approve / Reject, decided by a POST from here with the person's own
// session (their token, signed in in this tab — never in the link — or the device session
// the gateway set when they first used it here: operator/device-session.ts) and the value
// the gateway gave this page when it opened the link. Before asking for anything the page
// asks whether the link can still decide. Everything from participants is set as text.

import { previewBox } from "./preview.js";
import { el } from "./dom.js";
import { apiCall } from "./api.js";
import { revealText } from "./text.js";
import { argumentsView, reveal, textBlock } from "./args.js";
import { hintBadges } from "./cards.js";
import { riskLine } from "./risk.js";

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

/** A name the link claims, for the page's words: its hidden characters shown, at most 64 characters. */
function named(v) {
  const text = revealText(String(v ?? ""));
  return text.length > 64 ? `${text.slice(0, 63)}…` : text;
}

function api(method, path, body) {
  // Without a token of this tab, the device session's cookie (if any) speaks for the person.
  return apiCall(state.space, state.token ? { authorization: `Bearer ${state.token}` } : {}, method, path, body);
}

function problem(text) {
  $("problem").textContent = text;
}

async function open() {
  let opened;
  try {
    opened = await api("POST", "links/open", { link });
  } catch (err) {
    if (err.status === 401) return signIn(state.token ? "That token is not valid for this space." : "");
    return problem(err.message);
  }
  state.confirm = opened.confirm;
  const p = opened.proposal;
  const args = p.interrupted?.arguments ?? p.arguments ?? {};
  const intent = p.intent && typeof p.intent.text === "string" ? p.intent : undefined;
  if (opened.device?.until) showDevice(opened.device.until);
  const decide = async (decision, button) => {
    for (const b of document.querySelectorAll(".actions button")) b.disabled = true;
    try {
      await api("POST", "links/decide", { link, confirm: state.confirm, decision });
      $("message").textContent =
        decision === "approve" ? "Approved. The call goes ahead; this link is used up." : "Rejected. This link is used up.";
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
      p.title || p.description || p.hints
        ? el(
            "p",
            { class: "tool-line" },
            p.title ? el("strong", { class: "tool-title", text: `${reveal(p.title).slice(0, 120)} ` }) : undefined,
            hintBadges(p.hints),
            p.description ? el("span", { class: "tool-desc", text: ` ${reveal(p.description).slice(0, 300)}` }) : undefined,
          )
        : undefined,
      intent
        ? el(
            "blockquote",
            { class: "intent" },
            el("span", {
              class: "intent-label",
              text: intent.source === "proposal" ? `Why ${p.proposer} wants it:` : `${p.proposer}'s last message:`,
            }),
            textBlock(intent.text, { fold: 8, label: "intent" }),
          )
        : el("p", { class: "intent none muted", text: `${p.proposer} gave no reason.` }),
      el("p", {
        class: "why",
        text: `${p.why ? `Needs approval: ${revealText(p.why)}. ` : ""}Expires ${new Date(p.expiresAt).toLocaleString()}.`,
      }),
      // The risk the gateway states, with its reasons, as the console's card shows it (risk.js).
      riskLine(p, el, reveal),
      p.approvals
        ? el("p", {
            class: "approvals",
            text: `Approvals: ${p.approvals.text}${p.approvals.by?.length ? ` (${p.approvals.by.join(", ")})` : ""}.`,
          })
        : undefined,
      argumentsView(args, p.inputSchema),
      previewBox(p, () => api("POST", "links/preview", { link })),
      el("div", { class: "actions" }, approve, reject),
    ),
  );
  if (preferred === "approve" || preferred === "reject") {
    const chosen = preferred === "approve" ? approve : reject;
    $("message").textContent =
      `You chose ${preferred} in the notice: look at the call, then press ${preferred === "approve" ? "Approve" : "Reject"} to confirm.`;
    chosen.focus();
  }
}

/** The device session: how long this device opens the person's links without a token, and a way to end it. */
function showDevice(until) {
  const forget = el("button", {
    type: "button",
    text: "Forget this device",
    onclick: async () => {
      await api("POST", "links/forget", {}).catch(() => undefined);
      sessionStorage.removeItem("mewgate");
      $("device").textContent = "This device no longer opens links without a token.";
    },
  });
  $("device").replaceChildren(
    el("span", {
      text: `This device opens links for ${claims()?.a === undefined ? "you" : named(claims().a)} without a token until ${new Date(until).toLocaleTimeString()}. `,
    }),
    forget,
  );
}

/** What a link that cannot decide any more says, before anyone is asked to sign in. */
const SPENT = {
  used: "This link was already used: a link decides once. Open the console to see what became of the proposal.",
  expired: "This link has expired. Decide in the console instead.",
  not_pending: "The proposal this link decides is no longer waiting: someone decided it, or it was withdrawn or expired.",
  invalid: "This is not a decision link of this space (it was cut short or altered).",
};

async function start() {
  let st;
  try {
    const res = await fetch(`/api/spaces/${encodeURIComponent(state.space)}/links/state`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ link }),
    });
    // A space this gateway does not have (404): the link was altered, or is another gateway's.
    st = res.status === 404 ? { state: "invalid" } : await res.json();
  } catch {
    st = undefined;
  }
  if (st?.state === "invalid") {
    // Nothing the link claims is shown once the gateway has said it is not one of its links.
    $("space-name").textContent = "";
    $("who").textContent = "";
  }
  if (st && st.state !== "usable") return problem(SPENT[st.state] ?? String(st.message ?? "This link cannot decide anything."));
  let creds;
  try {
    creds = JSON.parse(sessionStorage.getItem("mewgate") || "null");
  } catch {
    creds = null;
  }
  if (creds && creds.space === state.space && creds.token) state.token = creds.token;
  // With no token in this tab, the device session (if the gateway set one) may open it.
  void open();
}

function signIn(message) {
  $("login").hidden = false;
  $("login-who").textContent = claims()?.a === undefined ? "the person this link was sent to" : named(claims().a);
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
  $("space-name").textContent = `· ${named(c.s)}`;
  $("who").textContent = `for ${named(c.a)}`;
  void start();
}
