/**
 * What helps a person decide, wired once per space: the previews of proposed calls
 * (preview.ts) and the signed decision links in notices (links.ts), with who gets a link.
 */
import type { SpaceConfig } from "../config/config.js";
import type { Authority } from "../policy/authority.js";
import type { Registry } from "../tools/registry.js";
import type { Proposal } from "./book.js";
import { approversNow } from "./approvals.js";
import { linkApprovers, Links } from "./links.js";
import type { ApproverLink } from "./notify.js";
import { type PreviewHost, Previews } from "./preview.js";

export interface AidsHost {
  config: SpaceConfig;
  registry: Registry;
  authority: Pick<Authority, "call" | "groups">;
  isDisabled(id: string): boolean;
  /** The proposals that have not ended, for the earlier calls of a turn (preview.ts). */
  unended(): readonly Proposal[];
  callFor: PreviewHost["call"];
  /** The web console's address once the gateway listens (the links' default base). */
  consoleUrl(): string | undefined;
}

export class Aids {
  readonly previews: Previews;
  readonly links: Links;

  constructor(private readonly host: AidsHost) {
    const { config, authority } = host;
    this.links = new Links(config.space.id, config.gateway.state_dir);
    this.previews = new Previews({
      config,
      registry: host.registry,
      // A preview is a direct call of the viewer's: the tool policy decides it, as for any call.
      verdict: (viewer, owner, tool, args) => authority.call(viewer, () => false, owner, "tools/call", { name: tool, arguments: args }),
      isDisabled: (id) => host.isDisabled(id),
      unended: () => host.unended(),
      call: (...a) => host.callFor(...a),
    });
  }

  /** A decision link for each person who may decide `p` (none when the space has no webhooks to carry them). */
  linksFor(p: Proposal): ApproverLink[] {
    const { config } = this.host;
    if (config.gateway.notify.length === 0) return [];
    const base = (config.gateway.public_url ?? this.host.consoleUrl() ?? "").replace(/\/(ui\/)?$/, "");
    return this.deciders(p).map((approver) => ({ approver, url: `${base}/ui/link.html#t=${this.links.mint(p, approver)}` }));
  }

  /**
   * A decision link (the part after `#t=`) for the one person who may decide `p` now, for
   * the MCP client whose call waits on it (participants/mcp-server/held/held.ts); none when
   * nobody or several may. It decides nothing by itself: its page decides with that
   * person's own session, once.
   */
  linkForOnePerson(p: Proposal): string | undefined {
    const people = this.deciders(p);
    return people.length === 1 ? this.links.mint(p, people[0]!) : undefined;
  }

  /** The people who may decide `p` now: the proposer's approvers (groups by their members) and the escalation stages reached. */
  deciders(p: Proposal): string[] {
    const { config, authority } = this.host;
    const mayDecide = (id: string) =>
      !this.host.isDisabled(id) && authority.call(id, () => false, p.owner, p.method, p.params, true).decision === "direct";
    const named = approversNow(config, p);
    return linkApprovers(config.participants, p, named && ((id) => authority.groups.names(named, id)), mayDecide);
  }
}
