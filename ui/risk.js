// A proposal's risk as the gateway states it (gateway/policy/learn/risk.ts): a level and its
// reasons on the card, the inbox sorted highest first, and the low-risk ones offered for
// approving together (each still approved, and recorded, on its own). Text only.

const RANK = { high: 0, medium: 1, low: 2 };

/** Highest risk first; proposals without a risk (not a tool call) after the rest, in arrival order. */
export function byRisk(a, b) {
  return (RANK[a.risk?.level] ?? 3) - (RANK[b.risk?.level] ?? 3);
}

/** Whether the viewer may tick `p` for a batch decision: not its own, and one the gateway says it may decide (gateway/operator/deciders.ts). */
export function mayPick(p) {
  return p !== undefined && p !== null && !p.mine && p.mayDecide === true;
}

/** Whether the viewer may approve `p` (not only reject it). */
export function mayApprove(p) {
  return mayPick(p) && p.mayOnly !== "reject";
}

/** Whether the viewer may reject `p` (a reviewer only approves). */
export function mayReject(p) {
  return mayPick(p) && p.mayOnly !== "approve";
}

/**
 * The proposals the batch bar offers to approve together: low risk as the gateway rates it
 * (nothing new, nothing dangerous), pending, ones the viewer may approve, and nothing that
 * asks more of a person than the risk says (a changed tool definition, a flagged tool, arguments an approver edited).
 */
export function lowRisk(proposals) {
  return proposals.filter(
    (p) =>
      p.risk?.level === "low" &&
      p.state === "pending" &&
      mayApprove(p) &&
      !p.definitionChanged &&
      !p.edited &&
      !(Array.isArray(p.findings) && p.findings.length > 0),
  );
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
