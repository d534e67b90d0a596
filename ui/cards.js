// A proposal as a card a person can decide on: who asks, which tool (title, description, its
// annotation hints as badges), the rule that made it wait, why the proposer wants it (its
// intent, or its last message), when it was proposed and how long it has left (a live
// countdown), a short id, and its arguments drawn by their schema (args.js). Every string a
// participant wrote goes on the page with textContent, control and bidi characters shown.

import { argsHeight, argsInBrief, argumentsView, reveal, textBlock } from "./args.js";
import { el } from "./dom.js";

export { el };
import { previewBox } from "./preview.js";
import { riskLine } from "./risk.js";

const HINT_WORDS = {
  destructiveHint: ["destructive", "not destructive"],
  readOnlyHint: ["read-only", "not read-only"],
  idempotentHint: ["idempotent", "not idempotent"],
  openWorldHint: ["open world", "closed world"],
};

const clip = (s, n) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

/** What the gateway found in a tool's texts (gateway/policy/inspect.ts): a heading and the reasons, as text. */
export function flagged(findings, heading, description) {
  if (!Array.isArray(findings) || findings.length === 0) return undefined;
  const shown = typeof description === "string" ? reveal(description) : "";
  return el(
    "div",
    { class: "findings", role: "note" },
    el("strong", { text: `⚠ ${heading}:` }),
    el("ul", {}, ...findings.slice(0, 24).map((f) => el("li", { text: String(f?.reason ?? f?.code ?? "flagged") }))),
    // On a card: the description itself, as a model would read it, hidden characters shown.
    shown ? el("p", { class: "flagged-text", text: `Its description: ${clip(shown, 600)}` }) : undefined,
  );
}

/** The tool changed since it was allowed: what changed, in words the gateway wrote (approving confirms the new definition). */
function definitionChange(mark) {
  const changes = Array.isArray(mark.changes) ? mark.changes.filter((c) => typeof c === "string").slice(0, 25) : [];
  return el(
    "div",
    { class: "definition-changed", role: "status" },
    el("p", {
      class: "interruption",
      text: `The tool ${String(mark.tool ?? "")} changed since it was allowed. Approving confirms its new definition.`,
    }),
    el("ul", {}, ...changes.map((c) => el("li", { text: c }))),
  );
}

/** The tool's annotation hints as badges: a destructive tool in red, a read-only one in green. */
export function hintBadges(hints) {
  if (!hints || typeof hints !== "object") return undefined;
  const badges = Object.entries(HINT_WORDS)
    .filter(([k]) => typeof hints[k] === "boolean")
    .map(([k, [yes, no]]) =>
      el("span", {
        class: `hint ${hints[k] ? "on" : "off"} ${k}`,
        text: hints[k] ? yes : no,
        title: `the tool declares ${k}: ${hints[k]}`,
      }),
    );
  return badges.length ? el("span", { class: "hints" }, ...badges) : undefined;
}

/** "in 4:59", "expired", for the countdown. */
export function left(ms) {
  if (ms <= 0) return "expired";
  const s = Math.ceil(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, "0");
  return h ? `in ${h}:${String(m).padStart(2, "0")}:${sec}` : `in ${m}:${sec}`;
}

/** Keeps every `[data-expires]` on the page counting down, once a second. */
export function startCountdowns() {
  const tick = () => {
    for (const node of document.querySelectorAll("[data-expires]")) {
      const ms = Date.parse(node.dataset.expires) - Date.now();
      node.textContent = `expires ${left(ms)}`;
      node.classList.toggle("soon", ms < 60_000);
    }
  };
  tick();
  return setInterval(tick, 1000);
}

/**
 * Who may decide it (gateway/operator/deciders.ts): the people who may approve and reject it,
 * then any reviewer who may approve it within its bound, or, while nobody may approve it, who
 * may reject it. Only those the gateway would heed now.
 */
export function decidersLine(p) {
  if (!Array.isArray(p.deciders)) return undefined;
  const ids = (xs) => (Array.isArray(xs) ? xs.filter((x) => typeof x === "string").map((x) => reveal(x)) : []);
  const reviewers = ids(p.reviewers);
  const people = ids(p.deciders).filter((id) => !reviewers.includes(id));
  const rejecters = ids(p.rejecters);
  const words = people.length
    ? `Who may decide: ${people.join(", ")}.`
    : reviewers.length
      ? "No person may decide it as things stand."
      : rejecters.length
        ? `Nobody may approve it as things stand; ${rejecters.join(", ")} may reject it.`
        : "Nobody in the space may decide it as things stand.";
  const review = reviewers.length
    ? ` ${reviewers.length === 1 ? "Reviewer" : "Reviewers"} ${reviewers.join(", ")} may approve it once (never reject it).`
    : "";
  return el("p", { class: "deciders", text: `${words}${review}` });
}

/** Why the proposer wants it, as a quote (its intent, or its last message), or that it gave no reason. */
export function intentQuote(p, label) {
  const intent = p.intent && typeof p.intent.text === "string" ? p.intent : undefined;
  if (!intent) return el("p", { class: "intent none muted", text: `${reveal(p.proposer)} gave no reason.` });
  return el(
    "blockquote",
    { class: "intent" },
    el("span", {
      class: "intent-label",
      text: label ?? (intent.source === "proposal" ? `Why ${reveal(p.proposer)} wants it:` : `${reveal(p.proposer)}'s last message:`),
    }),
    // Folded at 8 lines, or fewer characters on a phone: one enormous line folds too.
    textBlock(intent.text, { fold: 8, label: "intent", chars: narrowNow() ? 320 : 1600 }),
  );
}

/**
 * The card of a proposal awaiting a decision. `on`: {approve, always, edit, respond, reject,
 * withdraw, select(p, checked)}; `selected`: whether its box is ticked; `turn`: its place in
 * an agent turn drawn as one unit (turns.js): {call, count, sameIntent}.
 */
export function proposalCard(p, on, selected = false, turn = undefined) {
  // Interrupted: approved before the gateway stopped; approving it again (same action) may run it a second time.
  const cut = p.state === "interrupted" ? (p.interrupted ?? {}) : undefined;
  const args = cut?.arguments ?? p.arguments ?? {};
  // Buttons only for those who may decide (gateway/operator/deciders.ts); the others are told why.
  const mayNot = !p.mine && p.mayDecide === false;
  // A reviewer approves once and never rejects; while approving is closed, one may only reject.
  const only = p.mayOnly === "approve" || p.mayOnly === "reject" ? p.mayOnly : undefined;
  // "Always" would let one person's grant skip a second approver: not offered on a two-person rule.
  const twoPerson = p.approvals && p.approvals.required > 1;
  // A passkey confirms one call (gateway/proposals/passkey-bar.ts): no "Always", and the card says where.
  const passkey = p.passkey?.required === true;
  const respond = el("button", { text: "Respond", title: "answer the proposer without deciding", onclick: () => on.respond(p) });
  const actions = p.mine
    ? el("div", { class: "actions" }, el("button", { text: "Withdraw", onclick: () => on.withdraw(p) }))
    : mayNot
      ? el(
          "div",
          { class: "actions" },
          el("p", {
            class: "may-not muted",
            role: "note",
            text: `You cannot decide this one: ${reveal(p.mayNotDecide ?? "not yours to decide")}.`,
          }),
          respond,
        )
      : el(
          "div",
          { class: "actions" },
          only
            ? el("p", {
                class: "may-only muted",
                role: "note",
                text:
                  only === "approve"
                    ? `You review ${reveal(p.proposer)}'s proposals: you may approve this one once, as proposed; never reject it.`
                    : "Nobody may approve it as things stand; you may reject it.",
              })
            : undefined,
          only === "reject"
            ? undefined
            : el("button", { class: "approve", text: cut ? "Approve again" : "Approve", title: "a", onclick: () => on.approve(p) }),
          twoPerson || only || passkey
            ? undefined
            : el("button", {
                text: "Always…",
                title: "approve, and let the proposer call this tool without asking from now on (asks you to confirm)",
                onclick: () => on.always(p),
              }),
          only ? undefined : el("button", { text: "Edit", title: "e", onclick: () => on.edit(p) }),
          respond,
          only === "approve" ? undefined : el("button", { class: "reject", text: "Reject", title: "r", onclick: () => on.reject(p) }),
        );
  const proposed = Date.parse(p.createdAt);
  return el(
    "li",
    { class: cut ? "card interrupted" : "card", "data-id": p.id, tabindex: "-1" },
    turn ? el("p", { class: "turn-step muted", text: `Call ${turn.call} of ${turn.count} in this turn` }) : undefined,
    el(
      "div",
      { class: "card-head" },
      p.mine || p.mayDecide !== true
        ? undefined
        : el("input", {
            type: "checkbox",
            class: "pick",
            "aria-label": `select ${p.shortId ?? p.id}`,
            ...(selected ? { checked: "" } : {}),
            onchange: (e) => on.select(p, e.target.checked),
          }),
      el("h3", { text: `${p.proposer} → ${p.tool ?? `${p.owner}: ${p.method}`}` }),
      el("code", { class: "short-id", text: `#${p.shortId ?? String(p.id).slice(0, 8)}`, title: String(p.id) }),
    ),
    p.title || p.description || p.hints
      ? el(
          "p",
          { class: "tool-line" },
          p.title ? el("strong", { class: "tool-title", text: `${clip(reveal(p.title), 120)} ` }) : undefined,
          hintBadges(p.hints),
          p.description ? el("span", { class: "tool-desc", text: ` ${clip(reveal(p.description), 300)}` }) : undefined,
        )
      : undefined,
    ...(cut
      ? [
          el("p", {
            class: "interruption",
            role: "status",
            text: `Interrupted: ${cut.message ?? "the gateway stopped after it was approved; it may or may not have run"}.`,
          }),
          el("p", {
            class: "why",
            text: `Approved by ${cut.approvedBy ?? "someone"} before the stop. Approve it again to run it (again), or reject it.`,
          }),
        ]
      : []),
    ...(p.definitionChanged ? [definitionChange(p.definitionChanged)] : []),
    // In a turn whose heading says the intent, a call says its own only where it differs (turns.js).
    turn?.sameIntent ? undefined : intentQuote(p, turn ? "This call's own reason:" : undefined),
    el(
      "p",
      { class: "why" },
      el("span", {
        text: `${p.why ? `Needs approval: ${p.why}. ` : ""}Proposed ${Number.isNaN(proposed) ? "?" : new Date(proposed).toLocaleTimeString()}, `,
      }),
      el("span", {
        class: "expires",
        "data-expires": new Date(p.expiresAt).toISOString(),
        text: `expires ${left(Date.parse(p.expiresAt) - Date.now())}`,
      }),
      el("span", { text: ` (${new Date(p.expiresAt).toLocaleTimeString()}).` }),
    ),
    flagged(p.findings, `The gateway flagged ${p.tool ?? "this tool"}`, p.description),
    // A reviewer's word before yours (gateway/policy/learn/review.ts): its verdict, the risk it sees, its reason, cleaned by the gateway.
    p.review
      ? el("p", {
          class: "review",
          text: reveal(
            `Reviewer ${p.review.by}: ${p.review.verdict} (it sees risk ${p.review.risk})${p.review.reason ? `: ${p.review.reason}` : ""}${p.review.why ? ` — handed to you: ${p.review.why}` : ""}`,
          ),
        })
      : undefined,
    // The risk the gateway states, each reason shown (risk.js).
    riskLine(p, el, reveal),
    // How people decided calls like this before.
    p.like_this ? el("p", { class: "like-this muted", text: `History: ${p.like_this.text}.` }) : undefined,
    // A two-person rule: "1 of 2", who approved, and whether it can still be met.
    p.approvals
      ? el("p", {
          class: p.approvals.satisfiable ? "approvals" : "approvals error",
          role: "status",
          text: `Approvals: ${p.approvals.text}${p.approvals.by?.length ? ` (${p.approvals.by.join(", ")})` : ""}.${p.approvals.dropped?.length ? ` No longer counted: ${p.approvals.dropped.map((d) => `${d.by} (${d.why})`).join("; ")}.` : ""}${p.approvals.satisfiable ? "" : ` ${p.approvals.why}`}`,
        })
      : undefined,
    // Edited by an approver: these arguments are what runs, not those proposed.
    p.edited
      ? el("p", {
          class: "approvals",
          role: "status",
          text: `Arguments edited by ${reveal(p.edited.by ?? "an approver")}${p.edited.at ? ` at ${new Date(p.edited.at).toLocaleTimeString()}` : ""}: approving runs these, not those proposed.`,
        })
      : undefined,
    decidersLine(p),
    passkey && !p.mine && !mayNot ? passkeyLine(p.passkey.where) : undefined,
    foldedArguments(args, p.inputSchema),
    // What the call would change (a diff against the file on disk, …), beside the arguments.
    on.preview ? previewBox(p, () => on.preview(p)) : undefined,
    el("p", { class: "error", role: "alert" }),
    actions,
  );
}

/** A host a browser will not take as a passkey's RP ID: an IP address. */
const ipHost = (host) => /^\d+\.\d+\.\d+\.\d+$/.test(host) || host.includes(":") || host.startsWith("[");

/**
 * Approving needs the approver's passkey: where they give it (the passkey page, at this
 * proposal). At a host name, the page on this origin, where this tab's sign-in holds; at an IP
 * address (where passkeys do not work), the gateway's address for it, this tab's token carried
 * in the fragment on the click (the page takes it out of the address bar at once).
 */
function passkeyLine(where) {
  let url;
  try {
    url = new URL(String(where));
  } catch {
    url = undefined;
  }
  if (url && url.protocol !== "http:" && url.protocol !== "https:") url = undefined;
  if (url && !ipHost(location.hostname)) url = new URL(url.pathname + url.hash, location.origin);
  const follow = (e) => {
    if (!url || url.origin === location.origin) return;
    let creds = null;
    try {
      creds = JSON.parse(sessionStorage.getItem("mewgate") || "null");
    } catch {
      creds = null;
    }
    const space = new URLSearchParams(url.hash.slice(1)).get("space");
    if (!creds?.token || creds.space !== space) return;
    e.preventDefault();
    location.assign(`${url.href}&token=${encodeURIComponent(creds.token)}`);
  };
  return el(
    "p",
    { class: "passkey", role: "note" },
    el("span", { text: "Approving this call needs your passkey, for this call alone: " }),
    url
      ? el("a", { href: url.href, onclick: follow, text: "approve it with your passkey" })
      : el("span", { text: "open the passkey page" }),
    el("span", { text: "." }),
  );
}

/** A phone's width (app.css's breakpoint): cards fold sooner there. */
export const NARROW = "(max-width: 600px)";

/** Whether the console is as narrow as a phone now. */
const narrowNow = () => typeof matchMedia === "function" && matchMedia(NARROW).matches;

/** Lines of arguments a card shows before folding them, on a phone and wider. */
const ARGS_ROWS = { narrow: 12, wide: 60 };

/**
 * The arguments, drawn by their schema, folded behind a disclosure when they would take more
 * than a screenful (fewer lines on a phone), so the buttons are not pages below the risk
 * line. Its summary says every argument in brief: a short value as it is, a long one by
 * its lines and size; opened, all of it is there.
 */
export function foldedArguments(args, schema) {
  const narrow = narrowNow();
  const rows = argsHeight(args, narrow ? 40 : 140);
  const view = argumentsView(args, schema);
  if (rows <= (narrow ? ARGS_ROWS.narrow : ARGS_ROWS.wide)) return view;
  return el(
    "details",
    { class: "args-fold" },
    el("summary", { text: `Arguments (about ${rows} lines; open to read them all): ${clip(argsInBrief(args, 300), 1000)}` }),
    view,
  );
}

/** A modal made on the fly: `body` nodes, and buttons; resolves with the value of the one pressed (or "cancel"). */
export function ask(title, body, buttons) {
  const dialog = el("dialog", { class: "ask" });
  const form = el(
    "form",
    { method: "dialog" },
    el("h2", { text: title }),
    ...body,
    el("menu", {}, ...buttons.map((b) => el("button", { value: b.value, ...(b.class ? { class: b.class } : {}), text: b.text }))),
  );
  dialog.append(form);
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue || "cancel");
      dialog.remove();
    });
    dialog.showModal();
  });
}

/**
 * What "Always" will allow from now on, said plainly, and a confirmation. The scope is the
 * proposer and the tool, and the arguments: any, or, where the card offers them
 * (`always_limits`, gateway/policy/scope.ts), exactly these or a field's directory, chosen
 * here and said in words. Resolves with the chosen limit, or undefined when cancelled.
 */
export async function confirmAlways(p) {
  // Narrowest first (these arguments, then a field's directory, then the whole tool), so the preselected one is the least it grants.
  const offered = Array.isArray(p.always_limits) ? p.always_limits.filter((o) => o && typeof o.text === "string") : [];
  const limits = [...offered.filter((o) => o.limit !== "tool"), ...offered.filter((o) => o.limit === "tool")];
  let chosen = limits[0]?.limit ?? "tool";
  const said = el("li", { text: `arguments: ${limits.length ? reveal(limits[0].text) : "any"}` });
  const choices =
    limits.length > 1
      ? el(
          "fieldset",
          { class: "always-limits" },
          el("legend", { text: "Which arguments" }),
          ...limits.map((o, i) =>
            el(
              "label",
              {},
              el("input", {
                type: "radio",
                name: "always-limit",
                value: String(i),
                ...(i === 0 ? { checked: "" } : {}),
                onchange: () => {
                  chosen = o.limit;
                  said.textContent = `arguments: ${reveal(o.text)}`;
                },
              }),
              el("span", { text: ` ${reveal(o.text)}` }),
            ),
          ),
        )
      : undefined;
  const body = [
    el("p", { text: "Approve this call, and from now on let" }),
    el(
      "ul",
      { class: "always-scope" },
      el("li", { text: `participant: ${p.proposer}` }),
      el("li", { text: `tool: ${p.tool ?? p.method}` }),
      said,
    ),
    choices,
    el("p", {
      class: "muted",
      text: `${p.proposer} will call ${p.tool ?? "it"} with those arguments without asking anyone, until the grant is revoked (Grants tab).`,
    }),
  ].filter(Boolean);
  const answer = await ask("Always allow?", body, [
    { value: "cancel", text: "Cancel" },
    { value: "always", class: "approve", text: `Always allow ${p.proposer} → ${p.tool ?? p.method}` },
  ]);
  return answer === "always" ? { limit: chosen } : undefined;
}

/** A message to the proposer about this proposal, without deciding it. Resolves with the text, or undefined. */
export async function askResponse(p) {
  const text = el("textarea", {
    id: "respond-text",
    rows: "4",
    "aria-label": "your answer",
    placeholder: `e.g. "use notes/ instead", "why do you need this?"`,
  });
  const body = [
    el("p", {
      class: "muted",
      text: `${p.proposer} gets this as an answer to #${p.shortId ?? p.id}; the proposal stays pending (mewgate's agent withdraws it and may propose again).`,
    }),
    text,
  ];
  const dialog = ask(`Respond to ${p.proposer}`, body, [
    { value: "cancel", text: "Cancel" },
    { value: "send", class: "approve", text: "Send" },
  ]);
  const value = () => text.value;
  return (await dialog) === "send" && value().trim() ? value() : undefined;
}
