/**
 * Specialists switched off and on at runtime: `space/disable` and `space/enable`
 * `{participant_id, reason?}`.
 *
 * A disabled participant stays in the space but offers nothing: its tools leave every
 * catalogue at once (the registry hides them and the gateway announces
 * `tools/list_changed`, so agents rebuild their prompts and MCP clients relist), and a
 * call to it is refused (`participant_disabled`) on every path, an approved proposal
 * included. Only a participant whose capabilities allow the envelope may send it — by
 * default the space's humans. The switch is durable (the state store), so a restart keeps
 * it. People and the primary agent cannot be switched off: the first are who the space is
 * for, the second answers them.
 */
import type { Logger } from "pino";
import type { SpaceConfig } from "../config/config.js";
import { type Envelope, ErrorCodes, type InboundEnvelope, stamp } from "../wire/envelope.js";
import { clip, noParticipantRefusal, type Refusal } from "../ports/host.js";
import type { Member } from "../ports/member.js";
import type { Plan } from "../store/plan.js";

interface SwitchFields {
  id: string;
  by: string;
  ts: string;
  reason?: string | undefined;
}
export type SwitchRecord = ({ type: "disable" } & SwitchFields) | ({ type: "enable" } & SwitchFields);

export interface SwitchHost {
  readonly config: SpaceConfig;
  readonly log: Logger;
  deliver(env: Envelope, sender?: Member): void;
  record(...plans: Plan[]): Promise<void>;
  storeFailed(member: Member, err: unknown, correlationId: string | undefined, what: string): void;
  /** The catalogue, built before this: it keeps who is switched off, so a listing leaves them out. */
  readonly registry: { setDisabled(id: string, disabled: boolean): boolean };
}

export class Switches {
  private readonly disabled = new Set<string>();
  /**
   * Told when a switch changed what the catalogue lists. The router, built after this (the
   * store's switches are read before it exists), subscribes to re-announce the catalogue.
   */
  readonly catalogueChanged = new Set<() => void>();

  constructor(private readonly host: SwitchHost) {}

  isDisabled(id: string): boolean {
    return this.disabled.has(id);
  }

  all(): string[] {
    return [...this.disabled].sort();
  }

  /** Folds a stored record in (on start), or applies one just written. */
  apply(r: SwitchRecord): void {
    const was = this.disabled.has(r.id);
    if (r.type === "disable") this.disabled.add(r.id);
    else this.disabled.delete(r.id);
    if (was !== this.disabled.has(r.id) && this.host.registry.setDisabled(r.id, r.type === "disable"))
      for (const hear of this.catalogueChanged) hear();
  }

  snapshot(): SwitchRecord[] {
    return [...this.disabled].map((id) => ({ type: "disable", id, by: "snapshot", ts: new Date(0).toISOString() }));
  }

  /** `space/disable` or `space/enable`: recorded, then delivered; a refusal goes back for the pipeline to send (ports/host.ts `Answer`). */
  async onSwitch(member: Member, inbound: InboundEnvelope, type: "disable" | "enable"): Promise<Refusal | undefined> {
    const payload = (inbound.payload ?? {}) as Record<string, unknown>;
    const id = payload["participant_id"];
    const target = typeof id === "string" ? this.host.config.participants[id] : undefined;
    if (typeof id !== "string" || !target) return noParticipantRefusal(id);
    if (target.kind === "human")
      return {
        code: ErrorCodes.invalidPayload,
        message: `${inbound.kind}: "${clip(id)}" is a person; only agents, services and tool servers can be switched off`,
      };
    if (target.agent?.primary)
      return { code: ErrorCodes.invalidPayload, message: `${inbound.kind}: "${clip(id)}" is the space's primary agent and is always on` };
    const env = stamp(inbound, member.id);
    if ((type === "disable") !== this.disabled.has(id)) {
      const reason = typeof payload["reason"] === "string" ? clip(payload["reason"]) : undefined;
      const record = { type, id, by: member.id, ts: env.ts, reason } as SwitchRecord;
      try {
        await this.host.record({ records: [record], apply: () => this.apply(record) });
      } catch (err) {
        this.host.storeFailed(member, err, inbound.id, `"${clip(id)}" was not ${type}d`);
        return undefined;
      }
      this.host.log.info({ participant: id, by: member.id }, `participant ${type}d`);
    }
    // Said whether or not it changed anything: the sender learns the state it asked for holds.
    this.host.deliver(env, member);
    return undefined;
  }
}
