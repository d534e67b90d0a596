/**
 * The interactive terminal's slash commands that show or change what the space holds
 * rather than this person's queue: /participants, /tools, /grants and /revoke. Given the
 * few things they need (the current connection, the screen) rather than the terminal.
 */
import type { SpaceConfig } from "../../gateway/index.js";
import type { ParticipantClient } from "../../participants/index.js";
import { GATEWAY, oneLine, shortId, truncate, type Style } from "./format.js";
import { isRecord } from "../../gateway/index.js";

export interface ListsPort {
  /** The connection now: it is replaced when the terminal takes its seat back. */
  client(): ParticipantClient;
  me(): string;
  width(): number;
  readonly style: Style;
  readonly config: SpaceConfig | undefined;
  print(lines: string[]): void;
  notice(text: string, level?: "info" | "error"): void;
}

export class SpaceLists {
  constructor(private readonly port: ListsPort) {}

  /** `/participants`: who is here, and who is declared but not connected. */
  participantLines(): string[] {
    const s = this.port.style;
    const me = this.port.me();
    const lines = [s.bold("participants:"), `  ${me} (you)`];
    const present = this.port.client().participants;
    for (const p of present.values())
      lines.push(`  ${p.id}${p.kind ? ` (${p.kind})` : ""}${p.description ? s.dim(` — ${p.description}`) : ""}`);
    const declared = this.port.config ? Object.values(this.port.config.participants) : [];
    for (const p of declared) if (p.id !== me && !present.has(p.id)) lines.push(s.dim(`  ${p.id} (${p.kind}) — not connected`));
    return lines;
  }

  private async grants(): Promise<
    Array<{ id: string; from: string; recipient: string; capabilities: unknown; reason?: string; standing?: boolean }>
  > {
    const res = await this.port.client().request(GATEWAY, "grants/list", {}, { timeoutMs: 5000 });
    return isRecord(res) && Array.isArray(res["grants"]) ? (res["grants"] as never) : [];
  }

  /** `/grants`: who lent what to whom, always-approvals among them. */
  async showGrants(): Promise<void> {
    try {
      const grants = await this.grants();
      if (grants.length === 0) return this.port.print([this.port.style.dim("no grants")]);
      this.port.print([
        this.port.style.bold(`grants (${grants.length}; /revoke <id> takes one back, and all lent on from it):`),
        ...grants.map((g) =>
          truncate(
            `  [${shortId(g.id)}] ${g.from} → ${g.recipient}: ${oneLine(g.capabilities, 80)}${g.reason ? ` (${oneLine(g.reason, 60)})` : ""}${g.standing === false ? " [not standing]" : ""}`,
            this.port.width(),
          ),
        ),
      ]);
    } catch (err) {
      this.port.notice(`could not list grants: ${(err as Error).message}`, "error");
    }
  }

  /** `/revoke <id>`: a capability/revoke of that grant; the gateway cascades. */
  async revokeGrant(ref: string | undefined): Promise<void> {
    if (!ref) return this.port.notice("/revoke <grant id> (/grants lists them)", "error");
    try {
      const matches = (await this.grants()).filter((g) => g.id === ref || g.id.startsWith(ref));
      if (matches.length !== 1)
        return this.port.notice(
          matches.length ? `"${ref}" matches ${matches.length} grants; give more of the id` : `no grant "${ref}" (/grants lists them)`,
          "error",
        );
      const g = matches[0]!;
      this.port.client().send({ kind: "capability/revoke", payload: { recipient: g.recipient, grant_id: g.id } });
      this.port.notice(`revoked [${shortId(g.id)}] ${g.from} → ${g.recipient}`);
    } catch (err) {
      this.port.notice(`could not revoke: ${(err as Error).message}`, "error");
    }
  }

  /** `/tools`: the space's tools with this person's policy for each. */
  async showTools(): Promise<void> {
    let tools = this.port.client().tools;
    try {
      tools = await this.port.client().listTools({ timeoutMs: 5000 });
    } catch {
      // show what the welcome said
    }
    if (tools.length === 0) return this.port.print([this.port.style.dim("no tools in the space yet")]);
    const width = Math.min(40, Math.max(...tools.map((t) => t.name.length)));
    const lines = [...tools]
      .sort((a, b) => (a.name < b.name ? -1 : 1))
      .map((t) =>
        truncate(`  ${t.name.padEnd(width)}  ${(t.policy ?? "?").padEnd(8)}  ${oneLine(t.description ?? "", 200)}`, this.port.width()),
      );
    this.port.print([this.port.style.bold(`tools (${tools.length}; policy for ${this.port.me()}: direct, proposal or denied):`), ...lines]);
  }
}
