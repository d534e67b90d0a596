/**
 * When does a chat start a turn, and when must an exchange between machines stop?
 *
 * The rules (the agent participant applies them in this order):
 *   1. Its own envelopes never count.
 *   2. A chat addressed to the agent (`to` names it) or mentioning it (`@id`) is a trigger.
 *   3. A broadcast chat (no `to`) from a human, mentioning nobody present, is a trigger
 *      when that human is the only human present and this agent is the only agent
 *      present: in a one-person, one-agent space nobody should have to type `@agent`.
 *      With several agents present the human addresses one of them, so exactly one answers
 *      — unless one is the space's primary (`agent.primary`), which then takes it.
 *   4. Every other chat the agent can see is context only.
 *
 * Machines answering machines is bounded twice:
 *   - Hops: a human's chat is hop 0; a chat from any other participant is one more than
 *     the highest hop among the chats it correlates to (1 if it correlates to none the
 *     agent knows). The agent replies only if its reply would be at most `maxHops`. Replies
 *     carry `correlation_id: [trigger]`, so two agents of this kind stop after `maxHops`
 *     chats in all.
 *   - Streak: turns started by non-human chats since the last human chat the agent saw.
 *     This catches peers that do not correlate their replies.
 */

const ID_CHAR = "A-Za-z0-9_.\\-";

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\-]/g, "\\$&");
}

/**
 * A matcher for `@id` as a word: not inside a longer id or an e-mail address. A trailing
 * `.` (end of a sentence) still counts, `@bob.smith` does not mention `bob`.
 */
export function mentionPattern(id: string): RegExp {
  return new RegExp(`(^|[^${ID_CHAR}@])@${escapeRegExp(id)}(?![A-Za-z0-9_\\-]|\\.[A-Za-z0-9_\\-])`, "i");
}

/** Every id of `ids` mentioned in `text`. */
export function mentioned(text: string, ids: Iterable<string>): string[] {
  if (!text.includes("@")) return [];
  const out: string[] = [];
  for (const id of ids) if (mentionPattern(id).test(text)) out.push(id);
  return out;
}

/** Hop counts of the chats an agent has seen or sent, bounded in size (oldest forgotten first). */
export class HopTracker {
  private readonly hops = new Map<string, number>();

  constructor(private readonly capacity = 4096) {}

  /** Records and returns the hop count of a chat seen in the space. */
  observe(env: { id: string; correlation_id?: string[] | undefined }, fromHuman: boolean): number {
    let hops = 0;
    if (!fromHuman) {
      let before = 0;
      for (const id of env.correlation_id ?? []) before = Math.max(before, this.hops.get(id) ?? 0);
      hops = before + 1;
    }
    this.set(env.id, hops);
    return hops;
  }

  /** Records a chat this agent sent. */
  set(id: string, hops: number): void {
    this.hops.delete(id);
    this.hops.set(id, hops);
    if (this.hops.size > this.capacity) this.hops.delete(this.hops.keys().next().value!);
  }

  get(id: string): number | undefined {
    return this.hops.get(id);
  }

  clear(): void {
    this.hops.clear();
  }
}
