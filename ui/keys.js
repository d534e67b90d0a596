// Keyboard shortcuts in the inbox: j / k move between cards, a approves, r rejects, e edits,
// x selects, ? shows this list. Never while typing in a field or while a dialog is open.

import { ask, el } from "./cards.js";

export const SHORTCUTS = [
  ["j", "next proposal"],
  ["k", "previous proposal"],
  ["a", "approve the selected proposal (once; a destructive one asks first)"],
  ["r", "reject it (asks why)"],
  ["e", "edit its arguments, then approve"],
  ["x", "tick it for a batch decision"],
  ["?", "this help"],
];

/** Whether the keys may decide `p`: not one's own, and one the card offers buttons for (`how`: approve, reject or edit). */
const decidable = (p, how) => p !== undefined && !p.mine && p.mayDecide !== false && (p.mayOnly === undefined || p.mayOnly === how);

/** `a` on a call the tool declares destructive: said, and confirmed with a button. */
async function confirmDestructive(p) {
  const answer = await ask(
    "Approve a destructive call?",
    [el("p", { text: `${p.tool ?? p.method} is marked destructive by its server. Approve ${p.proposer}'s call once?` })],
    [
      { value: "cancel", text: "Cancel" },
      { value: "approve", class: "approve", text: "Approve once" },
    ],
  );
  return answer === "approve";
}

/** `cards()`: the pending cards in order; `on`: {approve, reject, edit, select}; `byId(id)`: the proposal. */
export function installKeys({ cards, byId, on }) {
  let focused;
  const focus = (node) => {
    for (const c of cards()) c.classList.toggle("focused", c === node);
    focused = node?.dataset.id;
    node?.focus({ preventScroll: true });
    node?.scrollIntoView({ block: "nearest" });
  };
  const current = () => cards().find((c) => c.dataset.id === focused);
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || document.querySelector("dialog[open]")) return;
    const t = e.target;
    if (t instanceof HTMLElement && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName))) return;
    if (document.getElementById("tab-inbox")?.hidden) return;
    const list = cards();
    const at = list.indexOf(current());
    const p = focused === undefined ? undefined : byId(focused);
    switch (e.key) {
      case "j":
        return focus(list[Math.min(list.length - 1, at + 1)] ?? list[0]);
      case "k":
        return focus(list[Math.max(0, at - 1)] ?? list[0]);
      case "a":
        if (!decidable(p, "approve")) return;
        // A destructive call is never one key: it asks first.
        if (p.hints?.destructiveHint === true) return void confirmDestructive(p).then((yes) => yes && on.approve(p));
        return void on.approve(p);
      case "r":
        if (decidable(p, "reject")) on.reject(p);
        return;
      case "e":
        if (decidable(p, "edit")) on.edit(p);
        return;
      case "x": {
        const box = current()?.querySelector("input.pick");
        if (box) {
          box.checked = !box.checked;
          box.dispatchEvent(new Event("change"));
        }
        return;
      }
      case "?":
        return void ask(
          "Keyboard shortcuts",
          [
            el(
              "dl",
              { class: "keys" },
              ...SHORTCUTS.flatMap(([k, what]) => [el("dt", {}, el("kbd", { text: k })), el("dd", { text: what })]),
            ),
          ],
          [{ value: "cancel", text: "Close" }],
        );
    }
  });
  return {
    refocus: () => focus(current() ?? undefined),
    // Focuses the card of proposal `id`, if it is drawn; whether it was.
    show: (id) => {
      const node = cards().find((c) => c.dataset.id === id);
      if (node) focus(node);
      return node !== undefined;
    },
  };
}
