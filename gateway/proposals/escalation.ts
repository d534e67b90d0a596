/**
 * Escalation (`policy.escalate: [{after_ms, notify, approvers}]`): when nobody has decided a
 * proposal `after_ms` after it was made, the stage's `approvers` may decide it too
 * (approvals.ts `approversNow`, a function of the time) and the webhooks are told again.
 *
 * One timer per awaiting proposal, for its next stage not yet fired, armed from the
 * proposal's `createdAt`, so a restart re-arms it where it was (a stage that fell due while
 * the gateway was down fires at once). A fired stage is recorded on the proposal
 * (`escalated`, written through the journal, with an audit entry naming the stage and the
 * people it lets decide) before anyone is told, so a restart does not tell the webhooks twice (space/compose.ts
 * hands it the notifier and arms it as proposals change).
 */
import type { SpaceHost } from "../ports/host.js";
import { awaiting, type Proposal, type ProposalBook } from "./book.js";

export class Escalations {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private closed = false;

  constructor(
    /** What it uses of the space (ports/host.ts). */
    private readonly space: Pick<SpaceHost, "authority" | "config" | "log" | "record">,
    private readonly proposals: ProposalBook,
    /** Tells the webhooks (notify.ts), naming who may decide now. */
    private readonly notify: (p: Proposal, approvers: readonly string[]) => void,
  ) {}

  private get config() {
    return this.space.config;
  }

  /**
   * Stage `stage` of `p` fell due with nobody's decision: recorded, then the webhooks are
   * told (if the stage says so). False: a decision is being written; try again shortly.
   */
  private async due(p: Proposal, stage: number): Promise<boolean> {
    if (!awaiting(p.state)) return true;
    if (this.proposals.isBusy(p.id)) return false;
    const s = this.config.policy.escalate[stage]!;
    // In the audit trail with the people it names (a group by its members now).
    await this.space.record(this.proposals.planEscalated(p, stage, this.space.authority.groups.expand(s.approvers)));
    this.space.log.info({ proposal: p.id, stage, approvers: s.approvers }, "proposal escalated: nobody decided in time");
    if (s.notify) this.notify(p, s.approvers);
    return true;
  }

  /** The next stage of `p` not yet fired, if any. */
  private next(p: Proposal): number | undefined {
    const fired = new Set(p.escalated ?? []);
    let best: number | undefined;
    this.config.policy.escalate.forEach((s, i) => {
      if (fired.has(i)) return;
      if (best === undefined || s.after_ms < this.config.policy.escalate[best]!.after_ms) best = i;
    });
    return best;
  }

  /** (Re-)arms `p`'s next stage, or disarms it when it no longer awaits a decision or has none left. */
  arm(p: Proposal, retryMs?: number): void {
    this.disarm(p.id);
    if (this.closed || !awaiting(p.state)) return;
    const stage = this.next(p);
    if (stage === undefined) return;
    const at = Date.parse(p.createdAt) + this.config.policy.escalate[stage]!.after_ms;
    const wait = retryMs ?? Math.max(0, at - Date.now());
    const timer = setTimeout(
      () => {
        this.timers.delete(p.id);
        if (!awaiting(p.state)) return;
        void this.due(p, stage).then(
          (ok) => this.arm(p, ok ? undefined : 1000),
          () => this.arm(p, 5000),
        );
      },
      Math.min(wait, 2_147_483_647),
    );
    timer.unref();
    this.timers.set(p.id, timer);
  }

  disarm(id: string): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
  }
}
