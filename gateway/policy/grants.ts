/**
 * Capabilities lent at runtime: who lent what to whom, and which loans still stand.
 *
 * A grant is only as good as its granter. For a tool call that is decided at the time of
 * use, by the policy decision point (authority.ts), which follows grants back to a
 * participant that may make the call directly. For every other capability it is decided
 * here, whenever a grant changes: a grant's capabilities count only while its granter
 * holds them, through its configuration or through grants that themselves count. So
 * revoking a grant takes down everything that was lent on from it — `revalidate` reports
 * those loans, and the space records their removal, so they do not come back when the
 * granter is later given the capability again.
 *
 * This module is state only: the space makes each record durable before it applies it.
 */
import { type Capability, compileCapabilities, covers, type Matcher } from "./capabilities.js";
import type { GrantCondition } from "./scope.js";

export interface Grant {
  id: string;
  from: string;
  recipient: string;
  capabilities: Capability[];
  reason?: string | undefined;
  ts: string;
  /**
   * `owner/tool` → the digest of the tool's definition when it was granted (tools/pins.ts):
   * the grant lets that tool be called directly only while its definition is this one.
   */
  pins?: Record<string, string> | undefined;
  /**
   * A scoped "always" (policy/scope.ts): the grant lets a tool call through only when the
   * call's arguments meet this. It lends nothing else: no capability, no tool list entry.
   */
  condition?: GrantCondition | undefined;
}

export type GrantRecord =
  | ({ type: "grant" } & Grant)
  | {
      type: "revoke";
      id: string;
      from: string;
      recipient: string;
      grant_id?: string | undefined;
      capabilities?: Capability[] | undefined;
      ts: string;
      /** Set on a removal that follows from another revoke: the revoke it follows from. */
      cascade_of?: string | undefined;
    };

interface Held extends Grant {
  matches: Matcher;
}

export class GrantBook {
  private readonly byRecipient = new Map<string, Held[]>();
  /** Grants whose capabilities their granter holds (see the module comment). */
  private standing = new Set<string>();
  private total = 0;

  /** `configured(id)`: the capabilities a participant has from space.yaml (none for an unknown id). */
  constructor(private readonly configured: (id: string) => readonly Capability[]) {}

  /** Folds one record into the state; `revalidate` afterwards to learn what fell with it. */
  apply(record: GrantRecord): void {
    const list = this.byRecipient.get(record.recipient) ?? [];
    if (record.type === "grant") {
      const { type: _type, ...grant } = record;
      list.push({ ...grant, matches: compileCapabilities(grant.capabilities) });
    } else if (record.grant_id !== undefined) {
      const i = list.findIndex((g) => g.id === record.grant_id);
      if (i >= 0) list.splice(i, 1);
    } else {
      const patterns = record.capabilities ?? [];
      for (const [i, g] of list.entries()) {
        const kept = g.capabilities.filter((c) => !patterns.some((p) => covers([p], c)));
        if (kept.length !== g.capabilities.length) list[i] = { ...g, capabilities: kept, matches: compileCapabilities(kept) };
      }
    }
    const kept = list.filter((g) => g.capabilities.length > 0);
    if (kept.length) this.byRecipient.set(record.recipient, kept);
    else this.byRecipient.delete(record.recipient);
    this.total = 0;
    for (const l of this.byRecipient.values()) this.total += l.length;
  }

  /** A copy to try changes on (a revoke's cascade is computed before anything is written). */
  clone(): GrantBook {
    const copy = new GrantBook(this.configured);
    for (const [k, list] of this.byRecipient) copy.byRecipient.set(k, [...list]);
    copy.standing = new Set(this.standing);
    copy.total = this.total;
    return copy;
  }

  get size(): number {
    return this.total;
  }

  /** Grants held by `recipient`, standing or not. */
  to(recipient: string): readonly Held[] {
    return this.byRecipient.get(recipient) ?? [];
  }

  /** How many grants `granter` has made that are still held. */
  madeBy(granter: string): number {
    let n = 0;
    for (const list of this.byRecipient.values()) for (const g of list) if (g.from === granter) n++;
    return n;
  }

  all(): Grant[] {
    return [...this.byRecipient.values()].flat().map(({ matches: _m, ...g }) => g);
  }

  /** Whether `g` stands as far as capabilities go (its granter holds what it lent). */
  stands(g: Grant): boolean {
    return this.standing.has(g.id);
  }

  /** What `id` may send: configured capabilities, then those of its standing grants. */
  capabilitiesOf(id: string): Capability[] {
    return [
      ...this.configured(id),
      ...this.to(id).flatMap((g) => (this.standing.has(g.id) && g.condition === undefined ? g.capabilities : [])),
    ];
  }

  /**
   * Recomputes which grants stand: the least set in which every grant's capabilities are
   * covered by its granter's configured capabilities or by grants to it in the set. A
   * loan cycle with no root in configuration therefore stands nowhere. Returns grants
   * that stood before and no longer do — the ones lent on from what was taken back.
   */
  revalidate(): Grant[] {
    const before = this.standing;
    const standing = new Set<string>();
    const all = [...this.byRecipient.values()].flat();
    // Each pass adds at least one grant or stops, so at most |grants| passes.
    for (let changed = true; changed; ) {
      changed = false;
      for (const g of all) {
        if (standing.has(g.id)) continue;
        const held = [
          ...this.configured(g.from),
          ...this.to(g.from).flatMap((h) => (standing.has(h.id) && h.condition === undefined ? h.capabilities : [])),
        ];
        if (g.capabilities.every((c) => covers(held, c))) {
          standing.add(g.id);
          changed = true;
        }
      }
    }
    this.standing = standing;
    return all.filter((g) => before.has(g.id) && !standing.has(g.id)).map(({ matches: _m, ...g }) => g);
  }
}
