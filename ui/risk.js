// A proposal's risk as the gateway states it (gateway/policy/learn/risk.ts): a level and its
// reasons on the card, the inbox sorted highest first, and the low-risk ones offered for
// approving together (each still approved, and recorded, on its own). Text only.

const RANK = { high: 0, medium: 1, low: 2 };

/** Highest risk first; proposals without a risk (not a tool call) after the rest, in arrival order. */
export function byRisk(a, b) {
  return (RANK[a.risk?.level] ?? 3) - (RANK[b.risk?.level] ?? 3);
}

/** The proposals a person may approve together: low risk, not their own. */
export function lowRisk(proposals) {
  return proposals.filter((p) => p.risk?.level === "low" && !p.mine && p.state === "pending");
}

/** The card's risk line: the level, then each reason. */
export function riskLine(p, el, reveal) {
  if (!p.risk) return undefined;
  const level = String(p.risk.level);
  const reasons = Array.isArray(p.risk.reasons) ? p.risk.reasons.map((r) => reveal(String(r.text))) : [];
  return el(
    "p",
    { class: `risk risk-${level}`, "data-risk": level },
    el("strong", { text: `Risk: ${level}` }),
    // Low says which: nothing new (a call like ones that ran) and nothing dangerous found in it.
    el("span", {
      text: reasons.length
        ? ` — ${reasons.join("; ")}.`
        : ` — ${reveal(String(p.risk.summary ?? "low: nothing new and nothing dangerous").replace(/^low: /, ""))}.`,
    }),
  );
}
