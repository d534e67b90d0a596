/**
 * The hint on a card: how often people decided calls like this one before ("you approved 5
 * like this"). Like this: the same proposer, the same tool, and every path-like argument
 * (a string with a `/`) in the same directory as this call's.
 */
import type { PastCall } from "./history.js";
import { indexKey } from "./recorded.js";

export interface LikeThis {
  approved: number;
  /** Of those, approved by the viewer. */
  by_you: number;
  rejected: number;
  text: string;
}

const dir = (v: string) => v.slice(0, v.lastIndexOf("/") + 1);

export function likeThis(
  index: Map<string, PastCall[]>,
  viewer: string,
  p: { id: string; proposer: string; owner: string; tool: string; args: Record<string, unknown> },
): LikeThis | undefined {
  const paths = Object.entries(p.args).filter((e): e is [string, string] => typeof e[1] === "string" && e[1].includes("/"));
  let approved = 0;
  let byYou = 0;
  let rejected = 0;
  for (const c of index.get(indexKey(p.proposer, p.owner, p.tool)) ?? []) {
    if (c.id === p.id) continue;
    if (!paths.every(([k, v]) => typeof c.args[k] === "string" && dir(c.args[k] as string) === dir(v))) continue;
    if (c.said === "approved") {
      approved++;
      if (c.by === viewer) byYou++;
    } else if (c.said === "rejected") rejected++;
  }
  if (approved + rejected === 0) return undefined;
  const parts = [
    byYou ? `you approved ${byYou}${approved > byYou ? ` (people ${approved})` : ""}` : `people approved ${approved}`,
    ...(rejected ? [`rejected ${rejected}`] : []),
  ];
  return { approved, by_you: byYou, rejected, text: `${parts.join(", ")} like this` };
}
