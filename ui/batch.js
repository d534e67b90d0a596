// The batch bar above the inbox: several cards decided together, each still approved or
// rejected, and recorded, on its own. It offers to select the low-risk calls the viewer may
// approve (risk.js `lowRisk`) — saying what it does and how many — and, once some are
// ticked, a button for each thing the viewer may do with them, counting only those it may
// do it to (gateway/operator/deciders.ts). The calls of one agent turn approved together run
// in the turn's order, each after the one before it ended (`callEnded`), as their previews
// showed them. Text only.

import { el } from "./dom.js";
import { lowRisk, mayApprove, mayPick, mayReject } from "./risk.js";

const LOW_MEANS =
  "Low: nothing new (like calls that ran before) and nothing dangerous found; each card's risk line says which. " +
  "Only calls you may approve are offered; each is still approved and recorded on its own.";

/**
 * Draws the bar into `bar` for `proposals` with `selected` (ids) ticked. `on`: {selectAll(list),
 * approve(list), reject(list), clear()}.
 */
export function drawBatchBar(bar, proposals, selected, on) {
  const picked = proposals.filter((p) => selected.has(p.id) && mayPick(p));
  const approvable = picked.filter(mayApprove);
  const rejectable = picked.filter(mayReject);
  const low = lowRisk(proposals).filter((p) => !selected.has(p.id));
  // Offered for two or more: one low call is its own card's Approve.
  const offer = low.length >= 2;
  bar.hidden = picked.length === 0 && !offer;
  const parts = [
    offer
      ? el("button", {
          class: "select-low",
          text: `Select the ${low.length} low-risk calls to approve together`,
          title: LOW_MEANS,
          onclick: () => on.selectAll(low),
        })
      : undefined,
    ...(picked.length
      ? [
          el("span", { class: "picked", text: `${picked.length} selected ` }),
          approvable.length
            ? el("button", { class: "approve", text: `Approve ${approvable.length} selected`, onclick: () => on.approve(approvable) })
            : undefined,
          rejectable.length
            ? el("button", { class: "reject", text: `Reject ${rejectable.length} selected`, onclick: () => on.reject(rejectable) })
            : undefined,
          el("button", { text: "Clear", onclick: () => on.clear() }),
        ]
      : []),
  ];
  // replaceChildren would draw an undefined as the word "undefined".
  bar.replaceChildren(...parts.filter(Boolean));
}

/** Until the call of approved proposal `id` has ended (answered or failed), at most 30 s; at once if it still waits for approvals. */
export async function callEnded(api, id) {
  for (let i = 0; i < 150; i++) {
    const { decided } = await api("GET", "proposals?state=decided").catch(() => ({ decided: [] }));
    const d = decided.find((x) => x.id === id);
    if (!d || (d.state !== "approved" && d.state !== "routed")) return;
    await new Promise((r) => setTimeout(r, 200));
  }
}
