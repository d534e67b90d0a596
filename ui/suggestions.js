// Suggested rules (gateway/policy/learn/): each the narrowest rule a repeated pattern of your
// decisions supports, what it covers, and its dry run — what it would have decided of every
// recorded call, split by what people decided, rejected calls listed. Accept writes it into
// space.yaml (the gateway keeps a backup, records it and reloads); dismiss hides it for good.
// Text only: every value goes on the page with textContent, hidden characters made visible.

export function suggestionsPanel({ api, el, list, note, reveal, onError, onCount }) {
  async function refresh() {
    let body;
    try {
      body = await api("GET", "policy/suggestions");
    } catch (err) {
      list.replaceChildren();
      note.textContent = err.status === 403 ? "Only a person sees suggested rules." : String(err.message);
      return;
    }
    onCount?.(body.suggestions.length);
    list.replaceChildren(...body.suggestions.map(card));
    note.textContent = body.suggestions.length
      ? `From ${body.calls} recorded call(s).`
      : `No suggestions from ${body.calls} recorded call(s)${body.dismissed ? ` (${body.dismissed} dismissed)` : ""}.`;
  }

  const text = (v) => reveal(typeof v === "string" ? v : JSON.stringify(v));

  function card(s) {
    const rule = typeof s.rule === "string" ? s.rule : `${s.rule.tool} when ${s.rule.when}`;
    const changes = Object.entries(s.changes).map(([how, c]) =>
      el("li", { text: `${how}: ${c.total} recorded call(s) — ${c.approved} approved, ${c.rejected} rejected by a person` }),
    );
    const rejected = s.listed.rejected.map((c) =>
      el("li", { class: "error", text: text(`rejected by ${c.by ?? "?"}: ${JSON.stringify(c.args)}`) }),
    );
    const approved = s.listed.approved.slice(0, 20).map((c) => el("li", { text: text(JSON.stringify(c.args)) }));
    const accept = el("button", { type: "button", class: "approve", text: s.confirm ? "Confirm and accept" : "Accept" });
    const dismiss = el("button", { type: "button", text: "Dismiss" });
    const act = (what, body) => async () => {
      accept.disabled = dismiss.disabled = true;
      try {
        await api("POST", `policy/suggestions/${encodeURIComponent(s.id)}/${what}`, body);
      } catch (err) {
        onError(err);
      }
      await refresh();
    };
    accept.addEventListener("click", act("accept", s.confirm ? { confirm: true } : {}));
    dismiss.addEventListener("click", act("dismiss", {}));
    const li = el(
      "li",
      { class: "card suggestion", "data-id": String(s.id), "data-kind": String(s.kind) },
      el("h3", { text: text(`${s.kind} for ${s.participant}: ${rule}`) }),
      el("p", { class: "why", text: text(s.why) }),
      el(
        "ul",
        { class: "plain scope" },
        ...s.scope.map((x) => el("li", { text: text(x) })),
        ...s.notes.map((x) => el("li", { class: "muted", text: text(x) })),
      ),
      el("p", {
        text: `Covers ${s.covers.approved} approved, ${s.covers.rejected} rejected, ${s.covers.edited} edited, ${s.covers.undecided} undecided call(s).`,
      }),
      el("ul", { class: "plain changes" }, ...changes),
      rejected.length ? el("ul", { class: "plain rejected" }, ...rejected) : undefined,
      s.confirm
        ? el("p", {
            class: "error",
            role: "status",
            text: text(
              `Covers calls rejected by ${s.confirm.by.join(", ")}: each must confirm${s.confirmed?.length ? ` (confirmed: ${s.confirmed.join(", ")})` : ""}.`,
            ),
          })
        : undefined,
      approved.length
        ? el("details", {}, el("summary", { text: "Approved calls it covers" }), el("ul", { class: "plain" }, ...approved))
        : undefined,
      el("menu", {}, accept, dismiss),
    );
    return li;
  }

  return { refresh };
}
