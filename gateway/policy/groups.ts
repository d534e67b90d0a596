/**
 * Groups of participants: `groups: {ops: [alice, bob]}` at space level in space.yaml, named
 * `@ops` wherever participants are named (a participant's `approvers`, an escalation's
 * `approvers`, the participant part of a tool rule such as `@servers/*`).
 *
 * Membership is decided here and nowhere else: a participant is in a group when space.yaml
 * lists it there, or when its runtime groups say so (set by whoever learns them at run
 * time, e.g. identity claims from an IdP: `setRuntime`). Everything that asks "is X named
 * by this list?" or "who does this list name?" goes through `names` and `expand`.
 */

/** A list entry that names a group rather than a participant. */
export const GROUP_PREFIX = "@";

export function isGroupRef(entry: string): boolean {
  return entry.startsWith(GROUP_PREFIX);
}

export class Groups {
  private readonly runtime = new Map<string, readonly string[]>();

  constructor(private readonly config: { groups?: Readonly<Record<string, readonly string[]>> | undefined }) {}

  /** The groups the space declares, by name. */
  declared(): readonly string[] {
    return Object.keys(this.config.groups ?? {});
  }

  /** Sets the groups `id` belongs to at run time (besides space.yaml's); an empty list clears them. */
  setRuntime(id: string, groups: readonly string[]): void {
    if (groups.length) this.runtime.set(id, [...groups]);
    else this.runtime.delete(id);
  }

  /** Whether `id` is in `group`: listed in space.yaml, or given it at run time. */
  has(group: string, id: string): boolean {
    const listed = Object.hasOwn(this.config.groups ?? {}, group) ? this.config.groups![group]! : [];
    return listed.includes(id) || (this.runtime.get(id)?.includes(group) ?? false);
  }

  /** The groups `id` is in, sorted: space.yaml's and its runtime ones. */
  of(id: string): string[] {
    const out = new Set<string>();
    for (const [g, members] of Object.entries(this.config.groups ?? {})) if (members.includes(id)) out.add(g);
    for (const g of this.runtime.get(id) ?? []) out.add(g);
    return [...out].sort();
  }

  /** The members of `group` known now: space.yaml's and those given it at run time. */
  members(group: string): string[] {
    const out = new Set<string>(Object.hasOwn(this.config.groups ?? {}, group) ? this.config.groups![group]! : []);
    for (const [id, groups] of this.runtime) if (groups.includes(group)) out.add(id);
    return [...out];
  }

  /** Whether `list` (participant ids and `@group`s) names `id`. */
  names(list: readonly string[], id: string): boolean {
    return list.some((e) => (isGroupRef(e) ? this.has(e.slice(1), id) : e === id));
  }

  /** The participant ids `list` names now, each once, in order. */
  expand(list: readonly string[]): string[] {
    const out = new Set<string>();
    for (const e of list) for (const id of isGroupRef(e) ? this.members(e.slice(1)) : [e]) out.add(id);
    return [...out];
  }

  /** Whether `list` names a group (so who it names may change at run time). */
  static hasGroup(list: readonly string[]): boolean {
    return list.some(isGroupRef);
  }
}

/**
 * A tool rule glob whose participant part is `@group` (`@servers/write_*`) as one glob per
 * member of the group as space.yaml declares it. Other globs are returned as they are.
 */
export function expandRuleGlob(glob: string, groups: Readonly<Record<string, readonly string[]>> | undefined): string[] {
  if (!isGroupRef(glob)) return [glob];
  const slash = glob.indexOf("/");
  const name = glob.slice(1, slash < 0 ? undefined : slash);
  const rest = slash < 0 ? "" : glob.slice(slash);
  const members = groups && Object.hasOwn(groups, name) ? groups[name]! : [];
  return members.map((m) => `${m}${rest}`);
}
