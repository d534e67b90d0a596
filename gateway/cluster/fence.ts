/**
 * Whether this node may still act as a space's owner: its lease is provably current.
 *
 * Another node takes a lease over only after it has seen the same revision for a whole
 * `lease_ms` of its own clock (cluster/index.ts), and that revision was written no
 * earlier than the renewal that wrote it was *sent*. So, measured on this node's
 * monotonic clock from the moment a renewal that then succeeded was sent, nobody else can
 * own the space for `lease_ms`; this node acts only within that time minus a safety
 * margin (for clock rates that differ a little, and for the step between a check and the
 * act it allows). A renewal whose answer comes late extends nothing it could not prove.
 *
 * Every act of an owner asks `current()` first — admitting a member, handling a frame,
 * writing the state (cluster/bus-store.ts asks before each publish and again once it is
 * stored, before anything is routed) — rather than waiting for a timer to say the lease
 * ran out: after a pause (SIGSTOP, a stalled VM) the event loop hands over the sockets'
 * queued input before any timer fires.
 */
export class LeaseClock {
  private until = 0;

  constructor(
    readonly leaseMs: number,
    /** Kept off the end of the lease: a fifth of it, at least 150 ms. */
    readonly marginMs = Math.max(150, Math.floor(leaseMs / 5)),
  ) {}

  /** The monotonic time to stamp a renewal with, taken just before it is sent. */
  static now(): number {
    return performance.now();
  }

  /** A lease write sent at `sentAt` (LeaseClock.now()) succeeded. */
  confirmed(sentAt: number): void {
    this.until = Math.max(this.until, sentAt + this.leaseMs - this.marginMs);
  }

  /** Whether this node may act as the owner now. */
  current(now = performance.now()): boolean {
    return now < this.until;
  }

  /** How long it may still act (ms; 0 once it may not). */
  left(now = performance.now()): number {
    return Math.max(0, this.until - now);
  }

  /** It may act no more (stepping down). */
  revoke(): void {
    this.until = 0;
  }
}
