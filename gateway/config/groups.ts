/**
 * Checks of space.yaml's `groups:` and of what names them (policy/groups.ts decides
 * membership at run time): a group lists participants, never other groups; every `@group`
 * named is declared; and a participant's `approvals: N` can be met by the approvers it names
 * (the proposer never counts), or the file is refused: a two-person rule nobody can satisfy
 * would hold every call forever. A list that names a group may grow at run time (members
 * from an identity provider), so it is only refused when no group is named; otherwise the
 * proposal's card says it cannot be satisfied (proposals/approvals.ts).
 */
import type * as z from "zod";
import { suggest } from "./schema.js";

type Ctx = z.RefinementCtx;

/** The most approvals a participant's `approvals` setting asks for. */
export function maxApprovals(setting: number | Record<string, number> | undefined): number {
  if (setting === undefined) return 1;
  return typeof setting === "number" ? setting : Math.max(1, ...Object.values(setting));
}

export function checkGroups(
  ctx: Ctx,
  ids: readonly string[],
  groups: Record<string, string[]>,
  participants: Record<
    string,
    {
      approvers?: string[] | undefined;
      approvals?: number | Record<string, number> | undefined;
      tools?: Record<string, unknown[] | undefined> | undefined;
    }
  >,
  escalate: ReadonlyArray<{ approvers: string[] }>,
  /** Groups the identity provider's claims map people into (identity.groups), without the "@". */
  mapped: readonly string[] = [],
): void {
  const names = [...Object.keys(groups), ...mapped];
  for (const [g, members] of Object.entries(groups)) {
    members.forEach((m, i) => {
      if (m.startsWith("@")) {
        ctx.addIssue({
          code: "custom",
          path: ["groups", g, i],
          message: `groups list participants, not other groups (${JSON.stringify(m)})`,
        });
        return;
      }
      if (ids.includes(m)) return;
      const near = suggest(m, ids);
      ctx.addIssue({
        code: "custom",
        path: ["groups", g, i],
        message: `unknown participant ${JSON.stringify(m)}${near ? `; did you mean ${JSON.stringify(near)}?` : ""}`,
      });
    });
  }
  const checkRef = (entry: string, path: (string | number)[]): void => {
    if (entry.startsWith("@")) {
      if (Object.hasOwn(groups, entry.slice(1)) || mapped.includes(entry.slice(1))) return;
      const near = suggest(entry.slice(1), names);
      return ctx.addIssue({
        code: "custom",
        path,
        message: `unknown group ${JSON.stringify(entry)}${near ? `; did you mean "@${near}"?` : "; declare it under groups: or map a claim to it under identity.groups"}`,
      });
    }
    if (ids.includes(entry)) return;
    const near = suggest(entry, ids);
    ctx.addIssue({
      code: "custom",
      path,
      message: `unknown participant ${JSON.stringify(entry)}${near ? `; did you mean ${JSON.stringify(near)}?` : ""}`,
    });
  };
  for (const [id, p] of Object.entries(participants)) {
    p.approvers?.forEach((a, i) => {
      if (a.startsWith("@")) checkRef(a, ["participants", id, "approvers", i]);
    });
    for (const [rule, list] of Object.entries(p.tools ?? {})) {
      (list ?? []).forEach((r, i) => {
        const glob = typeof r === "string" ? r : r && typeof r === "object" ? (r as { tool?: unknown }).tool : undefined;
        if (typeof glob === "string" && glob.startsWith("@")) checkRef(glob.split("/")[0]!, ["participants", id, "tools", rule, i]);
      });
    }
  }
  escalate.forEach((stage, i) => {
    stage.approvers.forEach((a, j) => {
      checkRef(a, ["policy", "escalate", i, "approvers", j]);
    });
  });
  const widened = escalate.flatMap((s) => s.approvers);
  for (const [id, p] of Object.entries(participants)) {
    const need = maxApprovals(p.approvals);
    if (need <= 1) continue;
    const named = p.approvers === undefined ? [...ids] : [...p.approvers, ...widened];
    if (named.some((e) => e.startsWith("@"))) continue;
    const eligible = new Set(named.filter((e) => e !== id));
    if (eligible.size >= need) continue;
    const who = eligible.size ? [...eligible].join(", ") : "nobody";
    ctx.addIssue({
      code: "custom",
      path: ["participants", id, "approvals"],
      message: `needs ${need} distinct approvers but only ${eligible.size} can approve (${who}; never the proposer itself): it could never be satisfied`,
    });
  }
}

/** A record without a prototype, so group names like "constructor" are only data. */
export function nullProto<T>(r: Record<string, T>): Record<string, T> {
  return Object.assign(Object.create(null) as Record<string, T>, r);
}
