/**
 * The two-person rule as policy sees it: how many distinct approvers a participant's call of
 * `owner/tool` needs (`approvals: N`, or the first `{tool glob: N}` that matches), and what a
 * quorum forbids — a grant (an "always", a `capability/grant`) that would let the participant
 * call such a tool without asking, so one person would stand in for N. proposals/approvals.ts
 * holds the rest of the rule (who approved, the card).
 */
import { type Capability, compileCapabilities, compileGlob } from "./capabilities.js";
import type { SpaceConfig } from "../config/config.js";
import { specificTool } from "./rules.js";

/** How many distinct approvers `proposer` calling `owner/tool` needs (1 for anything but a tools/call with a setting). */
export function requiredApprovals(config: SpaceConfig, proposer: string, owner: string, tool: string | undefined): number {
  const setting = config.participants[proposer]?.approvals;
  if (setting === undefined) return 1;
  if (typeof setting === "number") return setting;
  if (tool === undefined) return 1;
  for (const [glob, n] of Object.entries(setting)) if (compileGlob(glob)(`${owner}/${tool}`)) return n;
  return 1;
}

/**
 * Why lending `capabilities` to `recipient` would skip its quorum, if it would: a capability
 * naming a tool it needs N > 1 approvers for, one covering a tool of `tools` (the catalogue,
 * `owner/tool`) that does, or any tools/call capability when it needs N for every tool.
 */
export function quorumBypass(
  config: SpaceConfig,
  recipient: string,
  capabilities: readonly Capability[],
  tools: Iterable<string>,
): string | undefined {
  const setting = config.participants[recipient]?.approvals;
  if (setting === undefined) return undefined;
  const words = (tool: string, n: number) =>
    `"${recipient}" needs ${n} distinct approvers for ${tool} (approvals), and a grant would let it call ${tool} without asking anyone: one person would stand in for ${n}`;
  for (const c of capabilities) {
    const t = specificTool(c);
    if (t) {
      const n = requiredApprovals(config, recipient, t.owner, t.tool);
      if (n > 1) return words(`${t.owner}/${t.tool}`, n);
    }
  }
  const allows = compileCapabilities([...capabilities]);
  const calls = (owner: string, tool: string) =>
    allows({ kind: "mcp/request", to: [owner], payload: { method: "tools/call", params: { name: tool } } });
  for (const name of tools) {
    const slash = name.indexOf("/");
    if (slash <= 0) continue;
    const [owner, tool] = [name.slice(0, slash), name.slice(slash + 1)];
    const n = requiredApprovals(config, recipient, owner, tool);
    if (n > 1 && calls(owner, tool)) return words(name, n);
  }
  if (typeof setting === "number" && setting > 1 && allows({ kind: "mcp/request", payload: { method: "tools/call", params: {} } }))
    return words("any tool", setting);
  return undefined;
}
