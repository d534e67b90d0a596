// Who is connected to the space and from where, for an operator: one line per session and a
// button that ends it (the gateway closes the connection with 4413). Text only: every value
// goes on the page with textContent, hidden characters made visible by the console's `reveal`.

export function sessionsPanel({ api, list, note, reveal, onError }) {
  async function refresh() {
    try {
      const { sessions } = await api("GET", "sessions");
      list.replaceChildren(...sessions.map(row));
      note.textContent = sessions.length ? "" : "Nobody is connected.";
    } catch (err) {
      list.replaceChildren();
      note.textContent = err.status === 403 ? "Only an operator sees the sessions." : String(err.message);
    }
  }

  function row(s) {
    const li = document.createElement("li");
    li.dataset.participant = String(s.participant);
    const text = document.createElement("span");
    const token = s.token ? `, token ${s.token}` : "";
    const until = s.token_expires_at ? ` (expires ${s.token_expires_at})` : "";
    text.textContent = reveal(`${s.participant} (${s.kind}) from ${s.address} since ${s.joined_at}${token}${until}`);
    const end = document.createElement("button");
    end.type = "button";
    end.textContent = "End session";
    end.setAttribute("aria-label", reveal(`End the session of ${s.participant}`));
    end.addEventListener("click", async () => {
      end.disabled = true;
      try {
        await api("DELETE", `sessions/${encodeURIComponent(String(s.participant))}`);
      } catch (err) {
        onError(err);
      }
      await refresh();
    });
    li.append(text, " ", end);
    return li;
  }

  return { refresh };
}
