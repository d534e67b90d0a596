// One agent turn, one unit: proposals an agent made in one model turn (parallel tool calls,
// marked `turn` by the gateway from the agent's own word: gateway/wire/turn.ts) are shown
// together as one item, in the place of the riskiest of them: the agent's intent once, then
// the calls in the order it asked for them (each preview made after the earlier ones:
// gateway/proposals/turn-preview.ts), with a button to select those the viewer may decide —
// then approve or reject them together (each still decided and recorded on its own), or one
// by one as ever. Text only.

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

/** The intent of a call as a comparable key: the same words from the same source. */
const intentKey = (p) => (p.intent && typeof p.intent.text === "string" ? `${p.intent.source}\u0000${p.intent.text}` : "");

/**
 * The inbox's items: a card per proposal, and a turn as one item — its heading (how many
 * calls, the highest risk, the agent's intent once), then its cards in the order the model
 * asked for them. A call whose own intent differs from the turn's says its own: a turn's
 * first words never speak for a later call. `card(p, turn)` draws one card; `select(list)`
 * ticks the calls of the turn the viewer may decide (`decidable(p)`).
 */
export function turnItems(proposals, card, { el, reveal, select, intent, decidable = () => true }) {
  const items = [];
  for (const item of byTurn(proposals)) {
    if (item.proposal) {
      items.push(card(item.proposal));
      continue;
    }
    const { proposer, count, proposals: list } = item.turn;
    const worst = Math.min(...list.map(rank));
    const level = Object.keys(RANK).find((k) => RANK[k] === worst) ?? "unknown";
    const missing = count > list.length ? ` ${count - list.length} of its ${count} calls are not waiting here.` : "";
    const first = list[0];
    const mine = list.filter(decidable);
    items.push(
      el(
        "li",
        { class: "turn", "data-count": String(list.length) },
        el(
          "div",
          { class: "turn-head" },
          el("strong", { text: reveal(`One turn of ${proposer}: ${list.length} calls, in the order it asked for them`) }),
          el("span", { class: "muted", text: ` — highest risk ${level}.${missing} ` }),
          mine.length
            ? el("button", {
                type: "button",
                class: "select-turn",
                text: mine.length === list.length ? `Select these ${list.length}` : `Select the ${mine.length} you may decide`,
                onclick: () => select(mine),
              })
            : undefined,
        ),
        intent(first, `Why ${reveal(proposer)} wants ${list.length === count ? "them" : "this turn"}:`),
        el(
          "ol",
          { class: "cards turn-calls" },
          ...list.map((p) => card(p, { call: p.turn.index + 1, count, sameIntent: intentKey(p) === intentKey(first) })),
        ),
      ),
    );
  }
  return items;
}
