// One agent turn, one card: proposals an agent made in one model turn (parallel tool calls,
// marked `turn` by the gateway from the agent's own word: gateway/wire/turn.ts) are shown
// together under one heading, in the place of the riskiest of them, with a button to select
// them all — then approve or reject them together (each still decided and recorded on its
// own), or one by one as ever. Text only.

const RANK = { high: 0, medium: 1, low: 2 };
const rank = (p) => RANK[p.risk?.level] ?? 3;

/** Proposals in order (already sorted by risk), those of one turn moved together to where the first of them is. */
export function byTurn(proposals) {
  const groups = new Map();
  for (const p of proposals) {
    if (!p.turn) continue;
    const key = `${p.proposer}\u0000${p.turn.id}`;
    (groups.get(key) ?? groups.set(key, []).get(key)).push(p);
  }
  const out = [];
  const placed = new Set();
  for (const p of proposals) {
    const key = p.turn ? `${p.proposer}\u0000${p.turn.id}` : undefined;
    const group = key ? groups.get(key) : undefined;
    if (!group || group.length < 2) {
      out.push({ proposal: p });
      continue;
    }
    if (placed.has(key)) continue;
    placed.add(key);
    out.push({ turn: { proposer: p.proposer, count: p.turn.count, proposals: [...group].sort((a, b) => a.turn.index - b.turn.index) } });
  }
  return out;
}

/** The inbox's items: a card per proposal, and for a turn a heading, then its cards. */
export function turnItems(proposals, card, { el, reveal, select }) {
  const items = [];
  for (const item of byTurn(proposals)) {
    if (item.proposal) {
      items.push(card(item.proposal));
      continue;
    }
    const { proposer, count, proposals: list } = item.turn;
    const worst = Math.min(...list.map(rank));
    const level = Object.keys(RANK).find((k) => RANK[k] === worst) ?? "unknown";
    const missing = count > list.length ? ` (${count - list.length} of its ${count} calls not waiting here)` : "";
    items.push(
      el(
        "li",
        { class: "turn", "data-count": String(list.length) },
        el("strong", { text: reveal(`One turn of ${proposer}: ${list.length} calls`) }),
        el("span", { class: "muted", text: `${missing}, highest risk ${level}. ` }),
        el("button", { type: "button", class: "select-turn", text: `Select these ${list.length}`, onclick: () => select(list) }),
      ),
    );
    for (const p of list) items.push(card(p));
  }
  return items;
}
