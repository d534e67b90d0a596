// A proposal's preview on its card: what the call would change (gateway/proposals/preview.ts),
// fetched from GET …/proposals/<id>/preview and drawn as text — a diff line by line, coloured
// by its first character, never as HTML. A refused, failed or timed-out preview says so; the
// card's buttons never wait for it.
import { revealText } from "./text.js";

/** Previews fetched a moment ago, by proposal and arguments: a card drawn again reuses its preview. */
const recent = new Map();
const KEEP_MS = 10_000;

function node(tag, cls, text) {
  const n = document.createElement(tag);
  if (cls) n.className = cls;
  if (text !== undefined) n.textContent = text;
  return n;
}

/** Hidden and reordering characters made visible, as on the rest of the card. */
function reveal(text) {
  return revealText(text);
}

const STATUS = {
  refused: "Preview refused",
  failed: "Preview failed",
  timeout: "Preview timed out",
  too_large: "No preview: too large",
  will_fail: "This call will fail",
};

/** Most diff or text lines drawn before "show all". */
const FOLD = 400;
/** Lines of a preview a phone shows before folding it behind a disclosure. */
const PHONE_LINES = 12;

/** Earlier calls of the card's turn, as the gateway lists them: "call 1 (write_file)", "calls 1 (write_file) and 2 (edit_file)". */
function calls(list) {
  const each = (Array.isArray(list) ? list : [])
    .filter((c) => c && Number.isInteger(c.call) && typeof c.tool === "string")
    .slice(0, 64)
    .map((c) => `${c.call} (${reveal(c.tool)})`);
  if (each.length === 0) return "";
  return `${each.length === 1 ? "call" : "calls"} ${each.length === 1 ? each[0] : `${each.slice(0, -1).join(", ")} and ${each.at(-1)}`}`;
}

function draw(box, r) {
  box.replaceChildren();
  box.setAttribute("aria-busy", "false");
  if (!r || r.status === "none") {
    box.hidden = true;
    return;
  }
  box.dataset.status = r.status;
  const tool = typeof r.tool === "string" ? ` (${reveal(r.tool)})` : "";
  // Made after earlier calls of the same turn, or not reflecting some: said, with their place in the turn.
  const after = calls(r.after_turn);
  if (after) box.dataset.afterTurn = "true";
  const skipped = calls(r.not_reflected);
  const note = skipped ? node("p", "preview-note", `Not reflected here: ${skipped} of this turn, which may change files too.`) : undefined;
  if (r.status !== "ok") {
    box.append(
      node("h4", "preview-head", `${STATUS[r.status] ?? "No preview"}${tool}`),
      node("p", "preview-status", reveal(r.message ?? r.status)),
    );
    if (note) box.append(note);
    return;
  }
  if (note) box.append(note);
  if (r.unchanged) {
    box.dataset.unchanged = "true";
    box.prepend(
      node(
        "h4",
        "preview-head",
        after
          ? `Preview: no change — ${after} of this turn would leave exactly this${tool}`
          : `Preview: no change — the file already holds exactly this${tool}`,
      ),
    );
    return;
  }
  const what = after
    ? `changes against what ${after} of this turn would leave`
    : r.render === "diff"
      ? r.new_file
        ? "a new file"
        : "changes against what is there now"
      : r.render === "patch"
        ? "the tool's own dry run"
        : "what is there now";
  box.prepend(node("h4", "preview-head", `Preview: ${what}${tool}${r.truncated ? " — cut short" : ""}`));
  if (after)
    box.append(
      node(
        "p",
        "preview-note muted",
        `Shown as if ${after} runs first, as the agent asked; if this call is approved first, it meets the file as it is now.`,
      ),
    );
  const lines = reveal(r.text ?? "").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const pre = node("pre", r.render === "text" ? "preview-text" : "preview-diff");
  const fill = (n) => {
    pre.replaceChildren(
      ...lines.slice(0, n).map((line) => {
        const diffy = r.render !== "text";
        const cls = !diffy
          ? ""
          : line.startsWith("+++") || line.startsWith("---") || line.startsWith("===") || line.startsWith("Index:")
            ? "meta"
            : line.startsWith("@@")
              ? "hunk"
              : line.startsWith("+")
                ? "add"
                : line.startsWith("-")
                  ? "del"
                  : "";
        return node("span", cls, `${line}\n`);
      }),
    );
  };
  fill(FOLD);
  // On a phone a long preview is folded behind a disclosure saying its size: the buttons stay near.
  const narrow = typeof matchMedia === "function" && matchMedia("(max-width: 600px)").matches;
  let into = box;
  if (narrow && lines.length > PHONE_LINES) {
    const added = lines.filter((l) => l.startsWith("+") && !l.startsWith("+++")).length;
    const removed = lines.filter((l) => l.startsWith("-") && !l.startsWith("---")).length;
    const size = r.render === "text" ? `${lines.length} lines` : `${lines.length} lines (+${added} −${removed})`;
    into = node("details", "preview-fold");
    into.append(node("summary", "", `Show the ${r.render === "text" ? "text" : "diff"}: ${size}`));
    box.append(into);
  }
  into.append(pre);
  if (lines.length > FOLD) {
    const more = node("button", "preview-more", `Show all ${lines.length} lines`);
    more.type = "button";
    more.addEventListener("click", () => {
      fill(lines.length);
      more.remove();
    });
    into.append(more);
  }
}

/**
 * A preview section for card `p`; `load` fetches it (a promise of the API's answer). Returned
 * at once and filled when the answer comes.
 */
export function previewBox(p, load) {
  const box = node("section", "preview");
  box.setAttribute("aria-label", "Preview");
  box.setAttribute("aria-busy", "true");
  box.append(node("p", "preview-status muted", "Preview: loading…"));
  const key = `${p.id}\0${JSON.stringify(p.interrupted?.arguments ?? p.arguments ?? {})}`;
  let hit = recent.get(key);
  if (!hit || Date.now() - hit.at > KEEP_MS) {
    hit = { at: Date.now(), answer: load() };
    recent.set(key, hit);
    for (const [k, v] of recent) if (Date.now() - v.at > KEEP_MS) recent.delete(k);
  }
  hit.answer.then(
    (r) => draw(box, r),
    (err) => draw(box, { status: "failed", message: err?.message ?? "the preview could not be fetched" }),
  );
  return box;
}
