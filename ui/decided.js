// The Decided list: what became of each decided proposal — who decided, when, with edited
// arguments or not, and the call's outcome (ok, tool_error, error, timeout, cancelled,
// not_routed) with its result's text, folded. Text only, as everywhere in the console.

import { argsInBrief, argumentsView, reveal, textBlock } from "./args.js";
import { el } from "./cards.js";

const OUTCOME_WORDS = {
  ok: "ok",
  tool_error: "tool error",
  error: "error",
  timeout: "timed out",
  cancelled: "cancelled",
  not_routed: "not routed",
};

function decidedCard(d) {
  const when = new Date(d.decidedAt).toLocaleTimeString();
  // A two-person decision names every approver, in order.
  const approvers = Array.isArray(d.approvedBy) && d.approvedBy.length ? d.approvedBy.join(" and ") : (d.decidedBy ?? "?");
  const verdict =
    d.decision === "approved"
      ? `approved${d.scope === "always" ? " (always)" : ""} by ${approvers}`
      : d.decision === "rejected"
        ? `rejected by ${d.decidedBy ?? "?"}`
        : d.decision === "withdrawn"
          ? "withdrawn"
          : "expired";
  const outcome = d.outcome
    ? el("span", { class: `outcome ${d.outcome}`, text: OUTCOME_WORDS[d.outcome] ?? String(d.outcome) })
    : d.decision === "approved"
      ? el("span", { class: "outcome pending", text: "running…" })
      : undefined;
  return el(
    "li",
    { class: "card decided", "data-decided": d.id },
    el(
      "div",
      { class: "card-head" },
      el("h3", { text: `${d.proposer} → ${d.tool ?? d.method}` }),
      el("code", { class: "short-id", text: `#${d.shortId}`, title: d.id }),
      outcome,
    ),
    el("p", {
      class: "why",
      text: `${verdict} at ${when}${d.edited ? " · with edited arguments" : ""}${d.reason && d.decision !== "approved" ? ` · ${d.reason}` : ""}${d.text ? ` — ${reveal(d.text)}` : ""}`,
    }),
    // What was decided on: the arguments that ran (or were refused), so two rejected writes differ.
    el(
      "details",
      { class: "decided-args" },
      el("summary", { text: `Arguments${d.edited ? " (as edited)" : ""}: ${argsInBrief(d.arguments ?? d.proposedArguments)}` }),
      argumentsView(d.arguments ?? d.proposedArguments ?? {}, undefined),
    ),
    d.result
      ? el(
          "div",
          { class: "result" },
          el("span", { class: "intent-label", text: d.outcome === "ok" ? "Result:" : "What came back:" }),
          textBlock(d.result.text, { fold: 6, label: "result" }),
          d.result.cut ? el("p", { class: "muted", text: `(${d.result.cut} more characters not kept)` }) : undefined,
        )
      : undefined,
    d.failure && !d.result ? el("p", { class: "error", text: `failed: ${reveal(d.failure)}` }) : undefined,
  );
}

/** The Decided section under the inbox, refreshed on demand. */
export function decidedList({ api, list }) {
  async function refresh() {
    const { decided } = await api("GET", "proposals?state=decided&limit=50");
    list.replaceChildren(...decided.map(decidedCard));
    list.previousElementSibling?.classList.toggle("empty", decided.length === 0);
  }
  return { refresh };
}
