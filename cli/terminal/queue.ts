/**
 * The proposals waiting for this person, in arrival order, with one selected. The source of
 * truth is the client's view of pending proposals; the queue hides the ones this terminal
 * has just decided on (the gateway does not echo our own decision back) until the gateway
 * either refuses the decision or the proposal ends.
 */
import type { Envelope } from "../../gateway/index.js";

export type Resolved = { ok: true; proposal: Envelope } | { ok: false; message: string };

export class ProposalQueue {
  private items: Envelope[] = [];
  private selectedId: string | undefined;
  private readonly decided = new Set<string>();

  get size(): number {
    return this.items.length;
  }

  get all(): readonly Envelope[] {
    return this.items;
  }

  get current(): Envelope | undefined {
    return this.items.find((p) => p.id === this.selectedId) ?? this.items[0];
  }

  /** 1-based position of the selected proposal, 0 when empty. */
  get position(): number {
    const c = this.current;
    return c ? this.items.indexOf(c) + 1 : 0;
  }

  /** Brings the queue up to date; true when what a person sees changed. */
  sync(pending: Iterable<Envelope>): boolean {
    const before = this.signature();
    const list = [...pending];
    for (const id of [...this.decided]) if (!list.some((p) => p.id === id)) this.decided.delete(id);
    const previous = this.items;
    this.items = list.filter((p) => !this.decided.has(p.id));
    if (this.selectedId === undefined) {
      this.selectedId = this.items[0]?.id;
    } else if (!this.items.some((p) => p.id === this.selectedId)) {
      // The selected one left: select its successor in the old order, else the last one.
      const oldIndex = previous.findIndex((p) => p.id === this.selectedId);
      const successor = oldIndex < 0 ? undefined : previous.slice(oldIndex + 1).find((p) => this.items.some((q) => q.id === p.id));
      this.selectedId = (successor ?? this.items[this.items.length - 1])?.id;
    }
    return this.signature() !== before;
  }

  /** Hides a proposal we decided on; `undo` brings it back (the gateway refused the decision). */
  markDecided(id: string): void {
    this.decided.add(id);
    const i = this.items.findIndex((p) => p.id === id);
    if (i < 0) return;
    this.items.splice(i, 1);
    if (this.selectedId === id) this.selectedId = (this.items[i] ?? this.items[i - 1])?.id;
  }

  undo(id: string): void {
    this.decided.delete(id);
  }

  next(): boolean {
    return this.move(1);
  }

  prev(): boolean {
    return this.move(-1);
  }

  private move(delta: number): boolean {
    if (this.items.length < 2) return false;
    const i = this.position - 1;
    const j = (i + delta + this.items.length) % this.items.length;
    this.selectedId = this.items[j]!.id;
    return true;
  }

  /** A proposal by id or unique id prefix (as the short ids shown); the selected one when `ref` is empty. */
  resolve(ref: string | undefined, listHint = "/proposals"): Resolved {
    if (!ref) {
      const c = this.current;
      return c ? { ok: true, proposal: c } : { ok: false, message: "no proposal is waiting" };
    }
    const exact = this.items.find((p) => p.id === ref);
    if (exact) return { ok: true, proposal: exact };
    const matches = this.items.filter((p) => p.id.startsWith(ref));
    if (matches.length === 1) return { ok: true, proposal: matches[0]! };
    if (matches.length > 1) return { ok: false, message: `"${ref}" matches ${matches.length} proposals; give more of the id` };
    // The terminal names its own command; the CLI names `mewgate proposals list`.
    return { ok: false, message: `no pending proposal "${ref}" (${listHint} lists them)` };
  }

  private signature(): string {
    // An approver's edit changes what an approval runs: the card is drawn again.
    const edit = (p: Envelope) => {
      const payload = p.payload as Record<string, unknown> | undefined;
      const mark = typeof payload === "object" && payload !== null ? payload["mewgate/edited"] : undefined;
      return mark === undefined ? "" : `~${JSON.stringify(mark)}`;
    };
    return `${this.items.map((p) => p.id + edit(p)).join(",")}|${this.current?.id ?? ""}`;
  }
}
