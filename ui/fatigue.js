// Fatigue, measured (gateway/policy/learn/fatigue.ts), drawn small under the suggestions:
// per person, decisions per hour, the median time to decide, and a bar of how many of their
// approvals came within 2 s on a card whose preview they never opened; then the proposer
// and tool pairs people reject or edit most. <meter> elements, no markup from anyone.

export function fatiguePanel({ api, el, box, reveal }) {
  async function refresh() {
    let f;
    try {
      f = await api("GET", "policy/fatigue");
    } catch {
      box.replaceChildren();
      return;
    }
    const people = f.people.map((p) =>
      el(
        "li",
        { "data-person": String(p.person) },
        el("span", {
          text: reveal(
            `${p.person}: ${p.decisions} decision(s), ${p.per_hour}/h, median ${p.median_seconds} s; approved within 2 s unopened: ${p.quick_unopened} of ${p.approvals} `,
          ),
        }),
        el("meter", {
          min: "0",
          max: String(Math.max(1, p.approvals)),
          value: String(p.quick_unopened),
          high: String(Math.max(1, p.approvals) * 0.3),
          "aria-label": "approvals within 2 s, preview unopened",
        }),
      ),
    );
    const tools = f.tools
      .filter((t) => t.rejected + t.edited > 0)
      .sort((a, b) => b.rejection_rate + b.edit_rate - (a.rejection_rate + a.edit_rate))
      .slice(0, 10)
      .map((t) =>
        el(
          "li",
          {},
          el("span", {
            text: reveal(
              `${t.proposer} → ${t.tool}: ${Math.round(t.rejection_rate * 100)}% rejected, ${Math.round(t.edit_rate * 100)}% edited of ${t.decided} `,
            ),
          }),
          el("meter", { min: "0", max: "1", value: String(t.rejection_rate) }),
        ),
      );
    box.replaceChildren(
      el("h2", { text: "How people decide" }),
      people.length
        ? el("ul", { class: "plain fatigue-people" }, ...people)
        : el("p", { class: "muted", text: "No decisions recorded yet." }),
      // replaceChildren would print an undefined as text: only what there is.
      ...(tools.length ? [el("ul", { class: "plain fatigue-tools" }, ...tools)] : []),
    );
  }
  return { refresh };
}
