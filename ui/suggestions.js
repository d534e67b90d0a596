// Suggested rules (gateway/policy/learn/): each the narrowest rule a repeated pattern of your
// decisions supports, said in words first — what it lets through, field by field, "any text
// that passes the content check" included — then why, what it covers, and its dry run: what it
// would have decided of every recorded call, split by what people decided, rejected calls
// listed. The rule as space.yaml will hold it (CEL) is there to open, not to read first.
// Accept writes it into space.yaml (the gateway keeps a backup, records it and reloads); an
// accept that fails says why on the card. A rejecter's or a second person's word is given
// with the same button. Dismiss hides it for good. Below, the repeated patterns with no
// suggestion, each with why. Text only: every value goes on the page with textContent,
// hidden characters made visible.

export function suggestionsPanel({ api, el, list, note, reveal, onError, onCount }) {
  /** Why an accept failed, by suggestion id: kept across the refresh that follows it. */
  const failed = new Map();

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
    const withheld = body.withheld ?? [];
    list.replaceChildren(...body.suggestions.map(card), ...(withheld.length ? [withheldCard(withheld)] : []));
    note.textContent = body.suggestions.length
      ? `From ${body.calls} recorded call(s).`
      : `No suggestions from ${body.calls} recorded call(s)${body.dismissed ? ` (${body.dismissed} dismissed)` : ""}.`;
  }

  const text = (v) => reveal(typeof v === "string" ? v : JSON.stringify(v));

  function withheldCard(withheld) {
    return el(
      "li",
      { class: "card withheld" },
      el("h3", { text: "Repeated, with no suggestion" }),
      el(
        "ul",
        { class: "plain" },
        ...withheld.map((w) => el("li", { text: text(`${w.participant} → ${w.tool} (${w.approved} approved): ${w.why}`) })),
      ),
    );
  }

  function card(s) {
    const rule = typeof s.rule === "string" ? s.rule : `{tool: ${s.rule.tool}, when: ${s.rule.when}}`;
    const changes = Object.entries(s.changes).map(([how, c]) =>
      el("li", { text: `${how}: ${c.total} recorded call(s) — ${c.approved} approved, ${c.rejected} rejected by a person` }),
    );
    const rejected = s.listed.rejected.map((c) =>
      el("li", { class: "error", text: text(`rejected by ${c.by ?? "?"}: ${JSON.stringify(c.args)}`) }),
    );
    const approved = s.listed.approved.slice(0, 20).map((c) => el("li", { text: text(JSON.stringify(c.args)) }));
    const needsWord = Boolean(s.confirm) || Boolean(s.second && s.second.people.length > 1);
    const accept = el("button", { type: "button", class: "approve", text: needsWord ? "Confirm and accept" : "Accept" });
    const dismiss = el("button", { type: "button", text: "Dismiss" });
    const act = (what, body) => async () => {
      accept.disabled = dismiss.disabled = true;
      failed.delete(s.id);
      try {
        const r = await api("POST", `policy/suggestions/${encodeURIComponent(s.id)}/${what}`, body);
        if (r?.message) failed.set(s.id, { ok: true, message: r.message });
      } catch (err) {
        failed.set(s.id, { ok: false, message: err.message });
        onError?.(err);
      }
      await refresh();
    };
    accept.addEventListener("click", act("accept", needsWord ? { confirm: true } : {}));
    dismiss.addEventListener("click", act("dismiss", {}));
    const last = failed.get(s.id);
    const second = s.second && s.second.people.length > 1;
    return el(
      "li",
      { class: "card suggestion", "data-id": String(s.id), "data-kind": String(s.kind) },
      el("h3", { text: text(s.summary ?? `${s.kind} for ${s.participant}`) }),
      el("p", { class: "why", text: text(s.why) }),
      el("p", { class: "muted", text: "What it lets through without asking, field by field:" }),
      el("ul", { class: "plain scope" }, ...s.scope.map((x) => el("li", { text: text(x) }))),
      s.notes.length ? el("ul", { class: "plain notes" }, ...s.notes.map((x) => el("li", { class: "muted", text: text(x) }))) : undefined,
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
              `Covers calls rejected by ${s.confirm.by.join(", ")}: each must confirm, for the calls they rejected${s.confirmed?.length ? ` (confirmed: ${s.confirmed.join(", ")})` : ""}.`,
            ),
          })
        : undefined,
      second
        ? el("p", {
            class: "second",
            role: "status",
            text: text(
              `A second person's word first: one of ${s.second.people.join(", ")}, besides whoever accepts${s.seconded?.length ? ` (given by ${s.seconded.join(", ")})` : ""}.`,
            ),
          })
        : undefined,
      el(
        "details",
        { class: "rule" },
        el("summary", { text: "The rule as space.yaml will hold it" }),
        el("code", { text: text(`tools.${s.kind}: ${rule}`) }),
      ),
      approved.length
        ? el("details", {}, el("summary", { text: "Approved calls it covers" }), el("ul", { class: "plain" }, ...approved))
        : undefined,
      last ? el("p", { class: last.ok ? "done" : "error accept-failed", role: "alert", text: text(last.message) }) : undefined,
      el("menu", {}, accept, dismiss),
    );
  }

  return { refresh };
}
