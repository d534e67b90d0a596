/**
 * What the modules above the router need of it (calls/router.ts): the decision point, routing,
 * cancellation and the catalogue. proposals/ and requests/ name this, never the router itself,
 * which is built before both and needs neither.
 */
import type { Verdict } from "../policy/authority.js";
import type { NotRouted } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import type { Registry } from "../tools/registry.js";
import type { Envelope, McpRequestPayload } from "../wire/envelope.js";
import type { Call, Calls } from "./calls.js";

export interface CallRouter {
  readonly calls: Calls;
  readonly registry: Registry;
  /**
   * The policy decision point's verdict for `member` calling `target`. `confirming`: the
   * approver's bar, which a changed tool definition does not raise (authority.ts).
   */
  authorize(member: Member, target: string, method: string, params: Record<string, unknown> | undefined, confirming?: boolean): Verdict;
  /** Governance, tracking, delivery of a request to a participant; false if it was refused (the caller was told, correlated to `sentId`, the id it sent). */
  route(
    caller: Member,
    env: Envelope,
    payload: McpRequestPayload,
    sentId: string | undefined,
    extra?: Pick<Call, "proposalId" | "fulfiller">,
  ): boolean;
  /** Why `participant/tool` is not in the catalogue: `participant_disabled` or `unknown_tool`. */
  unknownTool(name: string): NotRouted;
  /** Tells everyone the catalogue's policies changed (a tool's definition was confirmed), so they list it again. */
  catalogueChanged(): void;
  /** `route`, telling no one of a refusal: why not comes back instead (undefined: routed). */
  tryRoute(
    caller: Member,
    env: Envelope,
    payload: McpRequestPayload,
    /** `receipt`: an approved call's signed receipt, stamped into its `_meta` (calls/person.ts). */
    extra?: Pick<Call, "proposalId" | "fulfiller"> & {
      receipt?: string | undefined;
      approved?: { chain: string[]; decidedBy: string | undefined } | undefined;
    },
  ): NotRouted | undefined;
  /** Ends a call its caller gave up on, down its delegation chain. */
  cancel(call: Call, reason: string, notifyTarget: boolean): void;
  refreshTools(id: string): void;
  toolsFor(member: Member): Array<Record<string, unknown>>;
  /** One page of `tools/list` for `member`: its tools as the bytes of a JSON array's members (texts cleaned, each with its policy), and where the next page starts. */
  toolsPage(member: Member, start: number, budget: number): { parts: Buffer[]; next?: string };
}
