// What the space's tool rules match (gateway/policy/check.ts), under the Tools table: rules
// naming no participant, rules that can never decide, conditions that do not compile, tools
// a rule expected and nobody registered. Humans only (GET policy/check); text, never HTML.

/**
 * The space's caps and their use this minute (GET policy/caps, gateway/policy/caps.ts): one
 * line per cap and subject, `agents: claude 12 of 60 calls`. A participant sees its own rows.
 */
export function capsView({ api, el, list, heading, reveal }) {
  async function refresh() {
    const res = await api("GET", "policy/caps").catch((err) => err);
    if (res instanceof Error || !Array.isArray(res.caps) || res.caps.length === 0) {
      list.hidden = heading.hidden = true;
      return;
    }
    const line = (u) => {
      const parts = [];
      if (u.calls_per_minute !== undefined) parts.push(`${u.calls} of ${u.calls_per_minute} calls`);
      if (u.cost_per_minute !== undefined) parts.push(`${u.cost} of ${u.cost_per_minute} cost`);
      const full =
        (u.calls_per_minute !== undefined && u.calls >= u.calls_per_minute) ||
        (u.cost_per_minute !== undefined && u.cost >= u.cost_per_minute);
      return el(
        "li",
        { class: full ? "finding warning" : "", "data-cap": String(u.cap) },
        el("span", { text: reveal(`${u.cap} (per ${u.per}): ${u.subject} ${parts.join(", ")}`) }),
      );
    };
    list.replaceChildren(...res.uses.slice(0, 200).map(line));
    heading.textContent = reveal(
      `Caps this minute: ${res.caps.map((c) => c.name).join(", ")}${res.uses.length ? "" : " (nothing counted yet)"}`,
    );
    list.hidden = res.uses.length === 0;
    heading.hidden = false;
  }
  return { refresh };
}

/** A finding's texts come from space.yaml; `reveal` shows hidden characters as ⟨U+…⟩. */
export function policyFindings({ api, el, list, heading, reveal }) {
  async function refresh() {
    const res = await api("GET", "policy/check").catch((err) => err);
    // Not a human, or an older gateway: nothing to show.
    if (res instanceof Error || !Array.isArray(res.findings)) {
      list.hidden = heading.hidden = true;
      return;
    }
    list.replaceChildren(
      ...res.findings.slice(0, 200).map((f) => {
        const where = f.line > 0 ? `${String(f.file).split("/").pop()}:${f.line}:${f.column}` : String(f.file).split("/").pop();
        return el(
          "li",
          { class: `finding ${f.severity === "error" ? "error" : "warning"}`, "data-code": String(f.code) },
          el("strong", { text: `${f.severity === "error" ? "error" : "warning"} ` }),
          el("span", { text: reveal(`${where} ${f.path}: ${f.message}`) }),
        );
      }),
    );
    heading.textContent = res.findings.length
      ? `Tool rules: ${res.errors} error(s), ${res.warnings} warning(s)`
      : "Tool rules: every rule names a participant and can decide something";
    list.hidden = res.findings.length === 0;
    heading.hidden = false;
  }
  return { refresh };
}
