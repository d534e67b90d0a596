// The space's tables in the console: who is in the space and its tools (with the gateway's
// flags), the standing grants with a Revoke each, and the audit trail filtered by the form.
// Read from the operator API; every value goes on the page with textContent.

import { reveal } from "./args.js";
import { flagged } from "./cards.js";
import { el } from "./dom.js";

const $ = (id) => document.getElementById(id);
const short = (id) => (typeof id === "string" ? id.slice(0, 8) : "?");

/** `me()`: who is signed in here; `afterPeople`: what else to draw with the roster (the policy findings). */
export function spaceTables({ api, me, afterPeople, onError }) {
  async function people() {
    const [{ participants }, { tools }] = await Promise.all([api("GET", "participants"), api("GET", "tools")]);
    $("people").replaceChildren(
      // You, signed in here, are present through this page even with no WebSocket session of your own.
      ...participants.map((p) => {
        const here = p.id === me();
        const on = p.online || here;
        return el(
          "li",
          {},
          el("span", { class: on ? "online" : "offline", text: on ? "● " : "○ " }),
          el("span", { text: `${p.id} (${p.kind})${here ? " — you, in this console" : ""}${p.description ? ` — ${p.description}` : ""}` }),
        );
      }),
    );
    $("tools").tBodies[0].replaceChildren(
      ...tools.map((t) =>
        el(
          "tr",
          {},
          el("td", { text: t.name }, t.findings?.length ? el("span", { class: "badge flag", text: "flagged" }) : undefined),
          el("td", { text: t.policy }),
          el("td", { text: reveal(t.description ?? "") }, flagged(t.findings, "Flagged by the gateway")),
        ),
      ),
    );
    await afterPeople();
  }

  async function grants() {
    const { grants: list } = await api("GET", "grants");
    $("grants-empty").hidden = list.length > 0;
    $("grants").replaceChildren(
      ...list.map((g) =>
        el(
          "li",
          {},
          el("span", {
            text: `${g.from} → ${g.recipient}: ${JSON.stringify(g.capabilities)}${g.limited_to ? ` [${g.limited_to}]` : ""}${g.reason ? ` (${g.reason})` : ""}${g.standing ? "" : " [not standing]"} `,
          }),
          el("button", {
            text: "Revoke",
            onclick: () => api("DELETE", `grants/${encodeURIComponent(g.id)}`).then(grants, onError),
          }),
        ),
      ),
    );
  }

  async function audit() {
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
            el("td", {
              text: [e.scope, e.reason, e.text, e.edited ? "edited" : "", e.outcome, ...(Array.isArray(e.changes) ? e.changes : [])]
                .filter(Boolean)
                .join(" · "),
            }),
          ),
        ),
    );
  }

  return { people, grants, audit };
}
